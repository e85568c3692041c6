//! Reading every stream back after a restart and judging it against its
//! writers' histories ([`super::check`]).
//!
//! A server that has just recovered may answer a read with a 5xx for a
//! moment, so a read that fails that way is tried again for a while
//! (`patience`, for all the streams together). A stream that still cannot be read past some offset on a
//! healthy disk has lost, as far as any client can tell, every
//! acknowledged append after it: those are reported as lost, with the
//! answer that stopped the read.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Client;

use super::check::{self, Writer};
use super::client::{self, ReadBack};
use super::verdict::{Kind, Violation};

/// The outcome of reading every stream back.
#[derive(Debug, Default)]
pub struct Verified {
    pub violations: Vec<Violation>,
    /// In-doubt appends found there / found missing.
    pub landed: usize,
    pub missing: usize,
    pub bytes: usize,
    /// What each stream held (as far as it could be read).
    pub contents: BTreeMap<String, Vec<u8>>,
}

/// Pause between attempts at a stream whose read failed.
const AGAIN: Duration = Duration::from_millis(200);

/// Reads `stream` through `base`, again while a read fails with a 5xx or
/// no answer, until `deadline`.
pub async fn read_patiently(
    client: &Client,
    base: &str,
    stream: &str,
    deadline: Instant,
) -> ReadBack {
    loop {
        let read = client::read_all(client, base, stream).await;
        let again = read.cut_short.as_ref().is_some_and(|e| e.transient());
        if !again || Instant::now() + AGAIN > deadline {
            return read;
        }
        tokio::time::sleep(AGAIN).await;
    }
}

/// Reads each stream back through `base` and checks it against its
/// writers' histories (settling their in-doubt appends).
pub async fn verify(
    client: &Client,
    base: &str,
    streams: &[String],
    writers: &mut [Writer],
    patience: Duration,
) -> Verified {
    let mut out = Verified::default();
    let deadline = Instant::now() + patience;
    for stream in streams {
        let read = read_patiently(client, base, stream, deadline).await;
        judge(stream, read, writers, &mut out);
    }
    out
}

/// Checks one stream read back against the writers' histories.
pub fn judge(stream: &str, read: ReadBack, writers: &mut [Writer], out: &mut Verified) {
    let Some(bytes) = read.bytes else {
        let acked: usize = writers
            .iter()
            .filter(|w| w.stream == stream)
            .map(Writer::acked)
            .sum();
        out.violations.push(Violation::new(
            Kind::LostAcknowledgedAppend,
            format!("stream {stream} is gone (404), and with it {acked} acknowledged appends"),
        ));
        out.contents.insert(stream.to_string(), Vec::new());
        return;
    };
    out.bytes += bytes.len();
    let reason = read.cut_short.map(|e| e.to_string());
    let mut mine: Vec<&mut Writer> = writers.iter_mut().filter(|w| w.stream == stream).collect();
    let verdict = check::check_stream(stream, &bytes, &mut mine, reason.as_deref());
    let lost = verdict
        .violations
        .iter()
        .any(|v| v.kind == Kind::LostAcknowledgedAppend);
    if let (Some(reason), false) = (&reason, lost) {
        out.violations.push(Violation::new(
            Kind::Unavailable,
            format!(
                "stream {stream} could not be read past byte {}: {reason}",
                bytes.len()
            ),
        ));
    }
    out.violations.extend(verdict.violations);
    out.landed += verdict.landed;
    out.missing += verdict.missing;
    out.contents.insert(stream.to_string(), bytes);
}
