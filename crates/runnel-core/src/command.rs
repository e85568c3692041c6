//! Commands: every change to stream state, as it is proposed, logged and
//! applied. A command carries the proposer's clock reading (`now_ms`) so
//! that applying it is deterministic on every replica and on replay.

use crate::codec::{CodecError, Reader, Writer};

/// Internal identity of one incarnation of a stream. Never reused, so a
/// command naming a stream id cannot hit a later stream of the same name.
pub type StreamId = u64;

/// An idempotent producer's identity and position, from its three headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Producer {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
}

/// Bytes to add to a stream. For JSON streams `data` is already framed
/// (see [`crate::json`]) and `message_ends` marks each message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Body {
    pub data: Vec<u8>,
    pub message_ends: Vec<u32>,
}

/// Fork parameters of a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkFrom {
    /// Name of the source stream.
    pub source: String,
    /// Position in the source to fork at; `None` means the source's tail.
    pub offset: Option<u64>,
    /// Bytes (binary) or messages (JSON) of the append starting at
    /// `offset` to include as well.
    pub sub_offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateStream {
    pub name: String,
    /// `None`: inherit from the fork source, or `application/octet-stream`.
    pub content_type: Option<String>,
    pub ttl_secs: Option<u64>,
    pub expires_at_ms: Option<i64>,
    pub closed: bool,
    pub fork: Option<ForkFrom>,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendToStream {
    pub name: String,
    /// `None` only for a close without a body.
    pub content_type: Option<String>,
    pub body: Body,
    pub producer: Option<Producer>,
    pub stream_seq: Option<String>,
    pub close: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Create(CreateStream),
    Append(AppendToStream),
    Delete {
        name: String,
    },
    /// Remove streams whose TTL or expiry passed, as judged by the proposer.
    Expire {
        ids: Vec<StreamId>,
    },
}

impl Command {
    /// Drops the body's data (once logged, applying needs only its length).
    pub fn release_data(&mut self) {
        match self {
            Command::Create(c) => c.body.data = Vec::new(),
            Command::Append(a) => a.body.data = Vec::new(),
            Command::Delete { .. } | Command::Expire { .. } => {}
        }
    }

    /// Stream names this command refers to (the stream, a fork's source).
    pub fn names(&self) -> Vec<&str> {
        match self {
            Command::Create(c) => {
                let mut names = vec![c.name.as_str()];
                if let Some(f) = &c.fork {
                    names.push(f.source.as_str());
                }
                names
            }
            Command::Append(a) => vec![a.name.as_str()],
            Command::Delete { name } => vec![name.as_str()],
            Command::Expire { .. } => vec![],
        }
    }

    /// The body bytes this command stores, if any.
    pub fn body(&self) -> Option<&Body> {
        match self {
            Command::Create(c) => Some(&c.body),
            Command::Append(a) => Some(&a.body),
            Command::Delete { .. } | Command::Expire { .. } => None,
        }
    }
}

/// A command with the time it was proposed: the unit that is logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub now_ms: i64,
    pub command: Command,
}

const FORMAT_VERSION: u8 = 1;
const TAG_CREATE: u8 = 1;
const TAG_APPEND: u8 = 2;
const TAG_DELETE: u8 = 3;
const TAG_EXPIRE: u8 = 4;

impl Entry {
    /// Encodes the entry. The body's data bytes come last, so a stored
    /// entry's data starts at `encoded.len() - data.len()`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out` (which may hold a caller's prefix).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let data: &[u8] = self
            .command
            .body()
            .map(|b| b.data.as_slice())
            .unwrap_or(&[]);
        out.reserve(64 + data.len());
        let mut w = Writer::wrap(std::mem::take(out));
        w.u8(FORMAT_VERSION);
        w.i64(self.now_ms);
        match &self.command {
            Command::Create(c) => {
                w.u8(TAG_CREATE);
                w.str(&c.name);
                w.opt_str(c.content_type.as_deref());
                w.opt_u64(c.ttl_secs);
                w.opt_i64(c.expires_at_ms);
                w.bool(c.closed);
                match &c.fork {
                    Some(f) => {
                        w.bool(true);
                        w.str(&f.source);
                        w.opt_u64(f.offset);
                        w.u64(f.sub_offset);
                    }
                    None => w.bool(false),
                }
                w.u32_list(&c.body.message_ends);
            }
            Command::Append(a) => {
                w.u8(TAG_APPEND);
                w.str(&a.name);
                w.opt_str(a.content_type.as_deref());
                match &a.producer {
                    Some(p) => {
                        w.bool(true);
                        w.str(&p.id);
                        w.u64(p.epoch);
                        w.u64(p.seq);
                    }
                    None => w.bool(false),
                }
                w.opt_str(a.stream_seq.as_deref());
                w.bool(a.close);
                w.u32_list(&a.body.message_ends);
            }
            Command::Delete { name } => {
                w.u8(TAG_DELETE);
                w.str(name);
            }
            Command::Expire { ids } => {
                w.u8(TAG_EXPIRE);
                w.u64(ids.len() as u64);
                for id in ids {
                    w.u64(*id);
                }
            }
        }
        w.raw(data);
        *out = w.finish();
    }

    /// Decodes an entry, data included.
    pub fn decode(bytes: &[u8]) -> Result<Entry, CodecError> {
        Self::decode_inner(bytes, true).map(|(entry, _)| entry)
    }

    /// Decodes an entry without copying its data, and returns the length
    /// of that data: all that recovery needs to rebuild the index.
    pub fn decode_header(bytes: &[u8]) -> Result<(Entry, u64), CodecError> {
        let (entry, data_start) = Self::decode_inner(bytes, false)?;
        Ok((entry, (bytes.len() - data_start) as u64))
    }

    fn decode_inner(bytes: &[u8], with_data: bool) -> Result<(Entry, usize), CodecError> {
        let mut r = Reader::new(bytes);
        let version = r.u8()?;
        if version != FORMAT_VERSION {
            return Err(CodecError::UnknownVersion(version));
        }
        let now_ms = r.i64()?;
        let command = match r.u8()? {
            TAG_CREATE => {
                let name = r.string()?;
                let content_type = r.opt_string()?;
                let ttl_secs = r.opt_u64()?;
                let expires_at_ms = r.opt_i64()?;
                let closed = r.bool()?;
                let fork = if r.bool()? {
                    Some(ForkFrom {
                        source: r.string()?,
                        offset: r.opt_u64()?,
                        sub_offset: r.u64()?,
                    })
                } else {
                    None
                };
                let message_ends = r.u32_list()?;
                Command::Create(CreateStream {
                    name,
                    content_type,
                    ttl_secs,
                    expires_at_ms,
                    closed,
                    fork,
                    body: Body {
                        data: r.rest(with_data),
                        message_ends,
                    },
                })
            }
            TAG_APPEND => {
                let name = r.string()?;
                let content_type = r.opt_string()?;
                let producer = if r.bool()? {
                    Some(Producer {
                        id: r.string()?,
                        epoch: r.u64()?,
                        seq: r.u64()?,
                    })
                } else {
                    None
                };
                let stream_seq = r.opt_string()?;
                let close = r.bool()?;
                let message_ends = r.u32_list()?;
                Command::Append(AppendToStream {
                    name,
                    content_type,
                    body: Body {
                        data: r.rest(with_data),
                        message_ends,
                    },
                    producer,
                    stream_seq,
                    close,
                })
            }
            TAG_DELETE => Command::Delete { name: r.string()? },
            TAG_EXPIRE => {
                let count = r.u64()?;
                let mut ids = Vec::new();
                for _ in 0..count {
                    ids.push(r.u64()?);
                }
                Command::Expire { ids }
            }
            other => return Err(CodecError::UnknownTag(other)),
        };
        let data_start = match command {
            Command::Create(_) | Command::Append(_) => r.data_start(),
            Command::Delete { .. } | Command::Expire { .. } => {
                r.expect_end()?;
                bytes.len()
            }
        };
        Ok((Entry { now_ms, command }, data_start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample_entries() -> Vec<Entry> {
        vec![
            Entry {
                now_ms: 1_700_000_000_000,
                command: Command::Create(CreateStream {
                    name: "a/b".into(),
                    content_type: Some("application/json".into()),
                    ttl_secs: Some(60),
                    expires_at_ms: None,
                    closed: false,
                    fork: Some(ForkFrom {
                        source: "src".into(),
                        offset: Some(7),
                        sub_offset: 2,
                    }),
                    body: Body {
                        data: b"{},".to_vec(),
                        message_ends: vec![3],
                    },
                }),
            },
            Entry {
                now_ms: -5,
                command: Command::Append(AppendToStream {
                    name: "s".into(),
                    content_type: None,
                    body: Body::default(),
                    producer: Some(Producer {
                        id: "p".into(),
                        epoch: 3,
                        seq: 9,
                    }),
                    stream_seq: Some("001".into()),
                    close: true,
                }),
            },
            Entry {
                now_ms: 0,
                command: Command::Delete { name: "x".into() },
            },
            Entry {
                now_ms: 0,
                command: Command::Expire { ids: vec![1, 2, 3] },
            },
        ]
    }

    #[test]
    fn entries_round_trip() {
        for entry in sample_entries() {
            let bytes = entry.encode();
            assert_eq!(Entry::decode(&bytes).unwrap(), entry);
        }
    }

    #[test]
    fn data_is_the_suffix_of_the_encoding() {
        for entry in sample_entries() {
            let bytes = entry.encode();
            let data = entry
                .command
                .body()
                .map(|b| b.data.clone())
                .unwrap_or_default();
            assert!(bytes.ends_with(&data));
            let (header_only, data_len) = Entry::decode_header(&bytes).unwrap();
            assert_eq!(data_len, data.len() as u64);
            assert!(header_only.command.body().is_none_or(|b| b.data.is_empty()));
        }
    }

    #[test]
    fn truncated_entries_are_errors_not_panics() {
        for entry in sample_entries() {
            let bytes = entry.encode();
            let header = bytes.len() - entry.command.body().map(|b| b.data.len()).unwrap_or(0);
            for cut in 0..header {
                assert!(Entry::decode(&bytes[..cut]).is_err(), "cut at {cut}");
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Entry::decode(&bytes);
            let _ = Entry::decode_header(&bytes);
        }

        #[test]
        fn appends_round_trip(
            name in ".{0,40}",
            data in proptest::collection::vec(any::<u8>(), 0..200),
            seq in proptest::option::of(".{0,10}"),
            now in any::<i64>(),
        ) {
            let entry = Entry { now_ms: now, command: Command::Append(AppendToStream {
                name, content_type: Some("text/plain".into()),
                body: Body { data, message_ends: vec![] },
                producer: None, stream_seq: seq, close: false,
            })};
            prop_assert_eq!(Entry::decode(&entry.encode()).unwrap(), entry);
        }
    }
}
