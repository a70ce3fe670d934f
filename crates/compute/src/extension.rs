//! The boot path's extension point: a [`BootExtension`] registered on the
//! [`Compute`](crate::Compute) by the process wiring may take a boot over
//! in its admission write (reserved servers: the lease is admitted in the
//! same write as the build requests and the quota) and add changes to the
//! write that deletes a held build request (the lease goes with it).
//!
//! This keeps the dependency pointing one way: `berth-compute` knows only
//! *held* build requests (never scheduled until released), not leases; the
//! reservation crates implement the trait and release held build requests
//! at the lease start.

use std::collections::BTreeMap;

use berth_compute_model::plan::BootAdmission;
use berth_compute_model::{ComputeError, Timestamp, World, WorldChangeSet};
use uuid::Uuid;

/// What an extension adds to a boot it takes over.
#[derive(Debug, Clone, Default)]
pub struct HeldBoot {
    /// Changes committed in the admission write (the lease).
    pub changes: WorldChangeSet,
    /// Scheduler hints added to every request spec of the boot (the
    /// `reservation` the instances will be built on).
    pub hints: BTreeMap<String, Vec<String>>,
}

/// Takes boots over in their admission write. Both plans run inside the
/// control write path on the caught-up `World`, so what they check is what
/// is committed; they must be pure apart from handing out fresh ids.
pub trait BootExtension: Send + Sync {
    /// Called in the admission write of every boot, after
    /// `plan_admit_boot` admitted `admitted` (so quota is checked). `None`:
    /// not this extension's boot (it is scheduled as usual). `Some`: its
    /// build requests are held (status `RESERVED`) and `changes` commit
    /// with them. An error refuses the boot with nothing written.
    fn plan_admit(
        &self,
        world: &World,
        boot: &BootAdmission,
        admitted: &[Uuid],
        now: Timestamp,
    ) -> Result<Option<HeldBoot>, ComputeError>;

    /// Changes to commit with the deletion of the held build request of
    /// `instance` (which is still in `world`).
    fn plan_delete_held(&self, world: &World, instance: &Uuid, now: Timestamp) -> Result<WorldChangeSet, ComputeError>;

    /// A boot was taken over (after its write committed): wake whatever
    /// acts on it later.
    fn admitted(&self) {}
}

/// Image data the runtime drops with the images it deletes (backups
/// rotated out, snapshots of failed or abandoned uploads, images deleted
/// through the compute API's proxy). The process wiring registers the
/// image API's store; without one, the store's sweep finds the files.
pub trait ImageData: Send + Sync {
    /// Remove `image`'s data, if there is any.
    fn remove(&self, image: &Uuid);
}
