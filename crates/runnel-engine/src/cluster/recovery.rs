//! Where a member's recovery reads its log from, given each group's
//! snapshot file and the groups it dropped.

use crate::raft::snapshot::SnapshotFile;

/// Where recovery scans the log from, and below where segments may be
/// missing because the collector deleted them (see [`super::collect::Collector`]).
///
/// The collector runs only once every group it waits for has a snapshot,
/// and deletes only segments before each one's replay point; it does not
/// wait for a group this node dropped. So gaps lie below the least replay
/// point of the snapshots. A group dropped at position `P` and not
/// snapshotted since may have records from `P` on (a copy taken back),
/// which no snapshot covers: the scan starts at `P` if that is earlier,
/// through the gaps the collector left meanwhile. A group neither
/// snapshotted nor dropped needs the whole log.
pub(super) fn replay_points(files: &[Option<SnapshotFile>], left: &[Option<u64>]) -> (u64, u64) {
    let (mut checkpoint, mut scan_from) = (u64::MAX, u64::MAX);
    for (file, left) in files.iter().zip(left) {
        match (file, left) {
            (Some(file), _) => checkpoint = checkpoint.min(file.header.replay_from),
            (None, Some(at)) => scan_from = scan_from.min(*at),
            (None, None) => checkpoint = 0,
        }
    }
    // (With every group dropped nothing held the collector back: any
    // segment may be gone.)
    (scan_from.min(checkpoint), checkpoint)
}

/// Per group, below which log position its records are not replayed:
/// its snapshot's replay point (what lies before is covered by the
/// snapshot file, vote included, and may sit among segments the
/// collector deleted when another group's replay point was lower), else
/// where this node dropped its copy, else nowhere.
pub(super) fn covered_below(files: &[Option<SnapshotFile>], left: &[Option<u64>]) -> Vec<u64> {
    files
        .iter()
        .zip(left)
        .map(|(file, left)| match file {
            Some(file) => file.header.replay_from,
            None => left.unwrap_or(0),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::snapshot::FileHeader;

    fn file(replay_from: u64) -> Option<SnapshotFile> {
        Some(SnapshotFile {
            header: FileHeader {
                meta: Default::default(),
                vote: None,
                replay_from,
            },
            state: Vec::new(),
        })
    }

    #[test]
    fn each_group_skips_what_its_snapshot_covers_or_what_it_dropped() {
        assert_eq!(
            covered_below(
                &[file(500), None, file(300), None],
                &[None, Some(100), Some(200), None]
            ),
            vec![500, 100, 300, 0]
        );
    }

    #[test]
    fn a_dropped_group_moves_the_scan_back_but_not_the_collected_gaps() {
        // Snapshots only: both points are the least replay point.
        assert_eq!(
            replay_points(&[file(500), file(300)], &[None, None]),
            (300, 300)
        );
        // A group dropped at 100, not snapshotted since: scanned from 100,
        // gaps the collector left below 300 still accepted.
        assert_eq!(
            replay_points(&[file(500), None, file(300)], &[None, Some(100), None]),
            (100, 300)
        );
        // Dropped, then snapshotted again: its snapshot counts.
        assert_eq!(
            replay_points(&[file(500), file(400)], &[None, Some(100)]),
            (400, 400)
        );
        // A group with neither: the whole log.
        assert_eq!(replay_points(&[file(500), None], &[None, None]), (0, 0));
        // Every group dropped: nothing held the collector back.
        assert_eq!(
            replay_points(&[None, None], &[Some(70), Some(90)]),
            (70, u64::MAX)
        );
    }
}
