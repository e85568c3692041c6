//! The first exchange on every Raft connection: each side names itself
//! and the cluster it belongs to, so that nodes of different clusters
//! refuse each other before any group's traffic flows (see
//! [`crate::cluster::identity`]), and a node that reaches another node
//! than the one it dialed (an address reused by a replacement) hangs up.
//!
//! The hello is an ordinary request frame of kind [`KIND_HELLO`] (request
//! id 0, group 0). Its body, and the body of a successful answer, is a
//! [`Hello`]:
//!
//! ```text
//! [version: u8 = 1][node id: u64][cluster id length: u8][cluster id: UTF-8]
//! ```
//!
//! with an empty cluster id for a node that knows none yet. A later
//! version keeps these fields in place and adds its own after them, which
//! this version ignores, so nodes of a later build can still greet this
//! one. A refusal carries the reason; [`RETIRED`] in place of the `ok`
//! byte tells a node that it was removed from the cluster for good.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{read_frame, request_frame, CONNECT_TIMEOUT, KIND_HELLO};
use crate::cluster::identity::Identity;
use crate::raft::NodeId;

/// The answer's status byte for a node removed for good (1 is "ok", 0 a
/// refusal for another reason).
pub(super) const RETIRED: u8 = 2;

/// The version of the [`Hello`] this build sends.
const HELLO_VERSION: u8 = 1;

/// A hello, or the answer to one: who sends it, and the cluster it
/// knows, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node: NodeId,
    pub cluster_id: Option<String>,
}

impl Hello {
    fn of(identity: &Identity) -> Hello {
        Hello {
            node: identity.node_id(),
            cluster_id: identity.get().map(str::to_string),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let id = self.cluster_id.as_deref().unwrap_or_default().as_bytes();
        let mut out = vec![HELLO_VERSION];
        out.extend_from_slice(&self.node.to_le_bytes());
        // Cluster ids are at most 64 bytes (`cluster_meta::validate`).
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        out
    }
}

/// Decodes a hello, or the answer to one.
pub(super) fn decode(body: &[u8]) -> Result<Hello, String> {
    let (&version, rest) = body.split_first().ok_or("an empty hello")?;
    if version == 0 {
        return Err("a hello of version 0".into());
    }
    let (node, rest) = rest
        .split_first_chunk::<8>()
        .ok_or("a hello without the sender's node id")?;
    let (&len, rest) = rest.split_first().ok_or("a hello without a cluster id")?;
    let (id, later_fields) = rest
        .split_at_checked(len as usize)
        .ok_or("a hello's cluster id is cut short")?;
    if version == HELLO_VERSION && !later_fields.is_empty() {
        return Err("a hello with bytes after its fields".into());
    }
    let cluster_id = if id.is_empty() {
        None
    } else {
        let id = std::str::from_utf8(id).map_err(|_| "a hello's cluster id is not UTF-8")?;
        runnel_core::cluster_meta::validate(id)
            .map_err(|e| format!("a hello's cluster id: {e}"))?;
        Some(id.to_string())
    };
    Ok(Hello {
        node: u64::from_le_bytes(*node),
        cluster_id,
    })
}

/// The dialing side: sends this node's hello to node `peer` at `addr` and
/// checks the answer.
pub(super) async fn greet(
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
    identity: &Identity,
    peer: NodeId,
    addr: &str,
) -> Result<(), String> {
    let body = Hello::of(identity).encode();
    let exchange = async {
        writer
            .write_all(&request_frame(0, KIND_HELLO, 0, &body))
            .await?;
        writer.flush().await?;
        read_frame(reader).await
    };
    let frame = tokio::time::timeout(CONNECT_TIMEOUT, exchange)
        .await
        .map_err(|_| "no answer to the hello".to_string())?
        .map_err(|e| format!("hello: {e}"))?;
    match frame.get(8) {
        Some(1) => {
            let answer = decode(&frame[9..])?;
            if answer.node != peer {
                return Err(format!(
                    "{addr} is node {}, not node {peer} (was the address given to another node?)",
                    answer.node
                ));
            }
            identity.admits(answer.cluster_id.as_deref())
        }
        Some(&RETIRED) => {
            identity.mark_removed(addr);
            Err(format!("refused: {}", String::from_utf8_lossy(&frame[9..])))
        }
        Some(_) => Err(format!("refused: {}", String::from_utf8_lossy(&frame[9..]))),
        None => Err("a short answer to the hello".into()),
    }
}

/// The answering side: the answer's status byte and body to the first
/// frame of a connection, which must be a hello from a node of this
/// cluster that `retired` does not name.
pub(super) fn answer(
    identity: &Identity,
    retired: &dyn Fn(NodeId) -> bool,
    first: &[u8],
) -> (u8, Vec<u8>) {
    let refused = |reason: String| (0, reason.into_bytes());
    if first.len() < 13 || first[8] != KIND_HELLO {
        return refused(
            "a connection must open with a hello (is the peer an older version?)".into(),
        );
    }
    let hello = match decode(&first[13..]) {
        Ok(hello) => hello,
        Err(reason) => return refused(reason),
    };
    if let Err(reason) = identity.admits(hello.cluster_id.as_deref()) {
        return refused(reason);
    }
    if retired(hello.node) {
        let reason = format!(
            "node {} was removed from this cluster for good; it cannot serve again",
            hello.node
        );
        return (RETIRED, reason.into_bytes());
    }
    (1, Hello::of(identity).encode())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::raft::transport::{listener::serve_connection, Served};
    use crate::raft::vote_guard::VoteGuard;

    /// Answers hellos as node 1 of cluster `theirs`, which retired node 9.
    fn listener(theirs: Option<&str>) -> Arc<Served> {
        Arc::new(Served {
            rafts: Vec::new(),
            views: Vec::new(),
            votes: VoteGuard::new(0),
            identity: Identity::of(1, theirs, std::path::Path::new("/nonexistent")),
            retired: Box::new(|node| node == 9),
        })
    }

    /// Greets node 1, a listener of cluster `theirs`, as node `node` of
    /// `mine`, which keeps its files in `dir`.
    async fn greet_as(
        node: NodeId,
        mine: Option<&str>,
        theirs: Option<&str>,
        dir: &std::path::Path,
    ) -> (Result<(), String>, Arc<Identity>) {
        let (near, far) = tokio::io::duplex(1 << 16);
        tokio::spawn(serve_connection(far, listener(theirs)));
        let (mut reader, mut writer) = tokio::io::split(near);
        let identity = Identity::of(node, mine, dir);
        let greeted = greet(&mut reader, &mut writer, &identity, 1, "peer:1").await;
        (greeted, identity)
    }

    #[tokio::test]
    async fn nodes_of_one_cluster_or_of_none_yet_talk() {
        let dir = tempfile::tempdir().unwrap();
        for (mine, theirs) in [
            (Some("prod"), Some("prod")),
            (None, Some("prod")),
            (Some("prod"), None),
            (None, None),
        ] {
            let (greeted, _) = greet_as(2, mine, theirs, dir.path()).await;
            assert_eq!(greeted, Ok(()), "{mine:?} greeting {theirs:?}");
        }
    }

    #[tokio::test]
    async fn nodes_of_different_clusters_refuse_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let (greeted, identity) = greet_as(2, Some("staging"), Some("prod"), dir.path()).await;
        let err = greeted.unwrap_err();
        assert!(
            err.contains(
                "refused: this node belongs to cluster \"prod\", the peer to cluster \"staging\""
            ),
            "{err}"
        );
        assert!(!identity.removed());
    }

    #[tokio::test]
    async fn a_retired_node_is_refused_and_marks_its_data_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (greeted, identity) = greet_as(9, Some("prod"), Some("prod"), dir.path()).await;
        let err = greeted.unwrap_err();
        assert!(
            err.contains("node 9 was removed from this cluster"),
            "{err}"
        );
        assert!(identity.removed());
        assert!(dir
            .path()
            .join(crate::cluster::identity::REMOVED_FILE)
            .exists());
    }

    #[tokio::test]
    async fn a_node_that_is_not_the_one_dialed_is_refused() {
        let (near, far) = tokio::io::duplex(1 << 16);
        tokio::spawn(serve_connection(far, listener(Some("prod"))));
        let (mut reader, mut writer) = tokio::io::split(near);
        let dir = tempfile::tempdir().unwrap();
        let identity = Identity::of(2, Some("prod"), dir.path());
        let err = greet(&mut reader, &mut writer, &identity, 3, "peer:1")
            .await
            .unwrap_err();
        assert!(err.contains("peer:1 is node 1, not node 3"), "{err}");
    }

    #[tokio::test]
    async fn a_connection_that_does_not_open_with_a_hello_is_closed() {
        let (near, far) = tokio::io::duplex(1 << 16);
        let serving = tokio::spawn(serve_connection(far, listener(Some("prod"))));
        let (mut reader, mut writer) = tokio::io::split(near);
        let probe = request_frame(9, crate::raft::transport::KIND_PROBE, 0, &[]);
        writer.write_all(&probe).await.unwrap();
        let answer = read_frame(&mut reader).await.unwrap();
        assert_eq!(answer[8], 0, "refused");
        assert!(String::from_utf8_lossy(&answer[9..]).contains("must open with a hello"));
        serving.await.unwrap();
        assert!(read_frame(&mut reader).await.is_err(), "closed");
    }

    #[test]
    fn hellos_round_trip_and_bad_ones_are_refused() {
        for cluster_id in [None, Some("prod-1".to_string())] {
            let hello = Hello {
                node: 3,
                cluster_id,
            };
            assert_eq!(decode(&hello.encode()), Ok(hello));
        }
        let raw = |version: u8, id: &[u8], after: &[u8]| {
            let mut body = vec![version];
            body.extend_from_slice(&3u64.to_le_bytes());
            body.push(id.len() as u8);
            body.extend_from_slice(id);
            body.extend_from_slice(after);
            body
        };
        assert_eq!(
            decode(&raw(2, b"prod", b"later fields")).map(|h| h.cluster_id),
            Ok(Some("prod".into())),
            "a later version's extra fields are skipped"
        );
        assert!(decode(&raw(1, b"prod", b"x")).is_err(), "trailing bytes");
        assert!(decode(&raw(0, b"prod", b"")).is_err(), "version 0");
        assert!(decode(&raw(1, b"a b", b"")).is_err());
        assert!(decode(&raw(1, &[0xff], b"")).is_err());
        let mut cut = raw(1, b"prod", b"");
        cut.pop();
        assert!(decode(&cut).is_err(), "cut short");
        assert!(decode(&[]).is_err());
        assert!(decode(&[1, 2, 3]).is_err(), "no node id");
    }
}
