//! The direct path's request reader: any bytes a client sends, read as the
//! start of a connection. It must decide (serve here, hand to hyper, or
//! give up) without panicking, and what it serves must convert to a
//! request and answer every lookup the handlers make.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use runnel_server::connection::{read_request, NextRequest};
use runnel_server::headers;

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    let next = futures::executor::block_on(read_request(&mut input, Bytes::new()));
    if let NextRequest::Plain { request, .. } = next {
        let target = request.target().to_string();
        let _ = headers::stream_name(&target);
        let _ = headers::read_query(target.split_once('?').map(|(_, q)| q));
        for name in [
            "content-type",
            "content-length",
            "producer-id",
            "stream-seq",
            "host",
        ] {
            let _ = request.header(name);
        }
        let _ = headers::producer(&*request);
        let body = request.body();
        assert!(body.len() <= runnel_server::connection::DIRECT_BODY_LIMIT);
        let _ = request.into_request();
    }
});
