//! How often the log synced and how long its syncs took: a count, a total,
//! and a histogram fine enough to read the tail from. A benchmark reads
//! acknowledgement latency against it: a durable acknowledgement cannot
//! come sooner than the sync it waits for, so its percentiles are bounded
//! below by the syncs' own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Width of one histogram bucket.
const BUCKET: Duration = Duration::from_micros(10);
/// Buckets up to 20 ms; longer syncs share the last one.
const BUCKETS: usize = 2000;

/// Records syncs from the committer; read at any time.
pub(crate) struct SyncRecorder {
    syncs: AtomicU64,
    nanos: AtomicU64,
    /// Records written (synced or, with `--sync never`, not).
    records: AtomicU64,
    /// The committer thread's CPU time so far, in nanoseconds.
    committer_cpu_nanos: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl SyncRecorder {
    pub fn new() -> SyncRecorder {
        SyncRecorder {
            syncs: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            records: AtomicU64::new(0),
            committer_cpu_nanos: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn record(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let bucket = (took.as_nanos() / BUCKET.as_nanos()).min(BUCKETS as u128 - 1) as usize;
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// A batch of `n` records was written.
    pub fn count_records(&self, n: u64) {
        self.records.fetch_add(n, Ordering::Relaxed);
    }

    /// The committer thread has used `cpu` so far (its thread clock).
    pub fn committer_cpu(&self, cpu: Duration) {
        let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
        self.committer_cpu_nanos.store(nanos, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> SyncStats {
        let mut buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        while buckets.last() == Some(&0) {
            buckets.pop();
        }
        SyncStats {
            syncs: self.syncs.load(Ordering::Relaxed),
            sync_time: Duration::from_nanos(self.nanos.load(Ordering::Relaxed)),
            records: self.records.load(Ordering::Relaxed),
            committer_cpu: Duration::from_nanos(self.committer_cpu_nanos.load(Ordering::Relaxed)),
            buckets,
        }
    }
}

/// Syncs so far (or between two readings, see [`SyncStats::since`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncStats {
    pub syncs: u64,
    pub sync_time: Duration,
    /// Records written; over `syncs`, the records each sync made durable.
    pub records: u64,
    /// CPU time of the thread that writes and syncs the log: work every
    /// append of the node passes through one thread for (the serial part
    /// `bench/cores.sh` measures).
    pub committer_cpu: Duration,
    /// Syncs per 10 µs of duration (trailing empty buckets left out).
    buckets: Vec<u64>,
}

impl SyncStats {
    /// The syncs made after `earlier` was read.
    pub fn since(&self, earlier: &SyncStats) -> SyncStats {
        let mut buckets: Vec<u64> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(earlier.buckets.get(i).copied().unwrap_or(0)))
            .collect();
        while buckets.last() == Some(&0) {
            buckets.pop();
        }
        SyncStats {
            syncs: self.syncs.saturating_sub(earlier.syncs),
            sync_time: self.sync_time.saturating_sub(earlier.sync_time),
            records: self.records.saturating_sub(earlier.records),
            committer_cpu: self.committer_cpu.saturating_sub(earlier.committer_cpu),
            buckets,
        }
    }

    /// Syncs that took at most `bound` (to the 10 µs of a bucket; syncs
    /// past 20 ms count only at bounds of 20 ms or more).
    pub fn at_most(&self, bound: Duration) -> u64 {
        let whole = (bound.as_nanos() / BUCKET.as_nanos()) as usize;
        self.buckets.iter().take(whole).sum()
    }

    /// The sync duration that a fraction `q` (0..=1) of the syncs did not
    /// exceed, to 10 µs (the upper edge of its bucket); `None` without
    /// syncs.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(BUCKET * (i as u32 + 1));
            }
        }
        Some(BUCKET * self.buckets.len() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_syncs_between_two_readings() {
        let recorder = SyncRecorder::new();
        assert_eq!(recorder.snapshot(), SyncStats::default());
        assert_eq!(recorder.snapshot().quantile(0.99), None);
        for _ in 0..50 {
            recorder.record(Duration::from_micros(5_000));
        }
        let before = recorder.snapshot();
        for _ in 0..98 {
            recorder.record(Duration::from_micros(195));
        }
        recorder.record(Duration::from_micros(900));
        recorder.record(Duration::from_secs(3));
        let run = recorder.snapshot().since(&before);
        assert_eq!(run.syncs, 100);
        assert_eq!(run.quantile(0.5), Some(Duration::from_micros(200)));
        assert_eq!(run.quantile(0.98), Some(Duration::from_micros(200)));
        assert_eq!(run.quantile(0.99), Some(Duration::from_micros(910)));
        assert_eq!(
            run.quantile(1.0),
            Some(Duration::from_millis(20)),
            "syncs past the last bucket count in it"
        );
        assert_eq!(
            run.sync_time,
            Duration::from_micros(98 * 195 + 900) + Duration::from_secs(3)
        );
        assert_eq!(run.at_most(Duration::from_micros(200)), 98);
        assert_eq!(run.at_most(Duration::from_millis(1)), 99);
        assert_eq!(run.at_most(Duration::from_secs(1)), 100);
        recorder.count_records(7);
        assert_eq!(recorder.snapshot().since(&before).records, 7);
        recorder.committer_cpu(Duration::from_millis(30));
        let first = recorder.snapshot();
        recorder.committer_cpu(Duration::from_millis(45));
        assert_eq!(
            recorder.snapshot().since(&first).committer_cpu,
            Duration::from_millis(15),
            "the committer's CPU is a running total"
        );
    }
}
