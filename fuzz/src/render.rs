//! The protocol's request headers rendered back from parsed values, as a
//! client (or the server, for the headers it echoes) writes them: what
//! `protocol_headers` parses again to check the round trip.

use http::{HeaderMap, HeaderValue};
use runnel_core::Producer;
use runnel_wire::headers::{self, names, ReadQuery};

/// The values of the protocol headers a request parsed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub producer: Option<Producer>,
    pub ttl: Option<u64>,
    pub expires_at: Option<i64>,
    pub closed: bool,
    pub stream_seq: Option<String>,
}

impl Parsed {
    /// Parses the headers of `map`; `None` when any is refused.
    pub fn of(map: &HeaderMap) -> Option<Parsed> {
        Some(Parsed {
            producer: headers::producer(map).ok()?,
            ttl: headers::ttl(map).ok()?,
            expires_at: headers::expires_at(map).ok()?,
            closed: headers::closed(map).ok()?,
            stream_seq: headers::text(map, &names::STREAM_SEQ)
                .ok()?
                .map(str::to_string),
        })
    }

    /// The headers that say these values.
    pub fn render(&self) -> HeaderMap {
        let mut map = HeaderMap::new();
        let mut put = |name, value: &str| {
            let value = HeaderValue::from_str(value).expect("parsed values are visible ASCII");
            map.insert(name, value);
        };
        if let Some(p) = &self.producer {
            put(names::PRODUCER_ID, &p.id);
            put(names::PRODUCER_EPOCH, &p.epoch.to_string());
            put(names::PRODUCER_SEQ, &p.seq.to_string());
        }
        if let Some(ttl) = self.ttl {
            put(names::STREAM_TTL, &ttl.to_string());
        }
        if let Some(at) = self.expires_at {
            // The server's own rendering (a HEAD's `Stream-Expires-At`).
            let text = headers::render_expires_at(at).expect("a parsed expiry renders");
            put(names::STREAM_EXPIRES_AT, &text);
        }
        put(
            names::STREAM_CLOSED,
            if self.closed { "true" } else { "false" },
        );
        if let Some(seq) = &self.stream_seq {
            put(names::STREAM_SEQ, seq);
        }
        map
    }
}

/// A read's query string for `query`: what `read_query` parses back.
pub fn read_query(query: &ReadQuery) -> String {
    let mut pairs = Vec::new();
    for (key, value) in [
        ("offset", &query.offset),
        ("live", &query.live),
        ("cursor", &query.cursor),
    ] {
        if let Some(value) = value {
            pairs.push(format!("{key}={}", headers::encode_path(value)));
        }
    }
    pairs.join("&")
}
