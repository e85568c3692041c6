//! A 3-node cluster of real processes on loopback: formation, balanced
//! leadership, forwarding, and SIGKILL of a leader under load.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::read_all;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_forms_balanced_and_any_node_serves_any_stream() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &["--groups", "6"]).await;
    let leaders = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let mut led = [0; 3];
    for l in &leaders {
        led[*l] += 1;
    }
    assert_eq!(led, [2, 2, 2], "leadership is balanced: {leaders:?}");

    let client = reqwest::Client::new();
    for s in 0..12 {
        let name = format!("any-{s}");
        let r = client
            .put(cluster.stream_url(s % 3, &name))
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        for node in 0..3 {
            let r = client
                .post(cluster.stream_url(node, &name))
                .header("content-type", "text/plain")
                .body(format!("via{node};"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204);
        }
        for node in 0..3 {
            let body = read_all(&client, &cluster.stream_url(node, &name)).await;
            assert_eq!(
                body, b"via0;via1;via2;",
                "read of {name} through node {node}"
            );
        }
    }
    cluster.wait_for_convergence(Duration::from_secs(10)).await;

    let status = cluster.status(0).await.unwrap();
    assert_eq!(status["mode"], "cluster");
    assert_eq!(status["groups"].as_array().unwrap().len(), 6);
}

/// One writer's stream and what it knows: `acked` appends were confirmed.
struct Writer {
    name: String,
    acked: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_leader_loses_no_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--groups", "3"]).await;
    let leaders = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let victim = leaders[0];
    let survivors: Vec<usize> = (0..3).filter(|n| *n != victim).collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();

    // Writers append through the surviving nodes, as idempotent producers
    // (a retry after an unanswered append is never stored twice).
    let writers: Vec<Arc<Mutex<Writer>>> = (0..9)
        .map(|w| {
            Arc::new(Mutex::new(Writer {
                name: format!("busy-{w}"),
                acked: Vec::new(),
            }))
        })
        .collect();
    for w in &writers {
        let name = w.lock().unwrap().name.clone();
        let r = client
            .put(cluster.stream_url(survivors[0], &name))
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let stop = Arc::new(AtomicBool::new(false));
    // The last time any append of a stream in the victim's groups failed.
    let outages: Arc<Mutex<BTreeMap<String, (Instant, Instant)>>> = Arc::default();
    let mut tasks = Vec::new();
    for (w, writer) in writers.iter().enumerate() {
        let urls: Vec<String> = survivors
            .iter()
            .map(|n| cluster.stream_url(*n, &writer.lock().unwrap().name))
            .collect();
        let (writer, stop, client, outages) = (
            Arc::clone(writer),
            Arc::clone(&stop),
            client.clone(),
            Arc::clone(&outages),
        );
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            let mut attempt = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let message = format!("<{w}:{seq}>");
                let result = client
                    .post(&urls[attempt % urls.len()])
                    .header("content-type", "text/plain")
                    .header("producer-id", format!("writer-{w}"))
                    .header("producer-epoch", "0")
                    .header("producer-seq", seq.to_string())
                    .body(message.clone())
                    .send()
                    .await;
                match result {
                    Ok(r) if r.status().is_success() => {
                        writer.lock().unwrap().acked.push(message);
                        seq += 1;
                    }
                    Ok(r) => {
                        let status = r.status();
                        assert_eq!(status, 503, "only unavailability is expected");
                        note_failure(&outages, &urls[0]);
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(_) => {
                        note_failure(&outages, &urls[0]);
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_at = Instant::now();
    cluster.kill(victim);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let new_leaders = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    assert!(!new_leaders.contains(&victim));
    {
        let outages = outages.lock().unwrap();
        let worst = outages
            .values()
            .map(|(_, last)| last.saturating_duration_since(killed_at))
            .max()
            .unwrap_or_default();
        eprintln!("writes failed for at most {worst:?} after the kill");
        assert!(
            worst < Duration::from_secs(3),
            "writes resumed only after {worst:?}"
        );
    }

    // The killed node comes back, catches up, and agrees with the others.
    cluster.restart(victim).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    cluster.wait_for_convergence(Duration::from_secs(20)).await;

    for writer in &writers {
        let writer = writer.lock().unwrap();
        assert!(writer.acked.len() > 10, "{} barely wrote", writer.name);
        let expected = writer.acked.concat();
        for node in 0..3 {
            let body = read_all(&client, &cluster.stream_url(node, &writer.name)).await;
            assert_eq!(
                String::from_utf8(body).unwrap(),
                expected,
                "{} read through node {node}",
                writer.name
            );
        }
    }
}

fn note_failure(outages: &Mutex<BTreeMap<String, (Instant, Instant)>>, url: &str) {
    let now = Instant::now();
    outages
        .lock()
        .unwrap()
        .entry(url.to_string())
        .and_modify(|(_, last)| *last = now)
        .or_insert((now, now));
}
