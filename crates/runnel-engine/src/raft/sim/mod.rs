//! Deterministic simulation of a 3-node cluster: every node's groups, the
//! network ([`net`]) and the disks run on one thread under tokio's paused
//! clock, and every random choice (faults, delays, election timeouts,
//! client behaviour) comes from one seed, so a failing seed reproduces
//! exactly. Shared logs are real files, committed by the simulation
//! ([`runnel_log::LogOptions::manual_commit`]); a crash drops what was not
//! committed.
//!
//! Each run drives idempotent producers through partitions, message loss
//! and delay, node crashes and restarts, and lost disks (a node restarts
//! with an empty data directory), while readers read each stream through
//! the node that believes it leads, as forwarded reads are served, or
//! through a follower after its read index, as live reads are. Every
//! request goes to a random node and is routed as the server routes it
//! ([`crate::Route`]: served there, forwarded to the leader, or refused
//! without one). Then the cluster heals (leaders moved by failovers are
//! handed back to their preferred nodes, under load), every replica must
//! hold the same bytes, and the recorded history (each append's and read's
//! invocation and completion on the simulated clock, and its answer) goes
//! through the same checker as the real-process partition test
//! ([`runnel_history::check`]): no acknowledged append lost, moved or
//! repeated, appends in real-time order, every read exactly the final
//! bytes it covered, and every read holding what was acknowledged before
//! it began (a leader cut off from the others, or a lagging follower,
//! must not serve stale state).
//!
//! [`membership`] changes the cluster under the same clients: a fourth
//! node joins every group and the first leaves. [`replicas`] moves one
//! replica of each group instead, so that the groups live on different
//! nodes and every node routes some groups it holds no copy of.
//!
//! [`transfer`] moves each group's leadership again and again under the
//! same clients, and checks that writes never wait out a lease.
//!
//! [`lost_disk`] plays one scenario the random faults are unlikely to
//! reach: a node loses its disk while an acknowledged write is on it and
//! its leader alone, and the leader crashes before the node has it back.
//!
//! `cargo test -p runnel-engine sim_` runs the fixed seed corpus;
//! `RUNNEL_SIM_SEEDS=500 cargo test --release -p runnel-engine sim_corpus`
//! runs more, `RUNNEL_SIM_SEED=N` one, and `RUNNEL_SIM_TRACE=1` prints
//! each fault and acknowledgement as it happens.

mod lost_disk;
mod membership;
mod net;
mod replicas;
mod transfer;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_core::{AppendToStream, Applied, Body, Command, CreateStream, Producer, ReadFrom};
use runnel_history::check::{AppendOp, History, Micros, ReadKind, ReadOp};
use runnel_history::record::payload;

use self::net::{SimNet, SimTransport};
use crate::api::{NodeEngine, Route};
use crate::cluster::identity::Identity;
use crate::cluster::{ClusterConfig, ClusterNode};
use crate::node::EngineConfig;
use crate::placement::stream_group;
use crate::raft::runtime::seed_thread_rng;

const NODES: u64 = 3;
const STREAMS: usize = 3;
/// Simulated time with faults, then calm before the checks.
const FAULTY: Duration = Duration::from_secs(20);
const CALM: Duration = Duration::from_secs(12);

struct Sim {
    dir: tempfile::TempDir,
    net: Arc<SimNet>,
    nodes: Vec<Option<Arc<ClusterNode>>>,
    committers: Vec<Option<tokio::task::JoinHandle<()>>>,
    trace: Arc<Mutex<Vec<String>>>,
    /// Seeds each (re)started node's disk latencies.
    disk_seed: u64,
}

thread_local! {
    /// When the running simulation started, on its paused clock.
    static ORIGIN: std::cell::Cell<Option<tokio::time::Instant>> = const { std::cell::Cell::new(None) };
}

/// Milliseconds since the simulation started.
fn at() -> u128 {
    ORIGIN
        .get()
        .map_or(0, |origin| origin.elapsed().as_millis())
}

impl Sim {
    /// Three nodes, none started yet.
    fn new(seed: u64) -> Sim {
        Sim::with_slots(seed, NODES as usize)
    }

    /// `slots` nodes, none started yet: the first [`NODES`] form the
    /// cluster, the others can join it.
    fn with_slots(seed: u64, slots: usize) -> Sim {
        Sim {
            dir: tempfile::tempdir().unwrap(),
            net: SimNet::new(seed.wrapping_mul(31)),
            nodes: (0..slots).map(|_| None).collect(),
            committers: (0..slots).map(|_| None).collect(),
            trace: Arc::default(),
            disk_seed: seed.wrapping_mul(17),
        }
    }

    /// Node `id`'s HTTP address (its Raft port is the next one).
    fn http_addr(id: u64) -> String {
        format!("10.0.0.{id}:4437")
    }

    /// The founders know each other; a node that joins later knows the
    /// founders and itself.
    fn config(&self, i: usize) -> ClusterConfig {
        let mut engine = EngineConfig::new(self.dir.path().join(format!("n{}", i + 1)));
        engine.groups = 3;
        engine.segment_bytes = 64 << 10;
        engine.checkpoint_interval = Duration::from_secs(3);
        let known = NODES.max(i as u64 + 1);
        let peers: BTreeMap<u64, String> = (1..=NODES)
            .chain(std::iter::once(known))
            .map(|id| (id, Sim::http_addr(id)))
            .collect();
        let mut config = ClusterConfig::new(engine, i as u64 + 1, peers);
        config.manual_commit = true;
        config
    }

    /// Records an event in the trace (`RUNNEL_SIM_TRACE=1` prints it too).
    fn note(&self, event: String) {
        if std::env::var_os("RUNNEL_SIM_TRACE").is_some() {
            eprintln!("{event}");
        }
        self.trace.lock().unwrap().push(event);
    }

    async fn start(&mut self, i: usize) {
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

    async fn crash(&mut self, i: usize) {
        if let Some(node) = self.nodes[i].take() {
            self.net.unregister(i as u64 + 1);
            if let Some(c) = self.committers[i].take() {
                c.abort();
            }
            node.crash().await;
            self.note(format!("{} crash n{}", at(), i + 1));
        }
    }

    fn alive(&self) -> Vec<Arc<ClusterNode>> {
        self.nodes.iter().flatten().cloned().collect()
    }
}

/// The history of appends and reads, on the simulated clock.
struct Recorder {
    origin: tokio::time::Instant,
    history: Mutex<History>,
}

impl Recorder {
    fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            origin: tokio::time::Instant::now(),
            history: Mutex::default(),
        })
    }

    fn now(&self) -> Micros {
        self.origin.elapsed().as_micros() as Micros
    }
}

fn stream_name(stream: usize) -> String {
    format!("stream-{stream}")
}

/// Creates an empty `text/plain` stream.
fn create_text(name: &str) -> Command {
    Command::Create(CreateStream {
        name: name.to_string(),
        content_type: Some("text/plain".into()),
        ..Default::default()
    })
}

/// Appends `data` to a `text/plain` stream.
fn append_text(name: &str, data: Vec<u8>, producer: Option<Producer>) -> Command {
    Command::Append(AppendToStream {
        name: name.to_string(),
        content_type: Some("text/plain".into()),
        body: Body {
            data,
            message_ends: Vec::new(),
        },
        producer,
        stream_seq: None,
        close: false,
    })
}

/// Proposes through the node that leads the stream's group, as the HTTP
/// layer's forwarding would.
async fn propose_via_leader(
    nodes: &[Arc<ClusterNode>],
    rng: &mut StdRng,
    name: &str,
    command: Command,
) -> Option<Applied> {
    let asked = &nodes[rng.gen_range(0..nodes.len())];
    let target = match asked.route(name) {
        Route::Local => Arc::clone(asked),
        Route::Forward { node, .. } => nodes.iter().find(|n| n.node_id() == node)?.clone(),
        Route::NoLeader => return None,
    };
    match tokio::time::timeout(
        Duration::from_secs(3),
        NodeEngine::propose(&*target, command),
    )
    .await
    {
        Ok(Ok(applied)) => Some(applied),
        _ => None,
    }
}

/// Appends to one stream with an idempotent producer (writer id = the
/// stream's index), retrying each sequence number until it is
/// acknowledged, and records each append in the history.
async fn producer(
    stream: usize,
    seed: u64,
    nodes: Arc<Mutex<Vec<Arc<ClusterNode>>>>,
    stop: Arc<AtomicBool>,
    trace: Arc<Mutex<Vec<String>>>,
    recorder: Arc<Recorder>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let name = stream_name(stream);
    let writer = stream as u32;
    let mut created = false;
    let mut seq = 0;
    // The append being tried, from its first attempt.
    let mut current: Option<AppendOp> = None;
    while !stop.load(Ordering::Relaxed) {
        let alive = nodes.lock().unwrap().clone();
        if alive.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let command = if created {
            let producer = Producer {
                id: format!("producer-{stream}"),
                epoch: 0,
                seq,
            };
            current.get_or_insert_with(|| AppendOp {
                stream: name.clone(),
                writer,
                seq,
                invoked: recorder.now(),
                acked: None,
                end: None,
            });
            append_text(&name, payload(writer, seq), Some(producer))
        } else {
            create_text(&name)
        };
        match propose_via_leader(&alive, &mut rng, &name, command).await {
            Some(Applied::Created { .. }) => created = true,
            Some(Applied::Appended {
                next_offset,
                duplicate,
                ..
            }) => {
                let mut op = current.take().expect("an append was tried");
                op.acked = Some(recorder.now());
                // A duplicate's answer gives the stream's tail, not where
                // the first attempt landed.
                op.end = (!duplicate).then_some(next_offset.0);
                recorder.history.lock().unwrap().appends.push(op);
                trace.lock().unwrap().push(format!(
                    "{} ack {stream}:{seq}@{}",
                    at(),
                    next_offset.0
                ));
                seq += 1;
            }
            Some(other) => panic!("unexpected answer {other:?}"),
            None => {
                let pause = rng.gen_range(5..60);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }
    // Unanswered when the producers stopped: in doubt.
    if let Some(op) = current {
        recorder.history.lock().unwrap().appends.push(op);
    }
}

/// Reads `stream` through the node that believes it leads the stream's
/// group, as a client's forwarded catch-up read would be served, or
/// through a follower after its read index, and records each read served
/// in the history. Returns the number of reads served.
async fn reader(
    stream: usize,
    seed: u64,
    nodes: Arc<Mutex<Vec<Arc<ClusterNode>>>>,
    stop: Arc<AtomicBool>,
    recorder: Arc<Recorder>,
) -> usize {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(100 + stream as u64));
    let name = stream_name(stream);
    let mut served = 0;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(5..50))).await;
        let alive = nodes.lock().unwrap().clone();
        if alive.is_empty() {
            continue;
        }
        let invoked = recorder.now();
        let asked = &alive[rng.gen_range(0..alive.len())];
        // As the server serves them: at the leader after its read barrier
        // (forwarded there if need be), or, for half the reads, by a
        // follower itself after catching up with its leader's read index
        // (as live reads are).
        let (target, via_leader) = match asked.route(&name) {
            Route::Local => (Arc::clone(asked), true),
            Route::Forward { .. } if rng.gen_bool(0.5) => {
                let prepared =
                    tokio::time::timeout(Duration::from_secs(3), asked.prepare_live_read(&name));
                if !matches!(prepared.await, Ok(true)) {
                    continue;
                }
                (Arc::clone(asked), false)
            }
            Route::Forward { node, .. } => match alive.iter().find(|n| n.node_id() == node) {
                // A forwarded read reaching a node that no longer leads
                // gets 503.
                Some(n) if n.route(&name) == Route::Local => (Arc::clone(n), true),
                _ => continue,
            },
            Route::NoLeader => continue,
        };
        if via_leader {
            let barrier = tokio::time::timeout(Duration::from_secs(3), target.read_barrier(&name));
            if !matches!(barrier.await, Ok(Ok(()))) {
                continue;
            }
        }
        let Ok(read) = target
            .engine_for(&name)
            .read(&name, ReadFrom::Start, u64::MAX)
            .await
        else {
            continue;
        };
        recorder.history.lock().unwrap().reads.push(ReadOp {
            stream: name.clone(),
            reader: 100 + stream as u32,
            kind: ReadKind::CatchUp,
            invoked,
            completed: recorder.now(),
            start: read.plan.start.0,
            bytes: read.body.to_vec(),
            next: read.plan.next.0,
            up_to_date: read.plan.up_to_date(),
        });
        served += 1;
    }
    served
}

/// Idempotent producers and readers, one of each per stream, sending
/// their requests to random nodes of `alive` (which the scenario keeps
/// up to date).
struct Workload {
    alive: Arc<Mutex<Vec<Arc<ClusterNode>>>>,
    stop: Arc<AtomicBool>,
    recorder: Arc<Recorder>,
    producers: Vec<tokio::task::JoinHandle<()>>,
    readers: Vec<tokio::task::JoinHandle<usize>>,
}

impl Workload {
    fn start(sim: &Sim, seed: u64) -> Workload {
        let alive = Arc::new(Mutex::new(sim.alive()));
        let stop = Arc::new(AtomicBool::new(false));
        let recorder = Recorder::new();
        let producers = (0..STREAMS)
            .map(|s| {
                tokio::spawn(producer(
                    s,
                    seed.wrapping_add(s as u64 + 1),
                    Arc::clone(&alive),
                    Arc::clone(&stop),
                    Arc::clone(&sim.trace),
                    Arc::clone(&recorder),
                ))
            })
            .collect();
        let readers = (0..STREAMS)
            .map(|s| {
                tokio::spawn(reader(
                    s,
                    seed,
                    Arc::clone(&alive),
                    Arc::clone(&stop),
                    Arc::clone(&recorder),
                ))
            })
            .collect();
        Workload {
            alive,
            stop,
            recorder,
            producers,
            readers,
        }
    }

    /// Stops the clients and answers what they saw.
    async fn finish(self, sim: &Sim) -> History {
        self.stop.store(true, Ordering::Relaxed);
        for p in self.producers {
            p.await.unwrap();
        }
        let mut reads = 0;
        for r in self.readers {
            reads += r.await.unwrap();
        }
        sim.note(format!("{} reads {reads}", at()));
        let mut history = self.recorder.history.lock().unwrap();
        std::mem::take(&mut *history)
    }
}

/// Runs one seed; panics with the seed on a violated check. Returns the
/// trace (events with their simulated times) for reproducibility checks.
fn run(seed: u64) -> Vec<String> {
    run_simulated(seed, simulate(seed))
}

/// Runs `simulation` on one thread under the paused clock.
fn run_simulated<T>(seed: u64, simulation: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    runtime.block_on(async {
        ORIGIN.set(Some(tokio::time::Instant::now()));
        tokio::time::timeout(Duration::from_secs(600), simulation)
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: the simulation hung"))
    })
}

async fn simulate(seed: u64) -> Vec<String> {
    seed_thread_rng(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut sim = Sim::new(seed);
    for i in 0..NODES as usize {
        sim.start(i).await;
    }
    let workload = Workload::start(&sim, seed);
    let alive = Arc::clone(&workload.alive);

    // Faults.
    let end = tokio::time::Instant::now() + FAULTY;
    let mut down: Vec<(usize, tokio::time::Instant)> = Vec::new();
    let mut cut: Option<(u64, tokio::time::Instant)> = None;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1200))).await;
        let now = tokio::time::Instant::now();
        for (i, until) in down.clone() {
            if now >= until {
                sim.start(i).await;
                down.retain(|(d, _)| *d != i);
            }
        }
        if let Some((node, until)) = cut {
            if now >= until {
                sim.net.isolate(node, false);
                sim.note(format!("{} heal n{node}", at()));
                cut = None;
            }
        }
        match rng.gen_range(0..100) {
            0..=24 if cut.is_none() && down.is_empty() => {
                let node = rng.gen_range(1..=NODES);
                sim.net.isolate(node, true);
                sim.note(format!("{} isolate n{node}", at()));
                cut = Some((node, now + Duration::from_millis(rng.gen_range(300..3000))));
            }
            // Crashes, sometimes of a second node while one is down (the
            // group stalls until one returns).
            25..=59 if down.len() < 2 && cut.is_none() => {
                let i = rng.gen_range(0..NODES as usize);
                if !down.iter().any(|(d, _)| *d == i) {
                    sim.crash(i).await;
                    let back = now + Duration::from_millis(rng.gen_range(100..2000));
                    down.push((i, back));
                }
            }
            // A lost disk: the node restarts empty (see `vote_guard`).
            // Another node may crash while it catches up, but no second
            // disk is lost before it has: a majority of a group's copies
            // would be gone, and the group would wait for ever for a
            // leader its empty nodes may safely vote for.
            85..=89
                if down.is_empty()
                    && cut.is_none()
                    && sim.alive().iter().all(|n| n.votes_in_every_group()) =>
            {
                let i = rng.gen_range(0..NODES as usize);
                sim.crash(i).await;
                std::fs::remove_dir_all(sim.dir.path().join(format!("n{}", i + 1)))
                    .expect("wipe the node's data directory");
                sim.note(format!("{} wipe n{}", at(), i + 1));
                let back = now + Duration::from_millis(rng.gen_range(100..2000));
                down.push((i, back));
            }
            55..=84 => {
                let (drop, delay) = (rng.gen_range(0..80), rng.gen_range(1..25));
                sim.net.set_faults(drop, delay);
                sim.note(format!("{} faults drop={drop}/1000 delay<={delay}ms", at()));
            }
            _ => {}
        }
        *alive.lock().unwrap() = sim.alive();
    }

    // Calm: everyone back, no loss, then the producers stop.
    for (i, _) in down.drain(..) {
        sim.start(i).await;
    }
    if let Some((node, _)) = cut.take() {
        sim.net.isolate(node, false);
    }
    sim.net.set_faults(0, 2);
    *alive.lock().unwrap() = sim.alive();
    tokio::time::sleep(CALM).await;
    let history = workload.finish(&sim).await;
    converge(&sim, seed).await;
    check(&sim, seed, &history).await;
    let trace = sim.trace.lock().unwrap().clone();
    for i in 0..NODES as usize {
        sim.crash(i).await;
    }
    trace
}

/// Waits until every node that holds a group applied the same entries in
/// it, and every node knows the cluster by the same id.
async fn converge(sim: &Sim, seed: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let nodes = sim.alive();
        let ids: Vec<_> = nodes.iter().map(|n| n.cluster_id()).collect();
        let groups = nodes[0].groups().len();
        let copies: Vec<Vec<_>> = (0..groups)
            .map(|g| {
                nodes
                    .iter()
                    .map(|n| &n.groups()[g])
                    .zip(&nodes)
                    .filter(|(group, n)| n.holds(group))
                    .map(|(group, _)| {
                        let s = group.status();
                        (s.last_applied_index, s.applied_digest)
                    })
                    .collect()
            })
            .collect();
        let same_id = ids[0].is_some() && ids.iter().all(|id| *id == ids[0]);
        let same_copies = copies
            .iter()
            .all(|c| !c.is_empty() && c.iter().all(|copy| *copy == c[0]));
        if same_id && same_copies {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "seed {seed}: replicas never converged: ids {ids:?}, copies {copies:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every replica holds the same bytes for every stream, and the history
/// passes the checker against them.
async fn check(sim: &Sim, seed: u64, history: &History) {
    let mut finals = BTreeMap::new();
    for stream in 0..STREAMS {
        let name = stream_name(stream);
        let mut replicas = Vec::new();
        for node in sim.alive() {
            let group = &node.groups()[stream_group(&name, node.groups().len())];
            if !node.holds(group) {
                continue;
            }
            let read = node
                .engine_for(&name)
                .read(&name, ReadFrom::Start, u64::MAX)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {name} unreadable: {e}"));
            replicas.push(read.body.to_vec());
        }
        assert!(
            replicas.iter().all(|r| *r == replicas[0]),
            "seed {seed}: replicas of {name} differ"
        );
        finals.insert(name, replicas.swap_remove(0));
    }
    let report = runnel_history::check::check(history, &finals);
    assert!(
        report.ok(),
        "seed {seed}: the history breaks the rules ({}):\n{}",
        report.summary(),
        report.anomalies.join("\n")
    );
    assert!(
        report.tail_reads > 0,
        "seed {seed}: no read reached the tail: nothing was checked"
    );
    sim.note(format!("checked: {}", report.summary()));
}

/// Runs `scenario` on every seed of the corpus, each reporting its
/// acknowledged appends and what the checker found; a seed that barely
/// made progress fails.
fn run_every_seed<Fut>(scenario: impl Fn(u64) -> Fut)
where
    Fut: std::future::Future<Output = Vec<String>>,
{
    for seed in seeds() {
        let trace = run_simulated(seed, scenario(seed));
        let acked = trace.iter().filter(|e| e.contains(" ack ")).count();
        let checked = trace
            .iter()
            .find_map(|e| e.strip_prefix("checked: "))
            .unwrap_or("not checked")
            .to_string();
        eprintln!("seed {seed}: {acked} acknowledged appends; {checked}");
        assert!(
            acked > 50,
            "seed {seed}: the cluster barely made progress ({acked} acks)"
        );
    }
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("RUNNEL_SIM_SEED") {
        return vec![seed.parse().expect("RUNNEL_SIM_SEED is a number")];
    }
    let count = std::env::var("RUNNEL_SIM_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(8);
    (1..=count).collect()
}

#[test]
fn sim_corpus_keeps_every_acknowledged_append() {
    for seed in seeds() {
        let trace = run(seed);
        let acked = trace.iter().filter(|e| e.contains(" ack ")).count();
        let reads = trace
            .iter()
            .find_map(|e| e.split(" reads ").nth(1))
            .unwrap_or("0")
            .to_string();
        let checked = trace
            .iter()
            .find_map(|e| e.strip_prefix("checked: "))
            .unwrap_or("not checked")
            .to_string();
        // Everything else in the trace is a fault event.
        let faults = trace.len() - acked - 2;
        let wipes = trace.iter().filter(|e| e.contains(" wipe ")).count();
        eprintln!(
            "seed {seed}: {acked} acknowledged appends, {reads} reads, \
             {faults} fault events ({wipes} lost disks); {checked}"
        );
        assert!(
            acked > 50,
            "seed {seed}: the cluster barely made progress ({acked} acks)"
        );
    }
}

#[test]
fn sim_same_seed_same_history() {
    assert_eq!(run(7), run(7), "a seed must reproduce exactly");
}
