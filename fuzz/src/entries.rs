//! A sequence of log entries, as the checkpoint target reads it from an
//! input: `[len: u16 LE][encoded Entry]...`. Applying the entries that
//! decode builds a state with whatever the log can put in one (streams,
//! producers, forks, snapshots, tiered chunks, cluster metadata), whose
//! checkpoint must then round-trip.

use runnel_core::{Entry, StreamsState};

/// The entries of `data` that decode, in order; a cut-short item ends
/// the sequence.
pub fn decode(data: &[u8]) -> Vec<Entry> {
    let mut entries = Vec::new();
    let mut rest = data;
    while let Some((len, after)) = rest.split_first_chunk::<2>() {
        let len = usize::from(u16::from_le_bytes(*len));
        let Some((item, after)) = after.split_at_checked(len) else {
            break;
        };
        if let Ok(entry) = Entry::decode(item) {
            entries.push(entry);
        }
        rest = after;
    }
    entries
}

/// The input that [`decode`] reads as `entries` (each at most 64 KiB
/// encoded).
pub fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        let bytes = entry.encode();
        let len = u16::try_from(bytes.len()).expect("a seed entry under 64 KiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

/// A state that applied `entries` as a log would, each entry's data
/// stored after the previous one's; refused commands change nothing.
pub fn apply(entries: &[Entry]) -> StreamsState {
    let mut state = StreamsState::new();
    let mut loc = 0u64;
    for entry in entries {
        let len = entry.command.body().map_or(0, |b| b.data.len() as u64);
        let _ = state.apply(entry, len, loc);
        loc += len;
    }
    state
}
