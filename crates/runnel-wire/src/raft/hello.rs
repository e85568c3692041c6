//! The hello's codec: the first exchange on every Raft connection, in
//! which each side names itself and the cluster it belongs to (the
//! exchange itself, and who is admitted, is the engine's
//! `raft::transport::hello`).
//!
//! The hello is an ordinary request frame of kind
//! [`KIND_HELLO`](super::frame::KIND_HELLO) (request id 0, group 0). Its
//! body, and the body of a successful answer, is a [`Hello`]:
//!
//! ```text
//! version 1: [1][node id: u64][cluster id length: u8][cluster id: UTF-8]
//! version 2: [2][node id: u64][cluster id length: u8][cluster id: UTF-8][cluster version: u32]
//! ```
//!
//! with an empty cluster id for a node that knows none yet. Version 2
//! adds the highest cluster version the sender's build supports
//! (`runnel_core::cluster_meta::CLUSTER_VERSION`); a version 1 hello (release
//! 0.1.0) supports cluster version 1. A later
//! version keeps these fields in place and adds its own after them, which
//! this version ignores, so nodes of a later build can still greet this
//! one. A refusal carries the reason; [`RETIRED`] in place of the `ok`
//! byte tells a node that it was removed from the cluster for good.

use super::NodeId;

/// The answer's status byte for a node removed for good (1 is "ok", 0 a
/// refusal for another reason).
pub const RETIRED: u8 = 2;

/// The version of the [`Hello`] this build sends.
pub const HELLO_VERSION: u8 = 2;

/// A hello, or the answer to one: who sends it, the cluster it knows, if
/// any, and the highest cluster version its build supports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node: NodeId,
    pub cluster_id: Option<String>,
    pub cluster_version: u32,
}

/// Why a hello's bytes do not decode. The answering side sends the text
/// to the dialer as its refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelloDecodeError {
    #[error("an empty hello")]
    Empty,
    #[error("a hello of version 0")]
    VersionZero,
    #[error("a hello without the sender's node id")]
    NoNodeId,
    #[error("a hello without a cluster id")]
    NoClusterId,
    #[error("a hello's cluster id is cut short")]
    CutShort,
    #[error("a hello with bytes after its fields")]
    TrailingBytes,
    #[error("a hello's cluster id is not UTF-8")]
    NotUtf8,
    #[error("a hello's cluster id: {0}")]
    BadClusterId(runnel_core::cluster_meta::ClusterIdError),
    #[error("a hello of version 2 without its cluster version")]
    NoClusterVersion,
}

impl Hello {
    /// The hello's body, of version [`HELLO_VERSION`].
    pub fn encode(&self) -> Vec<u8> {
        let id = self.cluster_id.as_deref().unwrap_or_default().as_bytes();
        let mut out = vec![HELLO_VERSION];
        out.extend_from_slice(&self.node.to_le_bytes());
        // Cluster ids are at most 64 bytes (`cluster_meta::validate`).
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        out.extend_from_slice(&self.cluster_version.to_le_bytes());
        out
    }
}

/// Decodes a hello, or the answer to one.
pub fn decode(body: &[u8]) -> Result<Hello, HelloDecodeError> {
    let (&version, rest) = body.split_first().ok_or(HelloDecodeError::Empty)?;
    if version == 0 {
        return Err(HelloDecodeError::VersionZero);
    }
    let (node, rest) = rest
        .split_first_chunk::<8>()
        .ok_or(HelloDecodeError::NoNodeId)?;
    let (&len, rest) = rest.split_first().ok_or(HelloDecodeError::NoClusterId)?;
    let (id, later_fields) = rest
        .split_at_checked(len as usize)
        .ok_or(HelloDecodeError::CutShort)?;
    let (cluster_version, later_fields) = if version == 1 {
        (1, later_fields)
    } else {
        let (v, rest) = later_fields
            .split_first_chunk::<4>()
            .ok_or(HelloDecodeError::NoClusterVersion)?;
        (u32::from_le_bytes(*v), rest)
    };
    if version <= HELLO_VERSION && !later_fields.is_empty() {
        return Err(HelloDecodeError::TrailingBytes);
    }
    let cluster_id = if id.is_empty() {
        None
    } else {
        let id = std::str::from_utf8(id).map_err(|_| HelloDecodeError::NotUtf8)?;
        runnel_core::cluster_meta::validate(id).map_err(HelloDecodeError::BadClusterId)?;
        Some(id.to_string())
    };
    Ok(Hello {
        node: u64::from_le_bytes(*node),
        cluster_id,
        cluster_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip_and_bad_ones_are_refused() {
        for cluster_id in [None, Some("prod-1".to_string())] {
            let hello = Hello {
                node: 3,
                cluster_id,
                cluster_version: 2,
            };
            assert_eq!(decode(&hello.encode()).unwrap(), hello);
        }
        let raw = |version: u8, id: &[u8], after: &[u8]| {
            let mut body = vec![version];
            body.extend_from_slice(&3u64.to_le_bytes());
            body.push(id.len() as u8);
            body.extend_from_slice(id);
            body.extend_from_slice(after);
            body
        };
        // Release 0.1.0's hello: cluster version 1.
        let old = decode(&raw(1, b"prod", b"")).unwrap();
        assert_eq!(
            (old.cluster_id.as_deref(), old.cluster_version),
            (Some("prod"), 1)
        );
        let later = decode(&raw(3, b"prod", b"\x05\0\0\0later fields")).unwrap();
        assert_eq!(
            (later.cluster_id.as_deref(), later.cluster_version),
            (Some("prod"), 5),
            "a later version's extra fields are skipped"
        );
        assert!(decode(&raw(1, b"prod", b"x")).is_err(), "trailing bytes");
        assert!(
            decode(&raw(2, b"prod", b"\x02\0\0\0x")).is_err(),
            "trailing bytes"
        );
        assert_eq!(
            decode(&raw(2, b"prod", b"\x02\0")),
            Err(HelloDecodeError::NoClusterVersion)
        );
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
