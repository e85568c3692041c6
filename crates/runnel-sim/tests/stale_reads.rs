//! The simulation catches a broken cluster: with the engine's stale-read
//! hook armed (`runnel-sim --unsafe-stale-reads`: leaders read without
//! confirming their leadership, followers without a read index), the
//! checker reports stale reads and the program exits with 1. The hook is
//! armed for a whole process, so this runs the program, not the library.

use std::process::Command;

#[test]
fn the_simulation_catches_stale_reads_when_reads_skip_the_barrier() {
    let run = Command::new(env!("CARGO_BIN_EXE_runnel-sim"))
        .args([
            "--unsafe-stale-reads",
            "--scenario",
            "faults",
            "--seed",
            "1",
        ])
        .output()
        .expect("runnel-sim runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("stale read"), "{stdout}");
}
