//! Golden Raft frames: requests that release 0.1.0's build wrote
//! (`fixtures/0.1.0/raft_frame/`, each a request frame without its length
//! prefix, as its fuzz seeds generator made them), which every later
//! build must read, and, but for the hello, write the same way: a node of
//! this build and one of 0.1.0 talk during a rolling upgrade.
//!
//! The hello is at version 2 since: 0.1.0's (version 1) decodes as a
//! build that supports cluster version 1, and 0.1.0 reads this build's
//! (it skips the fields a later version adds; `hello`'s tests).

use std::path::PathBuf;

use super::frame::{decode_request, PeerRequest, RequestHead};

/// Every frame kind 0.1.0 sent.
const FRAMES: [&str; 12] = [
    "append",
    "heartbeat",
    "vote",
    "snapshot",
    "probe",
    "read-index",
    "handoff",
    "leader",
    "list",
    "list-names",
    "hello",
    "hello-no-cluster",
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/0.1.0/raft_frame")
        .join(name)
}

#[test]
fn raft_frames_written_by_0_1_0_are_read_and_written_alike() {
    for name in FRAMES {
        let path = fixture(name);
        let frame = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (head, body) = RequestHead::split(&frame).expect("a whole frame head");
        let request = decode_request(head.kind, body)
            .unwrap_or_else(|e| panic!("{name}: a 0.1.0 frame does not decode: {e}"));
        match &request {
            PeerRequest::Hello(hello) => {
                assert_eq!(hello.cluster_version, 1, "{name}");
                let expected = match name {
                    "hello" => (2, Some("prod-1")),
                    _ => (7, None),
                };
                assert_eq!((hello.node, hello.cluster_id.as_deref()), expected);
            }
            _ => assert!(
                request.encode().expect("encodes") == body,
                "{name}: this build writes the frame otherwise than 0.1.0 did"
            ),
        }
        if let PeerRequest::Append(append) = &request {
            let entries = if name == "append" { 3 } else { 0 };
            assert_eq!(append.entries.len(), entries, "{name}");
        }
    }
}
