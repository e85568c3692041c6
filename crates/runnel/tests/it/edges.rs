//! The server at its edges, end to end: expiry across a restart and in a
//! cluster, retention applied by the server itself, the connection and
//! write-queue limits, a damaged checkpoint at start, and the size limits
//! of snapshots and bootstraps.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::cluster::Cluster;
use common::{append_text, create_text, read_all, Server};

fn rfc3339_in(from_now: Duration) -> String {
    let at = SystemTime::now() + from_now;
    let secs = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    chrono_like(secs)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time (days from the civil calendar
/// algorithm, so the test needs no date crate).
fn chrono_like(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

async fn sleep_until(at: Instant) {
    tokio::time::sleep(at.saturating_duration_since(Instant::now())).await;
}

async fn status_of(client: &reqwest::Client, url: &str) -> u16 {
    client.get(url).send().await.unwrap().status().as_u16()
}

/// Polls `url` until it answers `want`, for at most `within`.
async fn wait_for_status(client: &reqwest::Client, url: &str, want: u16, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let got = status_of(client, url).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{url} answered {got}, not {want}, for {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn ttl_and_expiry_hold_across_a_restart() {
    // Windows of several seconds on each side of every check, so that a
    // loaded machine makes the test slower, never wrong: each check also
    // asserts it ran inside its window.
    const TTL: Duration = Duration::from_secs(10);
    const EXPIRES_IN: Duration = Duration::from_secs(14);
    const RESTART_AT: Duration = Duration::from_secs(8);
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut server = Server::start(dir.path(), &[]).await;
    let (ttl, expires, kept) = (
        server.stream_url("edge/ttl"),
        server.stream_url("edge/expires"),
        server.stream_url("edge/kept"),
    );
    let created = Instant::now();
    let r = client
        .put(&ttl)
        .header("stream-ttl", TTL.as_secs().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let at = rfc3339_in(EXPIRES_IN);
    let r = client
        .put(&expires)
        .header("stream-expires-at", &at)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "Stream-Expires-At {at}");
    create_text(&client, &kept, "stays").await;
    // HEAD renews nothing.
    let head = |url: &str| {
        let request = client.head(url).send();
        async move { request.await.unwrap().status().as_u16() }
    };
    /// Asserts that `now` (since `from`) is inside `window`.
    fn within(what: &str, from: Instant, window: std::ops::Range<Duration>) {
        let at = from.elapsed();
        assert!(
            window.contains(&at),
            "{what} was checked {at:?} in, outside its window {window:?}: the machine stalled for seconds"
        );
    }

    // SIGKILL and restart 8 s in. The absolute expiry is kept as it was;
    // the sliding TTL restarts at recovery (reads renew it without a log
    // entry, so the server cannot know the last one: it keeps the stream
    // rather than expire one a client kept alive), and still ends.
    sleep_until(created + RESTART_AT).await;
    server.kill();
    let server = Server::start(dir.path(), &[]).await;
    let restarted = Instant::now();
    let (ttl, expires, kept) = (
        server.stream_url("edge/ttl"),
        server.stream_url("edge/expires"),
        server.stream_url("edge/kept"),
    );
    assert_eq!(head(&expires).await, 200, "Stream-Expires-At ended early");
    within(
        "the absolute expiry before its time",
        created,
        Duration::ZERO..EXPIRES_IN,
    );
    // Past the TTL as first set: alive, since recovery restarted it.
    sleep_until(created + TTL + Duration::from_secs(1)).await;
    assert_eq!(head(&ttl).await, 200, "the TTL did not restart at recovery");
    within("the restarted TTL", restarted, Duration::ZERO..TTL);
    sleep_until(created + EXPIRES_IN + Duration::from_secs(1)).await;
    assert_eq!(
        head(&expires).await,
        404,
        "Stream-Expires-At outlived the restart"
    );
    sleep_until(restarted + TTL + Duration::from_secs(1)).await;
    assert_eq!(
        head(&ttl).await,
        404,
        "the TTL never ended after the restart"
    );
    assert_eq!(read_all(&client, &kept).await, b"stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_is_the_same_through_every_cluster_node() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let cluster = Cluster::start(dir.path(), 3, &[]).await;
    cluster.wait_for_leaders(Duration::from_secs(20)).await;
    let at = rfc3339_in(Duration::from_secs(3));
    let r = client
        .put(cluster.stream_url(0, "edge/cluster-expires"))
        .header("content-type", "text/plain")
        .header("stream-expires-at", &at)
        .body("soon gone")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let created = Instant::now();
    for i in 0..3 {
        let url = cluster.stream_url(i, "edge/cluster-expires");
        assert_eq!(
            read_all(&client, &url).await,
            b"soon gone",
            "through node {}",
            i + 1
        );
    }
    for i in 0..3 {
        let url = cluster.stream_url(i, "edge/cluster-expires");
        wait_for_status(&client, &url, 404, Duration::from_secs(15)).await;
    }
    assert!(created.elapsed() >= Duration::from_secs(2), "expired early");
    // A new stream of the same name starts empty on every node.
    create_text(
        &client,
        &cluster.stream_url(1, "edge/cluster-expires"),
        "new",
    )
    .await;
    for i in 0..3 {
        let url = cluster.stream_url(i, "edge/cluster-expires");
        assert_eq!(read_all(&client, &url).await, b"new");
    }
}

#[tokio::test]
async fn retention_by_bytes_and_by_age_is_applied_by_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let server = Server::start(dir.path(), &[]).await;

    let by_bytes = server.stream_url("edge/retain-bytes");
    let r = client
        .put(&by_bytes)
        .header("content-type", "text/plain")
        .header("stream-retention-bytes", "25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    for i in 0..5 {
        append_text(&client, &by_bytes, &format!("message-{i}|")).await; // 10 bytes
    }
    // 50 bytes against 25: whole appends go from the front until at most
    // 25 remain, without a client asking.
    let deadline = Instant::now() + Duration::from_secs(10);
    while read_all(&client, &by_bytes).await.len() > 25 {
        assert!(
            Instant::now() < deadline,
            "retention by bytes never trimmed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(read_all(&client, &by_bytes).await, b"message-3|message-4|");
    let r = client
        .get(format!(
            "{by_bytes}?offset=0000000000000000_0000000000000000"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410, "reading trimmed history");

    let by_age = server.stream_url("edge/retain-age");
    let r = client
        .put(&by_age)
        .header("content-type", "text/plain")
        .header("stream-retention-age", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    append_text(&client, &by_age, "old|").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    append_text(&client, &by_age, "new|").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = read_all(&client, &by_age).await;
        if now == b"new|" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "retention by age left {:?}",
            String::from_utf8_lossy(&now)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends a GET for /health on a raw socket and waits up to `within` for
/// the status line.
fn health_on(addr: &str, within: Duration) -> Option<String> {
    let mut socket = TcpStream::connect(addr).ok()?;
    socket.set_read_timeout(Some(within)).unwrap();
    socket
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .ok()?;
    let mut buf = [0u8; 64];
    let n = socket.read(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines().next().map(str::to_string)
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--max-connections", "2"]).await;
    let addr = server.addr();
    // Two idle connections take both slots (the start-up probe's
    // connection is gone by now).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = TcpStream::connect(&addr).unwrap();
    let second = TcpStream::connect(&addr).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Timed from here: the thread may start late on a busy machine.
    let started = Instant::now();
    let waiting = {
        let addr = addr.clone();
        std::thread::spawn(move || (health_on(&addr, Duration::from_secs(10)), started.elapsed()))
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiting.is_finished(),
        "a third connection was served while two held the limit"
    );
    drop(first);
    let (answer, waited) = waiting.join().unwrap();
    assert_eq!(answer.as_deref(), Some("HTTP/1.1 200 OK"));
    assert!(waited >= Duration::from_millis(1500));
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_queue_limits_get_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    // One proposal queued and 64 KiB in flight at most.
    let server = Server::start(
        dir.path(),
        &[
            "--max-pending-proposals",
            "1",
            "--max-inflight-bytes",
            "65536",
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let url = server.stream_url("edge/queue");
    create_text(&client, &url, "").await;
    let body = "x".repeat(16 * 1024);
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(&url)
                .header("content-type", "text/plain")
                .body(body)
                .send()
                .await
                .unwrap();
            let retry_after = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_string());
            (r.status().as_u16(), retry_after)
        }));
    }
    let mut accepted = 0;
    let mut refused = 0;
    for task in tasks {
        match task.await.unwrap() {
            (204, _) => accepted += 1,
            (503, Some(_)) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert!(
        refused > 0,
        "64 concurrent 16 KiB appends all fit a 64 KiB queue"
    );
    assert!(accepted > 0, "every append was refused");
    // Exactly the accepted appends are there.
    assert_eq!(read_all(&client, &url).await.len(), accepted * body.len());
}

/// Runs `runnel serve` over `dir` expecting it to refuse to start; its
/// output.
fn refused_start(dir: &std::path::Path) -> String {
    let port = common::reserve_ports(1);
    let output = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "the server started over a damaged checkpoint"
    );
    String::from_utf8_lossy(&output.stderr).to_string() + &String::from_utf8_lossy(&output.stdout)
}

#[tokio::test]
async fn a_damaged_checkpoint_stops_the_start_and_a_half_written_one_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut server = Server::start(dir.path(), &["--checkpoint-interval-secs", "1"]).await;
    let url = server.stream_url("edge/checkpointed");
    create_text(&client, &url, "before the checkpoint|").await;
    let checkpoint = dir.path().join("checkpoint");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !checkpoint.exists() {
        assert!(Instant::now() < deadline, "no checkpoint written");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    append_text(&client, &url, "after it").await;
    server.kill();
    let good = std::fs::read(&checkpoint).unwrap();

    // A half-written next checkpoint (the crash came before its rename)
    // is not the checkpoint: the start ignores it and loses nothing.
    std::fs::write(dir.path().join("checkpoint.tmp"), &good[..good.len() / 2]).unwrap();
    let mut server = Server::start(dir.path(), &[]).await;
    let url = server.stream_url("edge/checkpointed");
    assert_eq!(
        read_all(&client, &url).await,
        b"before the checkpoint|after it"
    );
    server.kill();

    // A flipped byte in the checkpoint itself: the start refuses, saying
    // why, rather than serving from a state it cannot trust.
    let mut damaged = good.clone();
    damaged[good.len() / 2] ^= 0x40;
    std::fs::write(&checkpoint, &damaged).unwrap();
    let said = refused_start(dir.path());
    assert!(said.contains("checksum"), "the refusal says why: {said}");
    // Cut short, the same.
    std::fs::write(&checkpoint, &good[..good.len() - 7]).unwrap();
    let said = refused_start(dir.path());
    assert!(said.contains("checkpoint"), "the refusal says why: {said}");

    // With the good checkpoint back, everything is there.
    std::fs::write(&checkpoint, &good).unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let url = server.stream_url("edge/checkpointed");
    assert_eq!(
        read_all(&client, &url).await,
        b"before the checkpoint|after it"
    );
}

#[tokio::test]
async fn snapshot_and_bootstrap_sizes_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let server = Server::start(
        dir.path(),
        &["--max-snapshot-bytes", "100", "--max-bootstrap-bytes", "30"],
    )
    .await;
    let url = server.stream_url("edge/sized");
    create_text(&client, &url, "").await;
    let mut next = String::new();
    for i in 0..6 {
        let r = client
            .post(&url)
            .header("content-type", "text/plain")
            .body(format!("part-{i:04}|")) // 10 bytes
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        if i == 0 {
            next = r.headers()["stream-next-offset"]
                .to_str()
                .unwrap()
                .to_string();
        }
    }

    let snapshot = format!("{url}/$snapshot/{next}");
    let put = |body: String| {
        client
            .put(&snapshot)
            .header("content-type", "text/plain")
            .body(body)
            .send()
    };
    let r = put("s".repeat(101)).await.unwrap();
    assert_eq!(r.status(), 413, "a snapshot over --max-snapshot-bytes");
    let r = put("s".repeat(100)).await.unwrap();
    assert_eq!(r.status(), 201, "a snapshot at the limit");

    // 50 message bytes after the snapshot, 30 per bootstrap: the first
    // bootstrap stops short of the tail and says where to go on.
    let r = client
        .get(format!("{url}/$bootstrap"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("stream-up-to-date").is_none(),
        "a capped bootstrap claims the tail"
    );
    let go_on = r.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_string();
    let body = r.bytes().await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("part-0001|part-0002|part-0003|"), "{text}");
    assert!(
        !text.contains("part-0004"),
        "more than 30 message bytes: {text}"
    );
    let rest = client
        .get(format!("{url}?offset={go_on}"))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.bytes().await.unwrap(), "part-0004|part-0005|");
}

/// User plus system CPU time of a process, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) in parentheses.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_sec)
}

#[tokio::test]
async fn out_of_file_descriptors_the_server_backs_off_and_recovers() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let port = common::reserve_ports(1);
    let addr = format!("127.0.0.1:{port}");
    let data = dir.path().join("data");
    let mut command = Command::new(env!("CARGO_BIN_EXE_runnel"));
    command
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(&data)
        .env("RUNNEL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("server.log")).unwrap());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between
    // fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while health_on(&addr, Duration::from_secs(1)).as_deref() != Some("HTTP/1.1 200 OK") {
        assert!(
            Instant::now() < deadline,
            "the server did not start with 64 descriptors"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // More connections than the server has descriptors: accept fails
    // with EMFILE for the rest.
    let mut held: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu_before = cpu_time(child.id());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let busy = cpu_time(child.id()) - cpu_before;
    assert!(
        busy < Duration::from_millis(1000),
        "the accept loop spun on EMFILE: {busy:?} of CPU in 2 s"
    );
    // A connection accepted before the descriptors ran out is served.
    let first = &mut held[0];
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    first
        .write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    let n = first.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n])
    );

    // Once they close, new connections are served again.
    held.clear();
    let deadline = Instant::now() + Duration::from_secs(10);
    while health_on(&addr, Duration::from_secs(1)).as_deref() != Some("HTTP/1.1 200 OK") {
        assert!(
            Instant::now() < deadline,
            "the server did not recover from EMFILE"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(child.try_wait().unwrap().is_none(), "the server exited");
    let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap();
    assert!(
        log.contains("accept failed; backing off"),
        "EMFILE was never hit: {log}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `/ready` of node `i`: its status and body.
async fn ready(client: &reqwest::Client, cluster: &Cluster, i: usize) -> (u16, String) {
    match client
        .get(format!("{}/ready", cluster.base(i)))
        .send()
        .await
    {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(e) => (0, e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_follows_whether_a_node_can_serve() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    // A single node is ready once it serves.
    let single_dir = tempfile::tempdir().unwrap();
    let single = Server::start(single_dir.path(), &[]).await;
    let r = client
        .get(format!("{}/ready", single.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(single);

    let mut cluster = Cluster::start(dir.path(), 3, &[]).await;
    for i in 0..3 {
        assert_eq!(
            ready(&client, &cluster, i).await.0,
            200,
            "node {} at start",
            i + 1
        );
    }
    // Some writes, so that leaders commit proposals.
    for n in 0..12 {
        common::create_text(&client, &cluster.stream_url(0, &format!("m{n}")), "x").await;
    }
    // A ready node's metrics name a leader for every group, and exactly
    // one node leads each; the proposals committed are counted where they
    // were submitted (12 creations, forwarded to their leaders); every
    // node has made RPCs to both peers; the disk is measured.
    let mut leading = 0;
    let mut groups = 0;
    let mut committed = 0;
    for i in 0..3 {
        let text = common::get_text(&client, &format!("{}/metrics", cluster.base(i))).await;
        let samples = |name: &str| -> Vec<u64> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{group=")))
                .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
                .collect()
        };
        let leaders = samples("runnel_group_leader");
        assert!(
            !leaders.is_empty() && leaders.iter().all(|&l| l > 0),
            "node {}: {leaders:?}",
            i + 1
        );
        assert!(samples("runnel_group_votes").iter().all(|&v| v == 1));
        leading += samples("runnel_group_is_leader").iter().sum::<u64>();
        groups = leaders.len() as u64;
        committed += samples("runnel_group_proposals_committed_total")
            .iter()
            .sum::<u64>();
        assert_eq!(
            samples("runnel_group_proposals_failed_total").len(),
            leaders.len()
        );
        let value = |key: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("node {}: no {key}", i + 1))
        };
        for peer in (1..=3).filter(|p| *p != i + 1) {
            let rpcs = value(&format!(
                "runnel_peer_rpc_duration_seconds_count{{peer=\"{peer}\"}}"
            ));
            assert!(rpcs > 0.0, "node {} has called node {peer}", i + 1);
        }
        assert!(value("runnel_disk_free_bytes") > 0.0);
        assert!(value("runnel_disk_total_bytes") >= value("runnel_disk_free_bytes"));
    }
    assert_eq!(leading, groups, "one leader per group");
    assert!(committed >= 12, "{committed} proposals committed");
    // Two nodes gone: the last one can serve nothing, and says why.
    cluster.kill(1);
    cluster.kill(2);
    let deadline = Instant::now() + Duration::from_secs(15);
    let reason = loop {
        let (status, body) = ready(&client, &cluster, 0).await;
        if status == 503 {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "node 1 stayed ready without a quorum"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        reason.contains("no leader") || reason.contains("no quorum"),
        "{reason}"
    );
    // One back: a quorum again, and ready again.
    cluster.restart(1).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready(&client, &cluster, 0).await.0 != 200 || ready(&client, &cluster, 1).await.0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready again with a quorum back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // /ready, like /health, needs no credentials and is never forwarded.
    let r = client
        .head(format!("{}/ready", cluster.base(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
