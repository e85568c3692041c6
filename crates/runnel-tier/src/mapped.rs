//! Reads of a local (`file://`) store by mapping the object's file: the
//! bytes are served from the page cache with no copy and no fresh memory.
//! A reconnect storm reading tens of MiB of tiered history through
//! ordinary reads spent most of its time faulting in and zeroing new
//! pages for the buffers. Small ranges are read the ordinary way, so the
//! cache cannot pile up more mappings than the kernel allows a process.

use std::ops::Range;
use std::path::PathBuf;

use bytes::Bytes;

/// Ranges shorter than this are read, not mapped.
pub(crate) const MIN_MAPPED: u64 = 64 << 10;

/// Mapping offsets are a multiple of this (of every page size in use).
const ALIGN: u64 = 64 << 10;

/// Bytes `range` of `file`, mapped.
pub(crate) async fn map_range(file: PathBuf, range: Range<u64>) -> object_store::Result<Bytes> {
    let shown = file.display().to_string();
    tokio::task::spawn_blocking(move || map_now(&file, range))
        .await
        .map_err(|e| generic(format!("mapping {shown}: {e}")))?
}

fn map_now(file: &std::path::Path, range: Range<u64>) -> object_store::Result<Bytes> {
    let opened = std::fs::File::open(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => object_store::Error::NotFound {
            path: file.display().to_string(),
            source: Box::new(e),
        },
        _ => generic(format!("opening {}: {e}", file.display())),
    })?;
    let size = opened
        .metadata()
        .map_err(|e| generic(format!("{}: {e}", file.display())))?
        .len();
    if range.end > size || range.start > range.end {
        return Err(generic(format!(
            "{}: range {range:?} is outside its {size} bytes",
            file.display()
        )));
    }
    let start = range.start - range.start % ALIGN;
    // SAFETY: the mapping is read only, and the file is never written in
    // place once it is an object: puts write a temporary file and rename
    // it, and deletes unlink it, which leaves an existing mapping valid.
    // Only a process outside Runnel truncating the bucket's files could
    // make a read of the mapping fault.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(start)
            .len((range.end - start) as usize)
            .map(&opened)
    }
    .map_err(|e| generic(format!("mapping {}: {e}", file.display())))?;
    Ok(Bytes::from_owner(map).slice((range.start - start) as usize..))
}

fn generic(reason: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "local",
        source: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_mapped_range_reads_the_files_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("object");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        for range in [0..100_000u64, 70_000..300_000, 131_072..196_608, 5..5] {
            let got = map_range(path.clone(), range.clone()).await.unwrap();
            assert_eq!(&got[..], &data[range.start as usize..range.end as usize]);
        }
        assert!(map_range(path.clone(), 200_000..300_001).await.is_err());
        assert!(matches!(
            map_range(dir.path().join("missing"), 0..10).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }
}
