//! The first exchange on every Raft connection: each side names itself
//! and the cluster it belongs to, so that nodes of different clusters
//! refuse each other before any group's traffic flows (see
//! [`crate::cluster::identity`]), and a node that reaches another node
//! than the one it dialed (an address reused by a replacement) hangs up.
//!
//! The hello's bytes ([`Hello`], its version and codec) are
//! `runnel_wire::raft::hello`'s; this module holds the exchange: the
//! dialer's [`greet`] and the listener's [`answer`].

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use runnel_wire::raft::frame::{read_frame, request_frame, RequestHead, KIND_HELLO};
use runnel_wire::raft::hello::{decode, Hello, RETIRED};

use super::{PeerIdentity, CONNECT_TIMEOUT};
use crate::error::HelloError;
use crate::raft::NodeId;

/// This node's hello.
fn hello_of(identity: &dyn PeerIdentity) -> Hello {
    Hello {
        node: identity.node_id(),
        cluster_id: identity.cluster_id().map(str::to_string),
        cluster_version: crate::hooks::announced_cluster_version(),
    }
}

/// The dialing side: sends this node's hello to node `peer` at `addr` and
/// checks the answer.
pub(super) async fn greet(
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
    identity: &dyn PeerIdentity,
    peer: NodeId,
    addr: &str,
) -> Result<(), HelloError> {
    let body = hello_of(identity).encode();
    let exchange = async {
        writer
            .write_all(&request_frame(0, KIND_HELLO, 0, &body))
            .await?;
        writer.flush().await?;
        read_frame(reader).await
    };
    let frame = tokio::time::timeout(CONNECT_TIMEOUT, exchange)
        .await
        .map_err(|_| HelloError::NoAnswer)?
        .map_err(|e| HelloError::Io(Arc::new(e)))?;
    let refusal = || HelloError::Refused(String::from_utf8_lossy(&frame[9..]).into_owned());
    match frame.get(8) {
        Some(1) => {
            let answer = decode(&frame[9..]).map_err(HelloError::Decode)?;
            if answer.node != peer {
                return Err(HelloError::WrongNode {
                    addr: addr.to_string(),
                    found: answer.node,
                    dialed: peer,
                });
            }
            identity.admits(answer.cluster_id.as_deref())?;
            identity.note_peer_version(answer.node, answer.cluster_version);
            Ok(())
        }
        Some(&RETIRED) => {
            identity.mark_removed(addr);
            Err(refusal())
        }
        Some(_) => Err(refusal()),
        None => Err(HelloError::ShortAnswer),
    }
}

/// The answering side: the answer's status byte and body to the first
/// frame of a connection, which must be a hello from a node of this
/// cluster that `retired` does not name.
pub(super) fn answer(
    identity: &dyn PeerIdentity,
    retired: &dyn Fn(NodeId) -> bool,
    first: &[u8],
) -> (u8, Vec<u8>) {
    // The refusal's text is what the dialer reports.
    let refused = |reason: HelloError| (0, reason.to_string().into_bytes());
    let body = match RequestHead::split(first) {
        Some((head, body)) if head.kind == KIND_HELLO => body,
        _ => return refused(HelloError::NotAHello),
    };
    let hello = match decode(body) {
        Ok(hello) => hello,
        Err(reason) => return refused(reason.into()),
    };
    if let Err(reason) = identity.admits(hello.cluster_id.as_deref()) {
        return refused(reason);
    }
    if retired(hello.node) {
        let reason = HelloError::RetiredNode(hello.node).to_string();
        return (RETIRED, reason.into_bytes());
    }
    identity.note_peer_version(hello.node, hello.cluster_version);
    (1, hello_of(identity).encode())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::raft::transport::{listener::serve_connection, Served};
    use crate::raft::vote_guard::VoteGuard;

    /// A node's identity as the transport sees it, remembering whether a
    /// peer said it was removed (the cluster's `Identity` marks its data
    /// directory then: tested in `cluster::identity`).
    struct Stub {
        node: NodeId,
        cluster_id: Option<String>,
        removed: AtomicBool,
    }

    impl Stub {
        fn of(node: NodeId, cluster_id: Option<&str>) -> Arc<Stub> {
            Arc::new(Stub {
                node,
                cluster_id: cluster_id.map(str::to_string),
                removed: AtomicBool::new(false),
            })
        }

        fn removed(&self) -> bool {
            self.removed.load(Ordering::Relaxed)
        }
    }

    impl PeerIdentity for Stub {
        fn node_id(&self) -> NodeId {
            self.node
        }

        fn cluster_id(&self) -> Option<&str> {
            self.cluster_id.as_deref()
        }

        fn mark_removed(&self, _by: &str) {
            self.removed.store(true, Ordering::Relaxed);
        }
    }

    /// Answers hellos as node 1 of cluster `theirs`, which retired node 9.
    fn listener(theirs: Option<&str>) -> Arc<Served> {
        Arc::new(Served::new(
            Vec::new(),
            Vec::new(),
            VoteGuard::new(0),
            Stub::of(1, theirs),
            Box::new(|node| node == 9),
        ))
    }

    /// Greets node 1, a listener of cluster `theirs`, as node `node` of
    /// `mine`.
    async fn greet_as(
        node: NodeId,
        mine: Option<&str>,
        theirs: Option<&str>,
    ) -> (Result<(), HelloError>, Arc<Stub>) {
        let (near, far) = tokio::io::duplex(1 << 16);
        tokio::spawn(serve_connection(far, listener(theirs)));
        let (mut reader, mut writer) = tokio::io::split(near);
        let identity = Stub::of(node, mine);
        let greeted = greet(&mut reader, &mut writer, &*identity, 1, "peer:1").await;
        (greeted, identity)
    }

    #[tokio::test]
    async fn nodes_of_one_cluster_or_of_none_yet_talk() {
        for (mine, theirs) in [
            (Some("prod"), Some("prod")),
            (None, Some("prod")),
            (Some("prod"), None),
            (None, None),
        ] {
            let (greeted, _) = greet_as(2, mine, theirs).await;
            assert!(greeted.is_ok(), "{mine:?} greeting {theirs:?}: {greeted:?}");
        }
    }

    #[tokio::test]
    async fn nodes_of_different_clusters_refuse_each_other() {
        let (greeted, identity) = greet_as(2, Some("staging"), Some("prod")).await;
        let err = greeted.unwrap_err().to_string();
        assert!(
            err.contains(
                "refused: this node belongs to cluster \"prod\", the peer to cluster \"staging\""
            ),
            "{err}"
        );
        assert!(!identity.removed());
    }

    #[tokio::test]
    async fn a_retired_node_is_refused_and_told_so() {
        let (greeted, identity) = greet_as(9, Some("prod"), Some("prod")).await;
        let err = greeted.unwrap_err().to_string();
        assert!(
            err.contains("node 9 was removed from this cluster"),
            "{err}"
        );
        assert!(identity.removed());
    }

    #[tokio::test]
    async fn a_node_that_is_not_the_one_dialed_is_refused() {
        let (near, far) = tokio::io::duplex(1 << 16);
        tokio::spawn(serve_connection(far, listener(Some("prod"))));
        let (mut reader, mut writer) = tokio::io::split(near);
        let identity = Stub::of(2, Some("prod"));
        let err = greet(&mut reader, &mut writer, &*identity, 3, "peer:1")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("peer:1 is node 1, not node 3"), "{err}");
    }

    #[tokio::test]
    async fn a_connection_that_does_not_open_with_a_hello_is_closed() {
        let (near, far) = tokio::io::duplex(1 << 16);
        let serving = tokio::spawn(serve_connection(far, listener(Some("prod"))));
        let (mut reader, mut writer) = tokio::io::split(near);
        let probe = request_frame(9, runnel_wire::raft::frame::KIND_PROBE, 0, &[]);
        writer.write_all(&probe).await.unwrap();
        let answer = read_frame(&mut reader).await.unwrap();
        assert_eq!(answer[8], 0, "refused");
        assert!(String::from_utf8_lossy(&answer[9..]).contains("must open with a hello"));
        serving.await.unwrap();
        assert!(read_frame(&mut reader).await.is_err(), "closed");
    }
}
