//! A 3-node cluster of real processes on loopback: formation, balanced
//! leadership, forwarding, and SIGKILL of a leader under load.

use crate::common;

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
        common::create_text(&client, &cluster.stream_url(s % 3, &name), "").await;
        for node in 0..3 {
            common::append_text(
                &client,
                &cluster.stream_url(node, &name),
                &format!("via{node};"),
            )
            .await;
        }
        for node in 0..3 {
            let body = read_all(&client, &cluster.stream_url(node, &name)).await;
            assert_eq!(
                body, b"via0;via1;via2;",
                "read of {name} through node {node}"
            );
            // Forwarded or not, an answer carries each protocol header once.
            let url = format!("{}?offset=-1", cluster.stream_url(node, &name));
            let answer = client.get(url).send().await.unwrap();
            for header in ["access-control-allow-origin", "x-content-type-options"] {
                let copies = answer.headers().get_all(header).iter().count();
                assert_eq!(copies, 1, "{header} through node {node}");
            }
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
    // Generous: the test asserts that no write fails, not how fast any is.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // Writers append through the surviving nodes, as idempotent producers
    // (a retry after an unanswered append is never stored twice). The
    // nodes retry across the leadership change themselves: the writers
    // see latency, never an error. (How long the pause lasts is measured
    // by a benchmark, not asserted here: this machine is shared.)
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
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
        common::create_text(&client, &cluster.stream_url(survivors[0], &name), "").await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (w, writer) in writers.iter().enumerate() {
        let urls: Vec<String> = survivors
            .iter()
            .map(|n| cluster.stream_url(*n, &writer.lock().unwrap().name))
            .collect();
        let (writer, stop, client, errors) = (
            Arc::clone(writer),
            Arc::clone(&stop),
            client.clone(),
            Arc::clone(&errors),
        );
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            let mut attempt = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let message = format!("<{w}:{seq}>");
                let url = &urls[attempt % urls.len()];
                let result = common::idempotent_append(&client, url, w, seq, &message).await;
                match result {
                    Ok(()) => {
                        writer.lock().unwrap().acked.push(message);
                        seq += 1;
                    }
                    Err(e) => {
                        errors.lock().unwrap().push(e);
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(1)).await;
    let acked_before = |writers: &[Arc<Mutex<Writer>>]| -> Vec<usize> {
        writers
            .iter()
            .map(|w| w.lock().unwrap().acked.len())
            .collect()
    };
    let at_kill = acked_before(&writers);
    cluster.kill(victim);
    let new_leaders = cluster.wait_for_leaders(Duration::from_secs(30)).await;
    assert!(!new_leaders.contains(&victim));
    // Every writer goes on: each is acknowledged again, several times,
    // after the kill, whichever group it writes to.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = acked_before(&writers);
        if now.iter().zip(&at_kill).all(|(now, then)| *now >= then + 5) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "writers stalled after the kill: acknowledged {at_kill:?} then {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        *errors.lock().unwrap(),
        Vec::<String>::new(),
        "writers through the surviving nodes saw errors"
    );

    // The killed node comes back, catches up, and agrees with the others.
    cluster.restart(victim).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    cluster.wait_for_convergence(Duration::from_secs(20)).await;

    for writer in &writers {
        let (name, acked) = {
            let writer = writer.lock().unwrap();
            (writer.name.clone(), writer.acked.clone())
        };
        assert!(acked.len() > 10, "{name} barely wrote");
        let expected = acked.concat();
        for node in 0..3 {
            let body = read_all(&client, &cluster.stream_url(node, &name)).await;
            assert_eq!(
                String::from_utf8(body).unwrap(),
                expected,
                "{name} read through node {node}"
            );
        }
    }
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Fills a cluster configured to snapshot every second with 4.8 MB in six
/// streams, deletes three of them, and waits until node 1's log shrank.
/// Returns what the three remaining streams hold.
async fn fill_and_collect(cluster: &Cluster, dir: &std::path::Path) -> Vec<Vec<u8>> {
    let client = reqwest::Client::new();
    let chunk = "x".repeat(8 << 10);
    for s in 0..6 {
        let url = cluster.stream_url(s % 3, &format!("big-{s}"));
        common::create_text(&client, &url, "").await;
        for _ in 0..100 {
            common::append_text(&client, &url, &chunk).await;
        }
    }
    let log_dir = dir.join("n1/log");
    let written = dir_bytes(&log_dir);
    assert!(written > 4_800_000, "the log holds the appends: {written}");
    // Half the streams go; their bytes can leave the disk.
    for s in 0..3 {
        let r = client
            .delete(cluster.stream_url(0, &format!("big-{s}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }
    // A few more appends roll the log past the segments to collect.
    let url = cluster.stream_url(1, "big-5");
    for _ in 0..130 {
        common::append_text(&client, &url, &chunk).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = dir_bytes(&log_dir);
        if now < written {
            eprintln!("log of node 1: {written} bytes after the appends, {now} after collection");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no segment was collected ({now} bytes)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for n in 1..=3 {
        assert!(
            dir.join(format!("n{n}/snapshots/group-0.snap")).exists(),
            "node {n} wrote snapshot files"
        );
    }
    let mut kept = Vec::new();
    for s in 3..6 {
        kept.push(read_all(&client, &cluster.stream_url(0, &format!("big-{s}"))).await);
    }
    kept
}

async fn assert_holds(cluster: &Cluster, expected: &[Vec<u8>]) {
    let client = reqwest::Client::new();
    for (i, s) in (3..6).enumerate() {
        for node in 0..3 {
            let body = read_all(&client, &cluster.stream_url(node, &format!("big-{s}"))).await;
            assert_eq!(body.len(), expected[i].len(), "big-{s} through node {node}");
            assert!(body == expected[i], "big-{s} through node {node}");
        }
    }
    for s in 0..3 {
        let r = client
            .head(cluster.stream_url(2, &format!("big-{s}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "big-{s} stays deleted");
    }
}

/// Without preallocated segments, so that the log directory's size is the
/// size of its records, which these tests watch shrink.
const SNAPSHOTTING: [&str; 8] = [
    "--groups",
    "3",
    "--segment-bytes",
    "1048576",
    "--checkpoint-interval-secs",
    "1",
    "--preallocate-segments",
    "false",
];

/// Snapshots let the log shrink, and a whole-cluster restart recovers
/// from snapshots plus the log after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_reclaim_disk_and_recover_a_restarted_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &SNAPSHOTTING).await;
    let expected = fill_and_collect(&cluster, dir.path()).await;
    for n in 0..3 {
        cluster.kill(n);
    }
    for n in 0..3 {
        cluster.restart(n).await;
    }
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    cluster.wait_for_convergence(Duration::from_secs(30)).await;
    assert_holds(&cluster, &expected).await;
}

/// A node that lost its disk comes back from the others' snapshots. Its
/// leaders had counted its entries as matching, so this is also the case
/// of a follower whose log went backwards (openraft must restart the
/// search for a match, then send the snapshot, instead of stalling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_node_rejoins_by_snapshot_install() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &SNAPSHOTTING).await;
    let expected = fill_and_collect(&cluster, dir.path()).await;
    cluster.kill(2);
    std::fs::remove_dir_all(dir.path().join("n3")).unwrap();
    cluster.restart(2).await;
    cluster.wait_for_convergence(Duration::from_secs(30)).await;
    assert!(
        dir.path().join("n3/snapshots/group-0.snap").exists(),
        "the wiped node installed and stored snapshots"
    );
    assert_holds(&cluster, &expected).await;
    cluster.wait_until_every_node_votes().await;

    // The whole cluster restarts, the wiped node first and alone: it must
    // wait for a peer before it decides whether it may vote, then rejoin.
    for n in 0..3 {
        cluster.kill(n);
    }
    std::fs::remove_dir_all(dir.path().join("n3")).unwrap();
    cluster.restart(2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alone = cluster.status(2).await.expect("node 3 answers");
    for group in alone["groups"].as_array().unwrap() {
        assert_eq!(group["votes"], false, "alone and empty: {group}");
    }
    cluster.restart(0).await;
    cluster.restart(1).await;
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    cluster.wait_for_convergence(Duration::from_secs(30)).await;
    assert_holds(&cluster, &expected).await;
    cluster.wait_until_every_node_votes().await;
}

/// Live reads through a follower are served by that follower from its
/// applied state, after catching up with its leader (a read index): a
/// long-poll at `offset=now` right after an acknowledged append waits for
/// the next append, not that one. Streams with a sliding TTL are read at
/// the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_serve_live_reads_from_their_applied_state() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &["--groups", "3"]).await;
    let leaders = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let client = reqwest::Client::new();
    let served_by = |r: &reqwest::Response| {
        r.headers()["runnel-served-by"]
            .to_str()
            .unwrap()
            .parse::<usize>()
            .unwrap()
            - 1
    };

    for (s, ttl) in [
        ("tail-a", None),
        ("tail-b", None),
        ("tail-ttl", Some("600")),
    ] {
        let leader = leaders[runnel_engine::placement::stream_group(s, 3)];
        let follower = (leader + 1) % 3;
        let mut create = client
            .put(cluster.stream_url(leader, s))
            .header("content-type", "text/plain");
        if let Some(ttl) = ttl {
            create = create.header("stream-ttl", ttl);
        }
        assert_eq!(create.send().await.unwrap().status(), 201);
        for round in 0..5 {
            // Acknowledged by the leader, then a long-poll at the tail
            // through the follower: it must wait for the next append.
            common::append_text(
                &client,
                &cluster.stream_url(leader, s),
                &format!("old{round};"),
            )
            .await;
            let poll = client
                .get(format!(
                    "{}?offset=now&live=long-poll",
                    cluster.stream_url(follower, s)
                ))
                .send();
            let writer = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                client
                    .post(cluster.stream_url(leader, s))
                    .header("content-type", "text/plain")
                    .body(format!("new{round};"))
                    .send()
                    .await
                    .unwrap()
            };
            let (poll, appended) = tokio::join!(poll, writer);
            assert_eq!(appended.status(), 204);
            let poll = poll.unwrap();
            let expected_server = if ttl.is_some() { leader } else { follower };
            assert_eq!(served_by(&poll), expected_server, "{s} round {round}");
            assert_eq!(poll.status(), 200);
            assert_eq!(poll.text().await.unwrap(), format!("new{round};"));
        }
    }

    // SSE through a follower sees what the leader committed.
    let s = "tail-a";
    let leader = leaders[runnel_engine::placement::stream_group(s, 3)];
    let follower = (leader + 2) % 3;
    let mut sse = client
        .get(format!(
            "{}?offset=-1&live=sse",
            cluster.stream_url(follower, s)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(served_by(&sse), follower);
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains("new4;") {
        let chunk = tokio::time::timeout_at(deadline.into(), sse.chunk())
            .await
            .expect("SSE delivered the stream")
            .unwrap()
            .expect("SSE stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("old0;new0;old1;"), "{seen}");
}

/// Live bytes scattered over otherwise dead segments are moved forward by
/// each node's checkpoints, so the segments go; the moved bytes read the
/// same on every node, also after a whole-cluster restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sparse_segments_are_copied_forward_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--groups",
        "1",
        "--segment-bytes",
        "262144",
        "--checkpoint-interval-secs",
        "1",
        // The log directory's size is then its records' (see SNAPSHOTTING).
        "--preallocate-segments",
        "false",
    ];
    let mut cluster = Cluster::start(dir.path(), 3, &args).await;
    cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let client = reqwest::Client::new();
    let (keep, junk) = (cluster.stream_url(0, "keep"), cluster.stream_url(0, "junk"));
    for url in [&keep, &junk] {
        common::create_text(&client, url, "").await;
    }
    // Every segment gets a little of "keep" and much of "junk".
    let filler = "j".repeat(8 << 10);
    let mut expected = String::new();
    for i in 0..120 {
        let piece = format!("keep-{i};");
        common::append_text(&client, &keep, &piece).await;
        expected.push_str(&piece);
        for _ in 0..4 {
            common::append_text(&client, &junk, &filler).await;
        }
    }
    let peak: Vec<u64> = (1..=3)
        .map(|n| dir_bytes(&dir.path().join(format!("n{n}/log"))))
        .collect();
    assert_eq!(client.delete(&junk).send().await.unwrap().status(), 204);
    // Keep writing a little so the log rolls past the sparse segments.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        common::append_text(&client, &keep, "+").await;
        expected.push('+');
        let now: Vec<u64> = (1..=3)
            .map(|n| dir_bytes(&dir.path().join(format!("n{n}/log"))))
            .collect();
        if now.iter().zip(&peak).all(|(now, peak)| now * 3 < *peak) {
            eprintln!("logs: {peak:?} bytes at the peak, {now:?} after copy-forward");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sparse segments were not reclaimed: {peak:?} at the peak, {now:?} now"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.wait_for_convergence(Duration::from_secs(10)).await;
    for node in 0..3 {
        let body = read_all(&client, &cluster.stream_url(node, "keep")).await;
        assert_eq!(String::from_utf8(body).unwrap(), expected, "node {node}");
    }
    for n in 0..3 {
        cluster.kill(n);
    }
    for n in 0..3 {
        cluster.restart(n).await;
    }
    cluster.wait_for_leaders(Duration::from_secs(30)).await;
    for node in 0..3 {
        let body = read_all(&client, &cluster.stream_url(node, "keep")).await;
        assert_eq!(
            String::from_utf8(body).unwrap(),
            expected,
            "node {node} after restart"
        );
    }
}

/// Application snapshots, bootstrap and trims are replicated: after the
/// leader that took them is killed, the new leader serves the same
/// snapshot, bootstrap and 410 below the trim point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_trims_survive_a_leader_failover() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--groups", "1"]).await;
    let leader = cluster.wait_for_leaders(Duration::from_secs(10)).await[0];
    let other = (leader + 1) % 3;
    let client = reqwest::Client::new();
    let url = cluster.stream_url(other, "doc");
    let json = |r: reqwest::RequestBuilder| r.header("content-type", "application/json");
    let r = json(client.put(&url))
        .body(r#"[{"op":1},{"op":2}]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = json(client.post(&url))
        .body(r#"{"op":3}"#)
        .send()
        .await
        .unwrap();
    let at = r.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    let r = json(client.post(&url))
        .body(r#"{"op":4}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = json(client.put(format!("{url}/$snapshot/{at}")))
        .body(r#"{"state":"1-3"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = client
        .put(format!("{url}/$retention/{at}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "trim: {}", r.status());

    cluster.kill(leader);
    cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let url = cluster.stream_url(other, "doc");
    let r = client.get(format!("{url}/$snapshot")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), r#"{"state":"1-3"}"#);
    let r = client
        .get(format!("{url}/$bootstrap"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["stream-snapshot-offset"].to_str().unwrap(), at);
    let body = r.text().await.unwrap();
    assert!(
        body.contains(r#"{"state":"1-3"}"#) && body.contains(r#"{"op":4}"#),
        "{body}"
    );
    assert!(
        !body.contains(r#"{"op":3}"#),
        "only what follows the snapshot: {body}"
    );
    let zero = "0000000000000000_0000000000000000";
    let r = client
        .get(format!("{url}?offset={zero}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410, "history before the trim is gone");
    assert_eq!(r.headers()["stream-earliest-offset"].to_str().unwrap(), at);
    let r = client.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), r#"[{"op":4}]"#);
}
