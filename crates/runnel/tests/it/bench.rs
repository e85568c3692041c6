//! Every `runnel bench` subcommand, run briefly against a real server (and
//! the baseline server), with the JSON results checked for sane counts.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::Server;

fn bench(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("runnel bench runs");
    assert!(
        out.status.success(),
        "runnel bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn result(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_workload_runs_and_reports_sane_counts() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]).await;
    let target = server.base.clone();
    let out = |name: &str| dir.path().join(name);
    let common = [
        "--target",
        target.as_str(),
        "--quiet",
        "--duration-secs",
        "1",
    ];

    let ms = out("ms.json");
    bench(
        &[
            &[
                "multi-stream",
                "--streams",
                "4",
                "--json",
                ms.to_str().unwrap(),
            ],
            &common[..],
        ]
        .concat(),
    );
    let r = result(&ms);
    assert_eq!(r["workload"], "multi-stream");
    assert!(r["counts"]["ok"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["counts"]["error"], 0);
    assert!(r["latency"]["p99_ms"].as_f64().unwrap() > 0.0);

    let open_loop = out("open.json");
    bench(
        &[
            &[
                "multi-stream",
                "--streams",
                "4",
                "--rate",
                "200",
                "--json",
                open_loop.to_str().unwrap(),
            ],
            &common[..],
        ]
        .concat(),
    );
    let r = result(&open_loop);
    let ok = r["counts"]["ok"].as_u64().unwrap();
    assert!(
        (100..=260).contains(&ok),
        "open loop at 200/s for 1 s sent {ok}"
    );

    let fo = out("fo.json");
    bench(
        &[
            &[
                "fan-out",
                "--subscribers",
                "5",
                "--writer-rate",
                "50",
                "--json",
                fo.to_str().unwrap(),
            ],
            &common[..],
        ]
        .concat(),
    );
    let r = result(&fo);
    let written = r["params"]["events_written"].as_u64().unwrap();
    assert!(written >= 20, "{r}");
    assert_eq!(
        r["params"]["deliveries"].as_u64().unwrap(),
        written * 5,
        "every subscriber got every event"
    );

    let rp = out("rp.json");
    bench(
        &[
            &[
                "replay",
                "--clients",
                "3",
                "--pre-events",
                "10",
                "--event-bytes",
                "100",
                "--json",
                rp.to_str().unwrap(),
            ],
            &common[..],
        ]
        .concat(),
    );
    let r = result(&rp);
    assert_eq!(r["counts"]["ok"], 3);
    assert_eq!(r["params"]["bytes_per_client"], 1000);

    let boot = out("boot.json");
    bench(
        &[
            &[
                "replay",
                "--clients",
                "3",
                "--pre-events",
                "50",
                "--event-bytes",
                "200",
                "--state-keys",
                "2",
                "--bootstrap",
                "--settle-secs",
                "2",
                "--json",
                boot.to_str().unwrap(),
            ],
            &common[..],
        ]
        .concat(),
    );
    let r = result(&boot);
    assert_eq!(r["workload"], "replay-state");
    assert_eq!(r["counts"]["ok"], 3);
    let per_client = r["params"]["bytes_per_client"].as_u64().unwrap();
    assert!(
        per_client < 50 * 200 / 4,
        "bootstrap of 2 keys sent {per_client} bytes per client"
    );

    // The baseline server answers like a server and never fails.
    let port = common::reserve_ports(1);
    let mut baseline = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args([
            "bench",
            "baseline-server",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let base = out("base.json");
    let base_target = format!("http://127.0.0.1:{port}");
    bench(&[
        "multi-stream",
        "--streams",
        "4",
        "--target",
        &base_target,
        "--label",
        "baseline",
        "--quiet",
        "--duration-secs",
        "1",
        "--json",
        base.to_str().unwrap(),
    ]);
    baseline.kill().unwrap();
    baseline.wait().unwrap();
    assert!(result(&base)["counts"]["ok"].as_u64().unwrap() > 10);

    let report = out("report");
    let table = bench(&[
        "report",
        ms.to_str().unwrap(),
        base.to_str().unwrap(),
        fo.to_str().unwrap(),
        rp.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("| multi-stream | 4 | baseline |"), "{table}");
    for chart in [
        "multi-stream-throughput.svg",
        "multi-stream-p99.svg",
        "fan-out-p99.svg",
        "replay-p99.svg",
    ] {
        let svg = std::fs::read_to_string(report.join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("<polyline"),
            "{chart}"
        );
    }
}

#[test]
fn the_log_benchmark_runs() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("log.jsonl");
    let out = bench(&[
        "log",
        "--engines",
        "runnel,runnel-tasks",
        "--writers",
        "1,4",
        "--record-bytes",
        "256",
        "--duration-secs",
        "0.5",
        "--warmup-secs",
        "0.2",
        "--dir",
        dir.path().join("logs").to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| runnel | 4 | 256 |"), "{table}");
    assert!(table.contains("| runnel-tasks | 4 | 256 |"), "{table}");
    let lines = std::fs::read_to_string(&json).unwrap();
    assert_eq!(lines.lines().count(), 4);
    for line in lines.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(r["appends_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        // Both engines are runnel's log: they report their syncs.
        assert!(r["syncs_per_sec"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["mean_sync_ms"].as_f64().unwrap() > 0.0, "{r}");
        // Read from the syncs' histogram: at least one 10 µs bucket.
        assert!(r["sync_p99_ms"].as_f64().unwrap() >= 0.01, "{r}");
    }
}

/// The three command lines the published benchmark prints run as printed
/// (the target aside, and 5 s of measurement rather than 30: the shape of
/// each workload is what is checked, and CI runs beside other tests) and
/// finish with their workload's counts.
#[test]
fn the_published_command_lines_run_as_printed() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = runtime.block_on(Server::start(&dir.path().join("db"), &[]));
    for (i, line) in [
        "fan-out --subscribers 1000 --writer-rate 50 --duration-secs 30",
        "multi-stream --streams 500 --duration-secs 30 --payload-bytes 256",
        "bootstrap --clients 1000 --pre-events 200 --per-client-stream",
    ]
    .into_iter()
    .enumerate()
    {
        let json = dir.path().join(format!("{i}.json"));
        let line = line.replace("--duration-secs 30", "--duration-secs 5");
        let mut args: Vec<&str> = line.split(' ').collect();
        args.extend([
            "--target",
            &server.base,
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ]);
        bench(&args);
        let r = result(&json);
        assert!(r["counts"]["ok"].as_u64().unwrap() > 0, "{line}: {r}");
        assert_eq!(r["counts"]["error"], 0, "{line}: {r}");
    }
}

/// Appends answered with 2xx by the nodes of `cluster`, summed: a
/// forwarded append counts at the node the client reached and again at
/// the leader it was forwarded to.
async fn appends_answered(cluster: &common::cluster::Cluster) -> u64 {
    let mut total = 0;
    for i in cluster.running() {
        let text = reqwest::get(format!("{}/metrics", cluster.base(i)))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        total += text
            .lines()
            .filter(|l| l.starts_with("runnel_http_requests_total{route=\"append\",code=\"2xx\"}"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

/// `--to-leader` sends each stream's appends to its group's leader: no
/// append is forwarded (round robin forwards most of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn to_leader_sends_each_stream_to_its_groups_leader() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = common::cluster::Cluster::start(dir.path(), 3, &["--groups", "4"]).await;
    cluster
        .wait_for_leaders(std::time::Duration::from_secs(10))
        .await;
    let targets: Vec<String> = (0..3).map(|i| cluster.base(i)).collect();
    let targets = targets.join(",");
    let mut forwarded = Vec::new();
    for to_leader in [false, true] {
        let json = dir.path().join(format!("to-leader-{to_leader}.json"));
        let mut args = vec![
            "multi-stream",
            "--target",
            &targets,
            "--streams",
            "12",
            "--rate",
            "300",
            "--duration-secs",
            "1",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ];
        if to_leader {
            args.push("--to-leader");
        }
        // Creating the streams counts no append; the probe is a HEAD.
        let before = appends_answered(&cluster).await;
        bench(&args);
        let answered = appends_answered(&cluster).await - before;
        let r = result(&json);
        assert_eq!(r["counts"]["error"], 0, "{r}");
        let ok = r["counts"]["ok"].as_u64().unwrap();
        assert!(ok > 100, "{r}");
        forwarded.push(answered - ok);
    }
    assert!(forwarded[0] > 0, "round robin forwarded nothing");
    assert_eq!(forwarded[1], 0, "--to-leader forwarded appends");
}
