//! What recovery reads back: a log record's payload (a command entry), a
//! checkpoint file's state, and fork material from another node.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::command::Entry;
use runnel_core::{ForkMaterial, StreamsState};

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = Entry::decode(data) {
        // What decodes encodes back to the same bytes.
        assert_eq!(
            Entry::decode(&entry.encode()).ok().map(|e| e.encode()),
            Some(entry.encode())
        );
    }
    let _ = Entry::decode_header(data);
    let _ = StreamsState::decode_checkpoint(data);
    let _ = ForkMaterial::decode(data);
});
