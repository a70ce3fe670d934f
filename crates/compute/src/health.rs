//! Service health: which hosts are up (heartbeats within
//! `service_down_time`, not forced down), which are disabled, and how many
//! builds failed on each since its last success.
//!
//! Heartbeats reach the process the agent talks to, which records them in
//! memory at once and in the cell database (batched); other processes
//! learn them from the cell databases when they refresh ([`Health::merge_services`]).
//! Time comes from a [`Clock`], which tests can move.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::RwLock;

use berth_compute_model::cell::Service;
use berth_compute_model::Timestamp;

/// Where time comes from.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in Unix seconds.
    fn now(&self) -> Timestamp;
    /// Move time by `seconds` (tests).
    fn advance(&self, seconds: i64);
}

/// The wall clock, shifted by an offset that tests may set (only when the
/// server runs with test hooks). With a file, the offset survives a
/// restart (outage tests: time moves on while the process is down).
#[derive(Debug, Default)]
pub struct SystemClock {
    offset: AtomicI64,
    file: Option<std::path::PathBuf>,
}

impl SystemClock {
    /// A clock whose offset is kept in `file` (read now, rewritten on every
    /// advance).
    pub fn persisted(file: std::path::PathBuf) -> Self {
        let offset = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
        SystemClock { offset: AtomicI64::new(offset), file: Some(file) }
    }
}

impl Clock for SystemClock {
    fn advance(&self, seconds: i64) {
        let offset = self.offset.fetch_add(seconds, Ordering::SeqCst) + seconds;
        if let Some(file) = &self.file {
            if let Some(dir) = file.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            if let Err(e) = std::fs::write(file, offset.to_string()) {
                tracing::warn!(file = %file.display(), error = %e, "test clock offset not saved");
            }
        }
    }

    fn now(&self) -> Timestamp {
        let wall =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
        wall + self.offset.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone, Default)]
struct HostRecord {
    last_seen: Option<Timestamp>,
    disabled: bool,
    forced_down: bool,
    failed_builds: i64,
}

/// Health of every known host.
#[derive(Debug)]
pub struct Health {
    /// Seconds without a heartbeat after which a service is down (Nova's
    /// `service_down_time`, 60).
    pub service_down_time: i64,
    hosts: RwLock<HashMap<String, HostRecord>>,
    /// Hosts ever seen (`last_seen` set), kept with the records: the
    /// scheduler compares it with the mapped hosts on every run.
    known: AtomicUsize,
}

impl HostRecord {
    /// Seen at `at` (the latest time wins); true the first time.
    fn seen(&mut self, at: Timestamp) -> bool {
        let first = self.last_seen.is_none();
        self.last_seen = Some(self.last_seen.map_or(at, |t| t.max(at)));
        first
    }
}

impl Health {
    /// Empty health with `service_down_time`.
    pub fn new(service_down_time: i64) -> Self {
        Health { service_down_time, hosts: RwLock::new(HashMap::new()), known: AtomicUsize::new(0) }
    }

    fn update(&self, host: &str, f: impl FnOnce(&mut HostRecord)) {
        let mut hosts = self.hosts.write().unwrap_or_else(|p| p.into_inner());
        f(hosts.entry(host.to_owned()).or_default());
    }

    /// A heartbeat from `host` at `at`.
    pub fn heartbeat(&self, host: &str, at: Timestamp) {
        self.update(host, |r| {
            if r.seen(at) {
                self.known.fetch_add(1, Ordering::Relaxed);
            }
        });
    }

    /// Take in what the cell databases say (other processes' heartbeats,
    /// operator flags).
    pub fn merge_services(&self, services: &[Service]) {
        let mut hosts = self.hosts.write().unwrap_or_else(|p| p.into_inner());
        for service in services.iter().filter(|s| s.binary == "nova-compute") {
            let record = hosts.entry(service.host.clone()).or_default();
            record.disabled = service.disabled;
            record.forced_down = service.forced_down;
            if let Some(at) = service.last_seen_up {
                if record.seen(at) {
                    self.known.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// An operator changed the service flags of `host`.
    pub fn set_flags(&self, host: &str, disabled: bool, forced_down: bool) {
        self.update(host, |r| {
            r.disabled = disabled;
            r.forced_down = forced_down;
        });
    }

    /// A build failed on `host`: counted at once (the build-failure
    /// weigher sees it on the next request, not after Nova's 60-second
    /// periodic report). Returns the host's failures since its last
    /// success.
    pub fn build_failed(&self, host: &str) -> i64 {
        let mut failures = 0;
        self.update(host, |r| {
            r.failed_builds += 1;
            failures = r.failed_builds;
        });
        failures
    }

    /// A build succeeded on `host`: its failure count resets.
    pub fn build_succeeded(&self, host: &str) {
        self.update(host, |r| r.failed_builds = 0);
    }

    /// How many hosts have been seen (heartbeat or service row).
    pub fn known(&self) -> usize {
        self.known.load(Ordering::Relaxed)
    }

    /// Has `host` ever been seen (heartbeat or service row)?
    pub fn is_known(&self, host: &str) -> bool {
        self.hosts.read().unwrap_or_else(|p| p.into_inner()).get(host).is_some_and(|r| r.last_seen.is_some())
    }

    /// The last time `host` was seen (heartbeat or service row).
    pub fn last_seen(&self, host: &str) -> Option<Timestamp> {
        self.hosts.read().unwrap_or_else(|p| p.into_inner()).get(host).and_then(|r| r.last_seen)
    }

    /// Is `host` up at `now`?
    pub fn is_up_at(&self, host: &str, now: Timestamp) -> bool {
        let hosts = self.hosts.read().unwrap_or_else(|p| p.into_inner());
        hosts
            .get(host)
            .is_some_and(|r| !r.forced_down && r.last_seen.is_some_and(|t| now - t <= self.service_down_time))
    }

    /// The health at `now`, as the scheduler asks for it.
    pub fn at(&self, now: Timestamp) -> HealthAt<'_> {
        HealthAt { health: self, now }
    }
}

/// [`Health`] at one instant (implements the scheduler's view).
#[derive(Debug)]
pub struct HealthAt<'a> {
    health: &'a Health,
    now: Timestamp,
}

impl berth_scheduler::HostHealth for HealthAt<'_> {
    fn is_up(&self, host: &str) -> bool {
        self.health.is_up_at(host, self.now)
    }
    fn is_disabled(&self, host: &str) -> bool {
        self.health.hosts.read().unwrap_or_else(|p| p.into_inner()).get(host).is_some_and(|r| r.disabled)
    }
    fn failed_builds(&self, host: &str) -> i64 {
        self.health.hosts.read().unwrap_or_else(|p| p.into_inner()).get(host).map_or(0, |r| r.failed_builds)
    }
    fn status(&self, host: &str) -> berth_scheduler::HostStatus {
        let hosts = self.health.hosts.read().unwrap_or_else(|p| p.into_inner());
        hosts.get(host).map_or(berth_scheduler::HostStatus::default(), |r| berth_scheduler::HostStatus {
            up: !r.forced_down && r.last_seen.is_some_and(|t| self.now - t <= self.health.service_down_time),
            disabled: r.disabled,
            failed_builds: r.failed_builds,
        })
    }
}

#[cfg(test)]
mod tests {
    use berth_scheduler::HostHealth;

    use super::*;

    #[test]
    fn up_down_forced_and_failures() {
        let health = Health::new(60);
        assert!(!health.is_up_at("h", 100), "never heard of");
        health.heartbeat("h", 100);
        assert!(health.is_up_at("h", 160));
        assert!(!health.is_up_at("h", 161), "silent for longer than service_down_time");
        health.set_flags("h", true, true);
        assert!(!health.is_up_at("h", 100), "forced down");
        assert!(health.at(100).is_disabled("h"));
        health.build_failed("h");
        health.build_failed("h");
        assert_eq!(health.at(0).failed_builds("h"), 2);
        health.build_succeeded("h");
        assert_eq!(health.at(0).failed_builds("h"), 0);
        // `status` (one lookup) says what the three questions say.
        health.build_failed("h");
        for (host, now) in [("h", 100), ("h", 161), ("nobody", 100)] {
            let at = health.at(now);
            let expected = berth_scheduler::HostStatus {
                up: at.is_up(host),
                disabled: at.is_disabled(host),
                failed_builds: at.failed_builds(host),
            };
            assert_eq!(at.status(host), expected, "{host} at {now}");
        }
        health.set_flags("h", false, false);
        assert!(health.at(160).status("h").up && !health.at(160).status("h").disabled);
        assert_eq!(health.at(160).status("h").failed_builds, 1);
    }

    /// `known` counts each host once, from its first heartbeat or service
    /// row; flags alone do not make a host seen.
    #[test]
    fn known_counts_hosts_seen_once() {
        let health = Health::new(60);
        health.set_flags("quiet", false, false);
        assert_eq!(health.known(), 0);
        health.heartbeat("a", 10);
        health.heartbeat("a", 20);
        assert_eq!(health.known(), 1);
        let service = |host: &str, at: Option<Timestamp>| Service {
            id: 1,
            uuid: uuid::Uuid::new_v4(),
            host: host.to_owned(),
            binary: "nova-compute".to_owned(),
            disabled: false,
            disabled_reason: None,
            forced_down: false,
            last_seen_up: at,
            created_at: 0,
            updated_at: None,
        };
        health.merge_services(&[service("a", Some(30)), service("b", Some(5)), service("quiet", None)]);
        assert_eq!(health.known(), 2);
        assert!(health.is_known("b") && !health.is_known("quiet"));
    }
}
