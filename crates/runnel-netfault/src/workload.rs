//! Writers and readers through every node, recording each operation's
//! invocation, completion and answer into a [`History`].
//!
//! Per stream: an idempotent writer (producer headers; it retries an
//! unanswered append with the same sequence number, through any node,
//! until it is acknowledged), a plain writer (never retries: an unanswered
//! append stays in doubt), a catch-up reader (pages from the start or from
//! an offset it saw, to the tail) and a long-poll reader following the
//! tail. Every request goes to a node picked at random, so most are
//! forwarded to the group's leader or served by a follower.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::{Client, StatusCode};
use runnel_history::check::{AppendOp, History, Micros, ReadKind, ReadOp};
use runnel_history::record::payload;

/// Any request gives up after this long (a partitioned node never answers).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const CONTENT_TYPE: &str = "application/octet-stream";

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
}

impl Recorder {
    pub fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            origin: Instant::now(),
            history: Mutex::default(),
            errors: Mutex::default(),
        })
    }

    pub fn now(&self) -> Micros {
        self.origin.elapsed().as_micros() as Micros
    }

    fn note_error(&self, kind: String) {
        *self.errors.lock().unwrap().entry(kind).or_default() += 1;
    }

    pub fn take(&self) -> History {
        std::mem::take(&mut self.history.lock().unwrap())
    }
}

/// Shared by every task of the workload.
#[derive(Clone)]
pub struct Workload {
    pub client: Client,
    pub bases: Arc<Vec<String>>,
    pub recorder: Arc<Recorder>,
    /// Set when the faults are over: writers send nothing new (an
    /// idempotent writer still settles its unanswered append).
    pub stop_writing: Arc<AtomicBool>,
    /// Set when the readers should stop.
    pub stop_reading: Arc<AtomicBool>,
}

impl Workload {
    fn pick<'a>(&'a self, rng: &mut StdRng) -> &'a str {
        &self.bases[rng.gen_range(0..self.bases.len())]
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

    /// Creates `stream` through node 0, retrying until it exists.
    pub async fn create(&self, stream: &str) -> Result<(), String> {
        let url = stream_url(&self.bases[0], stream);
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
        Err(format!("creating {stream}: {last}"))
    }

    /// Appends until told to stop. An idempotent writer retries each
    /// append until it is acknowledged (after the stop too, for at most
    /// `settle`).
    pub async fn writer(
        self,
        stream: String,
        writer: u32,
        idempotent: bool,
        seed: u64,
        settle: Duration,
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seq = 0u64;
        let mut settle_by: Option<Instant> = None;
        while !self.stop_writing.load(Ordering::Acquire) {
            let invoked = self.recorder.now();
            let mut op = AppendOp {
                stream: stream.clone(),
                writer,
                seq,
                invoked,
                acked: None,
                end: None,
            };
            loop {
                let answer = self
                    .append_once(&stream, writer, seq, idempotent, &mut rng)
                    .await;
                if let Some(end) = answer {
                    op.acked = Some(self.recorder.now());
                    op.end = end;
                    break;
                }
                if !idempotent {
                    break;
                }
                if self.stop_writing.load(Ordering::Acquire) {
                    let by = *settle_by.get_or_insert_with(|| Instant::now() + settle);
                    if Instant::now() > by {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(50..250))).await;
            }
            self.recorder.history.lock().unwrap().appends.push(op);
            seq += 1;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
        }
    }

    /// One attempt: `Some(end)` when acknowledged (`end` is the next offset
    /// it gave, `None` for a duplicate answered without one).
    async fn append_once(
        &self,
        stream: &str,
        writer: u32,
        seq: u64,
        idempotent: bool,
        rng: &mut StdRng,
    ) -> Option<Option<u64>> {
        let base = self.pick(rng);
        let mut request = self
            .client
            .post(stream_url(base, stream))
            .header("content-type", CONTENT_TYPE)
            .body(payload(writer, seq));
        if idempotent {
            request = request
                .header("producer-id", format!("netfault-{writer}"))
                .header("producer-epoch", "0")
                .header("producer-seq", seq.to_string());
        }
        match request.send().await {
            Ok(r) if r.status() == StatusCode::NO_CONTENT && idempotent => Some(None),
            Ok(r) if r.status().is_success() => {
                let end = r
                    .headers()
                    .get("stream-next-offset")
                    .and_then(|v| v.to_str().ok())
                    .and_then(position);
                Some(end)
            }
            Ok(r) => {
                self.recorder
                    .note_error(format!("append: {}", r.status().as_u16()));
                None
            }
            Err(e) => {
                self.classify("append", &e);
                None
            }
        }
    }

    /// Reads from the start or from an offset seen before, page by page
    /// to the tail, again and again.
    pub async fn catch_up_reader(self, stream: String, reader: u32, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen: Vec<u64> = Vec::new();
        while !self.stop_reading.load(Ordering::Acquire) {
            let mut offset = match seen.len() {
                0 => None,
                n if rng.gen_bool(0.2) => Some(seen[rng.gen_range(0..n)]),
                _ => None,
            };
            // One pass: at most a bounded number of pages.
            for _ in 0..1000 {
                let Some(page) = self
                    .read_once(&stream, reader, offset, false, &mut rng)
                    .await
                else {
                    break;
                };
                seen.push(page.next);
                let done = page.up_to_date;
                offset = Some(page.next);
                self.recorder.history.lock().unwrap().reads.push(page);
                if done {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(50..200))).await;
        }
    }

    /// Follows the tail with long-polls, each through a random node.
    pub async fn tail_reader(self, stream: String, reader: u32, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut offset = None;
        while !self.stop_reading.load(Ordering::Acquire) {
            match self
                .read_once(&stream, reader, offset, offset.is_some(), &mut rng)
                .await
            {
                Some(page) => {
                    offset = Some(page.next);
                    self.recorder.history.lock().unwrap().reads.push(page);
                }
                None => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn read_once(
        &self,
        stream: &str,
        reader: u32,
        from: Option<u64>,
        long_poll: bool,
        rng: &mut StdRng,
    ) -> Option<ReadOp> {
        let base = self.pick(rng);
        let offset = match from {
            Some(p) => format!("{:016}_{p:016}", 0),
            None => "-1".to_string(),
        };
        let mut url = format!("{}?offset={offset}", stream_url(base, stream));
        if long_poll {
            url.push_str("&live=long-poll");
        }
        let invoked = self.recorder.now();
        let response = match self.client.get(&url).send().await {
            Ok(r) => r,
            Err(e) => {
                self.classify("read", &e);
                return None;
            }
        };
        let status = response.status();
        if !status.is_success() {
            self.recorder
                .note_error(format!("read: {}", status.as_u16()));
            return None;
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let next = header("stream-next-offset").and_then(|t| position(&t));
        let up_to_date = header("stream-up-to-date").as_deref() == Some("true");
        let bytes = match response.bytes().await {
            Ok(b) => b.to_vec(),
            Err(e) => {
                self.classify("read body", &e);
                return None;
            }
        };
        let Some(next) = next else {
            self.recorder
                .note_error("read: no Stream-Next-Offset".into());
            return None;
        };
        Some(ReadOp {
            stream: stream.to_string(),
            reader,
            kind: if long_poll {
                ReadKind::LongPoll
            } else {
                ReadKind::CatchUp
            },
            invoked,
            completed: self.recorder.now(),
            start: from.unwrap_or(0),
            bytes,
            next,
            up_to_date,
        })
    }
}

/// Reads a whole stream through `base`, to the tail.
pub async fn read_all(client: &Client, base: &str, stream: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    for _ in 0..100_000 {
        let url = format!("{}?offset={offset}", stream_url(base, stream));
        let r = client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("GET {url}: {}", r.status()));
        }
        let next = r
            .headers()
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| format!("GET {url}: no Stream-Next-Offset"))?;
        let up_to_date = r
            .headers()
            .get("stream-up-to-date")
            .is_some_and(|v| v == "true");
        let bytes = r.bytes().await.map_err(|e| format!("GET {url}: {e}"))?;
        out.extend_from_slice(&bytes);
        if up_to_date {
            return Ok(out);
        }
        if next == offset && bytes.is_empty() {
            return Err(format!("GET {url}: no progress and not up to date"));
        }
        offset = next;
    }
    Err(format!("reading {stream}: too many pages"))
}
