//! Running one seed of one scenario, and what it found ([`Outcome`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use runnel_history::check::Report;

use crate::scenarios;
use crate::sim::{set_thread_seed, ORIGIN};

/// The scenarios, each a run of the cluster under its own schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Partitions, message loss and delay, crashes and restarts, lost
    /// disks ([`scenarios::faults`]).
    Faults,
    /// A fourth node joins every group and the first leaves
    /// ([`scenarios::membership`]).
    Membership,
    /// One replica of each group moves to another node, and back
    /// ([`scenarios::replicas`]).
    Replicas,
    /// Each group's leadership moves again and again
    /// ([`scenarios::transfer`]).
    Transfer,
    /// A node loses its disk while a write is on it and its leader alone
    /// ([`scenarios::lost_disk`]).
    LostDisk,
    /// A node joins, leaderships and a replica move and a node leaves,
    /// while nodes are cut off and crash ([`scenarios::churn`]).
    Churn,
    /// A founder dies for good and the cluster moves its replicas itself
    /// ([`scenarios::healing`]).
    Healing,
    /// Six nodes in three zones lose a whole zone
    /// ([`scenarios::zone_loss`]).
    ZoneLoss,
}

impl Scenario {
    pub const ALL: [Scenario; 8] = [
        Scenario::Faults,
        Scenario::Membership,
        Scenario::Replicas,
        Scenario::Transfer,
        Scenario::LostDisk,
        Scenario::Churn,
        Scenario::Healing,
        Scenario::ZoneLoss,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Faults => "faults",
            Scenario::Membership => "membership",
            Scenario::Replicas => "replicas",
            Scenario::Transfer => "transfer",
            Scenario::LostDisk => "lost-disk",
            Scenario::Churn => "churn",
            Scenario::Healing => "healing",
            Scenario::ZoneLoss => "zone-loss",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A scenario's name that names none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownScenario(pub String);

impl fmt::Display for UnknownScenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        write!(
            f,
            "no scenario is called {:?} (there are {})",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownScenario {}

impl FromStr for Scenario {
    type Err = UnknownScenario;

    fn from_str(name: &str) -> Result<Scenario, UnknownScenario> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| UnknownScenario(name.to_string()))
    }
}

/// What one seed of one scenario did and found.
#[derive(Debug)]
pub struct Outcome {
    pub scenario: Scenario,
    pub seed: u64,
    /// Every event with its simulated time (ms), in order; the same seed
    /// gives the same trace.
    pub trace: Vec<String>,
    /// The checker's report, with the simulation's own findings (replicas
    /// that differ, too little progress) among its anomalies; `None` for
    /// a scenario that records no history (lost-disk).
    pub report: Option<Report>,
    /// Faults injected: crashes, lost disks, isolations, changes of the
    /// network's loss and delay.
    pub faults: usize,
    /// Membership changes and leadership transfers made.
    pub changes: usize,
    /// What the scenario says of itself besides (lost-disk: whether the
    /// wiped node held its vote).
    pub note: Option<String>,
}

/// A scenario that barely made progress proves little: fewer
/// acknowledged appends than this fail the seed.
pub const MIN_ACKED: usize = 50;

impl Outcome {
    /// Appends acknowledged during the run.
    pub fn acked(&self) -> usize {
        self.trace.iter().filter(|e| e.contains(" ack ")).count()
    }

    /// Operations the checker judged (appends and reads).
    pub fn operations(&self) -> usize {
        self.report.as_ref().map_or(0, |r| {
            r.acked + r.in_doubt_landed + r.in_doubt_missing + r.reads
        })
    }

    /// Whatever the run found wrong.
    pub fn anomalies(&self) -> &[String] {
        self.report.as_ref().map_or(&[], |r| &r.anomalies)
    }

    pub fn ok(&self) -> bool {
        self.anomalies().is_empty()
    }

    /// One line: the scenario, the seed, the counts and the checker's
    /// summary.
    pub fn summary(&self) -> String {
        let checked = match &self.report {
            Some(report) => report.summary(),
            None => "no history to check".into(),
        };
        let note = self
            .note
            .as_ref()
            .map_or(String::new(), |n| format!("; {n}"));
        format!(
            "{} seed {}: {} operations checked, {} faults injected, {} membership changes; {checked}{note}",
            self.scenario,
            self.seed,
            self.operations(),
            self.faults,
            self.changes,
        )
    }
}

/// Runs `scenario` on `seed`, on this thread under the paused clock.
/// Panics (with the seed) where the scenario cannot go on: a cluster
/// that never converged, a refusal that never came, a hang.
pub fn run_seed(scenario: Scenario, seed: u64) -> Outcome {
    let mut outcome = match scenario {
        Scenario::Faults => run_simulated(seed, scenarios::faults::run(seed)),
        Scenario::Membership => run_simulated(seed, scenarios::membership::run(seed)),
        Scenario::Replicas => run_simulated(seed, scenarios::replicas::run(seed)),
        Scenario::Transfer => run_simulated(seed, scenarios::transfer::run(seed)),
        Scenario::LostDisk => run_simulated(seed, scenarios::lost_disk::run(seed)),
        Scenario::Churn => run_simulated(seed, scenarios::churn::run(seed)),
        Scenario::Healing => run_simulated(seed, scenarios::healing::run(seed)),
        Scenario::ZoneLoss => run_simulated(seed, scenarios::zone_loss::run(seed)),
    };
    if let Some(report) = &mut outcome.report {
        let acked = outcome.trace.iter().filter(|e| e.contains(" ack ")).count();
        if acked <= MIN_ACKED {
            report.anomalies.push(format!(
                "the cluster barely made progress ({acked} acknowledged appends)"
            ));
        }
    }
    outcome
}

/// Runs `simulation` on this thread under the paused clock (the
/// simulation's randomness is this thread's: one simulation per thread).
pub fn run_simulated<T>(seed: u64, simulation: impl std::future::Future<Output = T>) -> T {
    set_thread_seed(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        ORIGIN.set(Some(tokio::time::Instant::now()));
        tokio::time::timeout(Duration::from_secs(600), simulation)
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: the simulation hung"))
    })
}
