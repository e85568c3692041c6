//! Golden fixtures: what release 0.1.0 wrote to the log and into
//! checkpoints (`fixtures/0.1.0/`), which every later build must read.
//!
//! - `entries.bin`: one entry of every command ([`sample_entries`]), each
//!   as a little-endian `u32` length and the entry's encoding.
//! - `checkpoint.bin`: the checkpoint of the state those entries, and a
//!   few streams written on purpose, leave ([`sample_state`]).
//!
//! The tests decode both and compare them with what the code builds now,
//! and check that this build still writes the same bytes. A format change
//! made on purpose fails the second check: keep the old fixtures (and the
//! code that reads them), add the new release's beside them, and move the
//! "writes the same bytes" check to the new ones. `RUNNEL_WRITE_FIXTURES=1
//! cargo test -p runnel-core golden` writes the fixtures of the current
//! build (for a new release only).

use std::path::PathBuf;

use crate::command::tests::sample_entries;
use crate::command::{AppendToStream, Body, Command, CreateStream, Entry};
use crate::state::StreamsState;

/// The release whose fixtures this build reads.
const RELEASE: &str = "0.1.0";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(RELEASE)
        .join(name)
}

fn writing() -> bool {
    std::env::var_os("RUNNEL_WRITE_FIXTURES").is_some()
}

/// Reads a fixture, or writes `now` as it when writing fixtures.
fn golden(name: &str, now: &[u8]) -> Vec<u8> {
    let path = fixture(name);
    if writing() {
        std::fs::create_dir_all(path.parent().expect("a directory")).expect("fixture directory");
        std::fs::write(&path, now).expect("fixture written");
    }
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn encode_entries(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let bytes = entry.encode();
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

fn decode_entries(mut bytes: &[u8]) -> Vec<Entry> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_le_bytes(bytes[..4].try_into().expect("a length")) as usize;
        out.push(Entry::decode(&bytes[4..4 + len]).expect("a 0.1.0 entry decodes"));
        bytes = &bytes[4 + len..];
    }
    out
}

fn text_stream(name: &str, data: &[u8]) -> Command {
    Command::Create(CreateStream {
        name: name.into(),
        content_type: Some("text/plain".into()),
        ttl_secs: None,
        expires_at_ms: None,
        closed: false,
        fork: None,
        body: Body {
            data: data.to_vec(),
            message_ends: Vec::new(),
        },
        compaction: false,
        retention: Default::default(),
        inherit: None,
    })
}

fn append(name: &str, data: &[u8], close: bool) -> Command {
    Command::Append(AppendToStream {
        name: name.into(),
        content_type: None,
        body: Body {
            data: data.to_vec(),
            message_ends: Vec::new(),
        },
        producer: None,
        stream_seq: None,
        close,
    })
}

/// A state with every command of [`sample_entries`] applied (those the
/// state refuses change nothing), then streams written (one closed).
fn sample_state() -> StreamsState {
    let mut state = StreamsState::new();
    // The sample's commands first: its expiry would end the streams.
    let mut entries = sample_entries();
    entries.extend(
        vec![
            text_stream("events/a", b"hello"),
            append("events/a", b" world", false),
            text_stream("done", b"last words"),
            append("done", b"", true),
        ]
        .into_iter()
        .map(|command| Entry {
            now_ms: 1_700_000_000_000,
            command,
        }),
    );
    let mut loc = 0;
    for entry in &entries {
        let len = entry.command.body().map_or(0, |b| b.data.len() as u64);
        let _ = state.apply(entry, len, loc);
        loc += len;
    }
    state
}

#[test]
fn entries_written_by_0_1_0_decode_to_what_they_were() {
    let now = encode_entries(&sample_entries());
    let old = golden("entries.bin", &now);
    assert_eq!(decode_entries(&old), sample_entries());
}

#[test]
fn this_build_writes_entries_as_0_1_0_did() {
    let now = encode_entries(&sample_entries());
    assert!(
        golden("entries.bin", &now) == now,
        "the log's entry encoding changed: see the module docs"
    );
}

#[test]
fn a_checkpoint_written_by_0_1_0_restores_the_same_state() {
    let state = sample_state();
    let now = state.capture_checkpoint().encode();
    let old = golden("checkpoint.bin", &now);
    let restored = StreamsState::decode_checkpoint(&old).expect("a 0.1.0 checkpoint decodes");
    assert_eq!(restored.digest(), state.digest());
    assert_eq!(restored.stream_count(), state.stream_count());
    assert!(state.stream_count() >= 2, "the sample holds streams");
    assert_eq!(restored.zone_of(2), Some("eu-1b"));
    assert!(restored.healing_paused());
    assert_eq!(restored.cluster_id(), Some("prod"));
}

#[test]
fn this_build_writes_checkpoints_as_0_1_0_did() {
    let now = sample_state().capture_checkpoint().encode();
    assert!(
        golden("checkpoint.bin", &now) == now,
        "the checkpoint encoding changed: see the module docs"
    );
}
