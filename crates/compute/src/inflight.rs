//! Scheduling decisions whose claims are in flight.
//!
//! A boot is scheduled on one snapshot and claimed in a later control
//! write (after its rows went into the cell). Conductor workers run
//! concurrently, so a decision made meanwhile would not see the earlier
//! one and, with equal hosts, would pick the same best host: the claims
//! then pile up on the hosts first in the weighing (seen on PostgreSQL,
//! whose cell writes keep the window open longest). Nova's scheduler
//! counts its own selections in its host states until the compute node
//! reports them (`HostState.consume_from_request`); here each selection
//! is counted from the scheduler run that made it until its claim
//! committed or failed ([`Ticket`] dropped).
//!
//! This is only the scheduler's view: the claim
//! (`berth_compute_model::plan::plan_claim`) still checks capacity on the
//! caught-up state in the one write that records it, and nothing here is
//! consulted there.

use std::sync::Mutex;

use berth_compute_model::plan::InstanceChoices;
use berth_compute_model::World;
use berth_model::AllocationMap;

/// The selections in flight in this process.
#[derive(Debug, Default)]
pub struct InFlight {
    state: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    next: u64,
    /// Ticket id of each entry of `allocations` (same order).
    tickets: Vec<u64>,
    allocations: Vec<AllocationMap>,
}

/// Selections counted as in flight until dropped.
#[derive(Debug)]
#[must_use = "the selections stop counting when the ticket is dropped"]
pub struct Ticket<'a> {
    owner: &'a InFlight,
    id: u64,
}

impl InFlight {
    /// Run `decide` with the allocations in flight, and count the first
    /// choice of every instance it returns as in flight until the ticket
    /// is dropped. Decisions are made one at a time, so each sees the
    /// ones made before it.
    pub fn decide<T, E>(
        &self,
        world: &World,
        decide: impl FnOnce(&World, &[AllocationMap]) -> Result<(Vec<InstanceChoices>, T), E>,
    ) -> Result<(Vec<InstanceChoices>, T, Ticket<'_>), E> {
        let mut entries = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (choices, extra) = decide(world, &entries.allocations)?;
        entries.next += 1;
        let id = entries.next;
        for choice in &choices {
            if let Some(first) = choice.choices.first() {
                entries.tickets.push(id);
                entries.allocations.push(first.allocations.clone());
            }
        }
        Ok((choices, extra, Ticket { owner: self, id }))
    }

    /// Selections in flight now (metrics and tests).
    pub fn len(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).allocations.len()
    }

    /// No selection in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn release(&self, id: u64) {
        let mut entries = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Entries { tickets, allocations, .. } = &mut *entries;
        let mut idx = 0;
        while idx < tickets.len() {
            if tickets[idx] == id {
                tickets.swap_remove(idx);
                allocations.swap_remove(idx);
            } else {
                idx += 1;
            }
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.owner.release(self.id);
    }
}
