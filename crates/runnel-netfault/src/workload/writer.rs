//! The writers: an idempotent producer that sends an unanswered append
//! again with the same sequence number (through any member) until it is
//! acknowledged, and a plain writer whose unanswered appends stay in
//! doubt.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use runnel_history::check::AppendOp;
use runnel_history::record::payload;

use super::{position, stream_url, Workload, CONTENT_TYPE};

impl Workload {
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
            let mut base;
            loop {
                base = self.pick(&mut rng);
                let answer = self
                    .append_once(&base, &stream, writer, seq, idempotent)
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
            self.recorder.push_append(op, &base);
            seq += 1;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(5..40))).await;
        }
    }

    /// One attempt: `Some(end)` when acknowledged (`end` is the next offset
    /// it gave, `None` for a duplicate answered without one).
    async fn append_once(
        &self,
        base: &str,
        stream: &str,
        writer: u32,
        seq: u64,
        idempotent: bool,
    ) -> Option<Option<u64>> {
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
}
