//! Leadership moves between the voters of a 3-node cluster's groups while
//! clients write: by request (`POST .../members?lead=N`, what the replica
//! moves use to take leadership off a node that gives its replica up),
//! and by itself, back to each group's preferred node once it restarted
//! after a failover. Writers never see an error, nothing acknowledged is
//! lost or repeated, and refusals name their reason.

use crate::common;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::read_all;
use common::writers::{stop_and_check, Writers};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_on_request_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &["--groups", "3"]).await;
    let preferred = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let targets = (0..3).map(|n| cluster.base(n)).collect();
    let writers = Writers::start(&client, "led", 6, targets).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Each data group's leadership goes round the three nodes, the
    // request sent to a node that does not lead it (it is forwarded).
    for step in 1..=3 {
        for group in 1..3 {
            let leader = cluster.leaders(0).await.unwrap()[group].unwrap();
            let to = (leader + 1) % 3;
            let via = (leader + 2) % 3;
            let (status, body) = cluster
                .change_members(via, group, &format!("lead={}", to + 1))
                .await;
            assert_eq!(status, 200, "step {step}, group {group}: {body}");
            let report: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(report["changed"], true, "{body}");
            assert_eq!(report["leader"], to as u64 + 1, "{body}");
            let seen = cluster.leaders(to).await.unwrap()[group];
            assert_eq!(
                seen,
                Some(to),
                "node {} leads group {group} in its view",
                to + 1
            );
        }
    }
    // Asking for the leader it has changes nothing; the leader asked to
    // lead away from another node keeps leading.
    let leader = cluster.leaders(0).await.unwrap()[1].unwrap();
    let (status, body) = cluster
        .change_members(0, 1, &format!("lead={}", leader + 1))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""changed":false"#), "{body}");
    let other = (leader + 1) % 3 + 1;
    let (status, body) = cluster
        .change_members(0, 1, &format!("lead-away={other}"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""changed":false"#), "{body}");
    assert_eq!(cluster.leaders(0).await.unwrap()[1], Some(leader));

    // Refused, with the reason.
    let (status, body) = cluster.change_members(0, 1, "lead=9").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("node 9 is not a voter of group 1"), "{body}");
    for bad in ["lead=one", "lead=1&remove=2", "lead-away="] {
        let (status, body) = cluster.change_members(0, 1, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }

    // The leaderships moved away from the preferred nodes go back to them
    // by themselves, the writers still writing.
    let deadline = Instant::now() + Duration::from_secs(40);
    while cluster.leaders(0).await.unwrap()
        != preferred.iter().map(|l| Some(*l)).collect::<Vec<_>>()
    {
        assert!(
            Instant::now() < deadline,
            "leadership did not return to {preferred:?}: {:?}",
            cluster.leaders(0).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop_and_check(writers, &client, &cluster, &[0, 1, 2]).await;
}

/// After a failover, leadership goes back to each group's preferred node
/// once it has restarted and caught up, and writes keep working: plain
/// (not idempotent) appends through another node all succeed, because
/// the handover's refusals are retried inside the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_returns_to_the_preferred_node_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--groups", "4"]).await;
    let balanced = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    let mut data_leaders = balanced[1..].to_vec();
    data_leaders.sort_unstable();
    assert_eq!(data_leaders, [0, 1, 2], "one data group each: {balanced:?}");
    let client = reqwest::Client::new();
    // A stream of the data group node 1 leads: the group that fails over
    // and moves back.
    let group = 1 + balanced[1..].iter().position(|l| *l == 0).unwrap();
    let name = (0..)
        .map(|i| format!("during-handover-{i}"))
        .find(|n| runnel_engine::placement::stream_group(n, 4) == group)
        .unwrap();
    let url = cluster.stream_url(1, &name);
    common::create_text(&client, &url, "").await;

    cluster.kill(0);
    let moved = cluster.wait_for_leaders(Duration::from_secs(10)).await;
    assert_ne!(moved[group], 0, "group {group} failed over");
    cluster.restart(0).await;
    let started = Instant::now();
    let mut writes = 0;
    let mut acked = Vec::new();
    let mut slowest = Duration::ZERO;
    for n in 0u32.. {
        // Writes keep succeeding while groups move back.
        let sent = Instant::now();
        let r = client
            .post(&url)
            .header("content-type", "text/plain")
            .body(format!("w{n};"))
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(status, 204, "write {n}: {}", r.text().await.unwrap());
        writes += 1;
        acked.push(n);
        slowest = slowest.max(sent.elapsed());
        let preferred = Some(balanced.iter().map(|l| Some(*l)).collect());
        if cluster.leaders(1).await == preferred && cluster.leaders(0).await == preferred {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "leadership did not return: {:?}",
            cluster.leaders(1).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "leadership back on the preferred nodes {:.1} s after the restart \
         ({writes} writes meanwhile, the slowest {slowest:?})",
        started.elapsed().as_secs_f64()
    );
    // Every write is there, once, in order: none was retried after it
    // had been applied.
    let body = read_all(&client, &cluster.stream_url(0, &name)).await;
    let stored: Vec<u32> = String::from_utf8(body)
        .unwrap()
        .split_terminator(';')
        .map(|w| w.strip_prefix('w').unwrap().parse().unwrap())
        .collect();
    assert_eq!(stored, acked);
}
