//! The FUSE side: every request mapped onto the backing directory, file contents through
//! [`Pending`], names (create, rename, unlink, mkdir) applied to the backing directory at once.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::pending::Pending;
use crate::{Fault, Stats};

/// Attributes are never cached by the kernel: the size a process sees is always this file
/// system's, pending writes included.
const TTL: Duration = Duration::ZERO;

/// A file or directory the kernel knows by number.
#[derive(Debug)]
struct Node {
    /// Relative to the backing directory ("" for the root).
    path: PathBuf,
    /// The backing file, opened on first use.
    file: Option<File>,
    /// Writes since the last good flush.
    pending: Option<Pending>,
}

/// Everything the requests share, behind one lock.
#[derive(Debug)]
pub(crate) struct State {
    backing: PathBuf,
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    next: u64,
    pub(crate) faults: Vec<Fault>,
    /// Every write that would grow a file fails with ENOSPC.
    pub(crate) full: bool,
    /// After a power cut every request fails with EIO until the next mount.
    pub(crate) dead: bool,
    pub(crate) stats: Stats,
}

impl State {
    pub(crate) fn new(backing: &Path) -> Self {
        let mut state = State {
            backing: backing.to_owned(),
            nodes: HashMap::new(),
            by_path: HashMap::new(),
            next: 2,
            faults: Vec::new(),
            full: false,
            dead: false,
            stats: Stats::default(),
        };
        state.nodes.insert(1, Node { path: PathBuf::new(), file: None, pending: None });
        state.by_path.insert(PathBuf::new(), 1);
        state
    }

    fn node(&mut self, ino: INodeNo) -> Result<&mut Node, Errno> {
        self.nodes.get_mut(&u64::from(ino)).ok_or(Errno::ENOENT)
    }

    fn full_path(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        let node = self.nodes.get(&u64::from(parent)).ok_or(Errno::ENOENT)?;
        Ok(node.path.join(name))
    }

    /// The number for `rel`, given on first sight.
    fn intern(&mut self, rel: PathBuf) -> u64 {
        if let Some(&ino) = self.by_path.get(&rel) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_path.insert(rel.clone(), ino);
        self.nodes.insert(ino, Node { path: rel, file: None, pending: None });
        ino
    }

    fn forget_path(&mut self, rel: &Path) {
        if let Some(ino) = self.by_path.remove(rel) {
            self.nodes.remove(&ino);
        }
    }

    fn attr(&mut self, ino: u64) -> Result<FileAttr, Errno> {
        let node = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let meta = fs::symlink_metadata(self.backing.join(&node.path)).map_err(Errno::from)?;
        let size = node.pending.as_ref().map_or(meta.len(), Pending::size);
        let time = |secs: i64, nanos: i64| {
            UNIX_EPOCH + Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32)
        };
        let kind = if meta.is_dir() {
            FileType::Directory
        } else if meta.file_type().is_symlink() {
            FileType::Symlink
        } else {
            FileType::RegularFile
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: time(meta.atime(), meta.atime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }

    /// The node's backing file and its pending state, both made on first use.
    fn open(&mut self, ino: INodeNo) -> Result<(&File, &mut Pending), Errno> {
        let full = {
            let node = self.nodes.get(&u64::from(ino)).ok_or(Errno::ENOENT)?;
            self.backing.join(&node.path)
        };
        let node = self.node(ino)?;
        if node.file.is_none() {
            node.file =
                Some(File::options().read(true).write(true).open(full).map_err(Errno::from)?);
        }
        let file = node.file.as_ref().expect("opened above");
        if node.pending.is_none() {
            node.pending = Some(Pending::over(file).map_err(Errno::from)?);
        }
        Ok((file, node.pending.as_mut().expect("made above")))
    }

    /// Takes one of the armed faults for `op`, if any: its errno.
    fn take_fault(&mut self, op: Op) -> Option<i32> {
        let at = self.faults.iter().position(|f| f.op() == op)?;
        let errno = self.faults[at].errno();
        if self.faults[at].spend() {
            self.faults.remove(at);
        }
        Some(errno)
    }

    /// The power cut: every pending byte forgotten (with the page written last in `tear`
    /// half-written first); from now on every request fails.
    pub(crate) fn cut(&mut self, tear: Option<&Path>) -> io::Result<crate::Cut> {
        let mut cut = crate::Cut::default();
        for node in self.nodes.values_mut() {
            let Some(pending) = node.pending.take() else { continue };
            let file = node.file.as_ref().expect("pending state has its file");
            if pending.is_clean(file)? {
                continue;
            }
            cut.files += 1;
            if tear.is_some_and(|t| t == node.path) && pending.tear(file)? {
                cut.torn = true;
            }
        }
        self.dead = true;
        Ok(cut)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Fsync,
    Write,
}

/// The file system the kernel talks to.
pub(crate) struct FaultFs(pub(crate) Arc<Mutex<State>>);

impl FaultFs {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state, unless a power cut happened: then EIO.
    fn live(&self) -> Result<MutexGuard<'_, State>, Errno> {
        let state = self.state();
        if state.dead { Err(Errno::EIO) } else { Ok(state) }
    }
}

fn entry(reply: ReplyEntry, attr: Result<FileAttr, Errno>) {
    match attr {
        Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn attr(reply: ReplyAttr, result: Result<FileAttr, Errno>) {
    match result {
        Ok(attr) => reply.attr(&TTL, &attr),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let result = self.live().and_then(|mut s| {
            let rel = s.child(parent, name)?;
            fs::symlink_metadata(s.full_path(&rel)).map_err(Errno::from)?;
            let ino = s.intern(rel);
            s.attr(ino)
        });
        entry(reply, result);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        attr(reply, self.live().and_then(|mut s| s.attr(ino.into())));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = self.live().and_then(|mut s| {
            let rel = s.node(ino)?.path.clone();
            let full = s.full_path(&rel);
            if let Some(mode) = mode {
                fs::set_permissions(&full, fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(Errno::from)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::chown(&full, uid, gid).map_err(Errno::from)?;
            }
            if let Some(size) = size {
                let grows = {
                    let (_, pending) = s.open(ino)?;
                    size > pending.size()
                };
                if grows && s.full {
                    return Err(Errno::ENOSPC);
                }
                let (file, pending) = s.open(ino)?;
                pending.truncate(file, size).map_err(Errno::from)?;
            }
            s.attr(ino.into())
        });
        attr(reply, result);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.live().and_then(|mut s| {
            let rel = s.child(parent, name)?;
            let full = s.full_path(&rel);
            fs::create_dir(&full).map_err(Errno::from)?;
            fs::set_permissions(&full, fs::Permissions::from_mode(mode & !umask & 0o7777))
                .map_err(Errno::from)?;
            let ino = s.intern(rel);
            s.attr(ino)
        });
        entry(reply, result);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.live().and_then(|mut s| {
            let rel = s.child(parent, name)?;
            fs::remove_file(s.full_path(&rel)).map_err(Errno::from)?;
            s.forget_path(&rel);
            Ok(())
        });
        empty(reply, result);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.live().and_then(|mut s| {
            let rel = s.child(parent, name)?;
            fs::remove_dir(s.full_path(&rel)).map_err(Errno::from)?;
            s.forget_path(&rel);
            Ok(())
        });
        empty(reply, result);
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
        let result = self.live().and_then(|mut s| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let from = s.child(parent, name)?;
            let to = s.child(newparent, newname)?;
            fs::rename(s.full_path(&from), s.full_path(&to)).map_err(Errno::from)?;
            s.forget_path(&to);
            // The node and everything under it (a directory) move; their pending writes
            // move with them.
            let moved: Vec<(PathBuf, u64)> = s
                .by_path
                .iter()
                .filter(|(p, _)| p.starts_with(&from))
                .map(|(p, &i)| (p.clone(), i))
                .collect();
            for (old, ino) in moved {
                let new = to.join(old.strip_prefix(&from).expect("filtered by prefix"));
                s.by_path.remove(&old);
                s.by_path.insert(new.clone(), ino);
                if let Some(node) = s.nodes.get_mut(&ino) {
                    node.path = new;
                }
            }
            Ok(())
        });
        empty(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.live().and_then(|mut s| s.open(ino).map(drop)) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.live().and_then(|mut s| {
            let rel = s.child(parent, name)?;
            let mut options = File::options();
            options.read(true).write(true).mode(mode & !umask & 0o7777);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            } else {
                options.create(true);
            }
            options.open(s.full_path(&rel)).map_err(Errno::from)?;
            let ino = s.intern(rel);
            if flags & libc::O_TRUNC != 0 {
                let (file, pending) = s.open(INodeNo(ino))?;
                pending.truncate(file, 0).map_err(Errno::from)?;
            }
            s.attr(ino)
        });
        match result {
            Ok(attr) => {
                reply.created(&TTL, &attr, Generation(0), FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
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
        let result = self.live().and_then(|mut s| {
            let (file, pending) = s.open(ino)?;
            pending.read(file, offset, size.into()).map_err(Errno::from)
        });
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
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
        let result = self.live().and_then(|mut s| {
            if let Some(errno) = s.take_fault(Op::Write) {
                s.stats.failed_writes += 1;
                return Err(Errno::from_i32(errno));
            }
            let full = s.full;
            let (file, pending) = s.open(ino)?;
            if full && offset + data.len() as u64 > pending.size() {
                return Err(Errno::ENOSPC);
            }
            pending.write(file, offset, data).map_err(Errno::from)?;
            s.stats.writes += 1;
            Ok(data.len() as u32)
        });
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
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
        let result = self.live().and_then(|mut s| {
            if let Some(errno) = s.take_fault(Op::Fsync) {
                s.stats.failed_fsyncs += 1;
                let (_, pending) = s.open(ino)?;
                pending.fail_sync();
                return Err(Errno::from_i32(errno));
            }
            let (file, pending) = s.open(ino)?;
            pending.sync(file).map_err(Errno::from)?;
            s.stats.fsyncs += 1;
            Ok(())
        });
        empty(reply, result);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _d: bool,
        reply: ReplyEmpty,
    ) {
        // Names reach the backing directory at once: nothing is pending for a directory.
        empty(reply, self.live().map(drop));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.live().and_then(|mut s| {
            let rel = s.node(ino)?.path.clone();
            let mut entries = vec![(u64::from(ino), FileType::Directory, ".".into())];
            entries.push((1, FileType::Directory, "..".into()));
            for e in fs::read_dir(s.full_path(&rel)).map_err(Errno::from)? {
                let e = e.map_err(Errno::from)?;
                let kind = if e.file_type().map_err(Errno::from)?.is_dir() {
                    FileType::Directory
                } else {
                    FileType::RegularFile
                };
                let child = s.intern(rel.join(e.file_name()));
                entries.push((child, kind, e.file_name()));
            }
            Ok(entries)
        });
        match result {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize)
                {
                    if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let free = if self.state().full { 0 } else { 1 << 24 };
        reply.statfs(1 << 24, free, free, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        empty(reply, self.live().map(drop));
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
        let result = self.live().and_then(|mut s| {
            if mode != 0 {
                return Err(Errno::EOPNOTSUPP);
            }
            let full = s.full;
            let (file, pending) = s.open(ino)?;
            let end = offset + length;
            if end > pending.size() {
                if full {
                    return Err(Errno::ENOSPC);
                }
                pending.truncate(file, end).map_err(Errno::from)?;
            }
            Ok(())
        });
        empty(reply, result);
    }
}
