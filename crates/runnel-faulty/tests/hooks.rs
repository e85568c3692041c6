//! The hooks arm from the environment in `runnel-faulty` and nowhere else:
//! the shipped `runnel` binary, given the same environment, serves
//! normally. (This test also makes `cargo test --workspace` build
//! `runnel-faulty`, which the crash tests of crates/runnel run.)

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STALE_WARNING: &str = "serving stale reads on purpose";

/// Starts `binary serve` with stale reads asked for, and returns what it
/// printed to stderr up to the line that says it serves.
fn stderr_until_serving(binary: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("RUNNEL_UNSAFE_STALE_READS", "1")
        .env("RUNNEL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut printed = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.expect("stderr");
        printed.push_str(&line);
        printed.push('\n');
        if line.contains("serving") && !line.contains(STALE_WARNING) {
            break;
        }
        assert!(Instant::now() < deadline, "no 'serving' line: {printed}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    printed
}

#[test]
fn only_the_test_binary_arms_its_hooks() {
    let faulty = Path::new(env!("CARGO_BIN_EXE_runnel-faulty"));
    let printed = stderr_until_serving(faulty);
    assert!(printed.contains(STALE_WARNING), "runnel-faulty: {printed}");

    let shipped = faulty.with_file_name("runnel");
    assert!(shipped.exists(), "{} is built", shipped.display());
    let printed = stderr_until_serving(&shipped);
    assert!(printed.contains("serving"), "runnel: {printed}");
    assert!(!printed.contains(STALE_WARNING), "runnel: {printed}");
}
