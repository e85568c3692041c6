//! Object names. Every object Runnel writes has a name no other upload
//! can produce: the writer's term and node and a random nonce are part
//! of it, and puts are create-only, so an object is never overwritten.
//! Stream names never appear in object names; stream ids (unique within
//! a group, never reused) do.
//!
//! ```text
//! chunks/g{group:04}/{stream:016x}/{start:020}-{end:020}-t{term}-n{node}-{nonce:016x}.rnc
//! snapshots/g{group:04}/{stream:016x}/{offset:020}-t{term}-n{node}-{nonce:016x}.rns
//! checkpoints/{sequence:020}-n{node}-{nonce:016x}.rnk
//! backups/c-{cluster}/g{group:04}/{sequence:020}-n{node}-{nonce:016x}.rnk
//! ```

use object_store::path::Path;

/// What makes one upload's name unique: who wrote it, in which term, and
/// a random nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Writer {
    pub term: u64,
    pub node: u64,
    pub nonce: u64,
}

impl Writer {
    /// A fresh writer identity for one upload.
    pub fn fresh(term: u64, node: u64) -> Writer {
        Writer {
            term,
            node,
            nonce: rand::random(),
        }
    }
}

/// Which of a group's objects a name denotes, parsed back by the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Chunk { start: u64, end: u64 },
    Snapshot { offset: u64 },
}

/// A chunk or snapshot object of one stream of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId {
    pub group: u32,
    pub stream: u64,
    pub kind: ObjectKind,
    pub writer: Writer,
}

impl ObjectId {
    /// The object's path under the store's prefix.
    pub fn path(&self) -> Path {
        let Writer { term, node, nonce } = self.writer;
        let (group, stream) = (self.group, self.stream);
        let text = match self.kind {
            ObjectKind::Chunk { start, end } => format!(
                "chunks/g{group:04}/{stream:016x}/{start:020}-{end:020}-t{term}-n{node}-{nonce:016x}.rnc"
            ),
            ObjectKind::Snapshot { offset } => format!(
                "snapshots/g{group:04}/{stream:016x}/{offset:020}-t{term}-n{node}-{nonce:016x}.rns"
            ),
        };
        Path::from(text)
    }

    /// Parses a path made by [`ObjectId::path`]; anything else is `None`.
    pub fn parse(path: &Path) -> Option<ObjectId> {
        let parts: Vec<&str> = path.as_ref().split('/').collect();
        let [area, group, stream, file] = parts.as_slice() else {
            return None;
        };
        let group = group.strip_prefix('g')?;
        if group.len() != 4 {
            return None;
        }
        let group = group.parse().ok()?;
        let stream = parse_hex16(stream)?;
        let (kind, rest) = match *area {
            "chunks" => {
                let body = file.strip_suffix(".rnc")?;
                let (start, rest) = split_decimal20(body)?;
                let (end, rest) = split_decimal20(rest)?;
                (ObjectKind::Chunk { start, end }, rest)
            }
            "snapshots" => {
                let body = file.strip_suffix(".rns")?;
                let (offset, rest) = split_decimal20(body)?;
                (ObjectKind::Snapshot { offset }, rest)
            }
            _ => return None,
        };
        let writer = parse_writer(rest)?;
        Some(ObjectId {
            group,
            stream,
            kind,
            writer,
        })
    }
}

/// The prefix under which group `group`'s objects of `area` live
/// (`chunks` or `snapshots`), for listing.
pub fn group_prefix(area: &str, group: u32) -> Path {
    Path::from(format!("{area}/g{group:04}"))
}

/// Both areas that hold group objects.
pub const GROUP_AREAS: [&str; 2] = ["chunks", "snapshots"];

/// A node checkpoint uploaded for disaster recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointId {
    pub sequence: u64,
    pub node: u64,
    pub nonce: u64,
}

impl CheckpointId {
    pub fn path(&self) -> Path {
        let CheckpointId {
            sequence,
            node,
            nonce,
        } = self;
        Path::from(format!(
            "{CHECKPOINT_AREA}/{sequence:020}-n{node}-{nonce:016x}.rnk"
        ))
    }

    pub fn parse(path: &Path) -> Option<CheckpointId> {
        let file = path
            .as_ref()
            .strip_prefix(CHECKPOINT_AREA)?
            .strip_prefix('/')?
            .strip_suffix(".rnk")?;
        let (sequence, rest) = split_decimal20(file)?;
        let rest = rest.strip_prefix('n')?;
        let (node, nonce) = rest.split_once('-')?;
        Some(CheckpointId {
            sequence,
            node: node.parse().ok()?,
            nonce: parse_hex16(nonce)?,
        })
    }
}

pub const CHECKPOINT_AREA: &str = "checkpoints";

/// Where clusters back up their groups' states (single nodes back up
/// their whole checkpoint under [`CHECKPOINT_AREA`]).
pub const GROUP_BACKUP_AREA: &str = "backups";

/// A backup of one group's state by a member of cluster `cluster`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupBackupId {
    pub cluster: String,
    pub group: u32,
    pub sequence: u64,
    pub node: u64,
    pub nonce: u64,
}

impl GroupBackupId {
    pub fn path(&self) -> Path {
        let GroupBackupId {
            group,
            sequence,
            node,
            nonce,
            ..
        } = self;
        Path::from(format!(
            "{}/g{group:04}/{sequence:020}-n{node}-{nonce:016x}.rnk",
            cluster_backups(&self.cluster)
        ))
    }

    pub fn parse(path: &Path) -> Option<GroupBackupId> {
        let parts: Vec<&str> = path.as_ref().split('/').collect();
        let [area, cluster, group, file] = parts.as_slice() else {
            return None;
        };
        if *area != GROUP_BACKUP_AREA {
            return None;
        }
        let cluster = cluster.strip_prefix("c-")?;
        let group = group.strip_prefix('g')?;
        if group.len() != 4 {
            return None;
        }
        let file = file.strip_suffix(".rnk")?;
        let (sequence, rest) = split_decimal20(file)?;
        let (node, nonce) = rest.strip_prefix('n')?.split_once('-')?;
        Some(GroupBackupId {
            cluster: cluster.to_string(),
            group: group.parse().ok()?,
            sequence,
            node: node.parse().ok()?,
            nonce: parse_hex16(nonce)?,
        })
    }
}

/// The folder of every group backup of cluster `cluster`.
pub fn cluster_backups(cluster: &str) -> String {
    format!("{GROUP_BACKUP_AREA}/c-{cluster}")
}

/// The folder of group `group`'s backups by cluster `cluster`.
pub fn group_backups(cluster: &str, group: u32) -> Path {
    Path::from(format!("{}/g{group:04}", cluster_backups(cluster)))
}

/// `{20 digits}-rest` -> (number, rest).
fn split_decimal20(text: &str) -> Option<(u64, &str)> {
    let (digits, rest) = text.split_at_checked(20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, rest.strip_prefix('-').unwrap_or(rest)))
}

fn parse_hex16(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

/// `t{term}-n{node}-{nonce:016x}`.
fn parse_writer(text: &str) -> Option<Writer> {
    let rest = text.strip_prefix('t')?;
    let (term, rest) = rest.split_once("-n")?;
    let (node, nonce) = rest.split_once('-')?;
    Some(Writer {
        term: term.parse().ok()?,
        node: node.parse().ok()?,
        nonce: parse_hex16(nonce)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_round_trip_and_sort_by_position() {
        let writer = Writer {
            term: 7,
            node: 3,
            nonce: 0xdead_beef,
        };
        for kind in [
            ObjectKind::Chunk { start: 0, end: 42 },
            ObjectKind::Chunk {
                start: u64::MAX - 1,
                end: u64::MAX,
            },
            ObjectKind::Snapshot { offset: 1 << 40 },
        ] {
            let id = ObjectId {
                group: 12,
                stream: 0xabc,
                kind,
                writer,
            };
            assert_eq!(ObjectId::parse(&id.path()), Some(id), "{}", id.path());
        }
        let a = ObjectId {
            group: 0,
            stream: 1,
            kind: ObjectKind::Chunk { start: 9, end: 10 },
            writer,
        };
        let b = ObjectId {
            kind: ObjectKind::Chunk { start: 10, end: 11 },
            ..a
        };
        assert!(a.path().as_ref() < b.path().as_ref());
        assert!(a
            .path()
            .as_ref()
            .starts_with(group_prefix("chunks", 0).as_ref()));
    }

    #[test]
    fn foreign_names_are_not_parsed() {
        for text in [
            "chunks/g0001/0000000000000001/x.rnc",
            "chunks/g1/0000000000000001/00000000000000000000-00000000000000000001-t1-n1-0000000000000001.rnc",
            "other/g0001/0000000000000001/00000000000000000000-00000000000000000001-t1-n1-0000000000000001.rnc",
            "chunks/g0001/0000000000000001/00000000000000000000-00000000000000000001-t1-n1-0000000000000001.tmp",
            "checkpoints/x.rnk",
        ] {
            assert_eq!(ObjectId::parse(&Path::from(text)), None, "{text}");
        }
    }

    #[test]
    fn checkpoint_names_round_trip() {
        let id = CheckpointId {
            sequence: 99,
            node: 1,
            nonce: 5,
        };
        assert_eq!(CheckpointId::parse(&id.path()), Some(id));
        assert_eq!(CheckpointId::parse(&Path::from("checkpoints/9.rnk")), None);
    }

    #[test]
    fn group_backup_names_round_trip() {
        let id = GroupBackupId {
            cluster: "prod-eu.1".into(),
            group: 3,
            sequence: 1_700_000_000_000,
            node: 2,
            nonce: 0xabc,
        };
        assert_eq!(
            id.path().as_ref(),
            "backups/c-prod-eu.1/g0003/00000001700000000000-n2-0000000000000abc.rnk"
        );
        assert_eq!(GroupBackupId::parse(&id.path()), Some(id.clone()));
        assert!(id
            .path()
            .as_ref()
            .starts_with(group_backups("prod-eu.1", 3).as_ref()));
        for text in [
            "backups/prod/g0003/00000001700000000000-n2-0000000000000abc.rnk",
            "backups/c-prod/g3/00000001700000000000-n2-0000000000000abc.rnk",
            "checkpoints/c-prod/g0003/00000001700000000000-n2-0000000000000abc.rnk",
            "backups/c-prod/g0003/x.rnk",
        ] {
            assert_eq!(GroupBackupId::parse(&Path::from(text)), None, "{text}");
        }
    }
}
