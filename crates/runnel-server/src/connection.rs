//! The direct path's request reader, with the server's body type: the
//! reader itself (which requests the server serves without hyper, and
//! their bytes) is `runnel_wire::connection`'s, a leaf crate the fuzz
//! targets build against; this module gives what it reads the `axum`
//! body the handlers take.

use axum::body::Body;
use bytes::Bytes;
use http::Request;

pub use runnel_wire::connection::{
    read_request, NextRequest, RawRequest, Rewind, DIRECT_BODY_LIMIT,
};

/// A request the direct path read, as the application's handlers take it;
/// or, when the `http` types reject one of its parts, its bytes for hyper
/// to answer.
pub fn into_request(raw: RawRequest) -> Result<Request<Body>, Bytes> {
    let (head, body) = raw.into_parts()?;
    Ok(head.map(|()| {
        if body.is_empty() {
            Body::empty()
        } else {
            Body::from(body)
        }
    }))
}

/// An SSE request's head, with an empty body.
pub fn sse_request(head: Request<()>) -> Request<Body> {
    head.map(|()| Body::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_direct_request_keeps_its_body() {
        let mut bytes: &[u8] =
            b"POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let NextRequest::Plain { request, .. } = read_request(&mut bytes, Bytes::new()).await
        else {
            panic!("not served directly");
        };
        let request = into_request(*request).expect("valid parts");
        assert_eq!(request.uri(), "/v1/stream/a");
        let body = axum::body::to_bytes(request.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(&body[..], b"hello");
    }
}
