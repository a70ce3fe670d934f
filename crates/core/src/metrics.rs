//! Counters of the write path and the change feed (exported at
//! `/metrics` by the binary).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Store and change-feed counters of one process.
#[derive(Debug, Default)]
pub struct CoreMetrics {
    /// Change sets applied from other processes (change feed).
    pub feed_applied: AtomicU64,
    /// Unix milliseconds of the last successful change-feed poll (0 = never).
    pub feed_last_poll_ms: AtomicI64,
    /// Failed change-feed polls.
    pub feed_errors: AtomicU64,
    /// Store calls that found the database unavailable.
    pub store_unavailable: AtomicU64,
    /// Full snapshot reloads because the change feed was pruned past this
    /// process's position.
    pub feed_reloads: AtomicU64,
}

impl CoreMetrics {
    /// `(name, help, value)` of every counter, for the text exposition.
    pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        vec![
            (
                "berth_change_feed_applied_total",
                "Change sets applied from other processes.",
                self.feed_applied.load(Ordering::Relaxed),
            ),
            ("berth_change_feed_errors_total", "Failed change-feed polls.", self.feed_errors.load(Ordering::Relaxed)),
            (
                "berth_store_unavailable_total",
                "Store calls that found the database unavailable.",
                self.store_unavailable.load(Ordering::Relaxed),
            ),
            (
                "berth_change_feed_reloads_total",
                "Full snapshot reloads after the change feed was pruned past this process.",
                self.feed_reloads.load(Ordering::Relaxed),
            ),
        ]
    }

    /// Seconds since the last change-feed poll (0 when never polled).
    pub fn feed_staleness_seconds(&self) -> f64 {
        let last = self.feed_last_poll_ms.load(Ordering::Relaxed);
        if last == 0 {
            return 0.0;
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        (now_ms - last).max(0) as f64 / 1000.0
    }
}
