//! What the writers append and how a stream read back is judged.
//!
//! Every append is a self-describing record ([`runnel_history::record`]),
//! so a byte that is lost, repeated, reordered or foreign shows as a parse
//! error or as an append in the wrong place.
//!
//! The rules for a stream: every acknowledged append is there exactly once;
//! an append whose answer never came, or was an error (in doubt), is there
//! at most once, and once a restart has shown it there or not there, it
//! stays so; each writer's appends are in its order; nothing else is
//! there; and an append acknowledged before another was sent comes before
//! it. Each broken rule is a [`Violation`] of its [`Kind`].

use std::collections::HashMap;
use std::time::Instant;

use runnel_history::record::parse_prefix;
pub use runnel_history::record::{parse, payload};

use super::verdict::{Kind, Violation};

/// What is known of one append.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Answered with success: must be there.
    Acked,
    /// No answer, or an error answer: may be there (at most once).
    InDoubt,
    /// In doubt, and a restart showed it there: must stay.
    Landed,
    /// In doubt, and a restart showed it missing: must stay missing.
    Missing,
}

#[derive(Clone, Debug)]
pub struct Append {
    pub sent: Instant,
    pub acked: Option<Instant>,
    pub fate: Fate,
}

/// One writer's history. Appends are numbered from 0 without gaps.
#[derive(Debug)]
pub struct Writer {
    pub id: u32,
    pub stream: String,
    /// Sends `Producer-Id`/`-Epoch`/`-Seq` and retries in-doubt appends.
    pub idempotent: bool,
    pub appends: Vec<Append>,
}

impl Writer {
    pub fn new(id: u32, stream: &str, idempotent: bool) -> Writer {
        Writer {
            id,
            stream: stream.to_string(),
            idempotent,
            appends: Vec::new(),
        }
    }

    pub fn acked(&self) -> usize {
        self.appends
            .iter()
            .filter(|a| matches!(a.fate, Fate::Acked))
            .count()
    }

    /// The in-doubt append an idempotent writer retries first (while the
    /// same server runs).
    pub fn pending(&self) -> Option<u64> {
        let last = self.appends.last()?;
        (self.idempotent && last.fate == Fate::InDoubt).then_some(self.appends.len() as u64 - 1)
    }

    /// After a restart settled its fate: whether an idempotent writer's
    /// last append, never acknowledged, landed (`Some(true)`) or not.
    pub fn needs_retry(&self) -> Option<bool> {
        let last = self.appends.last()?;
        match last.fate {
            _ if !self.idempotent => None,
            Fate::Landed => Some(true),
            Fate::Missing => Some(false),
            _ => None,
        }
    }
}

/// What checking one stream found.
#[derive(Debug, Default)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    /// In-doubt appends found there / found missing.
    pub landed: usize,
    pub missing: usize,
    pub appends: usize,
}

/// Checks one stream's bytes against the histories of its writers, then
/// records in the histories what this read settled (in-doubt appends
/// become `Landed` or `Missing`). `cut_short` says why the stream could
/// not be read past `bytes` (a read that kept failing): then only the
/// whole appends in `bytes` are judged, and the missing ones are reported
/// with that reason.
pub fn check_stream(
    stream: &str,
    bytes: &[u8],
    writers: &mut [&mut Writer],
    cut_short: Option<&str>,
) -> Verdict {
    let mut v = Verdict::default();
    // The whole appends up to the first byte that is none; what follows
    // it is foreign, unless the read was cut short there. The appends
    // before it are judged either way, so what is missing is reported too.
    let (placed, damage) = parse_prefix(bytes);
    if let (Some(damage), None) = (damage, cut_short) {
        v.violations.push(Violation::new(
            Kind::ForeignBytes,
            format!("stream {stream}: {damage}"),
        ));
    }
    let order: Vec<(u32, u64)> = placed.iter().map(|p| (p.writer, p.seq)).collect();
    v.appends = order.len();
    let index: HashMap<u32, usize> = writers.iter().enumerate().map(|(i, w)| (w.id, i)).collect();
    let mut seen: HashMap<(u32, u64), usize> = HashMap::new();
    let mut last_seq: HashMap<u32, u64> = HashMap::new();
    let mut latest_send: Option<(Instant, u32, u64)> = None;
    let mut push = |kind, message: String| v.violations.push(Violation::new(kind, message));
    for (pos, &(writer, seq)) in order.iter().enumerate() {
        let Some(append) = index
            .get(&writer)
            .and_then(|&i| writers[i].appends.get(seq as usize))
        else {
            push(Kind::ForeignBytes, format!("stream {stream}: append {pos} (writer {writer} seq {seq}) was never sent to this stream"));
            continue;
        };
        if let Some(first) = seen.insert((writer, seq), pos) {
            push(Kind::DuplicateAppend, format!("stream {stream}: writer {writer} seq {seq} is there twice (appends {first} and {pos})"));
        }
        if let Some(prev) = last_seq.insert(writer, seq) {
            if prev >= seq {
                push(
                    Kind::ReorderedAppend,
                    format!(
                        "stream {stream}: writer {writer} seq {seq} comes after its seq {prev}"
                    ),
                );
            }
        }
        if append.fate == Fate::Missing {
            push(Kind::ResurrectedAppend, format!("stream {stream}: writer {writer} seq {seq} was missing after an earlier restart and is back"));
        }
        if let (Some(acked), Some((sent, w2, s2))) = (append.acked, latest_send) {
            if sent > acked {
                push(Kind::ReorderedAppend, format!("stream {stream}: writer {writer} seq {seq} was acknowledged before writer {w2} seq {s2} was sent, but comes after it"));
            }
        }
        if latest_send.is_none_or(|(t, _, _)| append.sent > t) {
            latest_send = Some((append.sent, writer, seq));
        }
    }
    let mut lost = Vec::new();
    for w in writers.iter_mut() {
        for (seq, append) in w.appends.iter_mut().enumerate() {
            let here = seen.contains_key(&(w.id, seq as u64));
            match (append.fate, here) {
                (Fate::Acked | Fate::Landed, false) => lost.push((w.id, seq, append.fate)),
                (Fate::InDoubt, true) => {
                    append.fate = Fate::Landed;
                    v.landed += 1;
                }
                (Fate::InDoubt, false) => {
                    append.fate = Fate::Missing;
                    v.missing += 1;
                }
                _ => {}
            }
        }
    }
    if !lost.is_empty() {
        let (w, s, fate) = lost[0];
        let what = if fate == Fate::Acked {
            "acknowledged"
        } else {
            "acknowledged or seen"
        };
        let why = cut_short
            .map(|reason| {
                format!(
                    "; the stream could not be read past byte {}: {reason}",
                    bytes.len()
                )
            })
            .unwrap_or_default();
        v.violations.push(Violation::new(
            Kind::LostAcknowledgedAppend,
            format!(
                "stream {stream}: {} {what} appends are missing (first: writer {w} seq {s}; the stream holds {} appends){why}",
                lost.len(),
                order.len()
            ),
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(id: u32, fates: &[Fate]) -> Writer {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let now = *START.get_or_init(Instant::now);
        Writer {
            id,
            stream: "s".into(),
            idempotent: false,
            appends: fates
                .iter()
                .map(|&fate| Append {
                    sent: now,
                    acked: (fate == Fate::Acked).then_some(now),
                    fate,
                })
                .collect(),
        }
    }

    fn bytes(appends: &[(u32, u64)]) -> Vec<u8> {
        appends.iter().flat_map(|&(w, s)| payload(w, s)).collect()
    }

    #[test]
    fn payloads_parse_back() {
        let order = [(1, 0), (2, 0), (1, 1), (999_999, 123_456_789)];
        assert_eq!(parse(&bytes(&order)).unwrap(), order);
        let mut torn = bytes(&order);
        torn.truncate(torn.len() - 1);
        assert!(parse(&torn)
            .unwrap_err()
            .contains("partial append (writer 999999"));
        assert!(parse(b"\0\0\0")
            .unwrap_err()
            .contains("foreign bytes at offset 0"));
    }

    #[test]
    fn acked_must_be_there_and_in_doubt_at_most_once() {
        use Fate::*;
        let mut a = writer(1, &[Acked, Acked, InDoubt]);
        let mut b = writer(2, &[Acked, InDoubt]);
        let v = check_stream(
            "s",
            &bytes(&[(1, 0), (2, 0), (1, 1), (1, 2)]),
            &mut [&mut a, &mut b],
            None,
        );
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!((v.landed, v.missing), (1, 1));
        assert_eq!(a.appends[2].fate, Landed);
        assert_eq!(b.appends[1].fate, Missing);

        // The landed one must stay; the missing one must not come back.
        let v = check_stream(
            "s",
            &bytes(&[(1, 0), (2, 0), (1, 1), (2, 1)]),
            &mut [&mut a, &mut b],
            None,
        );
        assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
        assert_eq!(v.violations[0].kind, Kind::ResurrectedAppend);
        assert!(v.violations[0]
            .message
            .contains("missing after an earlier restart and is back"));
        assert_eq!(v.violations[1].kind, Kind::LostAcknowledgedAppend);
        assert!(v.violations[1]
            .message
            .contains("1 acknowledged or seen appends are missing"));
    }

    #[test]
    fn loss_duplication_reordering_and_strangers_are_violations() {
        use Fate::*;
        let check = |order: &[(u32, u64)]| {
            let mut a = writer(1, &[Acked, Acked]);
            let v = &check_stream("s", &bytes(order), &mut [&mut a], None).violations[0];
            (v.kind, v.message.clone())
        };
        let (kind, message) = check(&[(1, 0)]);
        assert_eq!(kind, Kind::LostAcknowledgedAppend);
        assert!(message.contains("1 acknowledged appends are missing (first: writer 1 seq 1"));
        assert_eq!(check(&[(1, 0), (1, 1), (1, 1)]).0, Kind::DuplicateAppend);
        assert_eq!(check(&[(1, 1), (1, 0)]).0, Kind::ReorderedAppend);
        assert_eq!(check(&[(1, 0), (1, 1), (7, 0)]).0, Kind::ForeignBytes);
    }

    #[test]
    fn an_append_acknowledged_before_another_was_sent_comes_first() {
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_millis(5);
        let t2 = t0 + std::time::Duration::from_millis(10);
        let mut a = writer(1, &[Fate::Acked]);
        a.appends[0] = Append {
            sent: t0,
            acked: Some(t1),
            fate: Fate::Acked,
        };
        let mut b = writer(2, &[Fate::Acked]);
        b.appends[0] = Append {
            sent: t2,
            acked: Some(t2),
            fate: Fate::Acked,
        };
        let ok = check_stream("s", &bytes(&[(1, 0), (2, 0)]), &mut [&mut a, &mut b], None);
        assert!(ok.violations.is_empty());
        let bad = check_stream("s", &bytes(&[(2, 0), (1, 0)]), &mut [&mut a, &mut b], None);
        assert_eq!(bad.violations[0].kind, Kind::ReorderedAppend);
        assert!(bad.violations[0]
            .message
            .contains("acknowledged before writer 2 seq 0 was sent"));
    }

    #[test]
    fn a_stream_read_in_part_loses_what_could_not_be_read() {
        use Fate::*;
        let mut a = writer(1, &[Acked, Acked, Acked]);
        let mut read = bytes(&[(1, 0)]);
        // Half of the next append, then the read failed.
        read.extend_from_slice(&bytes(&[(1, 1)])[..10]);
        let v = check_stream("s", &read, &mut [&mut a], Some("503 storage failed"));
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert_eq!(v.violations[0].kind, Kind::LostAcknowledgedAppend);
        assert!(v.violations[0]
            .message
            .contains("2 acknowledged appends are missing"));
        assert!(v.violations[0].message.contains("503 storage failed"));
    }
}
