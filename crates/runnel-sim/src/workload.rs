//! The clients of a simulation: one idempotent producer and one reader per
//! stream, sending each request to a random running node and routed as
//! the server routes it ([`Route`]: served there, forwarded to the
//! leader, or refused without one), and the history they record for the
//! checker ([`runnel_history::check`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runnel_core::{AppendToStream, Applied, Body, Command, CreateStream, Producer, ReadFrom};
use runnel_engine::cluster::ClusterNode;
use runnel_engine::{NodeEngine, Route};
use runnel_history::check::{AppendOp, History, Micros, ReadKind, ReadOp};
use runnel_history::record::payload;

use crate::sim::{at, Sim, STREAMS};

/// The history of appends and reads, on the simulated clock.
pub struct Recorder {
    origin: tokio::time::Instant,
    pub history: Mutex<History>,
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            origin: tokio::time::Instant::now(),
            history: Mutex::default(),
        })
    }

    /// Microseconds since the recorder started.
    pub fn now(&self) -> Micros {
        self.origin.elapsed().as_micros() as Micros
    }
}

/// The name of the workload's stream `stream`.
pub fn stream_name(stream: usize) -> String {
    format!("stream-{stream}")
}

/// Creates an empty `text/plain` stream.
pub fn create_text(name: &str) -> Command {
    Command::Create(CreateStream {
        name: name.to_string(),
        content_type: Some("text/plain".into()),
        ..Default::default()
    })
}

/// Appends `data` to a `text/plain` stream.
pub fn append_text(name: &str, data: Vec<u8>, producer: Option<Producer>) -> Command {
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
/// in the history. Half the reads start from the stream's start, half
/// where the reader's last read ended, as a client catching up goes on.
/// Returns the number of reads served.
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
    // Where the last read served ended.
    let mut next: Option<runnel_core::Offset> = None;
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
        let from = match next {
            Some(offset) if rng.gen_bool(0.5) => ReadFrom::At(offset),
            _ => ReadFrom::Start,
        };
        let Ok(read) = target.engine_for(&name).read(&name, from, u64::MAX).await else {
            continue;
        };
        next = Some(read.plan.next);
        recorder.history.lock().unwrap().reads.push(ReadOp {
            stream: name.clone(),
            reader: 100 + stream as u32,
            kind: ReadKind::CatchUp,
            invoked,
            completed: recorder.now(),
            start: read.plan.start.0,
            bytes: read.body,
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
pub struct Workload {
    /// The nodes the clients send to (the scenario keeps it current).
    pub alive: Arc<Mutex<Vec<Arc<ClusterNode>>>>,
    stop: Arc<AtomicBool>,
    pub recorder: Arc<Recorder>,
    producers: Vec<tokio::task::JoinHandle<()>>,
    readers: Vec<tokio::task::JoinHandle<usize>>,
}

impl Workload {
    pub fn start(sim: &Sim, seed: u64) -> Workload {
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
    pub async fn finish(self, sim: &Sim) -> History {
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
