//! `GET /metrics` scraped during a load run: the values move as they
//! should, and no stream name becomes a label.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::Server;

/// Every sample of a scrape: `name{labels}` to value.
pub(crate) async fn scrape(client: &reqwest::Client, base: &str) -> BTreeMap<String, f64> {
    let r = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = r.text().await.unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (key, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                key.to_string(),
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {l:?}")),
            )
        })
        .collect()
}

pub(crate) fn get(samples: &BTreeMap<String, f64>, key: &str) -> f64 {
    *samples
        .get(key)
        .unwrap_or_else(|| panic!("no sample {key}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--long-poll-timeout-ms", "20000"]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("secret-tenant/room");
    common::create_text(&client, &url, "").await;

    // Three SSE readers and two long-polls, held open.
    let mut held = Vec::new();
    for _ in 0..3 {
        let r = client
            .get(format!("{url}?offset=now&live=sse"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    let mut polls = Vec::new();
    for _ in 0..2 {
        let (client, url) = (client.clone(), url.clone());
        polls.push(tokio::spawn(async move {
            client
                .get(format!("{url}?offset=now&live=long-poll"))
                .send()
                .await
                .unwrap()
                .status()
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(&client, &server.base).await;
        if get(&s, "runnel_live_readers{mode=\"long_poll\"}") == 2.0 {
            assert_eq!(get(&s, "runnel_live_readers{mode=\"sse\"}"), 3.0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the long-polls were never counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // 200 appends from 8 writers, some through hyper (chunked bodies).
    let before = scrape(&client, &server.base).await;
    let mut writers = Vec::new();
    for w in 0..8 {
        let (client, url) = (client.clone(), url.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..25 {
                let body = format!("w{w}-{i}|");
                let request = client.post(&url).header("content-type", "text/plain");
                let request = if i % 5 == 0 {
                    let chunks = futures::stream::iter([Ok::<_, std::io::Error>(body)]);
                    request.body(reqwest::Body::wrap_stream(chunks))
                } else {
                    request.body(body)
                };
                assert_eq!(request.send().await.unwrap().status(), 204);
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    for p in polls {
        assert_eq!(
            p.await.unwrap(),
            200,
            "each long-poll was woken by an append"
        );
    }
    let after = scrape(&client, &server.base).await;
    let delta = |key: &str| get(&after, key) - before.get(key).copied().unwrap_or(0.0);
    assert_eq!(
        delta("runnel_http_requests_total{route=\"append\",code=\"2xx\"}"),
        200.0
    );
    assert_eq!(delta("runnel_append_ack_duration_seconds_count"), 200.0);
    assert_eq!(delta("runnel_log_records_total"), 200.0);
    assert!(
        delta("runnel_log_sync_duration_seconds_count") > 0.0,
        "no fsync observed"
    );
    assert!(
        get(
            &after,
            "runnel_log_sync_duration_seconds_bucket{le=\"+Inf\"}"
        ) == get(&after, "runnel_log_sync_duration_seconds_count")
    );
    // The serial parts of an append (`bench/cores.sh`): the log's
    // committer thread and the group's commit task did work for these
    // appends, and no more than the whole process did (whose CPU is read
    // in clock ticks of 10 ms).
    let process_cpu = delta("process_cpu_seconds_total");
    let committer = delta("runnel_log_committer_cpu_seconds_total");
    let commit_task = delta("runnel_group_commit_busy_seconds_total{group=\"0\"}");
    assert!(committer > 0.0, "the committer's CPU did not move");
    assert!(commit_task > 0.0, "the commit task's time did not move");
    assert!(
        committer <= process_cpu + 0.02,
        "committer {committer} s of the process's {process_cpu} s"
    );
    assert!(
        delta("runnel_sse_events_total") >= 3.0 * 2.0,
        "three readers saw data and control events"
    );
    assert!(delta("runnel_sse_bytes_total") > 0.0);
    assert_eq!(get(&after, "runnel_live_readers{mode=\"long_poll\"}"), 0.0);
    assert_eq!(get(&after, "runnel_live_readers{mode=\"sse\"}"), 3.0);
    assert_eq!(get(&after, "runnel_streams"), 1.0);
    assert_eq!(get(&after, "runnel_log_failed"), 0.0);
    assert!(get(&after, "process_resident_memory_bytes") > 1e6);
    let by_kind: f64 = ["anonymous", "file", "shared"]
        .iter()
        .map(|kind| {
            get(
                &after,
                &format!("runnel_resident_memory_bytes{{kind=\"{kind}\"}}"),
            )
        })
        .sum();
    assert!(get(&after, "runnel_resident_memory_bytes{kind=\"anonymous\"}") > 1e6);
    assert!(get(&after, "runnel_resident_memory_bytes{kind=\"file\"}") > 1e6);
    let resident = get(&after, "process_resident_memory_bytes");
    assert!(
        (by_kind - resident).abs() < resident / 2.0,
        "the kinds add up to {by_kind}, resident is {resident}"
    );
    assert!(get(&after, "process_open_fds") > 0.0);
    assert!(get(&after, "runnel_disk_free_bytes") > 0.0);
    assert!(get(&after, "runnel_disk_total_bytes") >= get(&after, "runnel_disk_free_bytes"));
    assert!(delta("runnel_http_requests_total{route=\"metrics\",code=\"2xx\"}") >= 1.0);

    // Readers gone: the gauge follows.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(
        &scrape(&client, &server.base).await,
        "runnel_live_readers{mode=\"sse\"}",
    ) != 0.0
    {
        assert!(
            Instant::now() < deadline,
            "closed SSE readers still counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A 404 is a 4xx of its route; stream names are never labels.
    let r = client
        .get(server.stream_url("missing"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let text = common::get_text(&client, &format!("{}/metrics", server.base)).await;
    assert!(
        text.contains("runnel_http_requests_total{route=\"read\",code=\"4xx\"} 1"),
        "{text}"
    );
    assert!(!text.contains("secret-tenant") && !text.contains("missing"));
}

/// `/metrics` and `/_runnel/status` say where memory goes: the index grows
/// with appends, and the allocator's figures are there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_is_broken_down_by_owner() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("memory/index");
    common::create_text(&client, &url, "").await;
    let owner = |samples: &BTreeMap<String, f64>, owner: &str| {
        get(
            samples,
            &format!("runnel_memory_bytes{{owner=\"{owner}\"}}"),
        )
    };
    let before = scrape(&client, &server.base).await;

    const APPENDS: usize = 2_000;
    let mut writers = Vec::new();
    for w in 0..8 {
        let (client, url) = (client.clone(), url.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..APPENDS / 8 {
                let r = client
                    .post(&url)
                    .header("content-type", "text/plain")
                    .body(format!("w{w}-{i}|"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 204);
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let after = scrape(&client, &server.base).await;
    let index = owner(&after, "index") - owner(&before, "index");
    // An index entry per append: a few bytes each in full blocks (they
    // are encoded), 40 in the last block, which takes appends.
    assert!(
        index >= (APPENDS * 4) as f64 && index <= (APPENDS * 60) as f64,
        "{APPENDS} appends grew the index by {index} bytes"
    );
    assert!(owner(&after, "streams") > 0.0);
    // The binary counts its allocations: what the engine's tables do not
    // explain is other allocations, and the rest of the anonymous
    // resident memory is not allocated.
    assert!(owner(&after, "other_allocated") > 0.0);
    let held: f64 = [
        "streams",
        "index",
        "read_pages",
        "tier_cache",
        "other_allocated",
        "allocator_free",
    ]
    .iter()
    .map(|o| owner(&after, o))
    .sum();
    let anonymous = get(&after, "runnel_resident_memory_bytes{kind=\"anonymous\"}");
    // Read from /proc a moment apart from the count: close, not equal.
    assert!(
        (held - anonymous).abs() < anonymous / 4.0,
        "the owners hold {held} bytes, the process {anonymous} anonymous bytes"
    );

    let status = server.status().await;
    let memory = &status["memory"];
    assert!(memory["resident"].as_u64().unwrap() > 1 << 20, "{memory}");
    assert!(
        memory["by_owner"]["index"].as_u64().unwrap() >= (APPENDS * 4) as u64,
        "{memory}"
    );
    assert!(memory["by_owner"]["allocator_free"].is_u64(), "{memory}");
}
