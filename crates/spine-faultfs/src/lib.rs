//! A file system for durability tests: it forgets what was not flushed.
//!
//! [`Disk::mount`] mounts a FUSE file system over a backing directory. Processes use it as
//! any other; what they write stays in memory ([`pending`]) until they `fsync` or
//! `fdatasync` the file, and only then reaches the backing directory, which stands for the
//! disk. Two commands act on it while it is in use:
//!
//! - [`Disk::cut`], a power cut: every byte not flushed is forgotten (the page written last
//!   of one file can be torn, half of it reaching the disk), and every later request fails
//!   with EIO until [`Disk::remount`], as a machine that lost power answers nothing.
//! - [`Disk::fail`]: the next N flushes, or writes, fail with EIO or ENOSPC. A failed flush
//!   behaves as Linux's does: the pages it did not write stay readable, are never written by
//!   a later flush, and are lost on a cut. [`Disk::fill`] makes every write that would grow
//!   a file fail with ENOSPC, as a full disk does, until it is called again with `false`.
//!
//! Names (create, rename, unlink, mkdir) reach the backing directory at once: the model is
//! a journaling file system whose metadata is durable and whose data is not, the same model
//! as Jepsen's LazyFS. Mounting needs `/dev/fuse` and root (it calls mount(2) itself: no
//! libfuse, no fusermount). Test-only.

pub mod pending;

mod fs;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use fuser::{BackgroundSession, Config, MountOption};

use fs::{FaultFs, Op, State};

/// A fault armed by [`Disk::fail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The next `count` fsyncs / fdatasyncs (of any file) fail with `errno`.
    Fsyncs { count: u32, errno: i32 },
    /// The next `count` writes (of any file) fail with `errno`, writing nothing.
    Writes { count: u32, errno: i32 },
}

impl Fault {
    fn op(&self) -> Op {
        match self {
            Fault::Fsyncs { .. } => Op::Fsync,
            Fault::Writes { .. } => Op::Write,
        }
    }

    fn errno(&self) -> i32 {
        match *self {
            Fault::Fsyncs { errno, .. } | Fault::Writes { errno, .. } => errno,
        }
    }

    /// Uses one occurrence; whether none is left.
    fn spend(&mut self) -> bool {
        let (Fault::Fsyncs { count, .. } | Fault::Writes { count, .. }) = self;
        *count = count.saturating_sub(1);
        *count == 0
    }
}

/// What a power cut forgot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Files that held writes not flushed.
    pub files: usize,
    /// Whether a page was torn (half written).
    pub torn: bool,
}

/// What the file system was asked to do since it was mounted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub writes: u64,
    pub fsyncs: u64,
    pub failed_writes: u64,
    pub failed_fsyncs: u64,
}

/// The file system mounted over a backing directory.
pub struct Disk {
    backing: PathBuf,
    mountpoint: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<BackgroundSession>,
}

impl Disk {
    /// Mounts the file system at `mountpoint` (an existing, empty directory) over `backing`.
    pub fn mount(backing: &Path, mountpoint: &Path) -> io::Result<Disk> {
        let backing = backing.canonicalize()?;
        let mountpoint = mountpoint.canonicalize()?;
        let state = Arc::new(Mutex::new(State::new(&backing)));
        let session = Self::session(&state, &mountpoint)?;
        Ok(Disk { backing, mountpoint, state, session: Some(session) })
    }

    fn session(state: &Arc<Mutex<State>>, mountpoint: &Path) -> io::Result<BackgroundSession> {
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("spine-faultfs".into()), MountOption::RW];
        fuser::spawn_mount(FaultFs(state.clone()), mountpoint, &config)
    }

    /// Whether this process can mount it here (root, `/dev/fuse`).
    pub fn available() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        root && Path::new("/dev/fuse").exists()
    }

    /// For tests: whether this process can mount it here. Where it cannot, says so on
    /// stderr and returns false (the test skips), except under CI (`CI` set), which runs as
    /// root with `/dev/fuse`: there it panics instead of skipping.
    pub fn available_or_skip() -> bool {
        if Self::available() {
            return true;
        }
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with /dev/fuse");
        eprintln!("skipped: mounting FUSE needs root and /dev/fuse");
        false
    }

    /// Where processes use it.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing directory: the disk.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A power cut: forgets every write not flushed; with `tear`, the page of that file
    /// (relative to the mount) written last is half-written to the disk first. Every request
    /// fails with EIO from now on, until [`Disk::remount`].
    pub fn cut(&self, tear: Option<&Path>) -> io::Result<Cut> {
        self.state().cut(tear)
    }

    /// Unmounts and mounts again over what is on the disk, as a machine that restarts: the
    /// kernel's caches are gone, faults disarmed, the disk no longer full.
    pub fn remount(&mut self) -> io::Result<()> {
        if let Some(session) = self.session.take() {
            session.umount_and_join()?;
        }
        self.state = Arc::new(Mutex::new(State::new(&self.backing)));
        self.session = Some(Self::session(&self.state, &self.mountpoint)?);
        Ok(())
    }

    /// Arms a fault.
    pub fn fail(&self, fault: Fault) {
        self.state().faults.push(fault);
    }

    /// Disarms every fault not yet used.
    pub fn heal(&self) {
        self.state().faults.clear();
    }

    /// A full disk (`true`): every write or truncation that would grow a file fails with
    /// ENOSPC; writes within a file's size still succeed. `false` gives the space back.
    pub fn fill(&self, full: bool) {
        self.state().full = full;
    }

    pub fn stats(&self) -> Stats {
        self.state().stats
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = session.umount_and_join();
        }
    }
}
