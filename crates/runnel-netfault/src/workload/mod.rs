//! Writers and readers through every node, recording each operation's
//! invocation, completion and answer into a [`History`].
//!
//! Per stream: an idempotent writer (producer headers; it retries an
//! unanswered append with the same sequence number, through any node,
//! until it is acknowledged), a plain writer (never retries: an unanswered
//! append stays in doubt), a catch-up reader (pages from the start or from
//! an offset it saw, to the tail), a long-poll reader following the tail,
//! and an SSE reader following it in one session at a time. Every request
//! goes to a member picked at random (the members change as nodes are
//! added and removed), so most are forwarded to the group's leader or
//! served by a follower.
//!
//! | module | owns |
//! |---|---|
//! | [`writer`] | the two writers |
//! | [`readers`] | catch-up and long-poll reads, and reading a whole stream |
//! | [`sse`] | SSE sessions: parsing the events, one read per data and control event |
//!
//! Streams are `text/plain`, so SSE sends the appends' bytes as they are
//! (a binary stream's SSE data would be base64).

mod readers;
mod sse;
mod writer;

pub use readers::read_all;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;
use reqwest::Client;
use runnel_history::check::{History, Micros};

use crate::error::{NetfaultError, Result};

/// Any request gives up after this long (a partitioned node never answers).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const CONTENT_TYPE: &str = "text/plain";

pub fn client() -> Client {
    Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

pub fn stream_url(base: &str, stream: &str) -> String {
    format!("{base}/v1/stream/{stream}")
}

/// The byte position an offset token carries (its last 16 digits).
pub fn position(token: &str) -> Option<u64> {
    let (_, position) = token.split_once('_')?;
    position.parse().ok()
}

/// The history being recorded, and the clock it is recorded on.
pub struct Recorder {
    origin: Instant,
    history: Mutex<History>,
    /// Answers that are neither success nor an expected refusal, by kind.
    pub errors: Mutex<std::collections::BTreeMap<String, usize>>,
    /// With `--trace`: every operation, one line each, with the node that
    /// answered it (for reading an anomaly against the nodes' logs).
    trace: Option<Mutex<std::io::BufWriter<std::fs::File>>>,
}

impl Recorder {
    pub fn new(trace: Option<std::fs::File>) -> Arc<Recorder> {
        Arc::new(Recorder {
            origin: Instant::now(),
            history: Mutex::default(),
            errors: Mutex::default(),
            trace: trace.map(|f| Mutex::new(std::io::BufWriter::new(f))),
        })
    }

    fn trace(&self, line: std::fmt::Arguments) {
        if let Some(trace) = &self.trace {
            use std::io::Write;
            let _ = writeln!(trace.lock().unwrap(), "{line}");
        }
    }

    /// Writes each stream's final appends to the trace.
    pub fn trace_finals(&self, finals: &std::collections::BTreeMap<String, Vec<u8>>) {
        for (stream, bytes) in finals {
            self.trace(format_args!("final {stream}: {}", appends_in(bytes)));
        }
    }

    /// Flushes the trace.
    pub fn flush(&self) {
        if let Some(trace) = &self.trace {
            use std::io::Write;
            let _ = trace.lock().unwrap().flush();
        }
    }

    pub fn now(&self) -> Micros {
        self.origin.elapsed().as_micros() as Micros
    }

    fn note_error(&self, kind: String) {
        *self.errors.lock().unwrap().entry(kind).or_default() += 1;
    }

    /// Records a read answered by the node at `base`.
    fn push_read(&self, read: runnel_history::check::ReadOp, base: &str) {
        self.trace(format_args!(
            "read {} reader {} {:?} via {base}: [{}, {}) {} B up_to_date {} invoked {} completed {}: {}",
            read.stream,
            read.reader,
            read.kind,
            read.start,
            read.next,
            read.bytes.len(),
            read.up_to_date,
            read.invoked,
            read.completed,
            appends_in(&read.bytes)
        ));
        self.history.lock().unwrap().reads.push(read);
    }

    /// Records an append whose last attempt went to the node at `base`.
    fn push_append(&self, append: runnel_history::check::AppendOp, base: &str) {
        self.trace(format_args!(
            "append {} writer {} seq {} via {base}: invoked {} acked {:?} end {:?}",
            append.stream, append.writer, append.seq, append.invoked, append.acked, append.end
        ));
        self.history.lock().unwrap().appends.push(append);
    }

    pub fn take(&self) -> History {
        std::mem::take(&mut self.history.lock().unwrap())
    }
}

/// The appends `bytes` hold, for the trace: `w5/s1@315 w6/s0@645 ...`
/// (offsets relative to the first byte), and what follows them if they
/// are not whole.
fn appends_in(bytes: &[u8]) -> String {
    let (placed, damage) = runnel_history::record::parse_prefix(bytes);
    let mut out: Vec<String> = placed
        .iter()
        .map(|p| format!("w{}/s{}@{}", p.writer, p.seq, p.start))
        .collect();
    if let Some(damage) = damage {
        out.push(format!("then {damage}"));
    }
    out.join(" ")
}

/// Shared by every task of the workload.
#[derive(Clone)]
pub struct Workload {
    pub client: Client,
    /// The members clients send requests to (changed by the operator).
    pub bases: Arc<RwLock<Vec<String>>>,
    pub recorder: Arc<Recorder>,
    /// Set when the faults are over: writers send nothing new (an
    /// idempotent writer still settles its unanswered append).
    pub stop_writing: Arc<AtomicBool>,
    /// Set when the readers should stop.
    pub stop_reading: Arc<AtomicBool>,
    /// Every SSE session sends a cursor (see [`sse`]).
    pub sse_cursor: bool,
}

impl Workload {
    /// A member, at random.
    fn pick(&self, rng: &mut StdRng) -> String {
        let bases = self.bases.read().unwrap();
        bases[rng.gen_range(0..bases.len())].clone()
    }

    fn classify(&self, what: &str, e: &reqwest::Error) {
        let kind = if e.is_timeout() {
            "timeout"
        } else if e.is_connect() {
            "connect"
        } else {
            "transport"
        };
        self.recorder.note_error(format!("{what}: {kind}"));
    }

    /// Creates `stream` through the first member, retrying until it exists.
    pub async fn create(&self, stream: &str) -> Result<()> {
        let base = self.bases.read().unwrap()[0].clone();
        let url = stream_url(&base, stream);
        let mut last = String::new();
        for _ in 0..50 {
            match self
                .client
                .put(&url)
                .header("content-type", CONTENT_TYPE)
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("{}", r.status()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(NetfaultError::Create {
            stream: stream.to_string(),
            last,
        })
    }
}
