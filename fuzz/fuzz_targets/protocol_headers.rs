//! The protocol's request headers (producer triple, TTL, expiry, closure,
//! sequence) from arbitrary values. Whatever parses renders back to
//! headers that parse to the same values (the expiry through the server's
//! own rendering), integers and identifiers to the very text sent, and
//! parsed values keep the protocol's bounds.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use runnel_fuzz::render::Parsed;
use runnel_wire::headers;

/// The headers the input's values go to, in turn.
pub const NAMES: [&str; 7] = [
    "producer-id",
    "producer-epoch",
    "producer-seq",
    "stream-ttl",
    "stream-expires-at",
    "stream-closed",
    "stream-seq",
];

/// Largest integer a JavaScript client holds exactly: the protocol's bound.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

fuzz_target!(|data: &[u8]| {
    // Values separated by 0xff, one per header name in turn.
    let mut map = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(data.split(|b| *b == 0xff)) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            map.append(HeaderName::from_static(name), value);
        }
    }
    // Each parser alone must not panic, whatever the others say.
    let producer = headers::producer(&map);
    let ttl = headers::ttl(&map);
    let _ = headers::expires_at(&map);
    let _ = headers::closed(&map);
    if let Ok(Some(p)) = &producer {
        assert!(!p.id.is_empty());
        assert!(p.epoch <= MAX_SAFE_INTEGER && p.seq <= MAX_SAFE_INTEGER);
    }
    if let Ok(Some(ttl)) = ttl {
        assert!(ttl <= MAX_SAFE_INTEGER);
    }
    let Some(parsed) = Parsed::of(&map) else {
        return;
    };
    // Rendered and parsed again: the same values, and the same rendering.
    let rendered = parsed.render();
    // The integers and identifiers have one written form, so what parsed
    // renders back to the very text sent (trimmed; `Stream-Closed` in any
    // case): a parser that dropped or altered a value is caught here.
    for name in NAMES {
        let (Some(sent), Some(back)) = (map.get(name), rendered.get(name)) else {
            continue;
        };
        let sent = sent
            .to_str()
            .expect("parsed headers are visible ASCII")
            .trim();
        let back = back.to_str().expect("rendered headers are visible ASCII");
        match name {
            // Any offset and precision: only the instant comes back.
            "stream-expires-at" => {}
            "stream-closed" => assert!(sent.eq_ignore_ascii_case(back), "{name}: {sent:?}"),
            _ => assert_eq!(sent, back, "{name} renders back to another text"),
        }
    }
    let again = Parsed::of(&rendered).expect("a rendering parses");
    assert_eq!(again, parsed);
    assert_eq!(again.render(), rendered);
});
