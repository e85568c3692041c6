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
}

impl BenchResult {
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
}
