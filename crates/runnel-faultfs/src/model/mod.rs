//! The durability model: an in-memory file system with two images.
//!
//! Every operation changes the *current* image, which is what running
//! processes see (the page cache and a disk's volatile write cache
//! together). The *durable* image is what the disk would hold after power
//! loss, and it changes only as a strict POSIX reading of `fsync` allows:
//!
//! - a file's contents and size become durable when that file is fsynced
//!   (`fdatasync` counts as `fsync`);
//! - a directory's entries (created, renamed, removed) become durable when
//!   that directory is fsynced (FUSE `fsyncdir`), all of them at once;
//! - a file is reachable after power loss only through durable entries, so
//!   a new file keeps its contents only if it was fsynced *and* its entry
//!   was made durable by fsyncing its parent (and so on up to the root).
//!
//! [`Model::power_cut`] makes the model *dead* (every later operation
//! fails with `EIO`, so a dying process writes nothing more) and replaces
//! the current image with the durable one, optionally keeping a prefix of
//! one file's last unsynced write (a torn write). [`Model::revive`] makes
//! it answer again. Injected faults ([`Fault`]) make writes or fsyncs of
//! matching paths fail; a failed fsync forgets the unsynced data the way
//! Linux marks failed pages clean, so an fsync retried after a failure
//! succeeds without making that data durable.
//!
//! Inode numbers are never reused, so the kernel's references to inodes
//! that a power cut removed stay harmless (they are kept as orphans until
//! forgotten). Errors are `libc` errno values.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

mod cut;
#[cfg(test)]
mod tests;
mod types;

pub use types::*;

pub type Ino = u64;
/// A `libc` errno value.
pub type Errno = i32;
pub type Result<T> = std::result::Result<T, Errno>;

/// The root directory's inode number (FUSE's).
pub const ROOT: Ino = 1;
/// Reported block size.
pub const BLOCK: u64 = 4096;
/// How many paths a [`CutReport`] lists at most.
const MAX_LISTED_PATHS: usize = 32;

struct FileData {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Byte range (start, end) outside which `data` and `durable` agree,
    /// apart from their lengths; `None` when they are equal.
    dirty: Option<(u64, u64)>,
    /// The last write since the last fsync: (offset, bytes).
    last_write: Option<(u64, Vec<u8>)>,
}

struct DirData {
    entries: BTreeMap<OsString, Ino>,
    durable: BTreeMap<OsString, Ino>,
}

enum Content {
    File(FileData),
    Dir(DirData),
}

struct Inode {
    content: Content,
    /// Where the current image holds it (parent 0: nowhere).
    parent: Ino,
    name: OsString,
    /// Entries naming it in the current image.
    nlink: u32,
    /// Entries naming it in durable directory images.
    durable_links: u32,
    /// The kernel's references (lookups not yet forgotten).
    lookups: u64,
    /// Open file and directory handles.
    opens: u64,
    perm: u16,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
}

impl Inode {
    fn new(content: Content, parent: Ino, name: &OsStr, perm: u16, uid: u32, gid: u32) -> Inode {
        let now = SystemTime::now();
        Inode {
            content,
            parent,
            name: name.to_owned(),
            nlink: 1,
            durable_links: 0,
            lookups: 0,
            opens: 0,
            perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
        }
    }

    fn kind(&self) -> Kind {
        match self.content {
            Content::File(_) => Kind::File,
            Content::Dir(_) => Kind::Dir,
        }
    }

    fn file_len(&self) -> u64 {
        match &self.content {
            Content::File(f) => f.data.len() as u64,
            Content::Dir(_) => 0,
        }
    }
}

/// The two images and everything else the file system knows.
pub struct Model {
    inodes: HashMap<Ino, Inode>,
    next_ino: Ino,
    alive: bool,
    capacity: u64,
    /// Bytes of current file data (the "disk" usage statfs reports).
    used: u64,
    faults: Vec<Fault>,
    /// A power cut waiting for a write to a matching path.
    armed: Option<ArmedCut>,
    /// A write triggered the armed cut; the FUSE side has not yet told
    /// the kernel to drop its caches.
    cut_by_write: bool,
    stats: Stats,
}

fn merge(range: Option<(u64, u64)>, start: u64, end: u64) -> Option<(u64, u64)> {
    if start >= end {
        return range;
    }
    Some(match range {
        Some((a, b)) => (a.min(start), b.max(end)),
        None => (start, end),
    })
}

impl Model {
    /// An empty file system of `capacity` bytes (writes past it get
    /// `ENOSPC`) whose root belongs to `uid`/`gid`.
    pub fn new(capacity: u64, uid: u32, gid: u32) -> Model {
        let root = Inode::new(
            Content::Dir(DirData {
                entries: BTreeMap::new(),
                durable: BTreeMap::new(),
            }),
            ROOT,
            OsStr::new(""),
            0o755,
            uid,
            gid,
        );
        Model {
            inodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            alive: true,
            capacity,
            used: 0,
            faults: Vec::new(),
            armed: None,
            cut_by_write: false,
            stats: Stats::default(),
        }
    }

    fn alive(&mut self) -> Result<()> {
        if self.alive {
            Ok(())
        } else {
            self.stats.refused_while_dead += 1;
            Err(libc::EIO)
        }
    }

    fn inode(&self, ino: Ino) -> Result<&Inode> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn inode_mut(&mut self, ino: Ino) -> Result<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn dir(&self, ino: Ino) -> Result<&DirData> {
        match &self.inode(ino)?.content {
            Content::Dir(d) => Ok(d),
            Content::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn dir_mut(&mut self, ino: Ino) -> Result<&mut DirData> {
        match &mut self.inode_mut(ino)?.content {
            Content::Dir(d) => Ok(d),
            Content::File(_) => Err(libc::ENOTDIR),
        }
    }

    fn file_mut(&mut self, ino: Ino) -> Result<&mut FileData> {
        match &mut self.inode_mut(ino)?.content {
            Content::File(f) => Ok(f),
            Content::Dir(_) => Err(libc::EISDIR),
        }
    }

    /// The current path of an inode, from the mount's root (`/a/b`).
    pub fn path_of(&self, ino: Ino) -> String {
        let mut parts = Vec::new();
        let mut at = ino;
        while at != ROOT {
            match self.inodes.get(&at) {
                Some(inode) if inode.parent != 0 && parts.len() < 256 => {
                    parts.push(inode.name.to_string_lossy().into_owned());
                    at = inode.parent;
                }
                _ => return format!("<unlinked inode {ino}>"),
            }
        }
        parts.reverse();
        format!("/{}", parts.join("/"))
    }

    /// Fails with the errno of the first fault on `op` matching `ino`'s path.
    fn injected(&mut self, op: FaultOp, ino: Ino) -> Result<()> {
        if !self.faults.iter().any(|f| f.op == op) {
            return Ok(());
        }
        let path = self.path_of(ino);
        let hit = self
            .faults
            .iter()
            .find(|f| f.op == op && f.path.as_deref().is_none_or(|p| path.contains(p)));
        match hit {
            Some(fault) => {
                self.stats.injected_failures += 1;
                Err(fault.errno)
            }
            None => Ok(()),
        }
    }

    fn attr_of(&self, ino: Ino, inode: &Inode) -> Attr {
        let (size, nlink) = match &inode.content {
            Content::File(f) => (f.data.len() as u64, inode.nlink),
            Content::Dir(d) => {
                let subdirs = d
                    .entries
                    .values()
                    .filter(|c| self.inodes.get(c).is_some_and(|i| i.kind() == Kind::Dir))
                    .count() as u32;
                (BLOCK, 2 + subdirs)
            }
        };
        Attr {
            ino,
            kind: inode.kind(),
            size,
            perm: inode.perm,
            nlink,
            uid: inode.uid,
            gid: inode.gid,
            atime: inode.atime,
            mtime: inode.mtime,
            ctime: inode.ctime,
        }
    }

    fn attr(&self, ino: Ino) -> Result<Attr> {
        Ok(self.attr_of(ino, self.inode(ino)?))
    }

    /// Looks `name` up in `parent`; counts a kernel reference.
    pub fn lookup(&mut self, parent: Ino, name: &OsStr) -> Result<Attr> {
        self.alive()?;
        let ino = *self.dir(parent)?.entries.get(name).ok_or(libc::ENOENT)?;
        self.inode_mut(ino)?.lookups += 1;
        self.attr(ino)
    }

    /// The kernel dropped `n` references.
    pub fn forget(&mut self, ino: Ino, n: u64) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.lookups = inode.lookups.saturating_sub(n);
            self.collect(ino);
        }
    }

    pub fn getattr(&mut self, ino: Ino) -> Result<Attr> {
        self.alive()?;
        self.attr(ino)
    }

    pub fn setattr(&mut self, ino: Ino, change: SetAttr) -> Result<Attr> {
        self.alive()?;
        if let Some(size) = change.size {
            self.set_size(ino, size)?;
        }
        let inode = self.inode_mut(ino)?;
        if let Some(mode) = change.mode {
            inode.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = change.uid {
            inode.uid = uid;
        }
        if let Some(gid) = change.gid {
            inode.gid = gid;
        }
        if let Some(atime) = change.atime {
            inode.atime = atime;
        }
        if let Some(mtime) = change.mtime {
            inode.mtime = mtime;
        }
        inode.ctime = SystemTime::now();
        self.attr(ino)
    }

    /// Truncates or extends (with zeros) a file of the current image.
    fn set_size(&mut self, ino: Ino, size: u64) -> Result<()> {
        let old = self.inode(ino)?.file_len();
        if size > old {
            self.injected(FaultOp::Write, ino)?;
            if self.used + (size - old) > self.capacity {
                return Err(libc::ENOSPC);
            }
        }
        let len = usize::try_from(size).map_err(|_| libc::EFBIG)?;
        let file = self.file_mut(ino)?;
        file.data.resize(len, 0);
        file.dirty = merge(file.dirty, old.min(size), old.max(size));
        file.last_write = None;
        self.used = self.used + size - old;
        let inode = self.inode_mut(ino)?;
        inode.mtime = SystemTime::now();
        Ok(())
    }

    fn add_entry(&mut self, parent: Ino, name: &OsStr, inode: Inode) -> Result<Ino> {
        if self.dir(parent)?.entries.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, inode);
        self.dir_mut(parent)?.entries.insert(name.to_owned(), ino);
        self.inode_mut(parent)?.mtime = SystemTime::now();
        Ok(ino)
    }

    /// Creates a directory; counts a kernel reference.
    pub fn mkdir(
        &mut self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        self.alive()?;
        self.dir(parent)?;
        let dir = Content::Dir(DirData {
            entries: BTreeMap::new(),
            durable: BTreeMap::new(),
        });
        let ino = self.add_entry(
            parent,
            name,
            Inode::new(dir, parent, name, (mode & 0o7777) as u16, uid, gid),
        )?;
        self.inode_mut(ino)?.lookups += 1;
        self.attr(ino)
    }

    /// Creates (or, without `exclusive`, opens an existing) regular file
    /// and opens it; counts a kernel reference and an open handle.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        mode: u32,
        uid: u32,
        gid: u32,
        exclusive: bool,
        truncate: bool,
    ) -> Result<Attr> {
        self.alive()?;
        let existing = self.dir(parent)?.entries.get(name).copied();
        let ino = match existing {
            Some(_) if exclusive => return Err(libc::EEXIST),
            Some(ino) => {
                if self.inode(ino)?.kind() == Kind::Dir {
                    return Err(libc::EISDIR);
                }
                if truncate {
                    self.set_size(ino, 0)?;
                }
                ino
            }
            None => {
                let file = Content::File(FileData {
                    data: Vec::new(),
                    durable: Vec::new(),
                    dirty: None,
                    last_write: None,
                });
                self.add_entry(
                    parent,
                    name,
                    Inode::new(file, parent, name, (mode & 0o7777) as u16, uid, gid),
                )?
            }
        };
        let inode = self.inode_mut(ino)?;
        inode.lookups += 1;
        inode.opens += 1;
        self.attr(ino)
    }

    /// Opens a file or directory handle.
    pub fn open(&mut self, ino: Ino) -> Result<Kind> {
        self.alive()?;
        let inode = self.inode_mut(ino)?;
        inode.opens += 1;
        Ok(inode.kind())
    }

    /// Closes a handle. Never fails: the kernel forgets the handle either
    /// way, dead or alive.
    pub fn release(&mut self, ino: Ino) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.opens = inode.opens.saturating_sub(1);
            self.collect(ino);
        }
    }

    pub fn read(&mut self, ino: Ino, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.alive()?;
        let inode = self.inode_mut(ino)?;
        inode.atime = SystemTime::now();
        let Content::File(file) = &inode.content else {
            return Err(libc::EISDIR);
        };
        let start = (offset.min(file.data.len() as u64)) as usize;
        let end = (start + size as usize).min(file.data.len());
        Ok(file.data[start..end].to_vec())
    }

    pub fn write(&mut self, ino: Ino, offset: u64, bytes: &[u8]) -> Result<u32> {
        self.alive()?;
        self.inode(ino)?;
        self.injected(FaultOp::Write, ino)?;
        let end = offset.checked_add(bytes.len() as u64).ok_or(libc::EFBIG)?;
        let old = self.inode(ino)?.file_len();
        if end > old && self.used + (end - old) > self.capacity {
            return Err(libc::ENOSPC);
        }
        let file = self.file_mut(ino)?;
        let end_us = usize::try_from(end).map_err(|_| libc::EFBIG)?;
        if end_us > file.data.len() {
            file.data.resize(end_us, 0);
        }
        file.data[offset as usize..end_us].copy_from_slice(bytes);
        // Extending past the old end also leaves zeros between: all of it
        // is unsynced.
        file.dirty = merge(file.dirty, offset.min(old), end);
        file.last_write = Some((offset, bytes.to_vec()));
        self.used += end.saturating_sub(old);
        let now = SystemTime::now();
        let inode = self.inode_mut(ino)?;
        inode.mtime = now;
        inode.ctime = now;
        self.stats.writes += 1;
        self.stats.bytes_written += bytes.len() as u64;
        if let Some(armed) = self.armed.take() {
            if self.path_of(ino).contains(&armed.path) {
                self.cut(armed.torn_seed, Some(ino));
                self.cut_by_write = true;
                return Err(libc::EIO);
            }
            self.armed = Some(armed);
        }
        Ok(bytes.len() as u32)
    }

    /// `fallocate` mode 0: extends the file with zeros to cover the range.
    pub fn fallocate(&mut self, ino: Ino, offset: u64, len: u64, mode: i32) -> Result<()> {
        self.alive()?;
        if mode != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let end = offset.checked_add(len).ok_or(libc::EFBIG)?;
        if end > self.inode(ino)?.file_len() {
            self.set_size(ino, end)?;
        }
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its contents and size become durable.
    pub fn fsync(&mut self, ino: Ino) -> Result<()> {
        self.alive()?;
        self.file_mut(ino)?;
        self.stats.fsyncs += 1;
        if let Err(errno) = self.injected(FaultOp::Fsync, ino) {
            // Like Linux after a failed writeback: the pages are marked
            // clean, so the data is in the page cache but will never reach
            // the disk, and the next fsync has nothing to report.
            let file = self.file_mut(ino)?;
            let forgotten = file
                .dirty
                .map_or(0, |(a, b)| b.min(file.data.len() as u64).saturating_sub(a));
            file.dirty = None;
            file.last_write = None;
            self.stats.bytes_forgotten_by_failed_fsyncs += forgotten;
            return Err(errno);
        }
        let file = self.file_mut(ino)?;
        let len = file.data.len();
        file.durable.resize(len, 0);
        if let Some((a, b)) = file.dirty.take() {
            let (a, b) = ((a as usize).min(len), (b as usize).min(len));
            file.durable[a..b].copy_from_slice(&file.data[a..b]);
        }
        file.last_write = None;
        Ok(())
    }

    /// `fsync` of a directory: its current entries become durable.
    pub fn fsync_dir(&mut self, ino: Ino) -> Result<()> {
        self.alive()?;
        self.dir(ino)?;
        self.stats.dir_fsyncs += 1;
        self.injected(FaultOp::Fsync, ino)?;
        let dir = self.dir_mut(ino)?;
        let new = dir.entries.clone();
        let old = std::mem::replace(&mut dir.durable, new.clone());
        for child in new.values() {
            if let Some(inode) = self.inodes.get_mut(child) {
                inode.durable_links += 1;
            }
        }
        for child in old.values() {
            if let Some(inode) = self.inodes.get_mut(child) {
                inode.durable_links = inode.durable_links.saturating_sub(1);
            }
            self.collect(*child);
        }
        Ok(())
    }

    /// Removes the entry `name` of `parent`, which must be of `kind`.
    fn remove_entry(&mut self, parent: Ino, name: &OsStr, kind: Kind) -> Result<()> {
        self.alive()?;
        let ino = *self.dir(parent)?.entries.get(name).ok_or(libc::ENOENT)?;
        match (kind, &self.inode(ino)?.content) {
            (Kind::File, Content::Dir(_)) => return Err(libc::EISDIR),
            (Kind::Dir, Content::File(_)) => return Err(libc::ENOTDIR),
            (Kind::Dir, Content::Dir(d)) if !d.entries.is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.inode_mut(parent)?.mtime = SystemTime::now();
        self.unlink_inode(ino);
        Ok(())
    }

    fn unlink_inode(&mut self, ino: Ino) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            inode.nlink = inode.nlink.saturating_sub(1);
            inode.ctime = SystemTime::now();
            if inode.nlink == 0 {
                inode.parent = 0;
            }
        }
        self.collect(ino);
    }

    /// Gives a file another name (`link(2)`; the local object store puts
    /// create-only objects this way). Like any new entry, it is durable
    /// once its directory is fsynced. Counts a kernel reference.
    pub fn link(&mut self, ino: Ino, new_parent: Ino, new_name: &OsStr) -> Result<Attr> {
        self.alive()?;
        if self.inode(ino)?.kind() == Kind::Dir {
            return Err(libc::EPERM);
        }
        if self.dir(new_parent)?.entries.contains_key(new_name) {
            return Err(libc::EEXIST);
        }
        self.dir_mut(new_parent)?
            .entries
            .insert(new_name.to_owned(), ino);
        let now = SystemTime::now();
        self.inode_mut(new_parent)?.mtime = now;
        let inode = self.inode_mut(ino)?;
        inode.nlink += 1;
        inode.parent = new_parent;
        inode.name = new_name.to_owned();
        inode.ctime = now;
        inode.lookups += 1;
        self.attr(ino)
    }

    pub fn unlink(&mut self, parent: Ino, name: &OsStr) -> Result<()> {
        self.remove_entry(parent, name, Kind::File)
    }

    pub fn rmdir(&mut self, parent: Ino, name: &OsStr) -> Result<()> {
        self.remove_entry(parent, name, Kind::Dir)
    }

    /// Moves an entry, replacing what `new_name` named (a file, or an empty
    /// directory when moving a directory), unless `no_replace`.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        new_parent: Ino,
        new_name: &OsStr,
        no_replace: bool,
    ) -> Result<()> {
        self.alive()?;
        let ino = *self.dir(parent)?.entries.get(name).ok_or(libc::ENOENT)?;
        let target = self.dir(new_parent)?.entries.get(new_name).copied();
        if target == Some(ino) {
            return Ok(());
        }
        let kind = self.inode(ino)?.kind();
        if kind == Kind::Dir {
            // Not into itself or below it.
            let mut at = new_parent;
            while at != ROOT && at != 0 {
                if at == ino {
                    return Err(libc::EINVAL);
                }
                at = self.inode(at)?.parent;
            }
        }
        if let Some(target) = target {
            if no_replace {
                return Err(libc::EEXIST);
            }
            match (kind, &self.inode(target)?.content) {
                (Kind::File, Content::Dir(_)) => return Err(libc::EISDIR),
                (Kind::Dir, Content::File(_)) => return Err(libc::ENOTDIR),
                (Kind::Dir, Content::Dir(d)) if !d.entries.is_empty() => {
                    return Err(libc::ENOTEMPTY)
                }
                _ => {}
            }
        }
        self.dir_mut(parent)?.entries.remove(name);
        self.dir_mut(new_parent)?
            .entries
            .insert(new_name.to_owned(), ino);
        let now = SystemTime::now();
        self.inode_mut(parent)?.mtime = now;
        self.inode_mut(new_parent)?.mtime = now;
        let inode = self.inode_mut(ino)?;
        inode.parent = new_parent;
        inode.name = new_name.to_owned();
        inode.ctime = now;
        if let Some(target) = target {
            self.unlink_inode(target);
        }
        Ok(())
    }

    /// A directory's entries, `.` and `..` first.
    pub fn readdir(&mut self, ino: Ino) -> Result<Vec<(Ino, Kind, OsString)>> {
        self.alive()?;
        let parent = match self.inode(ino)?.parent {
            0 => ino,
            p => p,
        };
        let mut out = vec![
            (ino, Kind::Dir, OsString::from(".")),
            (parent, Kind::Dir, OsString::from("..")),
        ];
        for (name, child) in &self.dir(ino)?.entries {
            out.push((*child, self.inode(*child)?.kind(), name.clone()));
        }
        Ok(out)
    }

    pub fn statfs(&mut self) -> Result<StatFs> {
        self.alive()?;
        Ok(StatFs {
            blocks: self.capacity / BLOCK,
            free_blocks: self.capacity.saturating_sub(self.used) / BLOCK,
            files: self.inodes.len() as u64,
        })
    }

    /// Drops an inode nothing refers to any more, and what only it held.
    fn collect(&mut self, ino: Ino) {
        let mut work = vec![ino];
        while let Some(ino) = work.pop() {
            let Some(inode) = self.inodes.get(&ino) else {
                continue;
            };
            if ino == ROOT
                || inode.nlink > 0
                || inode.durable_links > 0
                || inode.lookups > 0
                || inode.opens > 0
            {
                continue;
            }
            let inode = self.inodes.remove(&ino).expect("present");
            match inode.content {
                Content::File(f) => self.used -= f.data.len() as u64,
                Content::Dir(d) => {
                    for child in d.durable.values() {
                        if let Some(c) = self.inodes.get_mut(child) {
                            c.durable_links = c.durable_links.saturating_sub(1);
                        }
                        work.push(*child);
                    }
                }
            }
        }
    }

    /// Every inode number in use.
    pub fn inodes(&self) -> Vec<Ino> {
        self.inodes.keys().copied().collect()
    }

    pub fn is_alive(&self) -> bool {
        self.alive
    }

    pub fn add_fault(&mut self, fault: Fault) {
        self.faults.push(fault);
    }

    /// Also disarms an [`ArmedCut`].
    pub fn clear_faults(&mut self) {
        self.armed = None;
        self.faults.clear();
    }

    pub fn stats(&self) -> Stats {
        let mut stats = self.stats.clone();
        stats.alive = self.alive;
        stats.faults = self.faults.clone();
        stats.armed_cut = self.armed.clone();
        stats
    }
}
