//! Subscriptions beyond the conformance suite: webhook failures and
//! backoff, a restart between a wake and its callback, the control
//! group's leader killed mid-wake, streams in groups the delivering node
//! holds no copy of, and many subscriptions over many streams. Webhooks
//! go to a receiver in this process (`common::webhooks`) that records
//! every delivery and answers as each test scripts it.

use crate::common;

use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures::StreamExt;
use serde_json::{json, Value};

use common::cluster::Cluster;
use common::webhooks::{Delivery, Receiver, Reply};
use common::Server;

fn sub_url(base: &str, id: &str) -> String {
    format!("{base}/v1/stream/__ds/subscriptions/{id}")
}

async fn put_subscription(client: &reqwest::Client, base: &str, id: &str, body: Value) {
    let r = client
        .put(sub_url(base, id))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
}

async fn get_subscription(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let r = client.get(sub_url(base, id)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    json_of(r).await
}

async fn json_of(r: reqwest::Response) -> Value {
    serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
}

/// Creates (PUT, 201) or appends to (POST, 204) a JSON stream with
/// `token`'s credentials; answers the stream's tail.
async fn write_json(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: &str,
    token: Option<&str>,
) -> String {
    let expected = if method == reqwest::Method::PUT {
        201
    } else {
        204
    };
    let mut request = client
        .request(method, url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let r = request.send().await.unwrap();
    assert_eq!(r.status(), expected);
    r.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string()
}

async fn create_json(client: &reqwest::Client, url: &str, body: &str) -> String {
    write_json(client, reqwest::Method::PUT, url, body, None).await
}

/// The acked offset of `stream` in subscription `sub` (as GET shows it).
fn acked(sub: &Value, stream: &str) -> Option<String> {
    sub["streams"]
        .as_array()?
        .iter()
        .find(|s| s["path"] == stream)
        .map(|s| s["acked_offset"].as_str().unwrap().to_string())
}

async fn callback(client: &reqwest::Client, wake: &Value, offset: &str) -> reqwest::Response {
    let stream = wake["streams"][0]["path"].as_str().unwrap();
    client
        .post(wake["callback_url"].as_str().unwrap())
        .bearer_auth(wake["callback_token"].as_str().unwrap())
        .header("content-type", "application/json")
        .body(
            json!({
                "wake_id": wake["wake_id"],
                "generation": wake["generation"],
                "acks": [{"stream": stream, "offset": offset}],
                "done": true,
            })
            .to_string(),
        )
        .send()
        .await
        .unwrap()
}

/// Whether `delivery` carries a valid signature by a key of `jwks`.
fn signed_by(delivery: &Delivery, jwks: &Value) -> bool {
    let parts: Vec<&str> = delivery.signature.split(',').collect();
    let [t, kid, sig] = parts.as_slice() else {
        return false;
    };
    let (t, kid, sig) = (
        t.strip_prefix("t=").unwrap(),
        kid.strip_prefix("kid=").unwrap(),
        sig.strip_prefix("ed25519=").unwrap(),
    );
    let Some(key) = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid)
    else {
        return false;
    };
    let public = URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap();
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(&delivery.raw);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
        .verify(&message, &URL_SAFE_NO_PAD.decode(sig).unwrap())
        .is_ok()
}

/// A receiver that hangs, then fails twice, then takes the wake: the
/// server times out, backs off 1 s then 2 s then 4 s (give or take 20%),
/// shows the subscription `failed` meanwhile, re-sends the same wake each
/// time, and once it is taken the cursor is at the stream's tail.
#[tokio::test]
async fn a_failing_webhook_is_retried_with_backoff_and_no_cursor_is_lost() {
    let receiver = Receiver::start(Reply::Ok(json!({"done": true}))).await;
    receiver
        .script
        .lock()
        .unwrap()
        .extend([Reply::Hang, Reply::Fail(500), Reply::Fail(503)]);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &["--allow-dev-webhooks", "--webhook-timeout-ms", "500"],
    )
    .await;
    let client = reqwest::Client::new();
    put_subscription(
        &client,
        &server.base,
        "retry",
        json!({"type": "webhook", "pattern": "jobs/*", "webhook": {"url": receiver.url}, "lease_ttl_ms": 600000}),
    )
    .await;
    let tail = create_json(&client, &server.stream_url("jobs/a"), r#"{"n":1}"#).await;
    receiver.wait_for(2).await;
    // A retry is scheduled: the subscription shows it.
    let sub = get_subscription(&client, &server.base, "retry").await;
    assert_eq!(sub["status"], "failed", "{sub}");
    let seen = receiver.wait_for(4).await;
    assert_eq!(seen.len(), 4, "nothing after the wake was taken");
    let wake_ids: Vec<&Value> = seen.iter().map(|d| &d.body["wake_id"]).collect();
    assert!(
        wake_ids.iter().all(|w| *w == wake_ids[0]),
        "the same wake each time: {wake_ids:?}"
    );
    // Gaps after the 1st, 2nd and 3rd failures: 1 s, 2 s and 4 s each
    // less 20% at the most (the first also waited out the 0.5 s timeout).
    let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
    for (gap, least_ms) in gaps.iter().zip([500 + 800, 1600, 3200]) {
        assert!(*gap >= Duration::from_millis(least_ms), "gaps {gaps:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sub = get_subscription(&client, &server.base, "retry").await;
        if sub["status"] == "active" && acked(&sub, "jobs/a").as_deref() == Some(tail.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "never caught up: {sub}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// With `--public-url`, the URLs a subscription's answers and its webhook
/// bodies carry are under that URL, not the one the request came in on:
/// what a receiver behind a proxy or CDN can reach.
#[tokio::test]
async fn urls_in_answers_and_webhooks_are_under_the_public_url() {
    const PUBLIC: &str = "https://streams.example/base";
    let receiver = Receiver::start(Reply::Ok(json!({"done": true}))).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--allow-dev-webhooks",
            "--public-url",
            &format!("{PUBLIC}/"),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    put_subscription(
        &client,
        &server.base,
        "public",
        json!({"type": "webhook", "pattern": "jobs/*", "webhook": {"url": receiver.url}, "lease_ttl_ms": 600000}),
    )
    .await;
    let sub = get_subscription(&client, &server.base, "public").await;
    assert_eq!(
        sub["webhook"]["signing"]["jwks_url"],
        format!("{PUBLIC}/v1/stream/__ds/jwks.json"),
        "{sub}"
    );
    create_json(&client, &server.stream_url("jobs/a"), r#"{"n":1}"#).await;
    let wake = receiver.wait_for(1).await[0].body.clone();
    let callback = wake["callback_url"].as_str().unwrap();
    assert!(
        callback.starts_with(&format!("{PUBLIC}/v1/stream/__ds/")),
        "{wake}"
    );
    assert!(!wake.to_string().contains(&server.base), "{wake}");
    // Without the flag, the answer's URLs are the request's own.
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Server::start(plain_dir.path(), &["--allow-dev-webhooks"]).await;
    put_subscription(
        &client,
        &plain.base,
        "plain",
        json!({"type": "webhook", "pattern": "jobs/*", "webhook": {"url": receiver.url}, "lease_ttl_ms": 600000}),
    )
    .await;
    let sub = get_subscription(&client, &plain.base, "plain").await;
    assert_eq!(
        sub["webhook"]["signing"]["jwks_url"],
        format!("{}/v1/stream/__ds/jwks.json", plain.base),
        "{sub}"
    );
}

/// The server restarts between a wake and its callback: the wake comes
/// again under a new generation, signed with the same key; the callback
/// for the old one is fenced, the new one's is taken.
#[tokio::test]
async fn a_wake_outlives_a_restart_and_the_old_callback_is_fenced() {
    let receiver = Receiver::start(Reply::Ok(json!({}))).await;
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--allow-dev-webhooks"];
    let mut server = Server::start(dir.path(), &flags).await;
    let client = reqwest::Client::new();
    put_subscription(
        &client,
        &server.base,
        "restart",
        json!({"type": "webhook", "pattern": "jobs/*", "webhook": {"url": receiver.url}, "lease_ttl_ms": 600000}),
    )
    .await;
    let jwks_url = format!("{}/v1/stream/__ds/jwks.json", server.base);
    let jwks: Value = json_of(client.get(&jwks_url).send().await.unwrap()).await;
    let tail = create_json(&client, &server.stream_url("jobs/a"), r#"{"n":1}"#).await;
    let first = receiver.wait_for(1).await[0].clone();
    assert!(signed_by(&first, &jwks));

    server.kill();
    server.restart(dir.path(), &flags).await;
    let second = receiver.wait_for(2).await[1].clone();
    assert!(
        second.body["generation"].as_u64() > first.body["generation"].as_u64(),
        "{} then {}",
        first.body,
        second.body
    );
    let jwks_after: Value = json_of(client.get(&jwks_url).send().await.unwrap()).await;
    assert_eq!(jwks_after, jwks, "the signing key survived the restart");
    assert!(signed_by(&second, &jwks));

    let stale = callback(&client, &first.body, &tail).await;
    assert_eq!(stale.status(), 409);
    let stale = json_of(stale).await;
    assert_eq!(stale["error"]["code"], "FENCED");
    let fresh = callback(&client, &second.body, &tail).await;
    assert_eq!(fresh.status(), 200);
    assert_eq!(
        json_of(fresh).await,
        json!({"ok": true, "next_wake": false})
    );
    let sub = get_subscription(&client, &server.base, "restart").await;
    assert_eq!(acked(&sub, "jobs/a"), Some(tail));
    assert_eq!(
        receiver.deliveries().len(),
        2,
        "no wake after the work was done"
    );

    // An operator rotates the key: the next wake is signed with the new
    // one, and the old one stays published for receivers.
    let rotated = std::process::Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["ctl", "rotate-webhook-key", "--target", &server.base])
        .output()
        .unwrap();
    assert!(rotated.status.success(), "{rotated:?}");
    let jwks_rotated = json_of(client.get(&jwks_url).send().await.unwrap()).await;
    let kids: Vec<&Value> = jwks_rotated["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["kid"])
        .collect();
    assert_eq!(kids.len(), 2, "{jwks_rotated}");
    assert_eq!(
        kids[1], &jwks["keys"][0]["kid"],
        "the old key stays published"
    );
    let url = server.stream_url("jobs/a");
    write_json(&client, reqwest::Method::POST, &url, r#"{"n":2}"#, None).await;
    let third = receiver.wait_for(3).await[2].clone();
    assert!(
        third.signature.contains(kids[0].as_str().unwrap()),
        "{}",
        third.signature
    );
    assert!(signed_by(&third, &jwks_rotated));
    assert!(!signed_by(&third, &jwks), "not by the old key");
}

/// The control group's leader dies after sending a wake: the next leader
/// sends it again under a new generation, and the dead leader's callback
/// is fenced at any node.
#[tokio::test]
async fn the_next_control_leader_redelivers_and_fences_the_old_wake() {
    let receiver = Receiver::start(Reply::Ok(json!({}))).await;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3, &["--allow-dev-webhooks"]).await;
    let leaders = cluster.wait_for_leaders(Duration::from_secs(30)).await;
    let control = leaders[0];
    let entry = (control + 1) % 3;
    let client = reqwest::Client::new();
    let base = cluster.base(entry);
    put_subscription(
        &client,
        &base,
        "failover",
        json!({"type": "webhook", "pattern": "jobs/*", "webhook": {"url": receiver.url}, "lease_ttl_ms": 600000}),
    )
    .await;
    let tail = create_json(&client, &cluster.stream_url(entry, "jobs/a"), r#"{"n":1}"#).await;
    let first = receiver.wait_for(1).await[0].clone();
    assert_eq!(
        first.body["callback_url"],
        format!("{base}/v1/stream/__ds/subscriptions/failover/callback")
    );

    cluster.kill(control);
    let second = receiver.wait_for(2).await[1].clone();
    assert!(second.body["generation"].as_u64() > first.body["generation"].as_u64());
    assert_eq!(second.body["callback_url"], first.body["callback_url"]);

    let stale = callback(&client, &first.body, &tail).await;
    assert_eq!(stale.status(), 409);
    assert_eq!(json_of(stale).await["error"]["code"], "FENCED");
    let fresh = callback(&client, &second.body, &tail).await;
    assert_eq!(fresh.status(), 200);
    let other = (entry + 1) % 3;
    assert_ne!(other, control);
    let sub = get_subscription(&client, &cluster.base(other), "failover").await;
    assert_eq!(acked(&sub, "jobs/a"), Some(tail));
}

/// Four nodes, each data group on two of them: the control group's leader
/// holds no copy of about half the streams, and still delivers for them
/// (it asks their groups' leaders). A pattern and an explicit link over
/// streams in every group are each delivered and acknowledged to their
/// tails, and an append to a stream held elsewhere wakes the
/// subscription again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_follow_streams_in_groups_the_delivering_node_holds_no_copy_of() {
    const GROUPS: usize = 7;
    let receiver = Receiver::start(Reply::Ok(json!({"done": true}))).await;
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--allow-dev-webhooks",
        "--groups",
        "7",
        "--replication-factor",
        "2",
    ];
    let cluster = Cluster::start(dir.path(), 4, &flags).await;
    let control = cluster.wait_for_leaders(Duration::from_secs(30)).await[0];
    let entry = (control + 1) % 4;
    let client = reqwest::Client::new();
    put_subscription(
        &client,
        &cluster.base(entry),
        "placed",
        json!({"type": "webhook", "pattern": "jobs/*", "streams": ["orders"], "webhook": {"url": receiver.url}}),
    )
    .await;
    let names: Vec<String> = (0..12)
        .map(|i| format!("jobs/{i}"))
        .chain(["orders".to_string()])
        .collect();
    let status = cluster.status(control).await.unwrap();
    let elsewhere: Vec<&String> = names
        .iter()
        .filter(|n| {
            let g = runnel_engine::placement::stream_group(n, GROUPS);
            status["groups"][g]["state"] == "elsewhere"
        })
        .collect();
    eprintln!("held elsewhere than node {}: {elsewhere:?}", control + 1);
    assert!(
        !elsewhere.is_empty() && elsewhere.len() < names.len(),
        "{elsewhere:?}"
    );

    let mut tails = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let url = cluster.stream_url(i % 4, name);
        tails.push(create_json(&client, &url, r#"{"n":1}"#).await);
    }
    let all_acked = |expected: Vec<(String, String)>| {
        let (client, base) = (client.clone(), cluster.base(entry));
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let sub = get_subscription(&client, &base, "placed").await;
                let behind: Vec<_> = expected
                    .iter()
                    .filter(|(name, tail)| acked(&sub, name).as_ref() != Some(tail))
                    .collect();
                if behind.is_empty() {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "not acknowledged: {behind:?}: {sub}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    all_acked(names.iter().cloned().zip(tails.clone()).collect()).await;
    let delivered: usize = receiver
        .deliveries()
        .iter()
        .map(|d| d.body["streams"].as_array().map_or(0, Vec::len))
        .sum();
    assert!(delivered >= names.len(), "{:?}", receiver.deliveries());

    // One more message on a stream held elsewhere wakes it again.
    let before = receiver.deliveries().len();
    let name = elsewhere[0].clone();
    let url = cluster.stream_url(entry, &name);
    let tail = write_json(&client, reqwest::Method::POST, &url, r#"{"n":2}"#, None).await;
    all_acked(vec![(name.clone(), tail.clone())]).await;
    let woken = receiver.wait_for(before + 1).await;
    let last = &woken.last().unwrap().body;
    let entry_of = |d: &Value| {
        d["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["path"] == name.as_str())
            .cloned()
    };
    let streamed = entry_of(last).unwrap_or_else(|| panic!("{name} not in {last}"));
    assert_eq!(streamed["tail_offset"], tail.as_str(), "{last}");
}

/// 1,000 webhook subscriptions over 10,000 streams: subscription `s{i}`
/// watches `t{i mod 100}/*`, so each stream is watched by ten. Every
/// stream is created with a message and appended to once more; in the
/// end every subscription links its 100 streams with its cursor at each
/// tail (nothing missed), and far fewer webhooks were sent than there
/// were (message, subscription) pairs (wakes coalesce).
#[tokio::test]
async fn a_thousand_subscriptions_over_ten_thousand_streams_miss_nothing() {
    const SUBS: usize = 1_000;
    const PREFIXES: usize = 100;
    const PER_PREFIX: usize = 100;
    const CONCURRENCY: usize = 32;
    let receiver = Receiver::start(Reply::Ok(json!({"done": true}))).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--allow-dev-webhooks", "--sync", "never"]).await;
    let client = reqwest::Client::new();
    let started = Instant::now();
    futures::stream::iter(0..SUBS)
        .for_each_concurrent(CONCURRENCY, |i| {
            let (client, base, url) = (&client, &server.base, &receiver.url);
            async move {
                let body = json!({"type": "webhook", "pattern": format!("t{}/*", i % PREFIXES), "webhook": {"url": url}, "lease_ttl_ms": 600000});
                put_subscription(client, base, &format!("s{i}"), body).await;
            }
        })
        .await;
    let streams: Vec<String> = (0..PREFIXES)
        .flat_map(|k| (0..PER_PREFIX).map(move |j| format!("t{k}/s{j}")))
        .collect();
    futures::stream::iter(&streams)
        .for_each_concurrent(CONCURRENCY, |name| {
            let (client, server) = (&client, &server);
            async move {
                create_json(client, &server.stream_url(name), r#"{"n":1}"#).await;
            }
        })
        .await;
    let tails: std::collections::HashMap<String, String> = futures::stream::iter(&streams)
        .map(|name| {
            let (client, server) = (&client, &server);
            async move {
                let url = server.stream_url(name);
                let tail =
                    write_json(client, reqwest::Method::POST, &url, r#"{"n":2}"#, None).await;
                (name.clone(), tail)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let written = started.elapsed();

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut behind: Vec<usize> = (0..SUBS).collect();
    while !behind.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} subscriptions never caught up, e.g. {}",
            behind.len(),
            get_subscription(&client, &server.base, &format!("s{}", behind[0])).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut still = Vec::new();
        for i in behind {
            let sub = get_subscription(&client, &server.base, &format!("s{i}")).await;
            let links = sub["streams"].as_array().unwrap();
            let caught_up = links.len() == PER_PREFIX
                && links.iter().all(|l| {
                    let path = l["path"].as_str().unwrap();
                    path.starts_with(&format!("t{}/", i % PREFIXES))
                        && l["acked_offset"].as_str() == tails.get(path).map(String::as_str)
                });
            if !caught_up {
                still.push(i);
            }
        }
        behind = still;
    }
    let pairs = 2 * streams.len() * (SUBS / PREFIXES);
    let sent = receiver.deliveries().len();
    eprintln!(
        "{SUBS} subscriptions, {} streams: written in {written:?}, caught up {:?} later; {sent} webhooks for {pairs} (message, subscription) pairs",
        streams.len(),
        started.elapsed() - written
    );
    assert!(sent < pairs / 2, "{sent} webhooks for {pairs} pairs");
}

/// With access control, managing a subscription needs the `subscribe`
/// grant on what it watches (its pattern's literal prefix and its
/// streams); the signing keys stay public and workers answer with the
/// tokens the server gave them.
#[tokio::test]
async fn managing_subscriptions_needs_the_subscribe_grant() {
    use sha2::{Digest, Sha256};
    let hash = |token: &str| {
        Sha256::digest(token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("auth.toml");
    std::fs::write(
        &policy,
        format!(
            "[[tokens]]\nname = \"reader\"\nsha256 = \"{}\"\ngrants = [{{ prefix = \"\", allow = [\"read\", \"append\", \"create\"] }}]\n\
             [[tokens]]\nname = \"jobs\"\nsha256 = \"{}\"\ngrants = [{{ prefix = \"jobs/\", allow = [\"subscribe\", \"create\"] }}]\n",
            hash("reader-token"),
            hash("jobs-token")
        ),
    )
    .unwrap();
    let receiver = Receiver::start(Reply::Ok(json!({}))).await;
    let server = Server::start(
        &dir.path().join("db"),
        &[
            "--allow-dev-webhooks",
            "--auth-file",
            policy.to_str().unwrap(),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let put = |token: Option<&'static str>, id: &'static str, pattern: &'static str| {
        let mut request = client
            .put(sub_url(&server.base, id))
            .header("content-type", "application/json")
            .body(
                json!({"type": "webhook", "pattern": pattern, "webhook": {"url": receiver.url}})
                    .to_string(),
            );
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(put(None, "a", "jobs/*").await, 401);
    assert_eq!(put(Some("reader-token"), "a", "jobs/*").await, 403);
    assert_eq!(put(Some("jobs-token"), "a", "other/*").await, 403);
    assert_eq!(put(Some("jobs-token"), "a", "**").await, 403);
    assert_eq!(put(Some("jobs-token"), "a", "jobs/*").await, 201);
    // The server appends wake events for a pull-wake subscription: its
    // creator needs `append` on the wake stream.
    let pull = client
        .put(sub_url(&server.base, "p"))
        .bearer_auth("jobs-token")
        .header("content-type", "application/json")
        .body(
            json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "jobs/wake"})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(pull.status(), 403);
    let get = |token: &'static str| {
        let request = client.get(sub_url(&server.base, "a")).bearer_auth(token);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get("reader-token").await, 403);
    assert_eq!(get("jobs-token").await, 200);
    let jwks = client
        .get(format!("{}/v1/stream/__ds/jwks.json", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(jwks.status(), 200);

    // The wake's callback token is the worker's credential.
    let url = server.stream_url("jobs/x");
    let tail = write_json(
        &client,
        reqwest::Method::PUT,
        &url,
        r#"{"n":1}"#,
        Some("jobs-token"),
    )
    .await;
    let wake = receiver.wait_for(1).await[0].body.clone();
    assert_eq!(callback(&client, &wake, &tail).await.status(), 200);
}

/// An explicit link to a stream that does not exist yet waits for it;
/// when the stream is deleted and created again, the new one is delivered
/// from its first byte.
#[tokio::test]
async fn explicit_links_wait_for_their_stream_and_follow_re_creation() {
    let receiver = Receiver::start(Reply::Ok(json!({"done": true}))).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--allow-dev-webhooks"]).await;
    let client = reqwest::Client::new();
    put_subscription(
        &client,
        &server.base,
        "later",
        json!({"type": "webhook", "streams": ["later/a"], "webhook": {"url": receiver.url}}),
    )
    .await;
    // Long enough for the delivery loop to look at the missing stream.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let url = server.stream_url("later/a");
    let first_tail = create_json(&client, &url, r#"{"n":1}"#).await;
    let first = receiver.wait_for(1).await[0].body.clone();
    assert_eq!(first["streams"][0]["path"], "later/a");
    assert_eq!(first["streams"][0]["tail_offset"], first_tail.as_str());

    let r = client.delete(&url).send().await.unwrap();
    assert_eq!(r.status(), 204);
    // The new stream is shorter than the old cursor: still all new.
    let r = client
        .put(&url)
        .header("content-type", "application/json")
        .body("[]")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let tail = write_json(&client, reqwest::Method::POST, &url, r#"{"m":1}"#, None).await;
    let second = receiver.wait_for(2).await[1].body.clone();
    assert_eq!(second["streams"][0]["acked_offset"], "-1", "{second}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let sub = get_subscription(&client, &server.base, "later").await;
        if acked(&sub, "later/a").as_deref() == Some(tail.as_str()) {
            assert_eq!(sub["streams"][0]["link_type"], "explicit");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{sub}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
