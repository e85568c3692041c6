//! Crash-safety tests: recovery after cuts and corruption at every byte,
//! segment rolls, and fail-stop on a write error.

use super::*;
use std::sync::mpsc;
use std::time::Duration;

fn no_listener() -> DurabilityListener {
    Box::new(|_| {})
}

fn open_collect(dir: &Path, options: LogOptions) -> (Log, Vec<(u64, Vec<u8>)>) {
    let mut records = Vec::new();
    let log = Log::open(dir, options, no_listener(), |r| {
        records.push((r.payload_pos, r.payload.to_vec()));
        Ok(())
    })
    .unwrap();
    (log, records)
}

fn wait_durable(log: &Log, end: u64) {
    for _ in 0..2000 {
        if log.durable_position() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("record at {end} never became durable");
}

fn payloads(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("record-{i}-{}", "x".repeat(i % 7)).into_bytes())
        .collect()
}

/// Writes records and returns the log's single segment file bytes.
fn write_log(dir: &Path, records: &[Vec<u8>]) -> Vec<u8> {
    let (log, _) = open_collect(dir, LogOptions::default());
    let mut end = 0;
    for r in records {
        end = log.append(r).unwrap().end;
    }
    wait_durable(&log, end);
    drop(log);
    std::fs::read(segment::path_for(dir, 0)).unwrap()
}

#[test]
fn records_are_readable_after_durability_and_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (log, recovered) = open_collect(dir.path(), LogOptions::default());
    assert!(recovered.is_empty());
    let mut placed = Vec::new();
    for p in payloads(50) {
        placed.push((log.append(&p).unwrap(), p));
    }
    wait_durable(&log, placed.last().unwrap().0.end);
    for (at, p) in &placed {
        let mut buf = vec![0; p.len()];
        log.read_at(at.payload_pos, &mut buf).unwrap();
        assert_eq!(&buf, p);
    }
    drop(log);
    let (_log, recovered) = open_collect(dir.path(), LogOptions::default());
    let expected: Vec<_> = placed
        .iter()
        .map(|(at, p)| (at.payload_pos, p.clone()))
        .collect();
    assert_eq!(recovered, expected);
}

#[test]
fn a_cut_at_every_byte_recovers_exactly_the_whole_records_before_it() {
    let records = payloads(12);
    let source = tempfile::tempdir().unwrap();
    let image = write_log(source.path(), &records);
    // Record k ends at ends[k].
    let mut ends = Vec::new();
    let mut pos = 0u64;
    for r in &records {
        pos += HEADER_LEN + r.len() as u64;
        ends.push(pos);
    }
    // Without a tail, as a growing segment is cut; and followed by zeros,
    // as a preallocated one is.
    for (cut, zeros) in (0..=image.len()).flat_map(|cut| [(cut, 0), (cut, 4096)]) {
        let dir = tempfile::tempdir().unwrap();
        let mut file = image[..cut].to_vec();
        file.resize(cut + zeros, 0);
        std::fs::write(segment::path_for(dir.path(), 0), &file).unwrap();
        let (log, recovered) = open_collect(dir.path(), LogOptions::default());
        let whole = ends.iter().filter(|e| **e <= cut as u64).count();
        let got: Vec<_> = recovered.into_iter().map(|(_, p)| p).collect();
        assert_eq!(got, records[..whole], "cut at {cut}, {zeros} zeros after");
        // The torn bytes are gone and the log appends after the last whole record.
        let at = log.append(b"after").unwrap();
        assert_eq!(
            at.payload_pos,
            ends[..whole].last().copied().unwrap_or(0) + HEADER_LEN
        );
        wait_durable(&log, at.end);
        drop(log);
        let (_log, again) = open_collect(dir.path(), LogOptions::default());
        assert_eq!(
            again.len(),
            whole + 1,
            "cut at {cut}, {zeros} zeros after: appended record survives reopen"
        );
        assert_eq!(again.last().unwrap().1, b"after");
    }
}

#[test]
fn corruption_at_every_byte_never_serves_a_bad_record() {
    let records = payloads(8);
    let source = tempfile::tempdir().unwrap();
    let image = write_log(source.path(), &records);
    for at in 0..image.len() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = image.clone();
        bad[at] ^= 0x5a;
        std::fs::write(segment::path_for(dir.path(), 0), &bad).unwrap();
        let (_log, recovered) = open_collect(dir.path(), LogOptions::default());
        let got: Vec<_> = recovered.into_iter().map(|(_, p)| p).collect();
        // Exactly the records before the one holding the flipped byte,
        // each byte-exact: never the damaged record, never one after it.
        let mut end = 0u64;
        let damaged = records
            .iter()
            .position(|r| {
                end += HEADER_LEN + r.len() as u64;
                (at as u64) < end
            })
            .expect("the flip lies in a record");
        assert_eq!(got, records[..damaged], "flip at {at}");
    }
}

#[test]
fn segments_roll_by_size_and_recover_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 256,
        manual_commit: false,
        ..LogOptions::default()
    };
    let (log, _) = open_collect(dir.path(), options.clone());
    let records = payloads(100);
    let mut placed = Vec::new();
    for p in &records {
        let at = log.append(p).unwrap();
        // Wait each time so batches stay small and rolls happen often.
        wait_durable(&log, at.end);
        placed.push(at);
    }
    assert!(
        log.segment_count() > 5,
        "only {} segments",
        log.segment_count()
    );
    for (at, p) in placed.iter().zip(&records) {
        let mut buf = vec![0; p.len()];
        log.read_at(at.payload_pos, &mut buf).unwrap();
        assert_eq!(&buf, p);
    }
    drop(log);
    let (_log, recovered) = open_collect(dir.path(), options);
    let got: Vec<_> = recovered.into_iter().map(|(_, p)| p).collect();
    assert_eq!(got, records);
}

#[test]
fn segments_after_a_torn_one_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 64,
        manual_commit: false,
        ..LogOptions::default()
    };
    let (log, _) = open_collect(dir.path(), options.clone());
    for p in payloads(20) {
        let at = log.append(&p).unwrap();
        wait_durable(&log, at.end);
    }
    drop(log);
    let bases = segment::list(dir.path()).unwrap();
    assert!(bases.len() >= 3);
    // Tear the second segment: the third and later must go.
    let second = segment::path_for(dir.path(), bases[1]);
    let len = std::fs::metadata(&second).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&second)
        .unwrap();
    file.set_len(len - 1).unwrap();
    let (log, recovered) = open_collect(dir.path(), options);
    assert_eq!(segment::list(dir.path()).unwrap(), bases[..2]);
    assert!(!recovered.is_empty());
    assert_eq!(log.segment_count(), 2);
}

#[test]
fn a_write_error_stops_the_log_and_is_never_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    // /dev/full fails every write with ENOSPC: a full disk on demand.
    std::os::unix::fs::symlink("/dev/full", segment::path_for(dir.path(), 0)).unwrap();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let listener: DurabilityListener = Box::new(move |r| {
        let _ = tx.lock().unwrap().send(r);
    });
    let log = Log::open(dir.path(), LogOptions::default(), listener, |_| Ok(())).unwrap();
    let at = log.append(b"doomed").unwrap();
    let outcome = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let err = outcome.expect_err("a write to a full disk must fail");
    assert!(err.is_out_of_space(), "{err}");
    assert!(
        log.durable_position() < at.end,
        "nothing unsynced is durable"
    );
    assert!(matches!(log.append(b"more"), Err(LogError::Failed(_))));
}

#[test]
fn sync_mode_parses_from_flags() {
    assert_eq!("batch".parse::<SyncMode>(), Ok(SyncMode::Batch));
    assert_eq!("never".parse::<SyncMode>(), Ok(SyncMode::Never));
    assert_eq!("always".parse::<SyncMode>(), Ok(SyncMode::Always));
    assert!("sometimes".parse::<SyncMode>().is_err());
}

#[test]
fn collected_segments_leave_gaps_that_recovery_accepts_below_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 64,
        manual_commit: false,
        ..LogOptions::default()
    };
    let (log, _) = open_collect(dir.path(), options.clone());
    let mut placed = Vec::new();
    for p in payloads(30) {
        let at = log.append(&p).unwrap();
        wait_durable(&log, at.end);
        placed.push((at, p));
    }
    let bases = segment::list(dir.path()).unwrap();
    assert!(bases.len() > 6);
    // Keep the second segment (a live record), collect the rest below the
    // fifth segment.
    let checkpoint = bases[4];
    let kept = bases[1];
    let reclaimed = log
        .collect_segments(checkpoint, |base, _| base == kept)
        .unwrap();
    assert!(reclaimed > 0);
    let now = segment::list(dir.path()).unwrap();
    assert!(now.contains(&kept) && !now.contains(&bases[0]) && !now.contains(&bases[2]));
    drop(log);

    // Reopen from the checkpoint: gaps below it are fine, nothing later
    // is lost, and the kept segment is still readable.
    let reopen = LogOptions {
        replay_from: checkpoint,
        manual_commit: false,
        ..options.clone()
    };
    let (log, recovered) = open_collect(dir.path(), reopen);
    assert_eq!(
        segment::list(dir.path()).unwrap(),
        now,
        "no segment removed on reopen"
    );
    assert!(
        recovered.iter().all(|(pos, _)| *pos >= checkpoint),
        "checkpointed segments are not replayed"
    );
    let expected_after: Vec<_> = placed
        .iter()
        .filter(|(at, _)| at.payload_pos >= checkpoint)
        .map(|(at, p)| (at.payload_pos, p.clone()))
        .collect();
    assert_eq!(recovered, expected_after);
    let (at, p) = placed
        .iter()
        .find(|(at, _)| at.payload_pos >= kept && at.payload_pos < bases[2])
        .unwrap();
    let mut buf = vec![0; p.len()];
    log.read_at(at.payload_pos, &mut buf).unwrap();
    assert_eq!(&buf, p);

    // Scanning from before the gaps (a group left there, whose later
    // records no checkpoint covers) with the checkpoint named: the same
    // gaps are fine, and every record from the scan's start is replayed.
    drop(log);
    let from_before = LogOptions {
        replay_from: kept,
        collected_below: checkpoint,
        manual_commit: false,
        ..options.clone()
    };
    let (log, recovered) = open_collect(dir.path(), from_before);
    assert_eq!(
        segment::list(dir.path()).unwrap(),
        now,
        "no segment removed"
    );
    let still_there: Vec<_> = placed
        .iter()
        .filter(|(at, _)| {
            let pos = at.payload_pos;
            (kept..bases[2]).contains(&pos) || pos >= checkpoint
        })
        .map(|(at, p)| (at.payload_pos, p.clone()))
        .collect();
    assert_eq!(recovered, still_there);

    // Without the checkpoint, the same gap is corruption: later segments go.
    drop(log);
    let (_log, _) = open_collect(dir.path(), options);
    assert_eq!(segment::list(dir.path()).unwrap(), vec![now[0]]);
}

/// Writers in step with the syncs share them (the committer gathers a
/// batch as large as the last one), and every acknowledged record reads
/// back, in the order of its position, after a reopen.
#[test]
fn concurrent_writers_share_syncs_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let syncs = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&syncs);
    let listener: DurabilityListener = Box::new(move |_| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    let log = Log::open(dir.path(), LogOptions::default(), listener, |_| Ok(())).unwrap();
    let (writers, each) = (8, 300);
    let acknowledged: Vec<(u64, Vec<u8>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let log = &log;
                scope.spawn(move || {
                    (0..each)
                        .map(|i| {
                            let payload = format!("writer-{w}-record-{i}").into_bytes();
                            let at = log.append(&payload).unwrap();
                            wait_durable(log, at.end);
                            (at.payload_pos, payload)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let batches = syncs.load(Ordering::Relaxed);
    assert!(
        batches < (writers * each) as u64,
        "{batches} syncs for {} appends",
        writers * each
    );
    // Every published batch was synced, and the statistics say so.
    let stats = log.sync_stats();
    assert_eq!(stats.syncs, batches);
    assert!(stats.sync_time > Duration::ZERO);
    // The committer's thread clock: it did the writes and syncs, so it
    // used some CPU, and no more than the whole process did.
    assert!(stats.committer_cpu > Duration::ZERO);
    assert!(stats.committer_cpu <= process_cpu_time());
    drop(log);
    let (_log, recovered) = open_collect(dir.path(), LogOptions::default());
    let mut expected = acknowledged;
    expected.sort();
    assert_eq!(recovered, expected);
}

fn process_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `now`.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) },
        0
    );
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[test]
fn the_thread_clock_counts_only_the_calling_threads_work() {
    // Work until the thread's own clock shows 20 ms (however long that
    // takes on a busy machine): a clock that never moves fails here.
    let before = thread_cpu_time();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut x = 1u64;
    while thread_cpu_time() - before < Duration::from_millis(20) {
        assert!(
            std::time::Instant::now() < deadline,
            "the thread clock did not reach 20 ms in 60 s of work"
        );
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    let busy = thread_cpu_time() - before;
    // A clock of the whole process would show this thread's work in a
    // fresh thread too.
    let other = std::thread::spawn(thread_cpu_time).join().unwrap();
    assert!(other < busy, "a fresh thread has used {other:?}");
    let idle = thread_cpu_time();
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        thread_cpu_time() - idle < Duration::from_millis(10),
        "sleeping is not CPU"
    );
}

#[test]
fn a_log_that_does_not_sync_counts_no_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        sync: SyncMode::Never,
        ..LogOptions::default()
    };
    let log = Log::open(dir.path(), options, no_listener(), |_| Ok(())).unwrap();
    let at = log.append(b"unsynced").unwrap();
    wait_durable(&log, at.end);
    let stats = log.sync_stats();
    assert_eq!((stats.syncs, stats.sync_time), (0, Duration::ZERO));
    assert_eq!(stats.quantile(1.0), None, "no sync in the histogram");
    assert_eq!(stats.records, 1, "the record is counted");
}

/// A checkpoint calls `sync_written` before it points into the log: with
/// `SyncMode::Never` it syncs what was written (once, until more is), and
/// with group commit there is nothing left to sync.
#[test]
fn sync_written_syncs_a_log_that_never_syncs_and_only_it() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        sync: SyncMode::Never,
        ..LogOptions::default()
    };
    let log = Log::open(dir.path(), options, no_listener(), |_| Ok(())).unwrap();
    let at = log.append(b"unsynced").unwrap();
    wait_durable(&log, at.end);
    log.sync_written().unwrap();
    assert_eq!(log.sync_stats().syncs, 1, "the written records were synced");
    log.sync_written().unwrap();
    assert_eq!(log.sync_stats().syncs, 1, "nothing new to sync");
    let at = log.append(b"more").unwrap();
    wait_durable(&log, at.end);
    log.sync_written().unwrap();
    assert_eq!(log.sync_stats().syncs, 2);

    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogOptions::default(), no_listener(), |_| Ok(())).unwrap();
    let at = log.append(b"synced").unwrap();
    wait_durable(&log, at.end);
    let syncs = log.sync_stats().syncs;
    log.sync_written().unwrap();
    assert_eq!(
        log.sync_stats().syncs,
        syncs,
        "group commit synced it already"
    );
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("timed out waiting until {what}");
}

/// A busy log writes into segments prepared ahead as zeros: the active
/// one is longer than its records, every sealed one is cut to its
/// records, a crash image (the files as a killed process leaves them)
/// recovers every durable record, and a clean close leaves no zeros and
/// no spare behind.
#[test]
fn a_busy_log_writes_into_prepared_segments_and_recovers_from_them() {
    let dir = tempfile::tempdir().unwrap();
    let options = LogOptions {
        segment_bytes: 4096,
        manual_commit: false,
        ..LogOptions::default()
    };
    let (log, _) = open_collect(dir.path(), options.clone());
    let mut acknowledged = Vec::new();
    let mut append = |log: &Log, i: usize| {
        let payload = format!("record-{i:05}-{}", "p".repeat(40)).into_bytes();
        let at = log.append(&payload).unwrap();
        wait_durable(log, at.end);
        acknowledged.push((at.payload_pos, payload));
    };
    // The first segment grows until the log asks for a spare, which it
    // rolls into once ready; then it asks for the next.
    let mut i = 0;
    while log.segment_count() < 2 {
        append(&log, i);
        i += 1;
    }
    wait_until("the next spare is ready", || log.spare_ready());
    let spare = dir.path().join(spare::FILE_NAME);
    assert_eq!(file_len(&spare), 4096);
    while log.segment_count() < 3 {
        append(&log, i);
        i += 1;
    }

    let bases = segment::list(dir.path()).unwrap();
    assert_eq!(bases.len(), 3);
    let active = segment::path_for(dir.path(), bases[2]);
    let records_in_active = log.durable_position() - bases[2];
    assert!(records_in_active < 4096);
    assert_eq!(file_len(&active), 4096, "the active segment was a spare");
    let bytes = std::fs::read(&active).unwrap();
    assert!(
        bytes[records_in_active as usize..].iter().all(|b| *b == 0),
        "zeros follow the records"
    );
    for pair in bases.windows(2) {
        let sealed = segment::path_for(dir.path(), pair[0]);
        assert_eq!(
            file_len(&sealed),
            pair[1] - pair[0],
            "sealed to its records"
        );
    }

    // Crash image: the files as they are now, zeros and spare included.
    let image = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), image.path().join(entry.file_name())).unwrap();
    }
    let (recovered_log, recovered) = open_collect(image.path(), options.clone());
    assert_eq!(
        recovered, acknowledged,
        "every durable record, nothing else"
    );
    assert_eq!(
        file_len(&segment::path_for(image.path(), bases[2])),
        records_in_active,
        "recovery cut the zeros"
    );
    let at = recovered_log.append(b"after the crash").unwrap();
    assert_eq!(at.payload_pos, log.durable_position() + HEADER_LEN);
    drop(recovered_log);

    // A clean close seals the active segment and removes the spare.
    wait_until("the next spare is ready", || log.spare_ready());
    let end = log.durable_position();
    drop(log);
    assert_eq!(file_len(&active), end - bases[2], "sealed at close");
    assert!(!spare.exists(), "the unused spare is removed");
    let (_log, recovered) = open_collect(dir.path(), options);
    assert_eq!(recovered, acknowledged);
}

#[test]
fn logs_without_preallocation_or_committer_thread_prepare_no_spare() {
    for options in [
        LogOptions {
            segment_bytes: 64,
            preallocate: false,
            ..LogOptions::default()
        },
        LogOptions {
            segment_bytes: 64,
            manual_commit: true,
            ..LogOptions::default()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        // One left by an earlier process that did preallocate goes too.
        std::fs::write(dir.path().join(spare::FILE_NAME), [0; 64]).unwrap();
        let (log, _) = open_collect(dir.path(), options.clone());
        for p in payloads(20) {
            let at = log.append(&p).unwrap();
            if options.manual_commit {
                log.commit().unwrap();
            }
            wait_durable(&log, at.end);
        }
        assert!(log.segment_count() > 3, "{options:?}");
        assert!(!log.spare_ready());
        assert!(!dir.path().join(spare::FILE_NAME).exists(), "{options:?}");
    }
}

/// Resident kilobytes of the mapping that starts at `address`, from
/// `/proc/self/smaps`.
fn mapping_rss_kb(address: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut lines = smaps.lines();
    while let Some(line) = lines.next() {
        let start = line.split('-').next().unwrap_or("");
        if usize::from_str_radix(start, 16).ok() != Some(address) {
            continue;
        }
        for field in lines.by_ref() {
            if let Some(kb) = field.strip_prefix("Rss:") {
                return kb.trim().trim_end_matches("kB").trim().parse().unwrap();
            }
        }
    }
    panic!("no mapping at {address:#x} in /proc/self/smaps");
}

#[test]
fn released_mapped_pages_leave_resident_memory_and_reads_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open_collect(dir.path(), LogOptions::default());
    let records: Vec<Vec<u8>> = (0..256u32).map(|i| vec![(i % 251) as u8; 4096]).collect();
    let placed: Vec<Appended> = records.iter().map(|r| log.append(r).unwrap()).collect();
    wait_durable(&log, placed.last().unwrap().end);
    let read_all = || {
        for (at, record) in placed.iter().zip(&records) {
            let mut buf = vec![0; record.len()];
            log.read_at(at.payload_pos, &mut buf).unwrap();
            assert_eq!(&buf, record);
        }
    };
    let address = {
        let segments = log.shared.segments.read().unwrap();
        let segment = segments.values().next().unwrap();
        segment.mapping_address().expect("the segment is mapped")
    };
    read_all();
    let before = mapping_rss_kb(address);
    assert!(
        before >= 1024,
        "reading 1 MiB through the mapping left {before} kB resident"
    );
    log.release_mapped_pages();
    assert_eq!(mapping_rss_kb(address), 0, "released pages stay resident");
    read_all();
    assert!(
        mapping_rss_kb(address) >= 1024,
        "reads map the pages back in"
    );
}

/// A bulk writer that waits for room never has more than the limit (and
/// the record it just added) waiting in the buffer, however far ahead of
/// the disk it copies; without waiting it runs megabytes ahead.
#[test]
fn a_writer_waiting_for_room_keeps_the_buffer_small() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = open_collect(dir.path(), LogOptions::default());
    let record = vec![7u8; 64 << 10];
    let limit = 256 << 10;
    let mut most = 0;
    for _ in 0..1024 {
        log.append(&record).unwrap();
        log.wait_for_room(limit);
        most = most.max(log.buffered_bytes());
    }
    assert!(most <= limit, "{most} bytes waited in the buffer");
    wait_durable(&log, log.end_position());
}
