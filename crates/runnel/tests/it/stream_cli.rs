//! `runnel stream` against live servers: every subcommand, human and
//! JSON output, the exit codes scripts test, a `tail` that outlives a
//! server restart, and `ls` through a cluster node.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::cluster::Cluster;
use common::Server;

/// Runs `runnel stream --target BASE ARGS...` with `stdin`.
fn cli(base: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args(["stream", "--target", base])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(output: &Output) -> String {
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The exit code and the one line on stderr of a failed run.
fn failed(output: &Output) -> (i32, String) {
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    (output.status.code().unwrap(), stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn every_subcommand_with_its_output_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]).await;
    let base = server.base.clone();
    tokio::task::spawn_blocking(move || {
        let base = base.as_str();
        assert_eq!(
            ok(&cli(
                base,
                &["create", "chat/1", "--content-type", "application/json"],
                ""
            )),
            "created chat/1\n"
        );
        assert_eq!(
            ok(&cli(
                base,
                &["create", "chat/1", "--content-type", "application/json"],
                ""
            )),
            "chat/1 exists with the same configuration\n"
        );
        let (code, _) = failed(&cli(
            base,
            &["create", "chat/1", "--content-type", "text/plain"],
            "",
        ));
        assert_eq!(code, 4, "a conflict");

        ok(&cli(
            base,
            &["append", "chat/1", r#"{"a":1}"#, r#"{"b":[2]}"#],
            "",
        ));
        ok(&cli(
            base,
            &["append", "chat/1"],
            "{\"c\":3}\n\n{\"d\":4}\n",
        ));
        let (code, line) = failed(&cli(base, &["append", "chat/1", "not json"], ""));
        assert_eq!(code, 6);
        assert!(line.contains("message 1: not JSON"), "{line}");
        assert_eq!(
            ok(&cli(base, &["cat", "chat/1"], "")),
            "{\"a\":1}\n{\"b\":[2]}\n{\"c\":3}\n{\"d\":4}\n"
        );

        ok(&cli(
            base,
            &["create", "notes", "--content-type", "text/plain"],
            "",
        ));
        ok(&cli(base, &["append", "notes", "hello ", "world"], ""));
        ok(&cli(base, &["append", "notes"], "\nfrom stdin"));
        assert_eq!(
            ok(&cli(base, &["cat", "notes"], "")),
            "hello world\nfrom stdin"
        );

        let info: serde_json::Value =
            serde_json::from_str(&ok(&cli(base, &["--json", "info", "notes"], ""))).unwrap();
        assert_eq!(info["content_type"], "text/plain");
        assert_eq!(info["closed"], false);
        assert!(info["next_offset"]
            .as_str()
            .unwrap()
            .ends_with("0000000000000022"));
        let human = ok(&cli(base, &["info", "chat/1"], ""));
        assert!(human.contains("content type  application/json"), "{human}");

        let listed = ok(&cli(base, &["ls"], ""));
        let names: Vec<&str> = listed
            .lines()
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        assert_eq!(names, ["chat/1", "notes"]);
        let json_lines = ok(&cli(base, &["ls", "chat/", "--json"], ""));
        let first: serde_json::Value =
            serde_json::from_str(json_lines.lines().next().unwrap()).unwrap();
        assert_eq!(first["name"], "chat/1");
        assert_eq!(json_lines.lines().count(), 1);

        assert_eq!(ok(&cli(base, &["rm", "chat/1"], "")), "deleted chat/1\n");
        let (code, line) = failed(&cli(base, &["cat", "chat/1"], ""));
        assert_eq!(code, 3, "not found");
        assert!(line.starts_with("runnel: chat/1: 404"), "{line}");
        let (code, _) = failed(&cli("http://127.0.0.1:1", &["ls"], ""));
        assert_eq!(code, 1, "no server");
    })
    .await
    .unwrap();
}

/// A live tail across a server restart: it reconnects from its last
/// offset, misses nothing, repeats nothing, and ends when the stream is
/// closed.
#[tokio::test(flavor = "multi_thread")]
async fn tail_resumes_after_a_restart_and_ends_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]).await;
    let client = reqwest::Client::new();
    let url = server.stream_url("live");
    let r = client
        .put(&url)
        .header("content-type", "application/json")
        .body(r#"{"n":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mut tail = Command::new(env!("CARGO_BIN_EXE_runnel"))
        .args([
            "stream",
            "--target",
            &server.base,
            "tail",
            "live",
            "--offset",
            "-1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = mpsc::channel();
    let stdout = tail.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = lines_tx.send(line.unwrap());
        }
    });
    let next =
        |lines: &mpsc::Receiver<String>| lines.recv_timeout(Duration::from_secs(15)).unwrap();
    assert_eq!(next(&lines), r#"{"n":1}"#);

    let append = |body: &'static str, close: bool| {
        let mut request = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        if close {
            request = request.header("stream-closed", "true");
        }
        async move { assert!(request.send().await.unwrap().status().is_success()) }
    };
    append(r#"{"n":2}"#, false).await;
    assert_eq!(next(&lines), r#"{"n":2}"#);
    server.kill();
    server.restart(dir.path(), &[] as &[&str]).await;
    append(r#"{"n":3}"#, true).await;
    assert_eq!(next(&lines), r#"{"n":3}"#);
    let status = tokio::task::spawn_blocking(move || tail.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "tail ends when the stream is closed");
    assert!(
        lines.recv_timeout(Duration::from_millis(100)).is_err(),
        "nothing repeated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ls_through_a_cluster_node() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path(), 3, &[]).await;
    let client = reqwest::Client::new();
    for name in ["b", "a", "c/1"] {
        common::create_text(&client, &cluster.stream_url(0, name), "x").await;
    }
    let base = cluster.base(2);
    let listed = tokio::task::spawn_blocking(move || ok(&cli(&base, &["ls"], "")))
        .await
        .unwrap();
    let names: Vec<&str> = listed
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c/1"]);
}
