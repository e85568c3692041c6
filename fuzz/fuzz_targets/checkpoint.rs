//! Checkpoints: the whole state of a group, as recovery reads it from a
//! checkpoint file and a replica from a snapshot. Two ways in:
//!
//! - the input as a checkpoint: whatever decodes encodes to a checkpoint
//!   that decodes, and encodes the same again (a checkpoint's encoding
//!   is not canonical, stream order and JSON among others, so the bytes
//!   read need not come back);
//! - the input as a sequence of log entries (`runnel_fuzz::entries`):
//!   the state they build encodes to a checkpoint that decodes to a state
//!   that encodes to identical bytes, with the same live log ranges. A
//!   decoder that drops a field the state holds is caught here.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::StreamsState;
use runnel_fuzz::entries;

/// Encoded, decoded and encoded again: the same bytes, by both encoders.
fn round_trip(state: &StreamsState) {
    let bytes = state.encode_checkpoint();
    assert_eq!(state.capture_checkpoint().encode(), bytes);
    let decoded = StreamsState::decode_checkpoint(&bytes).expect("an encoding decodes");
    assert_eq!(
        decoded.encode_checkpoint(),
        bytes,
        "a checkpoint round-trips"
    );
    let mut ranges = state.live_ranges();
    let mut decoded_ranges = decoded.live_ranges();
    ranges.sort_unstable();
    decoded_ranges.sort_unstable();
    assert_eq!(decoded_ranges, ranges);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(state) = StreamsState::decode_checkpoint(data) {
        round_trip(&state);
    }
    let entries = entries::decode(data);
    if !entries.is_empty() {
        round_trip(&entries::apply(&entries));
    }
});
