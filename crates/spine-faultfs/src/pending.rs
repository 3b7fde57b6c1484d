//! One file's writes since its last good flush: what a power cut forgets.
//!
//! The backing file holds what reached the "disk". Writes and truncations change only the
//! [`Pending`] state: whole pages (the page cache's unit) copied from the backing file, changed
//! in memory, and the file's size. Reads see the pending pages over the backing file, as a
//! process reads through the page cache. [`Pending::sync`] writes the pages to the backing
//! file — the only way anything reaches it — and a cut simply drops the state.
//!
//! A failed flush behaves as Linux's writeback does (PostgreSQL's "fsyncgate"): the pages it
//! failed to write stay readable but are marked clean, so a later flush succeeds without
//! writing them and a power cut loses them; only writing such a page again makes it dirty.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The unit of pending data: a page of the page cache.
pub const PAGE: u64 = 4096;

/// A page changed in memory since the last good flush.
#[derive(Debug, Clone)]
struct Page {
    data: Box<[u8]>,
    /// A flush failed to write it: it is never written now unless written again.
    lost: bool,
}

/// What one file holds beyond its backing file.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The file's size as processes see it.
    size: u64,
    /// Below this offset a page not held here reads from the backing file; from it on, it
    /// reads as zeros (the file was truncated to here since the last flush, so what the
    /// backing file still holds past it is gone).
    floor: u64,
    pages: BTreeMap<u64, Page>,
    /// The page written last: the one a torn power cut half-writes.
    last: Option<u64>,
}

impl Pending {
    /// Nothing pending over `backing`.
    pub fn over(backing: &File) -> io::Result<Self> {
        let size = backing.metadata()?.len();
        Ok(Pending { size, floor: size, pages: BTreeMap::new(), last: None })
    }

    /// The size processes see.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether anything here is not on the backing file (pages, or a size change).
    pub fn is_clean(&self, backing: &File) -> io::Result<bool> {
        Ok(self.pages.is_empty()
            && self.size == backing.metadata()?.len()
            && self.floor == self.size)
    }

    /// Page `index` as it is now, from memory or the backing file.
    fn page(&self, backing: &File, index: u64) -> io::Result<Box<[u8]>> {
        if let Some(page) = self.pages.get(&index) {
            return Ok(page.data.clone());
        }
        let mut data = vec![0u8; PAGE as usize].into_boxed_slice();
        let start = index * PAGE;
        let readable = self.floor.saturating_sub(start).min(PAGE) as usize;
        let mut filled = 0;
        while filled < readable {
            let n = backing.read_at(&mut data[filled..readable], start + filled as u64)?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        Ok(data)
    }

    /// Up to `len` bytes from `offset`, as a process reads them.
    pub fn read(&self, backing: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let end = offset.saturating_add(len).min(self.size);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let page = self.page(backing, index)?;
            let from = (at - index * PAGE) as usize;
            let to = (end - index * PAGE).min(PAGE) as usize;
            out.extend_from_slice(&page[from..to]);
            at = index * PAGE + to as u64;
        }
        Ok(out)
    }

    /// Writes `data` at `offset` in memory.
    pub fn write(&mut self, backing: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let mut page = self.page(backing, index)?;
            let from = (at - index * PAGE) as usize;
            let to = (end - index * PAGE).min(PAGE) as usize;
            let taken = (at - offset) as usize;
            page[from..to].copy_from_slice(&data[taken..taken + (to - from)]);
            self.pages.insert(index, Page { data: page, lost: false });
            self.last = Some(index);
            at = index * PAGE + to as u64;
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// Sets the size to `size` in memory (shrinking or growing with zeros).
    pub fn truncate(&mut self, backing: &File, size: u64) -> io::Result<()> {
        if size < self.size {
            // The partial last page keeps its head; zeros past the new end.
            let index = size / PAGE;
            let cut = (size - index * PAGE) as usize;
            if cut > 0 {
                let mut page = self.page(backing, index)?;
                page[cut..].fill(0);
                let lost = self.pages.get(&index).is_some_and(|p| p.lost);
                self.pages.insert(index, Page { data: page, lost });
            }
            self.pages.retain(|&i, _| i * PAGE < size);
            if self.last.is_some_and(|i| i * PAGE >= size) {
                self.last = None;
            }
            self.floor = self.floor.min(size);
        }
        self.size = size;
        Ok(())
    }

    /// A good flush: every page not lost to an earlier failed flush reaches the backing
    /// file, and so does the size. Lost pages stay readable here and are still not written.
    pub fn sync(&mut self, backing: &File) -> io::Result<()> {
        // Past the floor the backing file's bytes are gone: cut them first, so a page not
        // written now reads as zeros, as it does here.
        if backing.metadata()?.len() > self.floor {
            backing.set_len(self.floor)?;
        }
        for (&index, page) in &self.pages {
            if !page.lost {
                backing.write_all_at(&page.data, index * PAGE)?;
            }
        }
        backing.set_len(self.size)?;
        self.pages.retain(|_, page| page.lost);
        self.floor = self.size;
        if self.last.is_some_and(|i| !self.pages.contains_key(&i)) {
            self.last = None;
        }
        Ok(())
    }

    /// A failed flush: nothing reaches the backing file, and every dirty page is now lost.
    pub fn fail_sync(&mut self) {
        for page in self.pages.values_mut() {
            page.lost = true;
        }
    }

    /// A power cut that tears the page written last: its first half reaches the backing
    /// file (lengthening it if the page lay past its end, as a size that reached the disk
    /// with half of an appended block), the rest of what is pending does not. Returns
    /// whether there was such a page.
    pub fn tear(&self, backing: &File) -> io::Result<bool> {
        let Some(index) = self.last else { return Ok(false) };
        let page = &self.pages[&index];
        let start = index * PAGE;
        let half = (PAGE / 2).min(self.size.saturating_sub(start)) as usize;
        backing.write_all_at(&page.data[..half], start)?;
        Ok(half > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn backing(content: &[u8]) -> (tempfile::NamedTempFile, File) {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), content).unwrap();
        let f = File::options().read(true).write(true).open(file.path()).unwrap();
        (file, f)
    }

    fn on_disk(f: &File) -> Vec<u8> {
        let mut out = Vec::new();
        let mut f = f.try_clone().unwrap();
        std::io::Seek::rewind(&mut f).unwrap();
        f.read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn writes_are_read_back_but_reach_the_disk_only_when_synced() {
        let (_t, f) = backing(b"hello world");
        let mut p = Pending::over(&f).unwrap();
        p.write(&f, 6, b"spine").unwrap();
        assert_eq!(p.read(&f, 0, 100).unwrap(), b"hello spine");
        assert_eq!(on_disk(&f), b"hello world", "nothing reaches the disk before a sync");
        p.sync(&f).unwrap();
        assert_eq!(on_disk(&f), b"hello spine");
        // Written after the sync: read back, and forgotten by a cut (dropping the state).
        p.write(&f, 0, b"HELLO").unwrap();
        p.write(&f, 11, b"!!").unwrap();
        assert_eq!(p.read(&f, 0, 100).unwrap(), b"HELLO spine!!");
        drop(p);
        assert_eq!(on_disk(&f), b"hello spine", "exactly the synced bytes survive");
        assert!(Pending::over(&f).unwrap().is_clean(&f).unwrap());
    }

    #[test]
    fn writes_across_pages_and_past_the_end() {
        let (_t, f) = backing(&[]);
        let mut p = Pending::over(&f).unwrap();
        let data: Vec<u8> = (0..3 * PAGE + 100).map(|i| (i % 251) as u8).collect();
        p.write(&f, 10, &data).unwrap();
        assert_eq!(p.size(), 10 + data.len() as u64);
        let read = p.read(&f, 0, u64::MAX).unwrap();
        assert_eq!(&read[..10], &[0; 10]);
        assert_eq!(&read[10..], &data[..]);
        assert_eq!(p.read(&f, PAGE - 1, 3).unwrap(), &data[PAGE as usize - 11..PAGE as usize - 8]);
        assert!(on_disk(&f).is_empty());
        p.sync(&f).unwrap();
        assert_eq!(on_disk(&f), read);
    }

    #[test]
    fn a_truncation_is_pending_too_and_a_regrown_file_reads_zeros() {
        let (_t, f) = backing(&[7u8; 3 * PAGE as usize]);
        let mut p = Pending::over(&f).unwrap();
        p.truncate(&f, 100).unwrap();
        assert_eq!(p.read(&f, 0, u64::MAX).unwrap(), vec![7u8; 100]);
        // Grown again by a write far past the end: the bytes between read as zeros, not as
        // the backing file's old ones.
        p.write(&f, 2 * PAGE, b"x").unwrap();
        let read = p.read(&f, 0, u64::MAX).unwrap();
        assert_eq!(read.len() as u64, 2 * PAGE + 1);
        assert!(read[100..2 * PAGE as usize].iter().all(|&b| b == 0));
        assert_eq!(on_disk(&f), vec![7u8; 3 * PAGE as usize], "the truncation is not on disk yet");
        p.sync(&f).unwrap();
        assert_eq!(on_disk(&f), read);
        // A truncation forgotten by a cut leaves the file as long as it was.
        let mut p = Pending::over(&f).unwrap();
        p.truncate(&f, 0).unwrap();
        assert_eq!(p.size(), 0);
        drop(p);
        assert_eq!(on_disk(&f), read);
    }

    #[test]
    fn a_failed_sync_loses_its_pages_even_after_a_later_good_sync() {
        let (_t, f) = backing(&[0u8; 2 * PAGE as usize]);
        let mut p = Pending::over(&f).unwrap();
        p.write(&f, 0, b"first").unwrap();
        p.write(&f, PAGE, b"second").unwrap();
        p.fail_sync();
        // Still readable, as Linux keeps the failed pages in its cache…
        assert_eq!(p.read(&f, 0, 5).unwrap(), b"first");
        // …but the next sync "succeeds" without writing them.
        p.write(&f, PAGE + 100, b"third").unwrap();
        p.sync(&f).unwrap();
        let disk = on_disk(&f);
        assert_eq!(&disk[..5], &[0; 5], "a page a failed sync held never reaches the disk");
        assert_eq!(&disk[PAGE as usize..PAGE as usize + 6], b"second", "rewritten: dirty again");
        assert_eq!(&disk[PAGE as usize + 100..PAGE as usize + 105], b"third");
        assert_eq!(p.read(&f, 0, 5).unwrap(), b"first", "still served from memory");
        // Writing the lost page again makes it dirty: the next sync writes it.
        p.write(&f, 1, b"F").unwrap();
        p.sync(&f).unwrap();
        assert_eq!(&on_disk(&f)[..5], b"fFrst");
    }

    #[test]
    fn a_torn_cut_writes_half_of_the_last_page_only() {
        let (_t, f) = backing(&[1u8; 2 * PAGE as usize]);
        let mut p = Pending::over(&f).unwrap();
        p.write(&f, 0, &[2u8; PAGE as usize]).unwrap();
        p.write(&f, PAGE, &[3u8; PAGE as usize]).unwrap();
        assert!(p.tear(&f).unwrap());
        let disk = on_disk(&f);
        assert!(disk[..PAGE as usize].iter().all(|&b| b == 1), "an earlier page: not written");
        let half = (PAGE + PAGE / 2) as usize;
        assert!(disk[PAGE as usize..half].iter().all(|&b| b == 3), "the first half: written");
        assert!(disk[half..].iter().all(|&b| b == 1), "the second half: old bytes");
        // A page appended past the disk's end of file: half of it lands there.
        let (_t, f) = backing(&[]);
        let mut p = Pending::over(&f).unwrap();
        p.write(&f, 0, &[4u8; PAGE as usize]).unwrap();
        p.write(&f, PAGE, &[5u8; 10]).unwrap();
        assert!(p.tear(&f).unwrap());
        let disk = on_disk(&f);
        assert_eq!(disk.len() as u64, PAGE + 10, "half a page, bounded by the file's size");
        assert!(disk[..PAGE as usize].iter().all(|&b| b == 0), "the page before: a hole");
    }
}
