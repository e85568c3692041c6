//! Offsets, cursors, queries and stream paths as clients write them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::offset::{parse_offset, parse_read_from};
use runnel_server::{cursor, headers};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(offset) = parse_offset(text) {
        // A parsed offset prints back as the same token.
        assert_eq!(offset.to_string(), text);
    }
    let _ = parse_read_from(text);
    let _ = cursor::next_cursor(1_700_000_000_000, Some(text));
    let _ = headers::read_query(Some(text));
    let _ = headers::percent_decode(text);
    if let Ok(name) = headers::stream_name(&format!("/v1/stream/{text}")) {
        // A name decodes from its encoding.
        let encoded = headers::encode_path(&name);
        assert_eq!(
            headers::stream_name(&format!("/v1/stream/{encoded}")).ok(),
            Some(name)
        );
    }
});
