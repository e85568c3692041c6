//! The direct path's request reader: any bytes a client sends, read as the
//! start of a connection. It must decide (serve here, hand to hyper, or
//! give up) without panicking and without losing or inventing a byte:
//! what it took plus what it left unread is the input. What it serves
//! must convert to an `http` request that says the same method, target,
//! headers and body, and answer every lookup the handlers make.
#![no_main]

use bytes::Bytes;
use http::Method;
use libfuzzer_sys::fuzz_target;
use runnel_wire::connection::{read_request, NextRequest, DIRECT_BODY_LIMIT};
use runnel_wire::headers;

/// Headers the handlers look up on a request served here.
const LOOKED_UP: [&str; 7] = [
    "content-type",
    "content-length",
    "producer-id",
    "stream-seq",
    "host",
    "authorization",
    "stream-closed",
];

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    let next = futures::executor::block_on(read_request(&mut input, Bytes::new()));
    let unread = input.len();
    match next {
        NextRequest::Gone => assert!(data.is_empty(), "gave up on bytes it had"),
        NextRequest::Other(taken) => {
            // Handed to hyper: every byte read so far, in order.
            assert_eq!(&taken[..], &data[..data.len() - unread]);
        }
        NextRequest::Sse(request) => {
            assert_eq!(request.method(), Method::GET);
            let query = request.uri().query().expect("an SSE read has a query");
            assert!(query.split('&').any(|p| p == "live=sse"));
            assert!(request.uri().path().starts_with(headers::STREAM_PREFIX));
        }
        NextRequest::Plain { request, .. } => {
            assert_eq!(request.whole(), &data[..data.len() - unread]);
            let body = request.body();
            assert!(body.len() <= DIRECT_BODY_LIMIT);
            assert!(request.whole().ends_with(&body));
            if !body.is_empty() {
                let length = request
                    .header("content-length")
                    .expect("a body has a length");
                let length = std::str::from_utf8(length).ok().map(str::trim);
                assert_eq!(length.and_then(|l| l.parse().ok()), Some(body.len()));
            }
            let target = request.target().to_string();
            let _ = headers::stream_name(&target);
            let _ = headers::read_query(target.split_once('?').map(|(_, q)| q));
            let _ = headers::producer(&*request);
            let looked_up: Vec<Option<Vec<u8>>> = LOOKED_UP
                .iter()
                .map(|name| request.header(name).map(<[u8]>::to_vec))
                .collect();
            let method = request.method().clone();
            if let Ok((converted, converted_body)) = request.into_parts() {
                // The `http` request says what the bytes said.
                assert_eq!(converted.method(), method);
                if target.starts_with('/') {
                    // Origin form, as the protocol's requests are sent;
                    // the `http` types cut off a fragment (and so the
                    // direct append path leaves targets with one to them).
                    let unfragmented = target.split('#').next().unwrap_or_default();
                    assert_eq!(converted.uri().to_string(), unfragmented);
                }
                assert_eq!(converted_body, body);
                for (name, value) in LOOKED_UP.iter().zip(looked_up) {
                    let got = converted
                        .headers()
                        .get(*name)
                        .map(|v| v.as_bytes().to_vec());
                    assert_eq!(got, value, "header {name}");
                }
            }
        }
    }
});
