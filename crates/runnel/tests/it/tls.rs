//! HTTPS: HTTP/1.1 and HTTP/2 (ALPN) with two clients (reqwest and
//! curl), SSE included; certificates reloaded on SIGHUP under load
//! without dropping a connection, a bad new certificate not taken; a
//! cluster on mutual TLS refusing a peer whose certificate comes from
//! another CA. (The conformance suite runs over HTTPS too, single node
//! and through a cluster on mutual TLS: `scripts/conformance.sh --tls`.)

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{https_client, Server};
use runnel_tls::rustls::pki_types::pem::PemObject;
use runnel_tls::rustls::pki_types::{CertificateDer, ServerName};

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_string()
}

/// Reads an SSE body until it holds `wanted`.
async fn sse_until(response: &mut reqwest::Response, wanted: &str) -> String {
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains(wanted) {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, response.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {wanted:?} in SSE: {seen}"))
            .unwrap()
            .expect("the SSE stream stays open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_http1_and_http2() {
    let ca = common::test_ca(3);
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--tls-cert".to_string(),
        path(ca.path(), "server.pem"),
        "--tls-key".to_string(),
        path(ca.path(), "server.key"),
    ];
    let server = Server::start_tls(dir.path(), &flags, &ca.path().join("ca.pem")).await;
    for (http1_only, version) in [
        (true, reqwest::Version::HTTP_11),
        (false, reqwest::Version::HTTP_2),
    ] {
        let http = https_client(&ca.path().join("ca.pem"), http1_only);
        let url = server.stream_url(&format!("s-{version:?}"));
        let r = http
            .put(&url)
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        assert_eq!((r.status().as_u16(), r.version()), (201, version));
        let mut live = http
            .get(format!("{url}?offset=-1&live=sse"))
            .send()
            .await
            .unwrap();
        assert_eq!((live.status().as_u16(), live.version()), (200, version));
        for word in ["one", "two"] {
            let r = http
                .post(&url)
                .header("content-type", "text/plain")
                .body(word)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 204);
        }
        sse_until(&mut live, "data:two").await;
        let r = http.get(format!("{url}?offset=-1")).send().await.unwrap();
        assert_eq!(r.text().await.unwrap(), "onetwo");
    }
    // curl, HTTP/1.1 and HTTP/2.
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let out = Command::new("curl")
            .args(["-s", "--cacert", &path(ca.path(), "ca.pem"), flag])
            .args(["-w", "\n%{http_version}"])
            .arg(format!("{}?offset=-1", server.stream_url("s-HTTP/1.1")))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("onetwo\n{version}")
        );
    }
    // runnel ctl speaks HTTPS too, and checks the certificate.
    let ctl = |pem: &str| {
        Command::new(env!("CARGO_BIN_EXE_runnel"))
            .args(["ctl", "status", "--target", &server.base, "--ca"])
            .arg(path(ca.path(), pem))
            .output()
            .unwrap()
    };
    let trusted = ctl("ca.pem");
    assert!(trusted.status.success(), "{trusted:?}");
    assert!(String::from_utf8_lossy(&trusted.stdout).contains("single node"));
    let refused = ctl("rogue-ca.pem");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("UnknownIssuer"));
    // Plain HTTP to the HTTPS port gets no HTTP answer.
    let plain = reqwest::Client::new()
        .get(format!(
            "http://127.0.0.1:{}/health",
            server.base.rsplit(':').next().unwrap()
        ))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err());
}

/// The leaf certificate the server at `addr` presents now.
async fn presented_certificate(addr: &str, ca: &Path) -> Vec<u8> {
    let connector = common::tls_connector(ca, &[]);
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn leaf_of(pem: &Path) -> Vec<u8> {
    CertificateDer::pem_file_iter(pem)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_reload_on_sighup_under_load() {
    let ca = common::test_ca(3);
    let ca_pem = ca.path().join("ca.pem");
    let (live_cert, live_key) = (ca.path().join("live.pem"), ca.path().join("live.key"));
    let install = |name: &str| {
        std::fs::copy(ca.path().join(format!("{name}.pem")), &live_cert).unwrap();
        std::fs::copy(ca.path().join(format!("{name}.key")), &live_key).unwrap();
    };
    install("server");
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--tls-cert".to_string(),
        live_cert.to_str().unwrap().to_string(),
        "--tls-key".to_string(),
        live_key.to_str().unwrap().to_string(),
    ];
    let server = Server::start_tls(dir.path(), &flags, &ca_pem).await;
    let addr = server.base.trim_start_matches("https://").to_string();
    let url = server.stream_url("reloaded");
    let http = https_client(&ca_pem, false);
    let r = http
        .put(&url)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        presented_certificate(&addr, &ca_pem).await,
        leaf_of(&ca.path().join("server.pem"))
    );

    // Load: writers on kept-alive connections (HTTP/1.1 and HTTP/2), and
    // an SSE reader opened before the reload.
    let mut live = http
        .get(format!("{url}?offset=-1&live=sse"))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), 200);
    let stop = Arc::new(AtomicBool::new(false));
    let (appended, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut writers = Vec::new();
    for n in 0..4 {
        let (http, url) = (https_client(&ca_pem, n % 2 == 0), url.clone());
        let (stop, appended, failed) = (stop.clone(), appended.clone(), failed.clone());
        writers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = http
                    .post(&url)
                    .header("content-type", "text/plain")
                    .body("x")
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 204 => appended.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    install("other-server");
    server.signal(libc::SIGHUP);
    let other = leaf_of(&ca.path().join("other-server.pem"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while presented_certificate(&addr, &ca_pem).await != other {
        assert!(
            Instant::now() < deadline,
            "the new certificate is presented"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A certificate that is not one, and a key of another certificate:
    // neither is taken.
    std::fs::write(&live_cert, "not a certificate").unwrap();
    server.signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::copy(ca.path().join("server.pem"), &live_cert).unwrap();
    server.signal(libc::SIGHUP);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(presented_certificate(&addr, &ca_pem).await, other);

    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let (appended, failed) = (
        appended.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    assert!(
        appended > 0 && failed == 0,
        "{appended} appended, {failed} failed"
    );
    // The reader from before the reload is still served.
    let r = http
        .post(&url)
        .header("content-type", "text/plain")
        .body("after-reload")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    sse_until(&mut live, "after-reload").await;
}

/// A node process whose log goes to a file.
struct Node(Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn status(http: &reqwest::Client, port: u16) -> Option<serde_json::Value> {
    let r = http
        .get(format!("https://127.0.0.1:{port}/_runnel/status"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    serde_json::from_slice(&r.bytes().await.ok()?).ok()
}

fn applied(status: &serde_json::Value) -> Vec<u64> {
    status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["last_applied_index"].as_u64().unwrap_or(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_on_mutual_tls_refuses_a_rogue_peer_and_admits_a_certified_newcomer() {
    let ca = common::test_ca(4);
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| common::reserve_ports(2)).collect();
    let peers = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let logs: Vec<PathBuf> = (1..=3)
        .map(|i| dir.path().join(format!("n{i}.log")))
        .collect();
    // Node 3's certificate names it, but comes from another CA.
    let certs = ["node-1", "node-2", "rogue-node-3"];
    let _nodes: Vec<Node> = (0..3)
        .map(|i| {
            let child = Command::new(env!("CARGO_BIN_EXE_runnel"))
                .args([
                    "serve",
                    "--node-id",
                    &(i + 1).to_string(),
                    "--peers",
                    &peers,
                ])
                // Every node holds every group, the newcomer included.
                .args(["--replication-factor", "4"])
                .args(["--groups", "3", "--data-dir"])
                .arg(dir.path().join(format!("n{}", i + 1)))
                .args(["--cluster-ca", &path(ca.path(), "ca.pem")])
                .args([
                    "--cluster-cert",
                    &path(ca.path(), &format!("{}.pem", certs[i])),
                ])
                .args([
                    "--cluster-key",
                    &path(ca.path(), &format!("{}.key", certs[i])),
                ])
                .env("RUNNEL_LOG", "warn,openraft=off")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&logs[i]).unwrap())
                .spawn()
                .unwrap();
            Node(child)
        })
        .collect();
    let trusted = https_client(&ca.path().join("ca.pem"), false);
    // Nodes 1 and 2 are a quorum: every group gets a leader among them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let led = match status(&trusted, ports[0]).await {
            Some(s) => s["groups"]
                .as_array()
                .unwrap()
                .iter()
                .all(|g| matches!(g["leader"].as_u64(), Some(1 | 2))),
            None => false,
        };
        if led {
            break;
        }
        assert!(Instant::now() < deadline, "nodes 1 and 2 elect leaders");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Through node 1 (forwarded when node 2 leads); the first writes may
    // meet a group whose leader still waits for node 2's vote.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..30 {
        let url = format!("https://127.0.0.1:{}/v1/stream/s{i}", ports[0]);
        loop {
            let r = trusted
                .put(&url)
                .header("content-type", "text/plain")
                .body("x")
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            if status == 201 {
                break;
            }
            let why = r.text().await.unwrap();
            assert!(
                status == 503 && Instant::now() < deadline,
                "{status}: {why}\n{}",
                std::fs::read_to_string(&logs[0]).unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Node 2 replicates; node 3 gets nothing.
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader_applied = applied(&status(&trusted, ports[0]).await.unwrap());
    while applied(&status(&trusted, ports[1]).await.unwrap()) < leader_applied {
        assert!(Instant::now() < deadline, "node 2 catches up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Node 3's HTTP port presents its rogue certificate: trust it to look.
    let rogue_view = https_client(&ca.path().join("rogue-ca.pem"), false);
    let third = status(&rogue_view, ports[2]).await.expect("node 3 answers");
    assert!(
        applied(&third).iter().all(|a| *a == 0),
        "node 3 applied nothing: {third}"
    );
    assert!(
        status(&trusted, ports[2]).await.is_none(),
        "clients of the CA refuse node 3"
    );
    let refused =
        std::fs::read_to_string(&logs[0]).unwrap() + &std::fs::read_to_string(&logs[1]).unwrap();
    assert!(
        refused.contains("raft connection refused: TLS"),
        "nodes 1 and 2 log the refusal"
    );

    // Node 4, certified by the cluster CA but named in no node's start
    // flags, joins through node 1 and becomes a voter of every group.
    let port = common::reserve_ports(2);
    let log = dir.path().join("n4.log");
    let _joined = Node(
        Command::new(env!("CARGO_BIN_EXE_runnel"))
            .args(["serve", "--node-id", "4", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["--join", &format!("https://127.0.0.1:{}", ports[0])])
            .args(["--join-ca", &path(ca.path(), "ca.pem")])
            .args(["--groups", "3", "--data-dir"])
            .arg(dir.path().join("n4"))
            .args(["--cluster-ca", &path(ca.path(), "ca.pem")])
            .args(["--cluster-cert", &path(ca.path(), "node-4.pem")])
            .args(["--cluster-key", &path(ca.path(), "node-4.key")])
            .env("RUNNEL_LOG", "warn,openraft=off")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let voters = |status: &serde_json::Value| -> Vec<serde_json::Value> {
        status["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["voters"].clone())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = status(&trusted, port).await.map(|s| voters(&s));
        if seen.as_ref().is_some_and(|v| {
            v.iter()
                .all(|voters| *voters == serde_json::json!([1, 2, 3, 4]))
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 4 did not become a voter: {seen:?}\n{}",
            std::fs::read_to_string(&log).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And it holds the streams: it applies what node 1 applied.
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader_applied = applied(&status(&trusted, ports[0]).await.unwrap());
    loop {
        let fourth = applied(&status(&trusted, port).await.unwrap());
        if fourth.iter().zip(&leader_applied).all(|(a, b)| a >= b) {
            break;
        }
        assert!(Instant::now() < deadline, "node 4 catches up: {fourth:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
