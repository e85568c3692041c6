//! Offsets, cursors, queries and stream paths as clients write them.
//! Offsets print back as the token they were parsed from; a read's query
//! renders back to a query that parses the same; a stream name decodes
//! from its encoding; a cursor never moves backwards.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::offset::{parse_offset, parse_read_from, ReadFrom};
use runnel_wire::{cursor, headers};

/// A clock reading in 2023 (cursors count intervals since 2024-10-09,
/// so this one is interval 0), and one in 2030.
const NOWS: [i64; 2] = [1_700_000_000_000, 1_900_000_000_000];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(offset) = parse_offset(text) {
        // A parsed offset prints back as the same token.
        assert_eq!(offset.to_string(), text);
    }
    match parse_read_from(text) {
        Ok(ReadFrom::At(offset)) => assert_eq!(offset.to_string(), text),
        Ok(ReadFrom::Start) => assert_eq!(text, "-1"),
        Ok(ReadFrom::Now) => assert_eq!(text, "now"),
        Err(_) => {}
    }
    for now in NOWS {
        let current = cursor::current_interval(now);
        let next: u64 = cursor::next_cursor(now, Some(text))
            .parse()
            .expect("a cursor is a number");
        // Never behind the clock's interval, and ahead of a client's
        // cursor that is not behind it: cursors only ever grow.
        assert!(next >= current);
        if let Ok(client) = text.parse::<u64>() {
            if client >= current {
                assert!(next > client || client == u64::MAX);
            }
        }
    }
    if let Ok(query) = headers::read_query(Some(text)) {
        // Each parameter a read understands is there when it was sent.
        let sent = |key: &str| {
            text.split('&')
                .any(|pair| pair.split_once('=').map_or(pair, |(k, _)| k) == key)
        };
        assert_eq!(sent("offset"), query.offset.is_some());
        assert_eq!(sent("live"), query.live.is_some());
        assert_eq!(sent("cursor"), query.cursor.is_some());
        let rendered = runnel_fuzz::render::read_query(&query);
        assert_eq!(headers::read_query(Some(&rendered)), Ok(query));
    }
    if let Ok(decoded) = headers::percent_decode(text) {
        assert_eq!(
            headers::percent_decode(&headers::encode_path(&decoded)),
            Ok(decoded)
        );
    }
    if let Ok(name) = headers::stream_name(&format!("/v1/stream/{text}")) {
        // A name decodes from its encoding, within the protocol's bounds.
        assert!(!name.is_empty() && name.len() <= headers::MAX_NAME_BYTES);
        assert!(!name.chars().any(char::is_control));
        let encoded = headers::encode_path(&name);
        assert_eq!(
            headers::stream_name(&format!("/v1/stream/{encoded}")),
            Ok(name)
        );
    }
});
