//! The first exchange on every Raft connection: the dialing node names
//! the cluster it belongs to, and the answering node its own, so that
//! nodes of different clusters refuse each other before any group's
//! traffic flows (see [`crate::cluster::identity`]).
//!
//! The hello is an ordinary request frame of kind [`KIND_HELLO`] (request
//! id 0, group 0) whose body is the cluster id in UTF-8, empty for a node
//! that knows none yet; the answer carries the answering node's the same
//! way, or the reason it refuses.

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{read_frame, request_frame, CONNECT_TIMEOUT, KIND_HELLO};
use crate::cluster::identity::Identity;

/// Decodes a hello's body: the cluster id the sender knows, if any.
pub(super) fn decode(body: &[u8]) -> Result<Option<String>, String> {
    if body.is_empty() {
        return Ok(None);
    }
    let id = std::str::from_utf8(body).map_err(|_| "a hello's cluster id is not UTF-8")?;
    runnel_core::cluster_id::validate(id).map_err(|e| format!("a hello's cluster id: {e}"))?;
    Ok(Some(id.to_string()))
}

fn body(identity: &Identity) -> Vec<u8> {
    identity.get().unwrap_or_default().as_bytes().to_vec()
}

/// The dialing side: sends this node's hello and checks the answer.
pub(super) async fn greet(
    reader: &mut (impl AsyncRead + Unpin),
    writer: &mut (impl AsyncWrite + Unpin),
    identity: &Identity,
) -> Result<(), String> {
    let exchange = async {
        writer
            .write_all(&request_frame(0, KIND_HELLO, 0, &body(identity)))
            .await?;
        writer.flush().await?;
        read_frame(reader).await
    };
    let frame = tokio::time::timeout(CONNECT_TIMEOUT, exchange)
        .await
        .map_err(|_| "no answer to the hello".to_string())?
        .map_err(|e| format!("hello: {e}"))?;
    match frame.get(8) {
        Some(1) => identity.admits(decode(&frame[9..])?.as_deref()),
        Some(_) => Err(format!("refused: {}", String::from_utf8_lossy(&frame[9..]))),
        None => Err("a short answer to the hello".into()),
    }
}

/// The answering side: the answer's `(ok, body)` to the first frame of a
/// connection, which must be a hello from a node of this cluster.
pub(super) fn answer(identity: &Identity, first: &[u8]) -> Result<Vec<u8>, String> {
    if first.len() < 13 || first[8] != KIND_HELLO {
        return Err("a connection must open with a hello (is the peer an older version?)".into());
    }
    identity.admits(decode(&first[13..])?.as_deref())?;
    Ok(body(identity))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::raft::transport::{listener::serve_connection, Served};
    use crate::raft::vote_guard::VoteGuard;

    /// Greets a listener that belongs to `theirs` as a node of `mine`.
    async fn greet_as(mine: Option<&str>, theirs: Option<&str>) -> Result<(), String> {
        let (near, far) = tokio::io::duplex(1 << 16);
        let served = Arc::new(Served {
            rafts: Vec::new(),
            votes: VoteGuard::new(0),
            identity: Identity::of(theirs),
        });
        tokio::spawn(serve_connection(far, served));
        let (mut reader, mut writer) = tokio::io::split(near);
        greet(&mut reader, &mut writer, &Identity::of(mine)).await
    }

    #[tokio::test]
    async fn nodes_of_one_cluster_or_of_none_yet_talk() {
        assert_eq!(greet_as(Some("prod"), Some("prod")).await, Ok(()));
        assert_eq!(greet_as(None, Some("prod")).await, Ok(()));
        assert_eq!(greet_as(Some("prod"), None).await, Ok(()));
        assert_eq!(greet_as(None, None).await, Ok(()));
    }

    #[tokio::test]
    async fn nodes_of_different_clusters_refuse_each_other() {
        let err = greet_as(Some("staging"), Some("prod")).await.unwrap_err();
        assert!(
            err.contains(
                "refused: this node belongs to cluster \"prod\", the peer to cluster \"staging\""
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_connection_that_does_not_open_with_a_hello_is_closed() {
        let (near, far) = tokio::io::duplex(1 << 16);
        let served = Arc::new(Served {
            rafts: Vec::new(),
            votes: VoteGuard::new(0),
            identity: Identity::of(Some("prod")),
        });
        let serving = tokio::spawn(serve_connection(far, served));
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
        assert_eq!(decode(b""), Ok(None));
        assert_eq!(decode(b"prod-1"), Ok(Some("prod-1".into())));
        assert!(decode(b"a b").is_err());
        assert!(decode(&[0xff]).is_err());
    }
}
