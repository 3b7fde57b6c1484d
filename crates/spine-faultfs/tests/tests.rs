//! The file system mounted for real, used through ordinary system calls: it forgets exactly
//! what was not flushed, and fails what it is told to fail.

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use spine_faultfs::{Disk, Fault};
use tempfile::TempDir;

/// A mounted disk over a fresh backing directory, or `None` (with a note) where FUSE cannot
/// be mounted; CI (`CI` set) requires it.
fn disk() -> Option<(Disk, TempDir, TempDir)> {
    if !Disk::available_or_skip() {
        return None;
    }
    let backing = TempDir::new().unwrap();
    let mountpoint = TempDir::new().unwrap();
    let disk = Disk::mount(backing.path(), mountpoint.path()).unwrap();
    Some((disk, backing, mountpoint))
}

fn open(path: &Path) -> File {
    File::options().read(true).write(true).create(true).truncate(false).open(path).unwrap()
}

#[test]
fn a_cut_forgets_exactly_what_was_not_synced() {
    let Some((mut disk, backing, _m)) = disk() else { return };
    let a = disk.path().join("a");
    let b = disk.path().join("b");
    let mut fa = open(&a);
    fa.write_all(b"synced ").unwrap();
    fa.sync_data().unwrap();
    fa.write_all(b"lost").unwrap();
    let mut fb = open(&b);
    fb.write_all(b"never synced").unwrap();
    // Processes read their writes back, flushed or not.
    assert_eq!(fs::read(&a).unwrap(), b"synced lost");
    assert_eq!(fs::read(&b).unwrap(), b"never synced");
    assert_eq!(fs::read(backing.path().join("a")).unwrap(), b"synced ");

    let cut = disk.cut(None).unwrap();
    assert_eq!(cut.files, 2);
    // A machine without power answers nothing.
    let err = fa.write_all(b"after").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    drop((fa, fb));
    disk.remount().unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"synced ");
    assert_eq!(fs::read(&b).unwrap(), b"", "created (names are durable), contents gone");
}

#[test]
fn a_truncation_not_synced_is_undone_by_a_cut() {
    let Some((mut disk, _b, _m)) = disk() else { return };
    let p = disk.path().join("log");
    let f = open(&p);
    f.write_all_at(&[9u8; 10_000], 0).unwrap();
    f.sync_all().unwrap();
    f.set_len(100).unwrap();
    f.write_all_at(b"new", 100).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 103);
    drop(f);
    disk.cut(None).unwrap();
    disk.remount().unwrap();
    assert_eq!(fs::read(&p).unwrap(), vec![9u8; 10_000]);
}

#[test]
fn a_torn_cut_leaves_half_of_the_last_page() {
    let Some((mut disk, _b, _m)) = disk() else { return };
    let p = disk.path().join("wal");
    let f = open(&p);
    f.write_all_at(&[1u8; 8192], 0).unwrap();
    f.sync_data().unwrap();
    f.write_all_at(&[2u8; 4096], 0).unwrap();
    f.write_all_at(&[3u8; 4096], 4096).unwrap();
    drop(f);
    assert!(disk.cut(Some(Path::new("wal"))).unwrap().torn);
    disk.remount().unwrap();
    let after = fs::read(&p).unwrap();
    assert_eq!(after.len(), 8192);
    assert!(after[..4096].iter().all(|&b| b == 1), "the earlier unsynced page is forgotten");
    assert!(after[4096..6144].iter().all(|&b| b == 3), "half the last page reached the disk");
    assert!(after[6144..].iter().all(|&b| b == 1), "the other half did not");
}

#[test]
fn a_failed_fsync_loses_its_pages_though_the_next_one_succeeds() {
    let Some((mut disk, _b, _m)) = disk() else { return };
    let p = disk.path().join("db");
    let f = open(&p);
    f.write_all_at(b"one", 0).unwrap();
    disk.fail(Fault::Fsyncs { count: 1, errno: libc::EIO });
    let err = f.sync_data().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    // Linux's answer to a retry: success, without writing the failed pages.
    f.write_all_at(b"two", 8192).unwrap();
    f.sync_data().unwrap();
    assert_eq!(disk.stats().failed_fsyncs, 1);
    let mut read = [0u8; 3];
    f.read_exact_at(&mut read, 0).unwrap();
    assert_eq!(&read, b"one", "still readable before the cut");
    drop(f);
    disk.cut(None).unwrap();
    disk.remount().unwrap();
    let after = fs::read(&p).unwrap();
    assert_eq!(&after[..3], &[0, 0, 0], "the page the failed fsync held is gone");
    assert_eq!(&after[8192..], b"two");
}

#[test]
fn failed_writes_and_a_full_disk() {
    let Some((disk, _b, _m)) = disk() else { return };
    let p = disk.path().join("f");
    let f = open(&p);
    f.write_all_at(&[5u8; 100], 0).unwrap();
    disk.fail(Fault::Writes { count: 1, errno: libc::EIO });
    assert_eq!(f.write_all_at(b"x", 0).unwrap_err().raw_os_error(), Some(libc::EIO));
    f.write_all_at(b"y", 0).unwrap();

    disk.fill(true);
    let err = f.write_all_at(b"grow", 100).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
    assert_eq!(err.kind(), ErrorKind::StorageFull);
    f.write_all_at(b"in place", 10).unwrap();
    assert!(fs::read(&p).is_ok(), "reads are served on a full disk");
    disk.fill(false);
    f.write_all_at(b"grow", 100).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 104);
}

#[test]
fn names_are_durable_at_once() {
    let Some((mut disk, backing, _m)) = disk() else { return };
    let dir = disk.path().join("d");
    fs::create_dir(&dir).unwrap();
    let f = open(&dir.join("x"));
    f.write_all_at(b"kept", 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    fs::rename(dir.join("x"), dir.join("y")).unwrap();
    open(&dir.join("z"));
    fs::remove_file(dir.join("z")).unwrap();
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["y"]);
    disk.cut(None).unwrap();
    disk.remount().unwrap();
    assert_eq!(fs::read(dir.join("y")).unwrap(), b"kept");
    assert!(!backing.path().join("d/x").exists());
}
