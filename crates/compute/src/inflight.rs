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
//! A claim that committed is in the snapshot before its ticket is
//! dropped: each entry names its instance, and the scheduler run leaves
//! out entries whose instance already holds allocations there (counting
//! them twice made a full-looking host refuse the last instance that fit).
//!
//! This is only the scheduler's view: the claim
//! (`berth_compute_model::plan::plan_claim`) still checks capacity on the
//! caught-up state in the one write that records it, and nothing here is
//! consulted there.

use std::sync::Mutex;

use berth_compute_model::plan::InstanceChoices;
use berth_model::AllocationMap;
use uuid::Uuid;

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
    /// Each selection: its instance and what it takes.
    allocations: Vec<(Uuid, AllocationMap)>,
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
    /// ones made before it. `decide` reads the world itself, inside this
    /// lock (never the other way round: nothing holding the world's lock
    /// waits for this one).
    pub fn decide<T, E>(
        &self,
        decide: impl FnOnce(&[(Uuid, AllocationMap)]) -> Result<(Vec<InstanceChoices>, T), E>,
    ) -> Result<(Vec<InstanceChoices>, T, Ticket<'_>), E> {
        let mut entries = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (choices, extra) = decide(&entries.allocations)?;
        entries.next += 1;
        let id = entries.next;
        for choice in &choices {
            if let Some(first) = choice.choices.first() {
                entries.tickets.push(id);
                entries.allocations.push((choice.instance, first.allocations.clone()));
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

#[cfg(test)]
mod tests {
    use berth_compute_model::choice::HostChoice;
    use uuid::Uuid;

    use super::*;

    fn choice(root: Uuid, ram: i64) -> HostChoice {
        let mut allocations = AllocationMap::new();
        allocations.entry(root).or_default().insert("MEMORY_MB".to_owned(), ram);
        HostChoice { root, allocations }
    }

    /// A decision sees the first choices of the decisions before it while
    /// their tickets live (alternates are not counted), and nothing once
    /// they are dropped, also when a decision fails.
    #[test]
    fn selections_count_until_their_ticket_is_dropped() {
        let in_flight = InFlight::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let decide = |seen: &mut Vec<usize>, picks: Vec<InstanceChoices>| {
            in_flight.decide(|now| -> Result<_, ()> {
                seen.push(now.len());
                Ok((picks, ()))
            })
        };
        let mut seen = Vec::new();
        let two = vec![
            InstanceChoices { instance: Uuid::new_v4(), choices: vec![choice(a, 512), choice(b, 512)] },
            InstanceChoices { instance: Uuid::new_v4(), choices: vec![choice(b, 256)] },
        ];
        let (_, (), first) = decide(&mut seen, two).expect("decided");
        let (_, (), second) =
            decide(&mut seen, vec![InstanceChoices { instance: Uuid::new_v4(), choices: vec![] }]).expect("decided");
        let failed = in_flight.decide(|now| -> Result<(Vec<InstanceChoices>, ()), usize> { Err(now.len()) });
        assert_eq!(failed.err(), Some(2), "a failed decision sees both selections and adds nothing");
        assert_eq!(seen, vec![0, 2], "the second decision saw the first's two selections, not its alternate");
        drop(first);
        assert!(in_flight.is_empty(), "released with the first ticket; the second had no selection");
        drop(second);
        assert_eq!(in_flight.len(), 0);
    }
}
