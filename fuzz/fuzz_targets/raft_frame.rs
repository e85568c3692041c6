//! What a peer (or anyone who reaches the Raft port) sends: the body of a
//! request frame, of each kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_engine::raft::transport::decode_request;

fuzz_target!(|data: &[u8]| {
    if let Some((kind, body)) = data.split_first() {
        let _ = decode_request(*kind % 10, body);
    }
});
