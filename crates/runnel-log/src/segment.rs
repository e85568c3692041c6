//! Segment files: naming, discovery and the recovery scan.
//!
//! A segment is named by the global log position of its first byte,
//! zero-padded to 20 digits (`00000000000000000000.log`), so a directory
//! listing sorts in log order and a position maps to its segment by a
//! range lookup. Segments are contiguous: each starts where the previous
//! one's valid bytes end.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::frame::{self, HEADER_LEN};
use crate::LogError;

const SUFFIX: &str = ".log";

pub fn file_name(base: u64) -> String {
    format!("{base:020}{SUFFIX}")
}

pub fn path_for(dir: &Path, base: u64) -> PathBuf {
    dir.join(file_name(base))
}

/// Parses a segment file name back to its base position.
pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Segment bases present in `dir`, ascending.
pub fn list(dir: &Path) -> Result<Vec<u64>, LogError> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| LogError::io("listing the log directory", e))? {
        let entry = entry.map_err(|e| LogError::io("listing the log directory", e))?;
        if let Some(base) = entry.file_name().to_str().and_then(parse_name) {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

/// Creates `dir` and any missing parents, and fsyncs the parent of each
/// directory it created, so the new entries survive a power loss.
pub fn create_dir_durable(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    fs::create_dir_all(dir)?;
    for created in missing {
        let parent = created
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Writes `len` bytes of `file` from `offset` back to the disk and waits
/// for them (`sync_file_range`): a large file written this way, a piece
/// at a time, never queues more than one piece ahead of other writers'
/// fsyncs. Not a durability barrier (no metadata, no device flush): an
/// fsync must still follow. Where the call is unsupported, does nothing.
pub fn write_back(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain syscall on an open descriptor; no memory is passed.
    let done = unsafe { libc::sync_file_range(file.as_raw_fd(), offset as i64, len as i64, flags) };
    if done == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::ENOSYS) | Some(libc::EINVAL) | Some(libc::ESPIPE) => Ok(()),
        _ => Err(err),
    }
}

/// Fsyncs a directory so that created, renamed or removed entries persist.
pub fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::io("syncing the log directory", e))
}

pub fn open_rw(path: &Path, create: bool) -> Result<File, LogError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
        .map_err(|e| LogError::io("opening a segment", e))
}

/// Outcome of scanning one segment.
pub struct Scan {
    /// Bytes of whole, checksummed records from the segment's start.
    pub valid_len: u64,
    /// Whether anything followed the valid records (torn or corrupt).
    pub torn: bool,
    /// What followed began with an all-zero header: the unused part of a
    /// preallocated segment, or a write that never reached the disk.
    pub zeros_follow: bool,
}

/// Scans a segment, calling `on_record(offset_in_segment_of_payload,
/// payload)` for each valid record, and stops at the first bad frame.
pub fn scan(
    path: &Path,
    max_record: u32,
    mut on_record: impl FnMut(u64, &[u8]) -> Result<(), LogError>,
) -> Result<Scan, LogError> {
    let file = File::open(path).map_err(|e| LogError::io("opening a segment for recovery", e))?;
    let file_len = file
        .metadata()
        .map_err(|e| LogError::io("reading segment metadata", e))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut pos = 0u64;
    let mut payload = Vec::new();
    loop {
        if pos == file_len {
            return Ok(Scan {
                valid_len: pos,
                torn: false,
                zeros_follow: false,
            });
        }
        let torn = |zeros_follow| {
            Ok(Scan {
                valid_len: pos,
                torn: true,
                zeros_follow,
            })
        };
        if file_len - pos < HEADER_LEN {
            return torn(false);
        }
        let mut header = [0u8; HEADER_LEN as usize];
        reader
            .read_exact(&mut header)
            .map_err(|e| LogError::io("reading a segment", e))?;
        if header == [0; HEADER_LEN as usize] {
            return torn(true);
        }
        let header = frame::decode_header(&header);
        if header.len == 0
            || header.len > max_record
            || u64::from(header.len) > file_len - pos - HEADER_LEN
        {
            return torn(false);
        }
        payload.resize(header.len as usize, 0);
        reader
            .read_exact(&mut payload)
            .map_err(|e| LogError::io("reading a segment", e))?;
        if frame::checksum(&payload) != header.crc {
            return torn(false);
        }
        on_record(pos + HEADER_LEN, &payload)?;
        pos += HEADER_LEN + u64::from(header.len);
    }
}

/// An open segment: its file, and a read-only mapping of it so reads of
/// durable bytes are a copy from the page cache instead of a syscall.
pub struct Segment {
    pub file: Arc<File>,
    map: Option<Mapping>,
    /// A sealed segment's length: reads past it are refused rather than
    /// touching the mapping (a page past the end of a mapped file faults
    /// with SIGBUS). `None` for the segment being written.
    sealed_len: Option<u64>,
}

impl Segment {
    /// Maps `map_len` bytes of address space over the file. The file may
    /// be shorter (the active segment grows into the mapping); only bytes
    /// below the durable position, which the file holds, are ever read.
    pub fn new(file: File, map_len: u64) -> Segment {
        let map = Mapping::new(&file, map_len);
        if map.is_none() {
            tracing::debug!("segment mapping failed; reads use pread");
        }
        Segment {
            file: Arc::new(file),
            map,
            sealed_len: None,
        }
    }

    /// A recovered segment that is no longer written, of `len` bytes.
    pub fn sealed(file: File, map_len: u64, len: u64) -> Segment {
        Segment {
            sealed_len: Some(len),
            ..Segment::new(file, map_len)
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset` with `pread`.
    pub fn pread_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_sealed(buf.len(), offset)?;
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset)
    }

    fn check_sealed(&self, len: usize, offset: u64) -> io::Result<()> {
        match self.sealed_len {
            // The state points past what the file holds (it lost bytes it
            // was never told were synced).
            Some(sealed) if offset.saturating_add(len as u64) > sealed => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read of {len} bytes at {offset} past the segment's {sealed} bytes"),
            )),
            _ => Ok(()),
        }
    }

    /// Unmaps the pages reads faulted into this process (see
    /// [`crate::Log::release_mapped_pages`]).
    pub fn release_mapped_pages(&self) {
        if let Some(map) = &self.map {
            map.release();
        }
    }

    /// Where the mapping starts, if the segment is mapped (for tests that
    /// look it up in `/proc/self/smaps`).
    #[cfg(test)]
    pub(crate) fn mapping_address(&self) -> Option<usize> {
        self.map.as_ref().map(|m| m.ptr as usize)
    }

    /// Lets the segment grow again (the log appends to it).
    pub fn unseal(&mut self) {
        self.sealed_len = None;
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_sealed(buf.len(), offset)?;
        if let Some(map) = &self.map {
            if let Some(bytes) = map.get(offset, buf.len()) {
                buf.copy_from_slice(bytes);
                return Ok(());
            }
        }
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset)
    }
}

/// A read-only shared mapping, unmapped on drop.
struct Mapping {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only and the pointer is only read through
// shared slices; the memory lives until drop.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(file: &File, len: u64) -> Option<Mapping> {
        use std::os::fd::AsRawFd;
        let len = usize::try_from(len).ok()?;
        // SAFETY: a fresh read-only shared mapping of a file we hold open;
        // failure is reported as MAP_FAILED and handled.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Mapping {
            ptr: ptr as *const u8,
            len,
        })
    }

    /// Drops this process's page table entries for the whole mapping.
    /// The file's pages stay in the kernel's page cache; the next read of
    /// one maps it back in. The bytes read never change: the mapping is
    /// shared and read-only, so a read racing this sees the same bytes.
    fn release(&self) {
        // SAFETY: advice over exactly the range `new` mapped; for a shared
        // file mapping MADV_DONTNEED changes no contents.
        let _ =
            unsafe { libc::madvise(self.ptr as *mut libc::c_void, self.len, libc::MADV_DONTNEED) };
    }

    fn get(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        // SAFETY: within the mapping; callers only ask for bytes the file
        // holds (below the durable position), which never shrink while
        // the log is open.
        (end <= self.len).then(|| unsafe { std::slice::from_raw_parts(self.ptr.add(start), len) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort() {
        assert_eq!(file_name(42), "00000000000000000042.log");
        assert_eq!(parse_name(&file_name(u64::MAX)), Some(u64::MAX));
        for bad in [
            "42.log",
            "0000000000000000004x.log",
            "00000000000000000042.tmp",
        ] {
            assert_eq!(parse_name(bad), None);
        }
    }
}
