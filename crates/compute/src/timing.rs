//! Latency histograms of the compute runtime (the dashboard's activity
//! view and `/metrics`): time from an accepted boot to ACTIVE, one
//! scheduler run, one claim's planned write. Fixed buckets of atomics:
//! recording is a few relaxed atomic adds, no lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

/// Bucket upper bounds, in seconds (the last bucket is `+Inf`).
pub const BUCKETS: [f64; 16] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// One latency histogram (seconds).
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last slot is `+Inf`.
    counts: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of observations, in microseconds.
    sum_micros: AtomicU64,
    count: AtomicU64,
}

/// A histogram's summary.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    /// Observations.
    pub count: u64,
    /// Mean, seconds (0 without observations).
    pub mean: f64,
    /// Upper bound (seconds) of the bucket holding the median (the
    /// largest finite bound for `+Inf`; 0 without observations).
    pub p50: f64,
    /// Same for the 99th percentile.
    pub p99: f64,
}

impl Histogram {
    /// Record one duration.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let slot = BUCKETS.iter().position(|b| secs <= *b).unwrap_or(BUCKETS.len());
        self.counts[slot].fetch_add(1, Relaxed);
        self.sum_micros.fetch_add(d.as_micros().min(u128::from(u64::MAX)) as u64, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }

    /// Per-bucket counts (the last is `+Inf`), the sum (seconds) and the count.
    pub fn snapshot(&self) -> (Vec<u64>, f64, u64) {
        let counts = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        (counts, self.sum_micros.load(Relaxed) as f64 / 1e6, self.count.load(Relaxed))
    }

    /// Count, mean, p50 and p99 (bucket upper bounds).
    pub fn summary(&self) -> Summary {
        let (counts, sum, _) = self.snapshot();
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return Summary::default();
        }
        let quantile = |q: f64| -> f64 {
            let want = ((count as f64 * q).ceil() as u64).max(1);
            let mut seen = 0;
            for (i, n) in counts.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return BUCKETS[i.min(BUCKETS.len() - 1)];
                }
            }
            BUCKETS[BUCKETS.len() - 1]
        };
        Summary { count, mean: sum / count as f64, p50: quantile(0.5), p99: quantile(0.99) }
    }

    /// The histogram in Prometheus text format (`name_bucket{le=...}`,
    /// `name_sum`, `name_count`), with its HELP and TYPE lines.
    pub fn render(&self, name: &str, help: &str) -> String {
        use std::fmt::Write;
        let (counts, sum, _) = self.snapshot();
        let mut out = format!("# HELP {name} {help}\n# TYPE {name} histogram\n");
        let mut cumulative = 0;
        for (i, n) in counts.iter().enumerate() {
            cumulative += n;
            match BUCKETS.get(i) {
                Some(bound) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {cumulative}");
        out
    }
}

/// Most boots remembered at once for time-to-ACTIVE; past it new boots
/// are not timed (builds that never go ACTIVE are forgotten only then).
const MAX_PENDING: usize = 100_000;

/// The compute runtime's latency histograms.
#[derive(Debug, Default)]
pub struct Timings {
    /// From `POST /servers` accepting a boot to the instance going ACTIVE
    /// (boots accepted and gone ACTIVE in this process).
    pub time_to_active: Histogram,
    /// One scheduler run (candidates, filters, weighing) for one boot
    /// request.
    pub scheduler: Histogram,
    /// One claim: the planned write of the chosen allocations, to durable.
    pub claim: Histogram,
    accepted: Mutex<HashMap<Uuid, Instant>>,
}

impl Timings {
    /// Boots accepted now.
    pub fn accepted(&self, instances: &[Uuid]) {
        let now = Instant::now();
        let mut accepted = self.accepted.lock().unwrap_or_else(|p| p.into_inner());
        if accepted.len() + instances.len() > MAX_PENDING {
            accepted.clear();
        }
        accepted.extend(instances.iter().map(|i| (*i, now)));
    }

    /// The instance went ACTIVE (a first time: later ACTIVEs are not
    /// timed) or its build ended otherwise (`active` false).
    pub fn finished(&self, instance: Uuid, active: bool) {
        let since = self.accepted.lock().unwrap_or_else(|p| p.into_inner()).remove(&instance);
        if let (Some(since), true) = (since, active) {
            self.time_to_active.observe(since.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_bucket_bounds() {
        let h = Histogram::default();
        assert_eq!(h.summary(), Summary::default());
        for _ in 0..98 {
            h.observe(Duration::from_micros(700));
        }
        h.observe(Duration::from_millis(20));
        h.observe(Duration::from_secs(100));
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50, 0.001);
        assert_eq!(s.p99, 0.025);
        assert!((s.mean - (98.0 * 0.0007 + 0.02 + 100.0) / 100.0).abs() < 1e-9, "{}", s.mean);
        let text = h.render("x_seconds", "help");
        assert!(text.contains("x_seconds_bucket{le=\"0.001\"} 98\n"), "{text}");
        assert!(text.contains("x_seconds_bucket{le=\"60\"} 99\n"), "{text}");
        assert!(text.contains("x_seconds_bucket{le=\"+Inf\"} 100\n"), "{text}");
        assert!(text.contains("x_seconds_count 100\n"), "{text}");
    }

    #[test]
    fn time_to_active_counts_accepted_boots_once() {
        let t = Timings::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        t.accepted(&[a, b]);
        t.finished(a, true);
        t.finished(a, true);
        t.finished(b, false);
        t.finished(Uuid::from_u128(3), true);
        assert_eq!(t.time_to_active.summary().count, 1);
    }
}
