//! What a peer (or anyone who reaches the Raft port) sends: a request
//! frame as the listener reads it, `[id: u64][kind: u8][group: u32][body]`
//! (the length prefix taken off). What decodes encodes to a body that
//! decodes to the same request, and encodes the same again (encoding is
//! stable). Where the body's format is canonical (votes, listings,
//! handovers, hellos of this version, the bodiless kinds) the encoding is
//! exactly the bytes the decoder read, so the frame built from it is the
//! frame received: a decoder that drops or alters a field is caught.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_wire::raft::frame::{
    decode_request, request_frame, PeerRequest, RequestHead, KIND_APPEND, KIND_SNAPSHOT,
};
use runnel_wire::raft::hello::HELLO_VERSION;

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = RequestHead::split(data) else {
        return;
    };
    let Ok(request) = decode_request(head.kind, body) else {
        return;
    };
    assert_eq!(request.kind(), head.kind);
    let encoded = request.encode().expect("a decoded request encodes");
    let again = decode_request(head.kind, &encoded).expect("an encoding decodes");
    assert_eq!(format!("{again:?}"), format!("{request:?}"));
    assert_eq!(
        again.encode().expect("encodes"),
        encoded,
        "encoding is stable"
    );
    // openraft's appends and snapshots hold sets and maps, which decode
    // from any order and encode sorted: their bodies are not canonical.
    let canonical = match &request {
        PeerRequest::Hello(_) => body.first() == Some(&HELLO_VERSION),
        _ => head.kind != KIND_APPEND && head.kind != KIND_SNAPSHOT,
    };
    if canonical {
        // Bytes after what the kind reads are ignored, as they always were.
        assert!(
            body.starts_with(&encoded),
            "the decoder read other bytes than it encodes"
        );
        let frame = request_frame(head.id, head.kind, head.group, &encoded);
        assert_eq!(
            &frame[4..],
            &data[..data.len() - (body.len() - encoded.len())]
        );
    }
});
