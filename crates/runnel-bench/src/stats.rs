//! Latency histograms, counters, and the JSON result every workload
//! writes.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::client::Outcome;

/// Latency recorder in microseconds (1 us to 1 hour, 3 significant digits).
#[derive(Clone)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            hist: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
        }
    }
}

impl Latency {
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, 3_600_000_000);
        self.hist.saturating_record(us);
    }

    pub fn merge(&mut self, other: &Latency) {
        self.hist.add(&other.hist).expect("same bounds");
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn summary(&self) -> LatencySummary {
        let ms = |us: u64| us as f64 / 1000.0;
        let q = |p: f64| ms(self.hist.value_at_quantile(p));
        LatencySummary {
            count: self.hist.len(),
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            p9999_ms: q(0.9999),
            max_ms: ms(self.hist.max()),
            mean_ms: self.hist.mean() / 1000.0,
            stddev_ms: self.hist.stdev() / 1000.0,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub p9999_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    pub stddev_ms: f64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    pub ok: u64,
    pub back_pressure: u64,
    pub error: u64,
}

impl Counts {
    pub fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::BackPressure => self.back_pressure += 1,
            Outcome::Error => self.error += 1,
        }
    }

    pub fn merge(&mut self, other: Counts) {
        self.ok += other.ok;
        self.back_pressure += other.back_pressure;
        self.error += other.error;
    }
}

/// CPU seconds this process used (user + system), to show the client was
/// not the bottleneck.
pub fn process_cpu_secs() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes into the struct we pass and nothing else.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// CPU seconds (user and system) process `pid` has used, from
/// `/proc/PID/stat`; `None` where it cannot be read.
pub fn other_process_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it do not.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    // SAFETY: sysconf reads a constant.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after ')'.
    Some((ticks(11)? + ticks(12)?) / per_sec.max(1.0))
}

/// What one run of a workload measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub workload: String,
    /// Name shown in tables and charts (`--label`, default the API style).
    pub system: String,
    pub api_style: crate::api::ApiStyle,
    pub targets: Vec<String>,
    /// The size parameter charts put on the x axis (streams, subscribers
    /// or clients).
    pub size: u64,
    pub params: serde_json::Value,
    pub elapsed_secs: f64,
    pub counts: Counts,
    /// Completed operations (appends, deliveries, replays) per second.
    pub throughput_per_sec: f64,
    pub latency: LatencySummary,
    pub bytes_received: u64,
    pub client_cpu_secs: f64,
    /// Client CPU as a share of one core over the run.
    pub client_cpu_cores: f64,
    /// Latency in each interval of the run, in order (`--interval-secs`;
    /// by the time each operation was meant to start).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalSummary>,
}

/// The latency of the operations meant to start in one interval of a run.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalSummary {
    /// Seconds from the start of the run to the interval's start.
    pub start_secs: f64,
    #[serde(flatten)]
    pub latency: LatencySummary,
}

/// Latency histograms of consecutive intervals of a run, shared by its
/// writers (a lock per operation: runs that ask for intervals are
/// open-loop runs at moderate rates).
pub struct Intervals {
    start: std::time::Instant,
    every: Duration,
    slots: std::sync::Mutex<Vec<Latency>>,
}

impl Intervals {
    pub fn new(start: std::time::Instant, every: Duration) -> Intervals {
        assert!(!every.is_zero(), "intervals must have a length");
        Intervals {
            start,
            every,
            slots: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Records an operation meant to start at `intended` that took
    /// `latency`.
    pub fn record(&self, intended: std::time::Instant, latency: Duration) {
        let slot = (intended.saturating_duration_since(self.start).as_secs_f64()
            / self.every.as_secs_f64()) as usize;
        let mut slots = self.slots.lock().expect("intervals lock");
        if slots.len() <= slot {
            slots.resize_with(slot + 1, Latency::default);
        }
        slots[slot].record(latency);
    }

    /// Each interval's summary, empty intervals included.
    pub fn summaries(&self) -> Vec<IntervalSummary> {
        let slots = self.slots.lock().expect("intervals lock");
        slots
            .iter()
            .enumerate()
            .map(|(i, latency)| IntervalSummary {
                start_secs: i as f64 * self.every.as_secs_f64(),
                latency: latency.summary(),
            })
            .collect()
    }
}

impl BenchResult {
    /// A line per interval, for stdout.
    pub fn print_intervals(&self) {
        for interval in &self.intervals {
            let l = &interval.latency;
            println!(
                "  from {:>5.0} s: {} ok, p50 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}",
                interval.start_secs, l.count, l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
            );
        }
    }

    /// A human summary for stdout.
    pub fn print(&self) {
        let l = &self.latency;
        println!(
            "{} [{}] size={} ok={} back-pressure={} errors={} rate={:.0}/s",
            self.workload,
            self.system,
            self.size,
            self.counts.ok,
            self.counts.back_pressure,
            self.counts.error,
            self.throughput_per_sec
        );
        println!(
            "  latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  p99.99 {:.2}  max {:.2}  mean {:.2}  stddev {:.2}",
            l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.p9999_ms, l.max_ms, l.mean_ms, l.stddev_ms
        );
        println!(
            "  bytes received {}  client cpu {:.1}s ({:.2} cores)",
            self.bytes_received, self.client_cpu_secs, self.client_cpu_cores
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_reports_quantiles_in_ms() {
        let mut l = Latency::default();
        for ms in 1..=100 {
            l.record(Duration::from_millis(ms));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.5, "{}", s.p50_ms);
        assert!((s.p99_ms - 99.0).abs() < 0.5, "{}", s.p99_ms);
        assert!((s.max_ms - 100.0).abs() < 0.5);
    }

    #[test]
    fn intervals_split_operations_by_when_they_were_meant_to_start() {
        let start = std::time::Instant::now();
        let intervals = Intervals::new(start, Duration::from_secs(60));
        let at = |secs| start + Duration::from_secs(secs);
        intervals.record(at(1), Duration::from_millis(1));
        intervals.record(at(59), Duration::from_millis(3));
        intervals.record(at(130), Duration::from_millis(100));
        let s = intervals.summaries();
        let counts: Vec<u64> = s.iter().map(|i| i.latency.count).collect();
        assert_eq!(counts, [2, 0, 1]);
        let starts: Vec<f64> = s.iter().map(|i| i.start_secs).collect();
        assert_eq!(starts, [0.0, 60.0, 120.0]);
        assert!((s[2].latency.p50_ms - 100.0).abs() < 0.5, "{:?}", s[2]);
        assert!(s[0].latency.max_ms < 3.5, "{:?}", s[0]);
    }
}
