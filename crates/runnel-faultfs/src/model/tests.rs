//! What survives a power cut, operation by operation.

use super::*;

const GIB: u64 = 1 << 30;

fn model() -> Model {
    Model::new(GIB, 0, 0)
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Creates `dir/file` (closing it again) and returns its inode.
fn create(m: &mut Model, dir: Ino, file: &str) -> Ino {
    let ino = m
        .create(dir, name(file), 0o644, 0, 0, true, false)
        .unwrap()
        .ino;
    m.release(ino);
    ino
}

fn contents(m: &mut Model, path: &str) -> Option<Vec<u8>> {
    let ino = m.resolve(path)?;
    Some(m.read(ino, 0, u32::MAX).unwrap())
}

fn cut(m: &mut Model) -> CutReport {
    let report = m.power_cut(None);
    m.revive();
    report
}

#[test]
fn unsynced_writes_are_lost_and_synced_ones_kept() {
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.fsync_dir(ROOT).unwrap();
    m.write(f, 0, b"hello").unwrap();
    m.fsync(f).unwrap();
    m.write(f, 5, b" world").unwrap();
    assert_eq!(contents(&mut m, "/f").unwrap(), b"hello world");

    let report = cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"hello");
    assert_eq!(report.bytes_dropped, 6);
    assert!(report.lost_paths.is_empty());
}

#[test]
fn a_new_file_needs_its_own_fsync_and_its_parents() {
    // Neither: gone.
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.write(f, 0, b"data").unwrap();
    let report = cut(&mut m);
    assert_eq!(m.resolve("/f"), None);
    assert_eq!(report.lost_paths, vec!["/f".to_string()]);
    assert_eq!(report.bytes_dropped, 4);

    // The file fsynced, its directory not: gone.
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.write(f, 0, b"data").unwrap();
    m.fsync(f).unwrap();
    cut(&mut m);
    assert_eq!(m.resolve("/f"), None);

    // The directory fsynced, the file not: there, empty.
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.write(f, 0, b"data").unwrap();
    m.fsync_dir(ROOT).unwrap();
    cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"");

    // Both, in either order: there, whole.
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.fsync_dir(ROOT).unwrap();
    m.write(f, 0, b"data").unwrap();
    m.fsync(f).unwrap();
    cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"data");
}

#[test]
fn a_new_directory_must_be_synced_in_its_parent() {
    let mut m = model();
    let d = m.mkdir(ROOT, name("d"), 0o755, 0, 0).unwrap().ino;
    let f = create(&mut m, d, "f");
    m.write(f, 0, b"x").unwrap();
    m.fsync(f).unwrap();
    m.fsync_dir(d).unwrap();
    // `d` itself was never made durable in the root: all of it goes.
    let report = cut(&mut m);
    assert_eq!(m.resolve("/d"), None);
    assert_eq!(
        report.lost_paths,
        vec!["/d".to_string(), "/d/f".to_string()]
    );

    let mut m = model();
    let d = m.mkdir(ROOT, name("d"), 0o755, 0, 0).unwrap().ino;
    m.fsync_dir(ROOT).unwrap();
    let f = create(&mut m, d, "f");
    m.write(f, 0, b"x").unwrap();
    m.fsync(f).unwrap();
    m.fsync_dir(d).unwrap();
    cut(&mut m);
    assert_eq!(contents(&mut m, "/d/f").unwrap(), b"x");
}

#[test]
fn a_rename_is_undone_unless_the_directory_is_synced() {
    let mut m = model();
    let tmp = create(&mut m, ROOT, "tmp");
    m.write(tmp, 0, b"new").unwrap();
    m.fsync(tmp).unwrap();
    m.fsync_dir(ROOT).unwrap();
    m.rename(ROOT, name("tmp"), ROOT, name("final"), false)
        .unwrap();
    let report = cut(&mut m);
    assert_eq!(m.resolve("/final"), None);
    assert_eq!(contents(&mut m, "/tmp").unwrap(), b"new");
    assert_eq!(report.restored_paths, vec!["/tmp".to_string()]);

    m.rename(ROOT, name("tmp"), ROOT, name("final"), false)
        .unwrap();
    m.fsync_dir(ROOT).unwrap();
    cut(&mut m);
    assert_eq!(m.resolve("/tmp"), None);
    assert_eq!(contents(&mut m, "/final").unwrap(), b"new");
}

#[test]
fn a_hard_link_is_a_new_entry_durable_with_its_directory() {
    // Create-only publish: write a staging file, sync it, link it under
    // its name, drop the staging name, sync the directory.
    let mut m = model();
    let staged = create(&mut m, ROOT, "staged");
    m.write(staged, 0, b"object").unwrap();
    m.fsync(staged).unwrap();
    m.link(staged, ROOT, name("final")).unwrap();
    assert_eq!(
        m.link(staged, ROOT, name("final")).err(),
        Some(libc::EEXIST)
    );
    m.unlink(ROOT, name("staged")).unwrap();
    let report = cut(&mut m);
    assert_eq!(m.resolve("/final"), None, "the directory was not synced");
    assert_eq!(report.lost_paths, vec!["/final".to_string()]);

    let staged = create(&mut m, ROOT, "staged");
    m.write(staged, 0, b"object").unwrap();
    m.fsync(staged).unwrap();
    m.link(staged, ROOT, name("final")).unwrap();
    m.unlink(ROOT, name("staged")).unwrap();
    m.fsync_dir(ROOT).unwrap();
    cut(&mut m);
    assert_eq!(contents(&mut m, "/final").unwrap(), b"object");
    assert_eq!(m.resolve("/staged"), None);
    let dir = m.mkdir(ROOT, name("d"), 0o755, 0, 0).unwrap().ino;
    assert_eq!(m.link(dir, ROOT, name("d2")).err(), Some(libc::EPERM));
}

#[test]
fn a_rename_over_a_file_restores_the_old_one_without_a_directory_sync() {
    let mut m = model();
    let old = create(&mut m, ROOT, "checkpoint");
    m.write(old, 0, b"old").unwrap();
    m.fsync(old).unwrap();
    let tmp = create(&mut m, ROOT, "checkpoint.tmp");
    m.write(tmp, 0, b"newer").unwrap();
    m.fsync(tmp).unwrap();
    m.fsync_dir(ROOT).unwrap();
    m.rename(
        ROOT,
        name("checkpoint.tmp"),
        ROOT,
        name("checkpoint"),
        false,
    )
    .unwrap();
    assert_eq!(contents(&mut m, "/checkpoint").unwrap(), b"newer");
    cut(&mut m);
    // The replaced file's durable contents were kept for this.
    assert_eq!(contents(&mut m, "/checkpoint").unwrap(), b"old");
    assert_eq!(contents(&mut m, "/checkpoint.tmp").unwrap(), b"newer");
}

#[test]
fn an_unlink_is_undone_unless_the_directory_is_synced() {
    let mut m = model();
    let f = create(&mut m, ROOT, "seg");
    m.write(f, 0, b"records").unwrap();
    m.fsync(f).unwrap();
    m.fsync_dir(ROOT).unwrap();
    m.unlink(ROOT, name("seg")).unwrap();
    assert_eq!(m.resolve("/seg"), None);
    cut(&mut m);
    assert_eq!(contents(&mut m, "/seg").unwrap(), b"records");

    m.unlink(ROOT, name("seg")).unwrap();
    m.fsync_dir(ROOT).unwrap();
    cut(&mut m);
    assert_eq!(m.resolve("/seg"), None);
}

#[test]
fn truncation_and_extension_are_durable_only_after_fsync() {
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.fsync_dir(ROOT).unwrap();
    m.write(f, 0, b"0123456789").unwrap();
    m.fsync(f).unwrap();
    m.setattr(
        f,
        SetAttr {
            size: Some(4),
            ..SetAttr::default()
        },
    )
    .unwrap();
    cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"0123456789");

    // Shrink then grow again: the regrown bytes are zeros once synced.
    m.setattr(
        f,
        SetAttr {
            size: Some(4),
            ..SetAttr::default()
        },
    )
    .unwrap();
    m.setattr(
        f,
        SetAttr {
            size: Some(8),
            ..SetAttr::default()
        },
    )
    .unwrap();
    m.fsync(f).unwrap();
    cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"0123\0\0\0\0");
}

#[test]
fn a_write_past_the_end_leaves_zeros_and_all_of_it_is_unsynced() {
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.fsync_dir(ROOT).unwrap();
    m.write(f, 4, b"ab").unwrap();
    assert_eq!(contents(&mut m, "/f").unwrap(), b"\0\0\0\0ab");
    m.fsync(f).unwrap();
    m.write(f, 10, b"cd").unwrap();
    let report = cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"\0\0\0\0ab");
    assert_eq!(report.bytes_dropped, 2);
}

#[test]
fn a_torn_write_keeps_a_prefix_of_the_last_unsynced_write() {
    for seed in 0..50 {
        let mut m = model();
        let f = create(&mut m, ROOT, "log");
        m.fsync_dir(ROOT).unwrap();
        m.write(f, 0, b"synced|").unwrap();
        m.fsync(f).unwrap();
        m.write(f, 7, b"lost|").unwrap();
        m.write(f, 12, b"0123456789").unwrap();
        let report = m.power_cut(Some(seed));
        m.revive();
        let torn = report.torn.expect("a torn write");
        assert_eq!(
            (torn.path.as_str(), torn.offset, torn.len),
            ("/log", 12, 10)
        );
        // Strictly a prefix: some of what was written is always lost.
        assert!((1..10).contains(&torn.kept));
        let kept = torn.kept as usize;
        // The earlier unsynced write is gone (zeros); the prefix is there.
        let mut want = b"synced|\0\0\0\0\0".to_vec();
        want.extend_from_slice(&b"0123456789"[..kept]);
        assert_eq!(contents(&mut m, "/log").unwrap(), want, "seed {seed}");
    }
}

#[test]
fn no_torn_write_after_an_fsync_or_in_a_lost_file() {
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.write(f, 0, b"abc").unwrap();
    m.fsync(f).unwrap();
    m.fsync_dir(ROOT).unwrap();
    let g = create(&mut m, ROOT, "g");
    m.write(g, 0, b"unreachable").unwrap();
    // `f` synced its last write; `g` has no durable entry.
    assert_eq!(m.power_cut(Some(7)).torn, None);
}

#[test]
fn the_same_seed_tears_the_same_way() {
    let run = |seed| {
        let mut m = model();
        for n in ["a", "b", "c"] {
            let f = create(&mut m, ROOT, n);
            m.write(f, 0, &[b'x'; 100]).unwrap();
        }
        m.fsync_dir(ROOT).unwrap();
        m.power_cut(Some(seed)).torn
    };
    assert_eq!(run(42), run(42));
}

#[test]
fn a_dead_model_refuses_everything_until_revived() {
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.fsync_dir(ROOT).unwrap();
    m.open(f).unwrap();
    m.power_cut(None);
    assert_eq!(m.write(f, 0, b"x"), Err(libc::EIO));
    assert_eq!(m.fsync(f), Err(libc::EIO));
    assert_eq!(m.read(f, 0, 1), Err(libc::EIO));
    assert_eq!(m.lookup(ROOT, name("f")).err(), Some(libc::EIO));
    assert_eq!(m.getattr(ROOT).err(), Some(libc::EIO));
    assert_eq!(m.statfs().err(), Some(libc::EIO));
    // Closing still counts, so the file is not kept open forever.
    m.release(f);
    assert_eq!(m.stats().refused_while_dead, 6);
    m.revive();
    assert_eq!(m.write(f, 0, b"x"), Ok(1));
}

#[test]
fn injected_write_faults_match_paths() {
    let mut m = model();
    let d = m.mkdir(ROOT, name("log"), 0o755, 0, 0).unwrap().ino;
    let seg = create(&mut m, d, "0.log");
    let meta = create(&mut m, ROOT, "meta");
    m.add_fault(Fault {
        op: FaultOp::Write,
        errno: libc::ENOSPC,
        path: Some("/log/".into()),
    });
    assert_eq!(m.write(seg, 0, b"x"), Err(libc::ENOSPC));
    assert_eq!(
        m.setattr(
            seg,
            SetAttr {
                size: Some(9),
                ..SetAttr::default()
            }
        )
        .err(),
        Some(libc::ENOSPC)
    );
    assert_eq!(m.write(meta, 0, b"x"), Ok(1));
    m.clear_faults();
    assert_eq!(m.write(seg, 0, b"x"), Ok(1));
    assert_eq!(m.stats().injected_failures, 2);
}

#[test]
fn a_failed_fsync_forgets_the_data_even_if_a_retry_succeeds() {
    let mut m = model();
    let f = create(&mut m, ROOT, "f");
    m.fsync_dir(ROOT).unwrap();
    m.write(f, 0, b"acked|").unwrap();
    m.fsync(f).unwrap();
    m.write(f, 6, b"doomed").unwrap();
    m.add_fault(Fault {
        op: FaultOp::Fsync,
        errno: libc::EIO,
        path: None,
    });
    assert_eq!(m.fsync(f), Err(libc::EIO));
    m.clear_faults();
    // The retry "succeeds": the page cache still shows the data ...
    assert_eq!(m.fsync(f), Ok(()));
    assert_eq!(contents(&mut m, "/f").unwrap(), b"acked|doomed");
    assert_eq!(m.stats().bytes_forgotten_by_failed_fsyncs, 6);
    // ... but the disk never got it.
    cut(&mut m);
    assert_eq!(contents(&mut m, "/f").unwrap(), b"acked|\0\0\0\0\0\0");
}

#[test]
fn a_failed_directory_fsync_keeps_the_old_entries() {
    let mut m = model();
    create(&mut m, ROOT, "f");
    m.add_fault(Fault {
        op: FaultOp::Fsync,
        errno: libc::EIO,
        path: None,
    });
    assert_eq!(m.fsync_dir(ROOT), Err(libc::EIO));
    cut(&mut m);
    assert_eq!(m.resolve("/f"), None);
}

#[test]
fn capacity_is_enforced_and_reported() {
    let mut m = Model::new(4 * BLOCK, 0, 0);
    let f = create(&mut m, ROOT, "f");
    m.write(f, 0, &[1; BLOCK as usize]).unwrap();
    let s = m.statfs().unwrap();
    assert_eq!((s.blocks, s.free_blocks), (4, 3));
    assert_eq!(
        m.write(f, 3 * BLOCK, &[1; BLOCK as usize + 1]),
        Err(libc::ENOSPC)
    );
    m.unlink(ROOT, name("f")).unwrap();
    // Space comes back once the kernel forgets the inode too.
    assert_eq!(m.statfs().unwrap().free_blocks, 3);
    m.forget(f, 1);
    assert_eq!(m.statfs().unwrap().free_blocks, 4);
}

#[test]
fn an_open_unlinked_file_lives_until_closed() {
    let mut m = model();
    let f = m
        .create(ROOT, name("f"), 0o644, 0, 0, true, false)
        .unwrap()
        .ino;
    m.write(f, 0, b"still here").unwrap();
    m.unlink(ROOT, name("f")).unwrap();
    assert_eq!(m.read(f, 0, 100).unwrap(), b"still here");
    m.forget(f, 1);
    m.release(f);
    assert_eq!(m.read(f, 0, 100), Err(libc::ENOENT));
    assert_eq!(m.statfs().unwrap().free_blocks, GIB / BLOCK);
}

#[test]
fn directory_operations_check_their_arguments() {
    let mut m = model();
    let d = m.mkdir(ROOT, name("d"), 0o755, 0, 0).unwrap().ino;
    create(&mut m, d, "f");
    create(&mut m, ROOT, "g");
    assert_eq!(m.rmdir(ROOT, name("d")), Err(libc::ENOTEMPTY));
    assert_eq!(m.unlink(ROOT, name("d")), Err(libc::EISDIR));
    assert_eq!(m.rmdir(ROOT, name("g")), Err(libc::ENOTDIR));
    assert_eq!(
        m.rename(ROOT, name("g"), ROOT, name("d"), false),
        Err(libc::EISDIR)
    );
    assert_eq!(
        m.rename(ROOT, name("d"), d, name("inside"), false),
        Err(libc::EINVAL)
    );
    assert_eq!(
        m.rename(ROOT, name("g"), d, name("f"), true),
        Err(libc::EEXIST)
    );
    assert_eq!(
        m.create(ROOT, name("g"), 0o644, 0, 0, true, false).err(),
        Some(libc::EEXIST)
    );
    let names: Vec<_> = m
        .readdir(d)
        .unwrap()
        .into_iter()
        .map(|(_, _, n)| n)
        .collect();
    assert_eq!(names, [".", "..", "f"]);
    m.rename(ROOT, name("g"), d, name("f"), false).unwrap();
    assert_eq!(m.resolve("/g"), None);
    assert_eq!(m.path_of(m.resolve("/d/f").unwrap()), "/d/f");
}

#[test]
fn a_durable_entry_reports_the_durable_size() {
    let mut m = model();
    let d = m.mkdir(ROOT, name("data"), 0o755, 0, 0).unwrap().ino;
    let f = create(&mut m, d, "log");
    m.write(f, 0, b"abc").unwrap();
    assert_eq!(m.durable_entry("/data"), None);
    m.fsync_dir(ROOT).unwrap();
    m.fsync_dir(d).unwrap();
    assert_eq!(m.durable_entry("/data"), Some((Kind::Dir, BLOCK)));
    assert_eq!(m.durable_entry("/data/log"), Some((Kind::File, 0)));
    m.fsync(f).unwrap();
    assert_eq!(m.durable_entry("/data/log"), Some((Kind::File, 3)));
}

#[test]
fn an_armed_cut_fires_at_the_next_matching_write_and_tears_it() {
    let mut m = model();
    let other = create(&mut m, ROOT, "other");
    let log = create(&mut m, ROOT, "0.log");
    m.fsync_dir(ROOT).unwrap();
    m.write(log, 0, b"synced").unwrap();
    m.fsync(log).unwrap();
    m.arm_cut(ArmedCut {
        path: ".log".into(),
        torn_seed: Some(3),
    });
    m.write(other, 0, b"unsynced elsewhere").unwrap();
    assert!(m.is_alive());
    assert_eq!(m.write(log, 6, b"0123456789"), Err(libc::EIO));
    assert!(!m.is_alive());
    assert!(m.take_cut_by_write());
    assert!(!m.take_cut_by_write());
    let report = m.stats().last_cut.unwrap();
    let torn = report.torn.unwrap();
    assert_eq!((torn.path.as_str(), torn.offset), ("/0.log", 6));
    // A second cut while dead changes nothing.
    assert_eq!(m.power_cut(None).torn, Some(torn.clone()));
    assert_eq!(m.stats().power_cuts, 1);
    m.revive();
    let mut want = b"synced".to_vec();
    want.extend_from_slice(&b"0123456789"[..torn.kept as usize]);
    assert_eq!(contents(&mut m, "/0.log").unwrap(), want);
    assert_eq!(contents(&mut m, "/other").unwrap(), b"");
}

#[test]
fn a_cut_counts_written_bytes_apart_from_zeros_and_kept_torn_prefixes() {
    let mut m = model();
    let log = create(&mut m, ROOT, "log");
    m.fsync_dir(ROOT).unwrap();
    // Preallocated zeros, synced, then written over and not synced.
    m.fallocate(log, 0, 100, 0).unwrap();
    m.fsync(log).unwrap();
    m.write(log, 0, b"record").unwrap();
    // A file whose entry is not durable: its zeros drop, but are no data.
    let spare = create(&mut m, ROOT, "spare");
    m.fallocate(spare, 0, 50, 0).unwrap();
    assert_eq!(m.unsynced_written_bytes(), 6);
    let report = m.power_cut(None);
    assert_eq!(
        (report.bytes_dropped, report.written_bytes_dropped),
        (56, 6)
    );
    assert_eq!(m.stats().written_bytes_dropped_total, 6);

    // A torn write's kept prefix is not counted as dropped.
    let mut m = model();
    let log = create(&mut m, ROOT, "log");
    m.fsync_dir(ROOT).unwrap();
    m.write(log, 0, b"0123456789").unwrap();
    let report = m.power_cut(Some(5));
    let torn = report.torn.expect("a torn write");
    assert_eq!(report.written_bytes_dropped, 10 - torn.kept);
    assert!(report.written_bytes_dropped >= 1);
}

#[test]
fn a_conditional_cut_waits_for_unsynced_written_data() {
    let mut m = model();
    let log = create(&mut m, ROOT, "log");
    m.fsync_dir(ROOT).unwrap();
    m.write(log, 0, b"abc").unwrap();
    m.fsync(log).unwrap();
    m.fallocate(log, 0, 4096, 0).unwrap();
    // Only zeros are unsynced: no cut.
    assert!(m.power_cut_if_unsynced(None).is_none());
    assert!(m.is_alive());
    m.write(log, 3, b"d").unwrap();
    let report = m.power_cut_if_unsynced(Some(1)).expect("a cut");
    assert!(!m.is_alive());
    assert_eq!(report.written_bytes_dropped, 1);
    // Dead: nothing more to cut.
    assert!(m.power_cut_if_unsynced(None).is_none());
    m.revive();
    // Neither the written byte nor the unsynced extension survived.
    assert_eq!(contents(&mut m, "/log").unwrap(), b"abc");
}
