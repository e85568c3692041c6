//! A latency histogram of fixed buckets kept in atomics: observing is a
//! few relaxed additions, reading happens only when `/metrics` is scraped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds (Prometheus `le`, the
/// last bucket is `+Inf`).
pub const BOUNDS_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

#[derive(Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative), the last past every bound.
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

/// A histogram's counts as Prometheus renders them.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// (upper bound in seconds, observations at or below it), cumulative.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn observe(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut running = 0;
        let mut buckets = Vec::with_capacity(BOUNDS_US.len());
        for (bound, bucket) in BOUNDS_US.iter().zip(&self.buckets) {
            running += bucket.load(Ordering::Relaxed);
            buckets.push((*bound as f64 / 1e6, running));
        }
        let count = running + self.buckets[BOUNDS_US.len()].load(Ordering::Relaxed);
        Snapshot {
            buckets,
            count,
            sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(100)); // on a bound: that bucket
        h.observe(Duration::from_micros(101));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60)); // past every bound
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], (0.0001, 1));
        assert_eq!(s.buckets[1], (0.00025, 2));
        assert_eq!(s.buckets[4], (0.0025, 2));
        assert_eq!(s.buckets[5], (0.005, 3));
        assert_eq!(s.buckets.last().unwrap().1, 3, "+Inf holds the fourth");
        assert!((s.sum_seconds - 60.003201).abs() < 1e-9);
    }
}
