//! Catch-up and long-poll readers, and reading a whole stream back.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Client;
use runnel_history::check::{ReadKind, ReadOp};

use super::{position, stream_url, Workload};
use crate::error::{NetfaultError, Result};

impl Workload {
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
                let Some((page, base)) = self
                    .read_once(&stream, reader, offset, false, &mut rng)
                    .await
                else {
                    break;
                };
                seen.push(page.next);
                let done = page.up_to_date;
                offset = Some(page.next);
                self.recorder.push_read(page, &base);
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
                Some((page, base)) => {
                    offset = Some(page.next);
                    self.recorder.push_read(page, &base);
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
    ) -> Option<(ReadOp, String)> {
        let base = self.pick(rng);
        let offset = match from {
            Some(p) => format!("{:016}_{p:016}", 0),
            None => "-1".to_string(),
        };
        let mut url = format!("{}?offset={offset}", stream_url(&base, stream));
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
        let read = ReadOp {
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
            bytes: bytes.into(),
            next,
            up_to_date,
        };
        Some((read, base))
    }
}

/// Reads a whole stream through `base`, to the tail.
pub async fn read_all(client: &Client, base: &str, stream: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    for _ in 0..100_000 {
        let url = format!("{}?offset={offset}", stream_url(base, stream));
        let failed = |reason: String| NetfaultError::Read {
            what: format!("GET {url}"),
            reason,
        };
        let r = client
            .get(&url)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !r.status().is_success() {
            return Err(failed(r.status().to_string()));
        }
        let next = r
            .headers()
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| failed("no Stream-Next-Offset".into()))?;
        let up_to_date = r
            .headers()
            .get("stream-up-to-date")
            .is_some_and(|v| v == "true");
        let bytes = r.bytes().await.map_err(|e| failed(e.to_string()))?;
        out.extend_from_slice(&bytes);
        if up_to_date {
            return Ok(out);
        }
        if next == offset && bytes.is_empty() {
            return Err(failed("no progress and not up to date".into()));
        }
        offset = next;
    }
    Err(NetfaultError::Read {
        what: stream.to_string(),
        reason: "too many pages".into(),
    })
}
