//! File mappings: what a file `mmap` maps (the [`FileMap`] record a VMA of kind
//! `File(n)` points to), how its pages get the file's data, and how a shared one's
//! writes reach the file.
//!
//! Memory here comes in 2 MiB blocks with no 4 KiB page tables (see `space.rs`), so
//! there is no page fault per page to fill or to mark dirty. Instead a mapping is
//! anonymous memory that the kernel fills by reading the file into it a block at a
//! time, when the block is first backed (the program's first touch, or the kernel's
//! check before it copies there: `AddressSpace::start_fill`, `space::Fill`, which
//! read into the block's chunk before it is mapped), for every block at once with
//! `MAP_POPULATE`, and straight away for the parts of a mapping in blocks already
//! backed (other mappings there; `mremap` growth; `madvise(MADV_DONTNEED)` of a
//! private mapping). Only what the file holds is read: past its end stays zeros.
//! A shared mapping remembers a hash of each page as last read from or written to
//! the file; writing it back (`msync`, `munmap`, the program's end, the last
//! mapping going) writes only the pages whose contents changed since, and never past
//! the file's current end, so that the file does not grow and a `write()` to a page
//! the program did not touch through the mapping is not undone.
//!
//! The file is reached only through [`MappedFile`] (implemented by open files, in
//! `crate::file`, a higher layer), and user memory only through [`UserMem`]: both are
//! called without the memory lock held (a copy may fault and take it), and this
//! module is unit-tested on the host with a buffer for memory.

use super::user::UserMem;
use crate::errno::Errno;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use onering_abi::layout::{align_down, align_up, PAGE_SIZE};
use onering_arch::sync::Mutex;

/// A file as a mapping needs it: positioned reads and writes through user memory,
/// and its size.
pub trait MappedFile: Send + Sync {
    /// Reads up to `len` bytes at file offset `off` into user memory at `buf`.
    fn read_at(&self, user: &dyn UserMem, buf: u64, len: u64, off: u64) -> Result<u64, Errno>;
    /// Writes up to `len` bytes from user memory at `buf` to file offset `off`.
    fn write_at(&self, user: &dyn UserMem, buf: u64, len: u64, off: u64) -> Result<u64, Errno>;
    /// The file's size now.
    fn size(&self) -> u64;
    /// The node of the file tree it is, if any (/proc/PID/maps names it).
    fn node(&self) -> Option<usize> {
        None
    }
}

/// One file mapping (all the VMAs of kind `File(n)` for its number `n`).
pub struct FileMap {
    pub file: Arc<dyn MappedFile>,
    /// The address the mapping was made at, and the file offset there: every page of
    /// its VMAs maps the file at the same distance further on.
    pub start: u64,
    pub offset: u64,
    /// MAP_SHARED: the program's writes go back to the file.
    pub shared: bool,
    /// Whether it may be made writable (a shared mapping of a file opened read-only
    /// may not: `mprotect` says EACCES, as on Linux).
    pub may_write: bool,
    /// Shared mappings: the hash of each page (from `start`) when it was last read
    /// from or written to the file; pages past the end of the vector were zeros.
    /// Held only briefly, never across another lock.
    hashes: Mutex<Vec<u64>>,
}

impl core::fmt::Debug for FileMap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FileMap").field("start", &self.start).field("offset", &self.offset).finish()
    }
}

impl FileMap {
    pub fn new(file: Arc<dyn MappedFile>, start: u64, offset: u64, shared: bool, may_write: bool) -> Self {
        FileMap { file, start, offset, shared, may_write, hashes: Mutex::new(Vec::new()) }
    }

    /// The same file, mapped at `at` from the offset `from` maps: for a mapping
    /// moved by `mremap` (the page hashes move with it).
    pub fn moved(&self, from: u64, at: u64) -> Self {
        let first = ((from - self.start) / PAGE_SIZE) as usize;
        let hashes = self.hashes.lock().get(first..).map(<[u64]>::to_vec).unwrap_or_default();
        FileMap {
            hashes: Mutex::new(hashes),
            ..FileMap::new(self.file.clone(), at, self.offset_of(from), self.shared, self.may_write)
        }
    }

    /// The file offset mapped at `addr`.
    pub fn offset_of(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }

    fn page(&self, addr: u64) -> usize {
        ((addr - self.start) / PAGE_SIZE) as usize
    }

    fn hash_of(&self, addr: u64) -> u64 {
        self.hashes.lock().get(self.page(addr)).copied().unwrap_or(ZERO_HASH)
    }

    fn set_hash(&self, addr: u64, h: u64) {
        let i = self.page(addr);
        let mut v = self.hashes.lock();
        if v.len() <= i {
            if h == ZERO_HASH {
                return;
            }
            v.resize(i + 1, ZERO_HASH);
        }
        v[i] = h;
    }
}

/// A piece `[start, end)` of a file mapping, to fill or write back.
pub type FilePiece = (Arc<FileMap>, u64, u64);

/// Runs `io` ([`fill`] or [`write_back`]) on each piece, with the program's memory
/// as the kernel may use it (protections ignored); the first error.
pub fn each(
    user: &dyn UserMem,
    pieces: &[FilePiece],
    io: fn(&dyn UserMem, &FileMap, u64, u64) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let mut result = Ok(());
    if !pieces.is_empty() {
        user.unprotected(&mut |u| {
            for (m, s, e) in pieces {
                result = result.and(io(u, m, *s, *e));
            }
        });
    }
    result
}

/// One step of the page hash (FxHash's, over 8-byte words).
const fn step(h: u64, word: u64) -> u64 {
    (h.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95)
}

const SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// The hash of a page of zeros.
const ZERO_HASH: u64 = {
    let (mut h, mut i) = (SEED, 0);
    while i < PAGE_SIZE / 8 {
        h = step(h, 0);
        i += 1;
    }
    h
};

fn page_hash(page: &[u8]) -> u64 {
    page.chunks_exact(8)
        .fold(SEED, |h, w| step(h, u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])))
}

/// Fills `[start, end)` of mapping `map` (page aligned, freshly zeroed) with the
/// file's data, as far as the file goes (reading only touches what it fills), and,
/// for a shared mapping, notes the hashes of the pages filled. `user` must ignore
/// the program's protections (`UserMem::unprotected`).
pub fn fill(user: &dyn UserMem, map: &FileMap, start: u64, end: u64) -> Result<(), Errno> {
    let mut at = start;
    while at < end {
        let n = map.file.read_at(user, at, end - at, map.offset_of(at))?;
        if n == 0 {
            break;
        }
        at += n;
    }
    if map.shared {
        let mut buf = vec![0u8; PAGE_SIZE as usize];
        for p in (start..align_up(at, PAGE_SIZE)).step_by(PAGE_SIZE as usize) {
            user.read(p, &mut buf)?;
            map.set_hash(p, page_hash(&buf));
        }
    }
    Ok(())
}

/// Writes the pages of `[start, end)` of shared mapping `map` that changed since they
/// were last read or written back to the file, up to its current end (a mapping
/// never grows the file). `user` as for [`fill`].
pub fn write_back(user: &dyn UserMem, map: &FileMap, start: u64, end: u64) -> Result<(), Errno> {
    if !map.shared {
        return Ok(());
    }
    let size = map.file.size();
    let Some(in_file) = size.checked_sub(map.offset) else {
        return Ok(());
    };
    let end = end.min(map.start.saturating_add(in_file));
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut changed = Vec::new();
    for p in (align_down(start, PAGE_SIZE)..end).step_by(PAGE_SIZE as usize) {
        user.read(p, &mut buf)?;
        let h = page_hash(&buf);
        if h != map.hash_of(p) {
            changed.push((p, h));
        }
    }
    // Runs of changed pages, each written in one go.
    for run in changed.chunk_by(|a, b| b.0 == a.0 + PAGE_SIZE) {
        let (first, last) = (run[0].0, run[run.len() - 1].0);
        let stop = (last + PAGE_SIZE).min(end);
        let mut at = first;
        while at < stop {
            let n = map.file.write_at(user, at, stop - at, map.offset_of(at))?;
            if n == 0 {
                return Err(Errno::EIO);
            }
            at += n;
        }
        for (p, h) in run {
            map.set_hash(*p, *h);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::user::BufferMem;

    /// A file that is a buffer.
    struct Buf(Mutex<Vec<u8>>);

    impl MappedFile for Buf {
        fn read_at(&self, user: &dyn UserMem, buf: u64, len: u64, off: u64) -> Result<u64, Errno> {
            let d = self.0.lock();
            let s = (off as usize).min(d.len());
            let n = (len as usize).min(d.len() - s).min(5000); // short reads too
            user.write(buf, &d[s..s + n])?;
            Ok(n as u64)
        }
        fn write_at(&self, user: &dyn UserMem, buf: u64, len: u64, off: u64) -> Result<u64, Errno> {
            let mut d = self.0.lock();
            let end = off as usize + len as usize;
            if d.len() < end {
                d.resize(end, 0);
            }
            user.read(buf, &mut d[off as usize..end])?;
            Ok(len)
        }
        fn size(&self) -> u64 {
            self.0.lock().len() as u64
        }
    }

    const B: u64 = 0x10_0000;
    const P: u64 = PAGE_SIZE;

    fn setup(shared: bool) -> (BufferMem, Arc<Buf>, FileMap) {
        let data: Vec<u8> = (0..3 * P + 100).map(|i| (i % 251) as u8).collect();
        let file = Arc::new(Buf(Mutex::new(data)));
        let map = FileMap::new(file.clone(), B, P, shared, true);
        (BufferMem::new(B, 8 * P as usize), file, map)
    }

    #[test]
    fn fill_copies_up_to_the_end_of_the_file() {
        let (u, f, map) = setup(false);
        fill(&u, &map, B, B + 8 * P).unwrap();
        let mut got = vec![0u8; 3 * P as usize];
        u.read(B, &mut got).unwrap();
        assert_eq!(&got[..(2 * P + 100) as usize], &f.0.lock()[P as usize..]);
        assert!(got[(2 * P + 100) as usize..].iter().all(|b| *b == 0), "zeros past the end");
    }

    #[test]
    fn write_back_writes_changed_pages_within_the_file() {
        let (u, f, map) = setup(true);
        fill(&u, &map, B, B + 8 * P).unwrap();
        // The program writes pages 0 and 2 (past the end too); someone writes page 1
        // of the mapping through the file meanwhile.
        u.write(B + 5, b"mapped").unwrap();
        u.write(B + 2 * P + 98, b"abcd").unwrap();
        f.0.lock()[(2 * P) as usize] = 0xee;
        write_back(&u, &map, B, B + 8 * P).unwrap();
        let d = f.0.lock().clone();
        assert_eq!(d.len() as u64, 3 * P + 100, "the file does not grow");
        assert_eq!(&d[(P + 5) as usize..(P + 11) as usize], b"mapped");
        assert_eq!(d[(2 * P) as usize], 0xee, "an untouched page is not written back");
        assert_eq!(&d[(3 * P + 98) as usize..], b"ab");
        // Nothing changed since: nothing is written again.
        f.0.lock()[(P + 5) as usize] = b'M';
        write_back(&u, &map, B, B + 8 * P).unwrap();
        assert_eq!(f.0.lock()[(P + 5) as usize], b'M');
        // A moved mapping keeps the hashes.
        let moved = map.moved(B + P, B + 4 * P);
        assert_eq!((moved.offset, moved.hash_of(B + 4 * P)), (2 * P, map.hash_of(B + P)));
    }
}
