//! Raft RPC frames between nodes. One TCP connection per ordered peer
//! pair carries the requests of every group, multiplexed by request id.
//!
//! Frames (little endian), each preceded by its length as a `u32`:
//!
//! ```text
//! request:  [id: u64][kind: u8][group: u32][body]
//! response: [id: u64][ok: u8][bincode body | error text]
//! ```
//!
//! A request's body is the bincode encoding of what its kind carries
//! ([`PeerRequest`]): openraft's requests, a [`ListRequest`], a handover's
//! role byte, a [`Hello`], or nothing. [`PeerRequest::encode`] is the one
//! encoder and [`decode_request`] the one decoder; everything a decoder
//! reads comes from whoever reached the Raft port, so nothing here may
//! panic or allocate without bound (fuzzed, round trips included:
//! `fuzz/fuzz_targets/raft_frame.rs`).

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::hello::{self, Hello, HelloDecodeError};
use super::{NodeId, TypeConfig};

pub const KIND_APPEND: u8 = 1;
pub const KIND_VOTE: u8 = 2;
pub const KIND_SNAPSHOT: u8 = 3;
/// How the receiver's copy of a group stands: a node that lost its disk
/// must rejoin its groups, not found them anew.
pub const KIND_PROBE: u8 = 4;
/// The leader's read index: the log index a follower must apply before
/// serving a read (the leader confirms it still leads first).
pub const KIND_READ_INDEX: u8 = 5;
/// A part in a leadership transfer; the body is the role.
pub const KIND_HANDOFF: u8 = 6;
/// The first request on a connection (see [`hello`]).
pub const KIND_HELLO: u8 = 7;
/// Who leads a group, as the receiver knows it: asked by a node that
/// holds no copy of the group, to route to its leader.
pub const KIND_LEADER: u8 = 8;
/// A page of the streams of a group the receiver leads ([`ListRequest`]):
/// asked by a node listing streams of a group it holds no copy of.
pub const KIND_LIST: u8 = 9;

/// Largest frame accepted (a batch of entries of the largest record size).
pub const MAX_FRAME: usize = 256 << 20;
/// Bytes of a request frame before its body: id, kind, group.
pub const REQUEST_HEAD: usize = 13;

/// A request frame, its length prefix included.
pub fn request_frame(id: u64, kind: u8, group: u32, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(4 + REQUEST_HEAD + body.len());
    frame.extend_from_slice(&((REQUEST_HEAD + body.len()) as u32).to_le_bytes());
    frame.extend_from_slice(&id.to_le_bytes());
    frame.push(kind);
    frame.extend_from_slice(&group.to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

/// A response frame with the status byte given (1 for ok), its length
/// prefix included.
pub fn status_frame(id: u64, status: u8, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(13 + body.len());
    frame.extend_from_slice(&((9 + body.len()) as u32).to_le_bytes());
    frame.extend_from_slice(&id.to_le_bytes());
    frame.push(status);
    frame.extend_from_slice(body);
    frame
}

/// Reads one frame (without its length prefix), refusing one longer than
/// [`MAX_FRAME`] before allocating for it.
pub async fn read_frame(reader: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let len = reader.read_u32_le().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "raft frame of {len} bytes exceeds the limit"
        )));
    }
    let mut frame = vec![0u8; len];
    reader.read_exact(&mut frame).await?;
    Ok(frame)
}

/// The fixed part of a request frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    pub id: u64,
    pub kind: u8,
    pub group: u32,
}

impl RequestHead {
    /// Splits a request frame (as [`read_frame`] returns it) into its head
    /// and body; `None` for a frame too short to hold a head.
    pub fn split(frame: &[u8]) -> Option<(RequestHead, &[u8])> {
        let (id, rest) = frame.split_first_chunk::<8>()?;
        let (&kind, rest) = rest.split_first()?;
        let (group, body) = rest.split_first_chunk::<4>()?;
        let head = RequestHead {
            id: u64::from_le_bytes(*id),
            kind,
            group: u32::from_le_bytes(*group),
        };
        Some((head, body))
    }
}

/// A page of a group's streams: those named with `prefix`, after `after`,
/// at most `limit` (the engine caps it, `MAX_LISTED`); or, with `names`,
/// those of these names that are live (the subscriptions' delivery
/// follows streams in groups its node holds no copy of by them).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListRequest {
    pub prefix: String,
    pub after: Option<String>,
    pub limit: u32,
    pub names: Option<Vec<String>>,
}

/// Why a request frame's body did not decode (or a request not encode).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("undecodable raft request: {0}")]
    Undecodable(#[from] bincode::Error),
    #[error("a handover request without a role")]
    NoRole,
    #[error(transparent)]
    Hello(#[from] HelloDecodeError),
    #[error("unknown raft request kind {0}")]
    UnknownKind(u8),
}

/// A peer's request, decoded from the body of its frame.
#[derive(Debug)]
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    Probe,
    ReadIndex,
    /// A leader hands its group over (the role it asks for).
    Handoff(u8),
    /// Who leads the group (the engine's `LeaderView`).
    Leader,
    /// A page of the group's streams ([`ListRequest`]).
    List(ListRequest),
    /// Who the peer is and the cluster id it knows (only the first
    /// request of a connection: see [`hello`]).
    Hello(Hello),
}

impl PeerRequest {
    /// The frame kind this request travels as.
    pub fn kind(&self) -> u8 {
        match self {
            PeerRequest::Append(_) => KIND_APPEND,
            PeerRequest::Vote(_) => KIND_VOTE,
            PeerRequest::Snapshot(_) => KIND_SNAPSHOT,
            PeerRequest::Probe => KIND_PROBE,
            PeerRequest::ReadIndex => KIND_READ_INDEX,
            PeerRequest::Handoff(_) => KIND_HANDOFF,
            PeerRequest::Hello(_) => KIND_HELLO,
            PeerRequest::Leader => KIND_LEADER,
            PeerRequest::List(_) => KIND_LIST,
        }
    }

    /// The body of this request's frame: what [`decode_request`] reads
    /// back as the same request.
    pub fn encode(&self) -> Result<Vec<u8>, RequestError> {
        Ok(match self {
            PeerRequest::Append(request) => bincode::serialize(request)?,
            PeerRequest::Vote(request) => bincode::serialize(request)?,
            PeerRequest::Snapshot(request) => bincode::serialize(request)?,
            PeerRequest::Probe | PeerRequest::ReadIndex | PeerRequest::Leader => Vec::new(),
            PeerRequest::Handoff(role) => vec![*role],
            PeerRequest::Hello(hello) => hello.encode(),
            PeerRequest::List(request) => bincode::serialize(request)?,
        })
    }
}

/// Decodes the body of a request frame of `kind`. Bytes after what the
/// kind reads are ignored (bincode's legacy options allow them), as they
/// always were: the encoding of the result is a prefix of `body`, but for
/// a hello of a later version (see [`hello`]).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_into_the_parts_they_were_made_of() {
        let frame = request_frame(7, KIND_LIST, 3, b"body");
        assert_eq!(&frame[..4], &17u32.to_le_bytes());
        let (head, body) = RequestHead::split(&frame[4..]).expect("a whole head");
        assert_eq!(
            head,
            RequestHead {
                id: 7,
                kind: KIND_LIST,
                group: 3
            }
        );
        assert_eq!(body, b"body");
        assert!(RequestHead::split(&frame[4..4 + 12]).is_none());
    }

    #[test]
    fn requests_decode_from_their_encoding() {
        let requests = [
            PeerRequest::Probe,
            PeerRequest::Handoff(2),
            PeerRequest::List(ListRequest {
                prefix: "a/".into(),
                after: Some("a/b".into()),
                limit: 10,
                names: Some(vec!["x".into()]),
            }),
            PeerRequest::Hello(Hello {
                node: 3,
                cluster_id: Some("prod".into()),
                cluster_version: 2,
            }),
        ];
        for request in requests {
            let body = request.encode().unwrap();
            let again = decode_request(request.kind(), &body).unwrap();
            assert_eq!(format!("{again:?}"), format!("{request:?}"));
            assert_eq!(again.encode().unwrap(), body);
        }
        assert!(matches!(
            decode_request(KIND_HANDOFF, &[]),
            Err(RequestError::NoRole)
        ));
        assert!(matches!(
            decode_request(42, &[]),
            Err(RequestError::UnknownKind(42))
        ));
    }
}
