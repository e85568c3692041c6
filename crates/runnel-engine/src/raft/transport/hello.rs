//! The first exchange on every Raft connection: the dialing node names
//! the cluster it belongs to, and the answering node its own, so that
//! nodes of different clusters refuse each other before any group's
//! traffic flows (see [`crate::cluster::identity`]).
//!
//! The hello is an ordinary request frame of kind [`KIND_HELLO`] (request
//! id 0, group 0) whose body is the dialing node's id (`u64`, little
//! endian) and the cluster id in UTF-8, empty for a node that knows none
//! yet. The answer carries the answering node's cluster id the same way,
//! or the reason it refuses; [`RETIRED`] in place of the `ok` byte tells
//! a node that it was removed from the cluster for good.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{read_frame, request_frame, CONNECT_TIMEOUT, KIND_HELLO};
use crate::cluster::identity::Identity;
use crate::raft::NodeId;

/// The answer's status byte for a node removed for good (1 is "ok", 0 a
/// refusal for another reason).
pub(super) const RETIRED: u8 = 2;

/// A hello: who sends it, and the cluster it knows, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node: NodeId,
    pub cluster_id: Option<String>,
}

/// Decodes a hello's body.
pub(super) fn decode(body: &[u8]) -> Result<Hello, String> {
    let (node, id) = body
        .split_first_chunk::<8>()
        .ok_or("a hello without the sender's node id")?;
    Ok(Hello {
        node: u64::from_le_bytes(*node),
        cluster_id: decode_cluster_id(id)?,
    })
}

/// Decodes a cluster id as a hello or its answer carries it.
fn decode_cluster_id(bytes: &[u8]) -> Result<Option<String>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let id = std::str::from_utf8(bytes).map_err(|_| "a hello's cluster id is not UTF-8")?;
    runnel_core::cluster_meta::validate(id).map_err(|e| format!("a hello's cluster id: {e}"))?;
    Ok(Some(id.to_string()))
}

fn cluster_id(identity: &Identity) -> Vec<u8> {
    identity.get().unwrap_or_default().as_bytes().to_vec()
}

/// The dialing side: sends this node's hello to the peer at `addr` and
/// checks the answer.
pub(super) async fn greet(
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
    identity: &Identity,
    addr: &str,
) -> Result<(), String> {
    let mut body = identity.node_id().to_le_bytes().to_vec();
    body.extend(cluster_id(identity));
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
        Some(1) => identity.admits(decode_cluster_id(&frame[9..])?.as_deref()),
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
    (1, cluster_id(identity))
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
            votes: VoteGuard::new(0),
            identity: Identity::of(1, theirs, std::path::Path::new("/nonexistent")),
            retired: Box::new(|node| node == 9),
        })
    }

    /// Greets a listener of cluster `theirs` as node `node` of `mine`,
    /// which keeps its files in `dir`.
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
        let greeted = greet(&mut reader, &mut writer, &identity, "peer:1").await;
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
    fn hello_bodies_decode_or_are_refused() {
        let hello = |node: u64, id: &[u8]| [&node.to_le_bytes()[..], id].concat();
        assert_eq!(
            decode(&hello(3, b"")),
            Ok(Hello {
                node: 3,
                cluster_id: None
            })
        );
        assert_eq!(
            decode(&hello(3, b"prod-1")),
            Ok(Hello {
                node: 3,
                cluster_id: Some("prod-1".into())
            })
        );
        assert!(decode(&hello(3, b"a b")).is_err());
        assert!(decode(&hello(3, &[0xff])).is_err());
        assert!(decode(&[1, 2, 3]).is_err(), "no node id");
    }
}
