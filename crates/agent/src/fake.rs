//! The fake hosts: a [`Driver`] whose guests exist only as the control
//! plane's rows. Each task takes the configured time (builds, rebuilds,
//! live migrations) and builds fail at the configured rate or always on a
//! bad host, as does a cold move's finish there; everything else succeeds
//! at once.

use std::time::Duration;

use crate::driver::{DiskImage, Driver, DriverFuture, Guest, TaskRef};
use crate::AgentConfig;

/// The fake hosts of one agent (its configuration's timings and
/// failures).
#[derive(Debug)]
pub struct FakeDriver<'a> {
    /// The agent's configuration.
    pub config: &'a AgentConfig,
}

async fn pause_for(time: Duration) {
    if !time.is_zero() {
        tokio::time::sleep(time).await;
    }
}

fn done<'a>() -> DriverFuture<'a, ()> {
    Box::pin(async { Ok(()) })
}

impl Driver for FakeDriver<'_> {
    fn hypervisor_type(&self) -> &'static str {
        "fake"
    }

    fn spawn<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            pause_for(self.config.build_time).await;
            if fails(self.config, task.host, task.instance) {
                return Err(format!(
                    "Build of instance {} aborted: fake driver failure on {}",
                    task.instance, task.host
                ));
            }
            Ok(())
        })
    }

    fn rebuild<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            pause_for(self.config.build_time).await;
            if fails(self.config, task.host, task.instance) {
                return Err(format!(
                    "Rebuild of instance {} aborted: fake driver failure on {}",
                    task.instance, task.host
                ));
            }
            Ok(())
        })
    }

    fn destroy<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn power_off<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn power_on<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn reboot<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn pause<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn unpause<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn suspend<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn resume<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn console_output<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, String> {
        Box::pin(async move {
            let name = task.body["display_name"].as_str().unwrap_or("");
            Ok(fake_console_log(task.instance, name, task.host))
        })
    }

    fn live_migration_prepare<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            if fails(self.config, task.host, task.instance) {
                return Err(format!(
                    "Live migration of instance {} failed: fake driver refused it on {}",
                    task.instance, task.host
                ));
            }
            Ok(())
        })
    }

    fn live_migrate<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            pause_for(self.config.live_migration_time).await;
            Ok(())
        })
    }

    fn rescue<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn unrescue<'a>(&'a self, _task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        done()
    }

    fn snapshot<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, DiskImage> {
        Box::pin(async move {
            pause_for(self.config.build_time).await;
            Ok(DiskImage::Bytes(crate::fake_disk(task.instance, task.body["image"].as_str().unwrap_or(""))))
        })
    }

    fn move_step<'a>(&'a self, task: TaskRef<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            // A bad host cannot take a moving guest in, as it cannot build.
            if task.kind == "resize_finish" && self.config.bad_hosts.iter().any(|h| h == task.host) {
                return Err(format!(
                    "Resize of instance {} aborted: fake driver failure on {}",
                    task.instance, task.host
                ));
            }
            Ok(())
        })
    }

    fn guests(&self) -> DriverFuture<'_, Option<Vec<Guest>>> {
        Box::pin(async { Ok(None) })
    }
}

/// A cheap deterministic coin for the failure rate (no RNG dependency):
/// hash of the instance uuid and the host, so each attempt of a
/// rescheduled build tosses its own coin (with the instance alone, a build
/// that failed once failed on every alternate).
pub(crate) fn fails(config: &AgentConfig, host: &str, instance: &str) -> bool {
    if config.bad_hosts.iter().any(|h| h == host) {
        return true;
    }
    if config.fail_rate <= 0.0 {
        return false;
    }
    let hash = instance
        .bytes()
        .chain(std::iter::once(b'@'))
        .chain(host.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    (hash % 1_000_000) as f64 / 1_000_000.0 < config.fail_rate
}

/// The fake driver's console log: a short, deterministic boot of a
/// guest named after the server (its hostname) and its uuid, so a
/// client sees plausible lines and tests can check tails of it.
fn fake_console_log(instance: &str, name: &str, host: &str) -> String {
    let guest: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect::<String>();
    let guest = if guest.is_empty() { "server" } else { guest.as_str() };
    [
        format!("[    0.000000] Linux version 6.1.0-berth (fake hypervisor on {host})"),
        format!("[    0.000000] DMI: OpenStack Foundation OpenStack Nova, BIOS berth {instance}"),
        "[    0.412345] Run /sbin/init as init process".to_owned(),
        format!("[    1.024000] cloud-init[312]: instance-id: {instance}"),
        format!("[    1.180000] cloud-init[312]: local-hostname: {guest}"),
        format!("{guest} login: "),
    ]
    .join("\n")
}
