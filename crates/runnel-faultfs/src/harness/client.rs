//! The HTTP side of the harness: creating, appending to, reading and
//! deleting streams, and the writer loop with its tally of answers.
//! Every request has a timeout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::{Client, StatusCode};

use super::check::{payload, Append, Fate, Writer};
use super::error::{HarnessError, Result};
use super::verdict::{Kind, Violation};

/// Any single request gives up after this long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONTENT_TYPE: &str = "application/octet-stream";

pub fn client() -> Client {
    Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client")
}

pub fn stream_url(base: &str, stream: &str) -> String {
    format!("{base}/v1/stream/{stream}")
}

/// What the server says it has tiered (chunks, bytes), when it tiers.
pub async fn tiered(client: &Client, base: &str) -> Option<(u64, u64)> {
    let r = client
        .get(format!("{base}/_runnel/status"))
        .send()
        .await
        .ok()?;
    let status: serde_json::Value = serde_json::from_slice(&r.bytes().await.ok()?).ok()?;
    let tiering = status.get("tiering")?;
    Some((
        tiering.get("tiered_chunks")?.as_u64()?,
        tiering.get("tiered_bytes")?.as_u64()?,
    ))
}

/// `PUT`s a byte stream; the status, or the transport error.
pub async fn create(client: &Client, base: &str, stream: &str) -> Result<StatusCode> {
    client
        .put(stream_url(base, stream))
        .header("content-type", CONTENT_TYPE)
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| HarnessError::request(format!("PUT {stream}"), e))
}

pub async fn delete(client: &Client, base: &str, stream: &str) -> Result<StatusCode> {
    client
        .delete(stream_url(base, stream))
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| HarnessError::request(format!("DELETE {stream}"), e))
}

/// An append that got no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoAnswer {
    #[error("timeout")]
    Timeout,
    #[error("connection refused")]
    Refused,
    #[error("transport error")]
    Transport,
}

/// One append; for an idempotent writer with its producer headers. The
/// status and the body of the answer.
pub async fn append(
    client: &Client,
    base: &str,
    writer: &Writer,
    seq: u64,
) -> std::result::Result<(StatusCode, String), NoAnswer> {
    let mut request = client
        .post(stream_url(base, &writer.stream))
        .header("content-type", CONTENT_TYPE)
        .body(payload(writer.id, seq));
    if writer.idempotent {
        request = request
            .header("producer-id", format!("faultfs-writer-{}", writer.id))
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string());
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            NoAnswer::Timeout
        } else if e.is_connect() {
            NoAnswer::Refused
        } else {
            NoAnswer::Transport
        }
    })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    Ok((status, body.trim().to_string()))
}

/// Why a stream could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("GET {url}: {reason}")]
    Transport { url: String, reason: String },
    #[error("GET {url}: {status} {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("GET {url}: {what}")]
    Protocol { url: String, what: &'static str },
}

impl ReadError {
    /// Worth asking again (a 5xx answer, no answer): the server may be
    /// recovering.
    pub fn transient(&self) -> bool {
        match self {
            ReadError::Transport { .. } => true,
            ReadError::Status { status, .. } => *status >= 500,
            ReadError::Protocol { .. } => false,
        }
    }
}

/// A whole stream read back, or as much of it as could be read.
#[derive(Debug, Default)]
pub struct ReadBack {
    /// `None` when the stream does not exist (404 at its start).
    pub bytes: Option<Vec<u8>>,
    /// Why the read stopped before the end, if it did (`bytes` holds what
    /// came before).
    pub cut_short: Option<ReadError>,
}

/// Reads a whole stream: from offset -1, following `Stream-Next-Offset`
/// until `Stream-Up-To-Date: true`. Stops at the first failing page.
pub async fn read_all(client: &Client, base: &str, stream: &str) -> ReadBack {
    let mut offset = "-1".to_string();
    let mut out = Vec::new();
    let stop = |out: Vec<u8>, error: ReadError| ReadBack {
        bytes: Some(out),
        cut_short: Some(error),
    };
    for _ in 0..100_000 {
        let url = format!("{}?offset={offset}", stream_url(base, stream));
        let response = match client.get(&url).send().await {
            Ok(r) => r,
            Err(e) => {
                let reason = e.to_string();
                return stop(out, ReadError::Transport { url, reason });
            }
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND && offset == "-1" {
            return ReadBack::default();
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            let body = body.trim().chars().take(200).collect();
            let status = status.as_u16();
            return stop(out, ReadError::Status { url, status, body });
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let Some(next) = header("stream-next-offset") else {
            let what = "no Stream-Next-Offset";
            return stop(out, ReadError::Protocol { url, what });
        };
        let up_to_date = header("stream-up-to-date").as_deref() == Some("true");
        let bytes = match response.bytes().await {
            Ok(b) => b,
            Err(e) => {
                let reason = e.to_string();
                return stop(out, ReadError::Transport { url, reason });
            }
        };
        out.extend_from_slice(&bytes);
        if up_to_date {
            return ReadBack {
                bytes: Some(out),
                cut_short: None,
            };
        }
        if next == offset && bytes.is_empty() {
            let what = "no progress and not up to date";
            return stop(out, ReadError::Protocol { url, what });
        }
        offset = next;
    }
    let url = stream_url(base, stream);
    let what = "too many pages";
    stop(out, ReadError::Protocol { url, what })
}

/// Answers the writers got, split at the moment the power cut (or the
/// injected fault) began.
#[derive(Debug, Default)]
pub struct Answers {
    /// Successes and errors answered before the cut.
    pub ok_before: usize,
    pub errors_before: usize,
    pub ok_after: usize,
    pub errors_after: usize,
    /// Per status code (or kind of missing answer): how many, one example
    /// body.
    pub counts: BTreeMap<String, (usize, String)>,
    /// Fresh appends acknowledged although sent after the fault (the
    /// IO-error test).
    pub acked_after_fault: Vec<Violation>,
}

impl Answers {
    fn note(&mut self, key: String, example: &str, ok: bool, after_cut: bool) {
        match (ok, after_cut) {
            (true, false) => self.ok_before += 1,
            (false, false) => self.errors_before += 1,
            (true, true) => self.ok_after += 1,
            (false, true) => self.errors_after += 1,
        }
        let entry = self.counts.entry(key).or_insert((0, example.to_string()));
        entry.0 += 1;
    }

    pub fn merge(&mut self, other: Answers) {
        self.ok_before += other.ok_before;
        self.errors_before += other.errors_before;
        self.ok_after += other.ok_after;
        self.errors_after += other.errors_after;
        for (k, (n, example)) in other.counts {
            self.counts.entry(k).or_insert((0, example)).0 += n;
        }
        self.acked_after_fault.extend(other.acked_after_fault);
    }

    /// `200 x12, 503 x3 ("storage failed")`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .counts
            .iter()
            .map(|(k, (n, example))| {
                if example.is_empty() {
                    format!("{k} x{n}")
                } else {
                    let example: String = example.chars().take(100).collect();
                    format!("{k} x{n} ({example:?})")
                }
            })
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }

    /// Whether the errors before the cut break the rule a healthy server
    /// on a healthy disk keeps: at least as many appends acknowledged as
    /// refused (a server refusing nearly everything tests nothing).
    pub fn refused_too_many(&self) -> bool {
        self.errors_before > self.ok_before
    }
}

/// Everything a writer task is given besides its [`Writer`].
#[derive(Clone)]
pub struct WriterSetup {
    pub client: Client,
    /// Each append goes to one of these, picked at random.
    pub bases: Arc<Vec<String>>,
    /// Set when the writers must stop.
    pub stop: Arc<AtomicBool>,
    /// Set when the power cut (or the fault) begins: answers after it
    /// are counted apart.
    pub cutting: Arc<AtomicBool>,
    /// Rest a random time up to this between appends.
    pub pause: Duration,
    /// Rest this long after an error answer (or none) before going on.
    pub error_pause: Duration,
    /// The IO-error test: a fresh append sent after this and acknowledged
    /// is a violation.
    pub fault_at: Option<Instant>,
    /// Whether a producer's new seq answered as a duplicate (204) is a
    /// wrong answer. On a single node it is; in a cluster the node a
    /// client reached retries an append whose first attempt may have
    /// landed (across a leadership change), and the leader's
    /// deduplication answers that retry 204: the append is there once,
    /// which reading back checks.
    pub fresh_duplicate_is_wrong: bool,
}

/// Appends until `stop`. A failed append (an error answer, or none) is
/// counted and stays in doubt: an idempotent writer sends it again with
/// the same seq until it is acknowledged or the writer stops; a plain
/// writer never repeats one and goes on with the next.
pub async fn run_writer(
    setup: WriterSetup,
    mut writer: Writer,
) -> (Writer, Answers, Vec<Violation>) {
    let mut answers = Answers::default();
    let mut violations = Vec::new();
    let mut first = true;
    while !setup.stop.load(Ordering::Acquire) {
        if !first && !setup.pause.is_zero() {
            let rest = rand::thread_rng().gen_range(Duration::ZERO..=setup.pause);
            tokio::time::sleep(rest).await;
        }
        first = false;
        let retry = writer.pending();
        let seq = match retry {
            Some(seq) => seq,
            None => {
                writer.appends.push(Append {
                    sent: Instant::now(),
                    acked: None,
                    fate: Fate::InDoubt,
                });
                writer.appends.len() as u64 - 1
            }
        };
        let base = {
            let i = rand::thread_rng().gen_range(0..setup.bases.len());
            setup.bases[i].clone()
        };
        let sent = Instant::now();
        let result = append(&setup.client, &base, &writer, seq).await;
        let after_cut = setup.cutting.load(Ordering::Acquire);
        let append = &mut writer.appends[seq as usize];
        match result {
            Ok((status, body)) if status.is_success() => {
                answers.note(status.as_u16().to_string(), "", true, after_cut);
                let fresh = retry.is_none() || status != StatusCode::NO_CONTENT;
                if fresh && setup.fault_at.is_some_and(|t| sent > t) {
                    answers.acked_after_fault.push(Violation::new(
                        Kind::AcknowledgedAfterFault,
                        format!(
                            "writer {} seq {seq} answered {status} although sent after the fault",
                            writer.id
                        ),
                    ));
                }
                let duplicate = retry.is_none() && status == StatusCode::NO_CONTENT;
                if writer.idempotent && duplicate && setup.fresh_duplicate_is_wrong {
                    violations.push(Violation::new(
                        Kind::WrongAnswer,
                        format!(
                            "writer {} seq {seq}: a new producer seq was answered as a duplicate ({status} {body:?})",
                            writer.id
                        ),
                    ));
                }
                append.acked = Some(Instant::now());
                append.fate = Fate::Acked;
            }
            Ok((status, body)) => {
                answers.note(status.as_u16().to_string(), &body, false, after_cut);
                tokio::time::sleep(setup.error_pause).await;
            }
            Err(error) => {
                answers.note(error.to_string(), "", false, after_cut);
                tokio::time::sleep(setup.error_pause).await;
            }
        }
    }
    (writer, answers, violations)
}

/// Retries an idempotent writer's in-doubt append after a restart that
/// showed whether it landed: a duplicate (204) if it did, a new append
/// (200) if it did not (or 204 as well, unless `fresh_duplicate_is_wrong`:
/// see [`WriterSetup::fresh_duplicate_is_wrong`]). Anything else is a
/// violation.
pub async fn retry_pending(
    client: &Client,
    base: &str,
    writer: &mut Writer,
    landed: bool,
    fresh_duplicate_is_wrong: bool,
) -> Option<Violation> {
    let seq = writer.appends.len() as u64 - 1;
    let (status, body) = match append(client, base, writer, seq).await {
        Ok(answer) => answer,
        Err(e) => {
            return Some(Violation::new(
                Kind::WrongAnswer,
                format!("writer {} retrying seq {seq}: no answer ({e})", writer.id),
            ))
        }
    };
    let want = if landed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::OK
    };
    let append = &mut writer.appends[seq as usize];
    if status.is_success() {
        append.acked = Some(Instant::now());
        append.fate = Fate::Acked;
    }
    let excused = !landed && !fresh_duplicate_is_wrong && status == StatusCode::NO_CONTENT;
    (status != want && !excused).then(|| {
        Violation::new(
            Kind::WrongAnswer,
            format!(
                "writer {} retrying seq {seq} (which the restart showed {}): {status} {body:?}, expected {want}",
                writer.id,
                if landed { "there" } else { "missing" }
            ),
        )
    })
}
