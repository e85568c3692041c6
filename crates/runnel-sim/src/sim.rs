//! The simulated cluster: its nodes (each a real [`ClusterNode`] over a
//! data directory of its own, with its shared log committed by the
//! simulation), the network they share ([`SimNet`]), and the trace of
//! what happened, on the simulated clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_engine::cluster::identity::Identity;
use runnel_engine::cluster::{ClusterConfig, ClusterNode};
use runnel_engine::EngineConfig;

use crate::net::{SimNet, SimTransport};
use crate::run::{Outcome, Scenario};
use runnel_history::check::Report;

/// Nodes that form the cluster.
pub const NODES: u64 = 3;
/// Streams the workload writes and reads, one producer and one reader
/// each.
pub const STREAMS: usize = 3;
/// Simulated time with faults, then calm before the checks.
pub const FAULTY: Duration = Duration::from_secs(20);
pub const CALM: Duration = Duration::from_secs(12);

/// Whether every event is printed as it is noted (`--trace`, or
/// `RUNNEL_SIM_TRACE=1`).
static TRACE: AtomicBool = AtomicBool::new(false);

/// Prints every event as it is noted, for the rest of the process.
pub fn print_trace(on: bool) {
    TRACE.store(on, Ordering::Relaxed);
}

fn printing_trace() -> bool {
    TRACE.load(Ordering::Relaxed) || std::env::var_os("RUNNEL_SIM_TRACE").is_some()
}

thread_local! {
    /// When the running simulation started, on its paused clock (one
    /// simulation per thread).
    pub(crate) static ORIGIN: std::cell::Cell<Option<tokio::time::Instant>> =
        const { std::cell::Cell::new(None) };
    /// The seed this thread simulates, to tell printed traces apart.
    static SEED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Milliseconds since the simulation started.
pub fn at() -> u128 {
    ORIGIN
        .get()
        .map_or(0, |origin| origin.elapsed().as_millis())
}

/// Notes that this thread simulates `seed` (printed with its trace).
pub(crate) fn set_thread_seed(seed: u64) {
    SEED.set(seed);
}

pub struct Sim {
    pub dir: tempfile::TempDir,
    pub net: Arc<SimNet>,
    /// The nodes by index (node id minus one); `None` while down.
    pub nodes: Vec<Option<Arc<ClusterNode>>>,
    committers: Vec<Option<tokio::task::JoinHandle<()>>>,
    pub trace: Arc<Mutex<Vec<String>>>,
    /// Seeds each (re)started node's disk latencies.
    disk_seed: u64,
    /// Faults injected: crashes, lost disks, isolations, and changes of
    /// the network's loss and delay.
    faults: AtomicUsize,
    /// Membership changes (and leadership transfers) made.
    changes: AtomicUsize,
    /// The nodes' `--dead-node-after` (self-healing), for nodes started
    /// from now on; off unless a scenario sets it.
    pub dead_node_after: Option<Duration>,
    /// Nodes that form the cluster (ids `1..=founders`).
    founders: u64,
    /// The founders' zones, as their `--peers` would name them (none
    /// unless a scenario places the cluster in zones).
    zones: runnel_engine::placement::Zones,
}

impl Sim {
    /// Three nodes, none started yet.
    pub fn new(seed: u64) -> Sim {
        Sim::with_slots(seed, NODES as usize)
    }

    /// `slots` nodes, none started yet: the first [`NODES`] form the
    /// cluster, the others can join it.
    pub fn with_slots(seed: u64, slots: usize) -> Sim {
        Sim {
            dir: tempfile::tempdir().expect("a temporary directory"),
            net: SimNet::new(seed.wrapping_mul(31)),
            nodes: (0..slots).map(|_| None).collect(),
            committers: (0..slots).map(|_| None).collect(),
            trace: Arc::default(),
            disk_seed: seed.wrapping_mul(17),
            faults: AtomicUsize::new(0),
            changes: AtomicUsize::new(0),
            dead_node_after: None,
            founders: NODES,
            zones: Default::default(),
        }
    }

    /// A cluster of one founder per entry of `zones`, node `i` in zone
    /// `zones[i]`; none started yet.
    pub fn in_zones(seed: u64, zones: &[&str]) -> Sim {
        let mut sim = Sim::with_slots(seed, zones.len());
        sim.founders = zones.len() as u64;
        sim.zones = zones
            .iter()
            .enumerate()
            .map(|(i, zone)| (i as u64 + 1, zone.to_string()))
            .collect();
        sim
    }

    /// Node `id`'s HTTP address (its Raft port is the next one).
    pub fn http_addr(id: u64) -> String {
        format!("10.0.0.{id}:4437")
    }

    /// The founders know each other; a node that joins later knows the
    /// founders and itself.
    fn config(&self, i: usize) -> ClusterConfig {
        let mut engine = EngineConfig::new(self.dir.path().join(format!("n{}", i + 1)));
        engine.groups = 3;
        engine.segment_bytes = 64 << 10;
        engine.checkpoint_interval = Duration::from_secs(3);
        // A simulated crash loses what the log had not committed; what it
        // wrote survives in the page cache whether synced or not, so a
        // real fsync would only cost wall-clock time (most of a run's).
        engine.sync = runnel_engine::SyncMode::Never;
        let known = self.founders.max(i as u64 + 1);
        let peers: BTreeMap<u64, String> = (1..=self.founders)
            .chain(std::iter::once(known))
            .map(|id| (id, Sim::http_addr(id)))
            .collect();
        let mut config = ClusterConfig::new(engine, i as u64 + 1, peers);
        config.manual_commit = true;
        // Off but in the healing scenario: members stay where the other
        // scenarios put them.
        config.dead_node_after = self.dead_node_after;
        config.zones = self.zones.clone();
        config.zone = self.zones.get(&(i as u64 + 1)).cloned();
        config
    }

    /// Records an event in the trace (printed too with `--trace`).
    pub fn note(&self, event: String) {
        if printing_trace() {
            eprintln!("[seed {}] {event}", SEED.get());
        }
        self.trace.lock().expect("trace lock").push(event);
    }

    /// Starts node `i` (again).
    pub async fn start(&mut self, i: usize) {
        let transport = SimTransport {
            net: Arc::clone(&self.net),
            me: i as u64 + 1,
        };
        let config = self.config(i);
        let identity = Identity::load(&config.engine.data_dir, config.node_id, None)
            .unwrap_or_else(|e| panic!("node {}'s cluster id: {e}", i + 1));
        let node = ClusterNode::open_with(&config, transport, identity)
            .await
            .unwrap_or_else(|e| panic!("node {} failed to open: {e}", i + 1));
        // The disk: what was appended becomes durable after 0.5-4 ms.
        let committing = Arc::clone(&node);
        let mut disk = StdRng::seed_from_u64(self.disk_seed + i as u64);
        self.disk_seed += 7;
        self.committers[i] = Some(tokio::spawn(async move {
            loop {
                let pause = Duration::from_micros(disk.gen_range(500..4000));
                tokio::time::sleep(pause).await;
                if committing.commit_log().is_err() {
                    return;
                }
            }
        }));
        self.nodes[i] = Some(node);
        self.note(format!("{} start n{}", at(), i + 1));
    }

    /// Ends the run: the outcome of `scenario` on `seed` (the checker's
    /// `report`, the scenario's `note`), with the trace and the faults and
    /// changes counted; every node stopped.
    pub async fn conclude(
        mut self,
        scenario: Scenario,
        seed: u64,
        report: Option<Report>,
        note: Option<String>,
    ) -> Outcome {
        let outcome = Outcome {
            scenario,
            seed,
            trace: self.trace(),
            report,
            faults: self.faults(),
            changes: self.changes(),
            note,
        };
        self.stop_all().await;
        outcome
    }

    /// Kills node `i` (a fault): what its log had not committed is lost.
    pub async fn crash(&mut self, i: usize) {
        if self.stop(i).await {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Node `i` loses its disk: it is killed and its data directory
    /// wiped (it comes back empty when started again).
    pub async fn wipe(&mut self, i: usize) {
        self.crash(i).await;
        std::fs::remove_dir_all(self.dir.path().join(format!("n{}", i + 1)))
            .expect("wipe the node's data directory");
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    /// Stops every node at the end of a run (not a fault).
    pub async fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.stop(i).await;
        }
    }

    /// Kills node `i` if it runs; answers whether it did.
    async fn stop(&mut self, i: usize) -> bool {
        let Some(node) = self.nodes[i].take() else {
            return false;
        };
        self.net.unregister(i as u64 + 1);
        if let Some(c) = self.committers[i].take() {
            c.abort();
        }
        node.crash().await;
        self.note(format!("{} crash n{}", at(), i + 1));
        true
    }

    /// Cuts `node` off from every other node, or heals it.
    pub fn isolate(&self, node: u64, isolated: bool) {
        if isolated {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
        self.net.isolate(node, isolated);
    }

    /// Loses `drop_per_mille` of the messages and delays each by up to
    /// `max_delay_ms` (a fault).
    pub fn set_faults(&self, drop_per_mille: u32, max_delay_ms: u64) {
        self.faults.fetch_add(1, Ordering::Relaxed);
        self.net.set_faults(drop_per_mille, max_delay_ms);
    }

    /// A calm network: nothing lost, up to 2 ms of delay (not a fault).
    pub fn calm(&self) {
        self.net.set_faults(0, 2);
    }

    /// Notes a membership change (or leadership transfer) made.
    pub fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Faults injected so far.
    pub fn faults(&self) -> usize {
        self.faults.load(Ordering::Relaxed)
    }

    /// Membership changes made so far.
    pub fn changes(&self) -> usize {
        self.changes.load(Ordering::Relaxed)
    }

    /// The running nodes.
    pub fn alive(&self) -> Vec<Arc<ClusterNode>> {
        self.nodes.iter().flatten().cloned().collect()
    }

    /// The trace so far.
    pub fn trace(&self) -> Vec<String> {
        self.trace.lock().expect("trace lock").clone()
    }
}
