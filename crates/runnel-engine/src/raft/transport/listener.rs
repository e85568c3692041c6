//! The answering side of the Raft transport: the listener on the Raft
//! port, one task per connection, and one task per request, so a slow
//! append of one group does not hold up the votes of another.

use std::sync::Arc;

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::{
    hello, read_frame, response_frame, status_frame, write_frames, ServeError, Served,
    CONNECT_TIMEOUT, KIND_APPEND, KIND_HANDOFF, KIND_HELLO, KIND_LEADER, KIND_LIST, KIND_PROBE,
    KIND_READ_INDEX, KIND_SNAPSHOT, KIND_VOTE,
};
use crate::error::HelloError;
use crate::raft::{NodeId, TypeConfig};

/// Answers the Raft RPCs of every group arriving on `listener`, over
/// mutual TLS when `tls` is given.
pub(crate) async fn serve(
    listener: TcpListener,
    served: Arc<Served>,
    tls: Option<Arc<runnel_tls::ClusterTls>>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "raft accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let served = Arc::clone(&served);
        match &tls {
            None => {
                tokio::spawn(serve_connection(stream, served));
            }
            Some(tls) => {
                let tls = Arc::clone(tls);
                tokio::spawn(async move {
                    match tokio::time::timeout(CONNECT_TIMEOUT * 5, tls.accept(stream)).await {
                        Ok(Ok((stream, _peer))) => serve_connection(stream, served).await,
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "raft connection refused: TLS")
                        }
                        Err(_) => tracing::warn!("raft connection refused: TLS timed out"),
                    }
                });
            }
        }
    }
}

pub(super) async fn serve_connection(
    stream: impl AsyncRead + AsyncWrite + Send + 'static,
    served: Arc<Served>,
) {
    let (mut reader, writer) = tokio::io::split(stream);
    let (responses, outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(write_frames(writer, outgoing));
    let Ok(first) = read_frame(&mut reader).await else {
        return;
    };
    let (status, body) = hello::answer(&*served.identity, &*served.retired, &first);
    if status != 1 {
        let reason = String::from_utf8_lossy(&body).into_owned();
        tracing::warn!(%reason, "raft connection refused");
    }
    let _ = responses.send(status_frame(0, status, &body));
    if status != 1 {
        return;
    }
    while let Ok(frame) = read_frame(&mut reader).await {
        if frame.len() < 13 {
            tracing::warn!("short raft request frame; closing the connection");
            break;
        }
        let id = u64::from_le_bytes(frame[..8].try_into().expect("8 bytes"));
        let kind = frame[8];
        let group = u32::from_le_bytes(frame[9..13].try_into().expect("4 bytes"));
        let (served, responses) = (Arc::clone(&served), responses.clone());
        tokio::spawn(async move {
            let answer = answer(&served, kind, group, &frame[13..]).await;
            let _ = responses.send(response_frame(id, answer));
        });
    }
}

/// Why a request frame's body did not decode.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("undecodable raft request: {0}")]
    Undecodable(#[from] bincode::Error),
    #[error("a handover request without a role")]
    NoRole,
    #[error(transparent)]
    Hello(#[from] HelloError),
    #[error("unknown raft request kind {0}")]
    UnknownKind(u8),
}

/// A peer's request, decoded from the body of its frame.
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Probe,
    ReadIndex,
    /// A leader hands its group over (the role it asks for).
    Handoff(u8),
    /// Who leads the group ([`super::LeaderView`]).
    Leader,
    /// A page of the group's streams ([`super::ListRequest`]).
    List(super::ListRequest),
    /// Who the peer is and the cluster id it knows (only the first
    /// request of a connection: see [`hello`]).
    Hello(super::Hello),
}

/// Decodes the body of a request frame of `kind`: all of it comes from
/// whoever reached the Raft port, so nothing here may panic or allocate
/// without bound (fuzzed: `fuzz/fuzz_targets/raft_frame.rs`).
pub fn decode_request(kind: u8, body: &[u8]) -> Result<PeerRequest, RequestError> {
    Ok(match kind {
        KIND_APPEND => PeerRequest::Append(bincode::deserialize(body)?),
        KIND_VOTE => PeerRequest::Vote(bincode::deserialize(body)?),
        KIND_SNAPSHOT => PeerRequest::Snapshot(bincode::deserialize(body)?),
        KIND_PROBE => PeerRequest::Probe,
        KIND_READ_INDEX => PeerRequest::ReadIndex,
        KIND_HANDOFF => PeerRequest::Handoff(*body.first().ok_or(RequestError::NoRole)?),
        KIND_HELLO => PeerRequest::Hello(hello::decode(body)?),
        KIND_LEADER => PeerRequest::Leader,
        KIND_LIST => PeerRequest::List(bincode::deserialize(body)?),
        other => return Err(RequestError::UnknownKind(other)),
    })
}

async fn answer(served: &Served, kind: u8, group: u32, body: &[u8]) -> Result<Vec<u8>, ServeError> {
    let raft = served.group_raft(group)?;
    let encoded = match decode_request(kind, body)? {
        PeerRequest::Append(request) => bincode::serialize(&raft.append_entries(request).await),
        PeerRequest::Vote(_) if served.refuses_vote(group) => return Err(ServeError::VoteHeld),
        PeerRequest::Vote(request) => bincode::serialize(&raft.vote(request).await),
        PeerRequest::Snapshot(request) => bincode::serialize(&raft.install_snapshot(request).await),
        PeerRequest::Probe => bincode::serialize(&served.probe(group).await?),
        PeerRequest::ReadIndex => bincode::serialize(&served.read_index(group).await?),
        PeerRequest::Leader => bincode::serialize(&served.leader_view(group)?),
        PeerRequest::List(request) => bincode::serialize(&served.list(group, &request).await?),
        PeerRequest::Handoff(role) => {
            served.handoff(group, role)?;
            bincode::serialize(&())
        }
        PeerRequest::Hello(_) => return Err(ServeError::HelloAfterOpen),
    };
    Ok(encoded?)
}
