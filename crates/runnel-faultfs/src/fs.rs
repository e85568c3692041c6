//! The FUSE side: maps kernel requests onto the [`Model`] and mounts it.
//!
//! Caching is set up so the kernel never hides the model: entries and
//! attributes are answered with a TTL of zero, the writeback cache is not
//! requested (every `write` reaches the model before it returns), and files
//! are opened without `FOPEN_KEEP_CACHE`, so each open drops the page cache
//! of the file and a restarted process reads what the model holds. Files
//! are not opened with `FOPEN_DIRECT_IO`, so read-only `MAP_SHARED`
//! mappings work (served through the page cache from `read`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use crate::model::{self, Attr, Kind, Model, SetAttr};

/// Entry and attribute time-to-live: nothing is cached.
const TTL: Duration = Duration::ZERO;

/// The model shared by the FUSE threads and the control socket.
pub type SharedModel = Arc<Mutex<Model>>;

pub fn lock(model: &SharedModel) -> MutexGuard<'_, Model> {
    // A panic in one request must not wedge every later one.
    model.lock().unwrap_or_else(|e| e.into_inner())
}

/// A directory listing taken at `opendir`, so `readdir` offsets stay
/// stable while entries change.
type Listing = Vec<(u64, Kind, std::ffi::OsString)>;

/// Called with every inode after a power cut, to drop the kernel's caches.
pub type AfterCut = Arc<dyn Fn(&[model::Ino]) + Send + Sync>;

pub struct FaultFs {
    model: SharedModel,
    next_fh: AtomicU64,
    listings: Mutex<HashMap<u64, Listing>>,
    after_cut: Arc<OnceLock<AfterCut>>,
}

impl FaultFs {
    pub fn new(model: SharedModel) -> FaultFs {
        FaultFs {
            model,
            next_fh: AtomicU64::new(1),
            listings: Mutex::new(HashMap::new()),
            after_cut: Arc::new(OnceLock::new()),
        }
    }

    /// Runs the hook for a cut a write triggered, on its own thread: the
    /// kernel may wait for pages that requests in flight hold locked, and
    /// those need this file system's threads to answer.
    fn after_cut(&self) {
        if let Some(hook) = self.after_cut.get() {
            let (hook, inodes) = (Arc::clone(hook), self.model().inodes());
            std::thread::spawn(move || hook(&inodes));
        }
    }

    fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.model)
    }

    fn fh(&self) -> FileHandle {
        FileHandle(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }
}

fn errno(code: model::Errno) -> Errno {
    Errno::from_i32(code)
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
    }
}

fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: model::BLOCK as u32,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

fn entry(reply: ReplyEntry, result: model::Result<Attr>) {
    match result {
        Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
        Err(e) => reply.error(errno(e)),
    }
}

fn empty(reply: ReplyEmpty, result: model::Result<()>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(reply, self.model().lookup(parent.0, name));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.model().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.model().getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let change = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
        };
        match self.model().setattr(ino.0, change) {
            Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let mut m = self.model();
        let result = m.create(
            parent.0,
            name,
            mode & !umask,
            req.uid(),
            req.gid(),
            true,
            false,
        );
        if let Ok(a) = &result {
            // `create` counted an open handle that mknod does not make.
            m.release(a.ino);
        }
        entry(reply, result);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self
            .model()
            .mkdir(parent.0, name, mode & !umask, req.uid(), req.gid());
        entry(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(reply, self.model().link(ino.0, newparent.0, newname));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.model().unlink(parent.0, name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.model().rmdir(parent.0, name));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        empty(
            reply,
            self.model()
                .rename(parent.0, name, newparent.0, newname, no_replace),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut m = self.model();
        match m.open(ino.0) {
            Ok(Kind::Dir) if flags.0 & libc::O_ACCMODE != libc::O_RDONLY => {
                m.release(ino.0);
                reply.error(Errno::EISDIR);
            }
            // No FOPEN_KEEP_CACHE: the kernel drops the file's cached pages.
            Ok(_) => reply.opened(self.fh(), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.model().read(ino.0, offset, size) {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let (result, cut) = {
            let mut m = self.model();
            let result = m.write(ino.0, offset, data);
            (result, m.take_cut_by_write())
        };
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
        if cut {
            self.after_cut();
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Writes are already in the model; close() reports EIO while dead.
        if self.model().is_alive() {
            reply.ok();
        } else {
            reply.error(Errno::EIO);
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.model().release(ino.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.model().fsync(ino.0));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut m = self.model();
        let listing = match m.readdir(ino.0) {
            Ok(listing) => listing,
            Err(e) => return reply.error(errno(e)),
        };
        if let Err(e) = m.open(ino.0) {
            return reply.error(errno(e));
        }
        let fh = self.fh();
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(fh.0, listing);
        reply.opened(fh, FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if !self.model().is_alive() {
            return reply.error(Errno::EIO);
        }
        let listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        let Some(listing) = listings.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in listing.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, file_type(*kind), name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.listings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&fh.0);
        self.model().release(ino.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.model().fsync_dir(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.model().statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.free_blocks,
                s.free_blocks,
                s.files,
                u32::MAX as u64,
                model::BLOCK as u32,
                255,
                model::BLOCK as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        empty(reply, self.model().getattr(ino.0).map(|_| ()));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.model().create(
            parent.0,
            name,
            mode & !umask,
            req.uid(),
            req.gid(),
            flags & libc::O_EXCL != 0,
            flags & libc::O_TRUNC != 0,
        );
        match result {
            Ok(a) => reply.created(
                &TTL,
                &fuse_attr(&a),
                Generation(0),
                self.fh(),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.model().fallocate(ino.0, offset, length, mode));
    }
}

/// Mount options: the source shows as `runnel-faultfs` in `mount`.
pub fn config(threads: usize) -> fuser::Config {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName("runnel-faultfs".into()),
        MountOption::Subtype("runnel-faultfs".into()),
        MountOption::RW,
        MountOption::NoAtime,
    ];
    config.n_threads = Some(threads.max(1));
    config
}

/// Mounts `model` at `mountpoint` (serve it with [`fuser::Session::run`])
/// and sets the hook that drops the kernel's caches after a power cut;
/// returns the session and that hook, for the control socket's cuts.
pub fn mount(
    model: SharedModel,
    mountpoint: &Path,
    threads: usize,
) -> std::io::Result<(fuser::Session<FaultFs>, AfterCut)> {
    let fs = FaultFs::new(model);
    let slot = Arc::clone(&fs.after_cut);
    let session = fuser::Session::new(fs, mountpoint, &config(threads))?;
    let notifier = session.notifier();
    let hook: AfterCut = Arc::new(move |inodes: &[model::Ino]| {
        for &ino in inodes {
            // ENOENT for inodes the kernel does not know: nothing to drop.
            let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
        }
    });
    let _ = slot.set(Arc::clone(&hook));
    Ok((session, hook))
}
