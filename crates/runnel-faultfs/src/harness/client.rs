//! The HTTP side of the harness: creating, appending to, reading and
//! deleting streams, and the writer loop. Every request has a timeout.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::{Client, StatusCode};

use super::check::{payload, Append, Fate, Writer};

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

/// `PUT`s a byte stream; the status, or the transport error.
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

pub async fn create(client: &Client, base: &str, stream: &str) -> Result<StatusCode, String> {
    client
        .put(stream_url(base, stream))
        .header("content-type", CONTENT_TYPE)
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| format!("PUT {stream}: {e}"))
}

pub async fn delete(client: &Client, base: &str, stream: &str) -> Result<StatusCode, String> {
    client
        .delete(stream_url(base, stream))
        .send()
        .await
        .map(|r| r.status())
        .map_err(|e| format!("DELETE {stream}: {e}"))
}

/// One append; for an idempotent writer with its producer headers.
pub async fn append(
    client: &Client,
    base: &str,
    writer: &Writer,
    seq: u64,
) -> Result<(StatusCode, String), String> {
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
            "timeout".to_string()
        } else if e.is_connect() {
            "connection refused".to_string()
        } else {
            "transport error".to_string()
        }
    })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    Ok((status, body.trim().to_string()))
}

/// Reads a whole stream: from offset -1, following `Stream-Next-Offset`
/// until `Stream-Up-To-Date: true`. `Ok(None)` when it does not exist.
pub async fn read_all(
    client: &Client,
    base: &str,
    stream: &str,
) -> Result<Option<Vec<u8>>, String> {
    let mut offset = "-1".to_string();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let url = format!("{}?offset={offset}", stream_url(base, stream));
        let response = client
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND && offset == "-1" {
            return Ok(None);
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(format!("GET {url}: {status} {}", body.trim()));
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let next = header("stream-next-offset")
            .ok_or_else(|| format!("GET {url}: no Stream-Next-Offset"))?;
        let up_to_date = header("stream-up-to-date").as_deref() == Some("true");
        let bytes = response
            .bytes()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        out.extend_from_slice(&bytes);
        if up_to_date {
            return Ok(Some(out));
        }
        if next == offset && bytes.is_empty() {
            return Err(format!("GET {url}: no progress and not up to date"));
        }
        offset = next;
    }
    Err(format!("reading {stream}: too many responses"))
}

/// Status codes (or transport errors) the writers saw, with one example
/// body each.
#[derive(Debug, Default)]
pub struct Answers {
    pub counts: BTreeMap<String, (usize, String)>,
    /// Fresh appends acknowledged although sent after `fault_at`.
    pub acked_after_fault: Vec<String>,
}

impl Answers {
    fn note(&mut self, key: String, example: &str) {
        let entry = self.counts.entry(key).or_insert((0, example.to_string()));
        entry.0 += 1;
    }

    pub fn merge(&mut self, other: Answers) {
        for (k, (n, example)) in other.counts {
            self.counts.entry(k).or_insert((0, example)).0 += n;
        }
        self.acked_after_fault.extend(other.acked_after_fault);
    }

    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .counts
            .iter()
            .map(|(k, (n, example))| {
                if example.is_empty() {
                    format!("{k} x{n}")
                } else {
                    format!("{k} x{n} ({example:?})")
                }
            })
            .collect();
        parts.join(", ")
    }
}

/// How a writer behaves on a failed append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Stop until the next cycle (the power-loss test: the server is dying).
    Stop,
    /// Keep trying every `Duration` (the IO-error test: watch the answers).
    Continue(Duration),
}

/// Appends until `stop`, or until a failure with [`OnError::Stop`]. An
/// idempotent writer first retries its in-doubt append, and retries a
/// failed one with the same seq; a plain writer never retries.
pub async fn run_writer(
    client: Client,
    base: String,
    mut writer: Writer,
    stop: Arc<AtomicBool>,
    on_error: OnError,
    fault_at: Option<Instant>,
    pause: Duration,
) -> (Writer, Answers, Vec<String>) {
    let mut answers = Answers::default();
    let mut violations = Vec::new();
    let mut first = true;
    while !stop.load(Ordering::Acquire) {
        if !first && !pause.is_zero() {
            let rest = rand::thread_rng().gen_range(Duration::ZERO..=pause);
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
        let sent = Instant::now();
        let result = append(&client, &base, &writer, seq).await;
        let append = &mut writer.appends[seq as usize];
        match result {
            Ok((status, body)) if status.is_success() => {
                answers.note(status.as_u16().to_string(), "");
                let fresh = retry.is_none() || status != StatusCode::NO_CONTENT;
                if fresh && fault_at.is_some_and(|t| sent > t) {
                    answers.acked_after_fault.push(format!(
                        "writer {} seq {seq} answered {status} although sent after the fault",
                        writer.id
                    ));
                }
                if writer.idempotent && retry.is_none() && status == StatusCode::NO_CONTENT {
                    violations.push(format!(
                        "writer {} seq {seq}: a new producer seq was answered as a duplicate ({status} {body:?})",
                        writer.id
                    ));
                }
                append.acked = Some(Instant::now());
                append.fate = Fate::Acked;
            }
            Ok((status, body)) => {
                answers.note(status.as_u16().to_string(), &body);
                match on_error {
                    OnError::Stop => break,
                    OnError::Continue(pause) => tokio::time::sleep(pause).await,
                }
            }
            Err(error) => {
                answers.note(error, "");
                match on_error {
                    OnError::Stop => break,
                    OnError::Continue(pause) => tokio::time::sleep(pause).await,
                }
            }
        }
    }
    (writer, answers, violations)
}

/// Retries an idempotent writer's in-doubt append after a restart that
/// showed whether it landed: a duplicate (204) if it did, a new append
/// (200) if it did not. Anything else is a violation.
pub async fn retry_pending(
    client: &Client,
    base: &str,
    writer: &mut Writer,
    landed: bool,
) -> Result<(), String> {
    let seq = writer.appends.len() as u64 - 1;
    let (status, body) = append(client, base, writer, seq)
        .await
        .map_err(|e| format!("writer {} retrying seq {seq}: {e}", writer.id))?;
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
    if status != want {
        return Err(format!(
            "writer {} retrying seq {seq} (which the restart showed {}): {status} {body:?}, expected {want}",
            writer.id,
            if landed { "there" } else { "missing" }
        ));
    }
    Ok(())
}
