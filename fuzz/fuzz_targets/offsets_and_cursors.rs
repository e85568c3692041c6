//! Offsets, cursors, queries and stream paths as clients write them.
//! Offsets print back as the token they were parsed from; a read's query
//! renders back to a query that parses the same; a stream name decodes
//! from its encoding; a cursor never moves backwards, and two readers at
//! one position share it unless one is ahead.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_core::offset::{parse_read, parse_token, ReadFrom};
use runnel_wire::{cursor, headers};

/// A clock reading in 2023 (cursors count intervals since 2024-10-09,
/// so this one is interval 0), and one in 2030.
const NOWS: [i64; 2] = [1_700_000_000_000, 1_900_000_000_000];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((incarnation, offset)) = parse_token(text) {
        // A parsed offset prints back as the same token.
        assert_eq!(offset.token_in(incarnation).as_str(), text);
    }
    match parse_read(text) {
        Ok((ReadFrom::At(offset), incarnation)) => {
            assert_eq!(offset.token_in(incarnation).as_str(), text)
        }
        Ok((ReadFrom::Start, 0)) => assert_eq!(text, "-1"),
        Ok((ReadFrom::Now, 0)) => assert_eq!(text, "now"),
        Ok(other) => panic!("a sentinel names no incarnation: {other:?}"),
        Err(_) => {}
    }
    let position = data.iter().fold(0u64, |p, b| p.wrapping_mul(31).wrapping_add(u64::from(*b)));
    for now in NOWS {
        let shared = cursor::next_cursor_value(now, None, position);
        let next: u64 = cursor::next_cursor(now, Some(text), position)
            .parse()
            .expect("a cursor is a number");
        // Never behind what a client without a cursor gets (so never
        // behind the clock's interval), and ahead of a client's cursor that
        // is not behind it: cursors only ever grow.
        assert!(next >= shared);
        assert!(shared / 100_000_000 == cursor::current_interval(now));
        match text.parse::<u64>() {
            Ok(client) if client >= shared => assert!(next > client || client == u64::MAX),
            // Behind, or none: the shared cursor of that position.
            _ => assert_eq!(next, shared),
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
