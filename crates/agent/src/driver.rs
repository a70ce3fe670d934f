//! The driver seam: what a host does with its guests. The agent's task
//! loop ([`crate::run_task`]) turns each task of the control plane's
//! protocol into one call here and the call's outcome into the event it
//! reports; the protocol is the same whatever the driver. Two drivers:
//! the fake hosts ([`crate::fake`], the default and the tests'
//! workhorse) and libvirt ([`crate::libvirt`], real QEMU guests).

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

/// What a driver call answers: `Err` carries the message an event (or a
/// log line) reports.
pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, String>> + Send + 'a>>;

/// One task as a driver sees it.
#[derive(Debug, Clone, Copy)]
pub struct TaskRef<'a> {
    /// The task's kind (`build`, `stop`, ...).
    pub kind: &'a str,
    /// The instance uuid.
    pub instance: &'a str,
    /// The host it runs on.
    pub host: &'a str,
    /// The whole task as the control plane sent it (`key_data`,
    /// `display_name`, ...).
    pub body: &'a Value,
}

/// A guest's power state as the hypervisor reports it (libvirt's domain
/// states, as Nova's `power_state` maps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestPower {
    /// Running (or blocked).
    Running,
    /// Paused (by berth, or suspended to disk in progress).
    Paused,
    /// Shut off (cleanly or not).
    Shutoff,
    /// Crashed.
    Crashed,
    /// Anything else (in shutdown, suspended by the guest, ...).
    Other,
}

/// One guest a host runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guest {
    /// The instance uuid.
    pub instance: String,
    /// The host it runs on.
    pub host: String,
    /// Its power state.
    pub power: GuestPower,
}

/// What a host does. Every call is idempotent for its (instance, task):
/// an agent restarted in the middle of a task runs it again and must
/// find what it had done (a build finds its domain and does not spawn it
/// twice).
pub trait Driver: Send + Sync + std::fmt::Debug {
    /// The `hypervisor_type` the hosts register with (`fake`, `QEMU`).
    fn hypervisor_type(&self) -> &'static str;
    /// Create and boot the guest (`build`).
    fn spawn<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Re-create the guest from its (new) image (`rebuild`).
    fn rebuild<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Destroy the guest and everything it has on the host (`delete`,
    /// `destroy_evacuated`).
    fn destroy<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Clean shutdown bounded by a timeout, then power off (`stop`).
    fn power_off<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Power on (`start`).
    fn power_on<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Reboot: soft (ACPI) then hard (`reboot`).
    fn reboot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Pause the guest's vCPUs (`pause`).
    fn pause<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Unpause (`unpause`).
    fn unpause<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Save the guest's memory to disk and stop it (`suspend`).
    fn suspend<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Restore a suspended guest (`resume`).
    fn resume<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// The guest's serial console log (`console_output`).
    fn console_output<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, String>;
    /// Accept an incoming live migration (`live_migration_prepare`).
    fn live_migration_prepare<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Send the guest to the destination (`live_migrate`).
    fn live_migrate<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Boot the guest from a rescue image, its own disk attached
    /// (`rescue`).
    fn rescue<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// Boot the guest from its own disk again (`unrescue`).
    fn unrescue<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// The guest's root disk as an image's bytes, for `createImage` and
    /// `createBackup` (`snapshot`; the task's `image` is where it goes).
    fn snapshot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, Vec<u8>>;
    /// A step of a cold move or of shelving (`resize_*`, `shelve*`,
    /// `unshelve`), named by the task's kind.
    fn move_step<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()>;
    /// The guests the hosts run and their power states, for the power
    /// sync; `None`: this driver has no guests to watch (the fake hosts).
    fn guests(&self) -> DriverFuture<'_, Option<Vec<Guest>>>;
}
