//! The protocol's request headers (producer triple, TTL, expiry, closure,
//! sequence) from arbitrary values.
#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;
use runnel_server::headers;

const NAMES: [&str; 7] = [
    "producer-id",
    "producer-epoch",
    "producer-seq",
    "stream-ttl",
    "stream-expires-at",
    "stream-closed",
    "stream-seq",
];

fuzz_target!(|data: &[u8]| {
    // Values separated by 0xff, one per header name in turn.
    let mut map = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(data.split(|b| *b == 0xff)) {
        if let Ok(value) = HeaderValue::from_bytes(value) {
            map.append(HeaderName::from_static(name), value);
        }
    }
    let _ = headers::producer(&map);
    let _ = headers::ttl(&map);
    let _ = headers::expires_at(&map);
    let _ = headers::closed(&map);
});
