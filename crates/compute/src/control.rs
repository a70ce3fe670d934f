//! The compute runtime's view of the control state: read the [`World`],
//! and write through the one write path. `berth-core`'s `App` implements
//! [`Control`]; the runtime never sees the store or the group commit.

use berth_compute_model::{ComputeError, World, WorldChangeSet};
use berth_store::StoreError;

/// Why a control write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The plan refused (quota, not found, conflict, ...).
    #[error(transparent)]
    Refused(#[from] ComputeError),
    /// The store failed (unavailable, conflict between processes, ...).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Read and write the control state. Object safe: plans are passed as
/// `FnMut` (called exactly once); use [`read`] and [`write`].
pub trait Control: Send + Sync {
    /// Call `f` with the current world.
    fn read_world(&self, f: &mut dyn FnMut(&World));
    /// Plan against the current world (inside the write path) and commit
    /// the change set durably.
    fn write_world(
        &self,
        plan: &mut (dyn FnMut(&World) -> Result<WorldChangeSet, ComputeError> + Send),
    ) -> Result<(), WriteError>;
    /// A read barrier: afterwards the world holds every write any process
    /// had committed when the call began (blocking; nothing to do where
    /// no other process writes).
    fn sync(&self) {}
}

/// Read from the world.
pub fn read<R>(control: &dyn Control, f: impl FnOnce(&World) -> R) -> R {
    let mut f = Some(f);
    let mut out = None;
    control.read_world(&mut |world| {
        if let Some(f) = f.take() {
            out = Some(f(world));
        }
    });
    out.expect("read_world calls its closure")
}

/// Plan and commit one write; returns what the plan returned with its
/// change set.
pub fn write<T: Send>(
    control: &dyn Control,
    plan: impl FnOnce(&World) -> Result<(WorldChangeSet, T), ComputeError> + Send,
) -> Result<T, WriteError> {
    let mut plan = Some(plan);
    let mut out = None;
    control.write_world(&mut |world| {
        let plan = plan.take().ok_or_else(|| ComputeError::Conflict("plan called twice".into()))?;
        let (set, value) = plan(world)?;
        out = Some(value);
        Ok(set)
    })?;
    out.ok_or_else(|| WriteError::Store(StoreError::Internal("write path did not run the plan".into())))
}

/// The core's write path is the control write path.
impl Control for berth_core::App {
    fn read_world(&self, f: &mut dyn FnMut(&World)) {
        f(&self.read());
    }

    fn write_world(
        &self,
        plan: &mut (dyn FnMut(&World) -> Result<WorldChangeSet, ComputeError> + Send),
    ) -> Result<(), WriteError> {
        self.write(|world| plan(world).map(|set| (set, ())).map_err(WriteError::Refused))
    }

    fn sync(&self) {
        berth_core::App::sync(self)
    }
}
