//! SIGKILL while 16 writers append, 20 times over (and more, until the
//! writers have filled three log segments: on a loaded machine each cycle
//! writes less): after each restart every acknowledged append is there,
//! in order, exactly once, and nothing else is (an append in flight at
//! the kill may or may not have landed).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{read_all, Server};
use rand::Rng;

const WRITERS: usize = 16;
const CYCLES: usize = 20;
/// Kills at most, however slow the machine: enough to fill the segments.
const MAX_CYCLES: usize = 400;
/// Segments small enough that the writers fill several: kills land in
/// segments that were prepared ahead as zeros, and around rolls.
const SMALL_SEGMENTS: [&str; 2] = ["--segment-bytes", "1048576"];

/// One writer's history: appends it knows are stored, and the one in
/// flight when the server died (if any).
#[derive(Default)]
struct Writer {
    stored: Vec<Vec<u8>>,
    in_flight: Option<Vec<u8>>,
    next_seq: u64,
}

fn payload(writer: usize, seq: u64) -> Vec<u8> {
    // Distinct, fixed-size records make any loss, reorder or repeat visible.
    format!("<w{writer:02}:{seq:08}:{}>", "x".repeat(40)).into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_repeated_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let writers: Vec<Arc<Mutex<Writer>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let mut acked_total = 0usize;

    let segments = || {
        std::fs::read_dir(dir.path().join("log")).map_or(0, |d| {
            d.filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
                .count()
        })
    };
    let mut cycles = 0;
    for cycle in 0..MAX_CYCLES {
        if cycle >= CYCLES && segments() >= 3 {
            break;
        }
        cycles += 1;
        let mut server = Server::start(dir.path(), &SMALL_SEGMENTS).await;
        for (w, writer) in writers.iter().enumerate() {
            let url = server.stream_url(&format!("crash-{w}"));
            // Verify what survived the previous kill, then reconcile the
            // in-flight append: stored if the log kept it, dropped if not.
            let content = if cycle == 0 {
                common::create_text(&client, &url, "").await;
                Vec::new()
            } else {
                read_all(&client, &url).await
            };
            let mut writer = writer.lock().unwrap();
            let acked: Vec<u8> = writer.stored.concat();
            if content == acked {
                writer.in_flight = None;
            } else {
                let landed = writer
                    .in_flight
                    .take()
                    .expect("extra bytes need an in-flight append");
                assert_eq!(
                    content,
                    [acked, landed.clone()].concat(),
                    "cycle {cycle} writer {w}"
                );
                writer.stored.push(landed);
            }
        }

        let mut tasks = Vec::new();
        for (w, writer) in writers.iter().enumerate() {
            let (client, writer) = (client.clone(), Arc::clone(writer));
            let url = server.stream_url(&format!("crash-{w}"));
            tasks.push(tokio::spawn(async move {
                let mut acked = 0;
                loop {
                    let data = {
                        let mut wr = writer.lock().unwrap();
                        let data = payload(w, wr.next_seq);
                        wr.next_seq += 1;
                        wr.in_flight = Some(data.clone());
                        data
                    };
                    let sent = client
                        .post(&url)
                        .header("content-type", "text/plain")
                        .body(data.clone())
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status() == 204 => {
                            let mut wr = writer.lock().unwrap();
                            wr.in_flight = None;
                            wr.stored.push(data);
                            acked += 1;
                        }
                        Ok(r) => panic!("unexpected status {}", r.status()),
                        // The server was killed: this append's fate is unknown.
                        Err(_) => return acked,
                    }
                }
            }));
        }
        let run_for = rand::thread_rng().gen_range(150..600);
        tokio::time::sleep(Duration::from_millis(run_for)).await;
        server.kill();
        for t in tasks {
            acked_total += t.await.unwrap();
        }
    }

    // A last restart: everything acknowledged, in order, once.
    let server = Server::start(dir.path(), &SMALL_SEGMENTS).await;
    for (w, writer) in writers.iter().enumerate() {
        let content = read_all(&client, &server.stream_url(&format!("crash-{w}"))).await;
        let writer = writer.lock().unwrap();
        let acked = writer.stored.concat();
        match &writer.in_flight {
            Some(landed) if content.len() > acked.len() => {
                assert_eq!(content, [acked, landed.clone()].concat())
            }
            _ => assert_eq!(content, acked, "writer {w}"),
        }
    }
    let segments = segments();
    eprintln!(
        "{acked_total} appends acknowledged across {cycles} SIGKILL cycles, {segments} segments"
    );
    assert!(
        segments >= 3,
        "the writers filled only {segments} segments in {cycles} cycles"
    );
    assert!(
        acked_total > WRITERS * CYCLES,
        "too few appends were acknowledged to test anything: {acked_total}"
    );
}
