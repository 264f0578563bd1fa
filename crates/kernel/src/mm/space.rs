//! The program's address space: VMAs, their backing by 2 MiB chunks, `brk`, `mmap`
//! and `munmap`, and the checks behind every user-memory access.
//!
//! Memory is backed in whole 2 MiB blocks: a block gets a zeroed chunk and one
//! page-directory entry; other mappings inside the block cost nothing more; the block
//! is released when the last mapping in it goes. No 4 KiB page tables, which are what
//! cost microseconds on our hypervisor, except for a block a fork left
//! copy-on-write once a process has written some of its pages (`Block::Cow`:
//! only the pages written are copied, through a 4 KiB table; see `fork`). Small mappings (under [`LAZY_MIN`]) are backed
//! when they are made, so touching them never faults. Large ones (thread stacks of
//! 8 MiB, Go's 64 MiB heap arenas, big buffers) are backed block by block on first
//! touch: by the page-fault handler when the program touches them, by [`check`] when
//! the kernel is about to, so that a program may map far more than it uses, as on
//! Linux. A mapping larger than all of memory is refused at once (Linux's heuristic
//! overcommit); running out later kills the program, as Linux's OOM killer would.
//! `PROT_NONE` mappings (reservations) get no backing, so touching them faults.
//!
//! A file mapping is such memory with a [`FileMap`] record (VMA kind `File(n)`):
//! this module keeps the records with the VMAs (a record goes when its last VMA
//! does: it is then set aside for the caller to drop, outside the memory lock, since
//! dropping the last reference closes the file) and says which pieces to fill or
//! write back; the filling and writing, which read and write files and so run
//! without the lock, are `filemap`'s. File mappings are lazy: a block that holds
//! one is backed only once it is filled ([`Fill`]: taken under the lock, filled
//! without it, then mapped), on first touch, as [`check`] or the page-fault
//! handler find it owed a fill.
//!
//! When chunks run short, backing asks the chunk allocator to reclaim (the page
//! cache's memory, through the heap: `onering_arch::mm`) and tries once more before
//! ENOMEM.
//!
//! Page-table writes and chunk contents go through the [`Mmu`] trait, so this logic
//! runs in host unit tests with a fake. Backed blocks own their chunks
//! (`onering_arch::mm::Chunk`). The backing state sits in a `RefCell` so that
//! `check`, which only has `&self`, can back what it vouches for; the whole address
//! space lives under the memory lock (`mm::Mm`), which is never held while user
//! memory is copied (a copy that faults takes it to back the page).
//!
//! [`check`]: AddressSpace::check

use super::filemap::{self, FileMap, FilePiece};
use super::user::BufferMem;
use super::vma::{Vma, VmaKind, VmaSet, PROT_EXEC, PROT_READ, PROT_WRITE};
use crate::errno::Errno;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use onering_abi::layout::{align_down, align_up, HUGE_PAGE_SIZE, PAGE_SIZE, USER_END};
use onering_arch::mm::{Chunk, ChunkAllocator};
use onering_arch::sync::Mutex;

/// Page-table operations on the live address space, and the contents of the
/// chunks behind it.
pub trait Mmu {
    /// Maps the 2 MiB block at `virt` to `chunk`, writable or read-only; may take
    /// chunks for page-table pages from `chunks`. (Mapped to that chunk already:
    /// only the rights change.)
    fn map_block(&mut self, virt: u64, chunk: &Chunk, chunks: &mut ChunkAllocator, writable: bool)
        -> Result<(), Errno>;
    /// Maps the block at `virt` page by page: page `i` to `copy` (writable) where
    /// bit `i` of `copied` is set, to `base` (read-only) elsewhere.
    fn split_block(
        &mut self,
        virt: u64,
        base: &Chunk,
        copy: &Chunk,
        copied: &[u64; 8],
        chunks: &mut ChunkAllocator,
    ) -> Result<(), Errno>;
    /// Maps page `virt` of a split block to its copy, writable.
    fn map_copied_page(&mut self, virt: u64);
    /// Removes the mapping of the 2 MiB block at `virt`.
    fn unmap_block(&mut self, virt: u64);
    /// Empty tables for another address space (fork's child).
    fn new_space(&mut self, chunks: &mut ChunkAllocator) -> Result<Self, Errno>
    where
        Self: Sized;
    /// Unmaps everything and gives the tables back: the space ends.
    fn release(&mut self);
    /// Writes `data` at `offset` of `chunk`, the block at user address `virt`
    /// (of a space that may not be the one loaded).
    fn write(&mut self, virt: u64, chunk: &mut Chunk, offset: u64, data: &[u8]);
    /// Zeroes the user range `[virt, virt + len)`, which is `chunk` from `offset`.
    fn zero(&mut self, virt: u64, len: u64, chunk: &mut Chunk, offset: u64);
    /// Copies the user range `[from, from + len)` (in `src` at `src_off`) to `to`
    /// (in `dst` at `dst_off`; `dst` is None when it is `src` itself).
    #[allow(clippy::too_many_arguments)]
    fn copy(
        &mut self,
        from: u64,
        to: u64,
        len: u64,
        src: &mut Chunk,
        src_off: u64,
        dst: Option<&mut Chunk>,
        dst_off: u64,
    );
}

/// Mappings (or mprotect/mremap ranges) of at least this size are backed on first
/// touch rather than at once.
pub const LAZY_MIN: u64 = 2 * HUGE_PAGE_SIZE;

/// `mmap` flags this kernel understands.
pub mod map_flags {
    pub const SHARED: u32 = 0x01;
    pub const PRIVATE: u32 = 0x02;
    pub const SHARED_VALIDATE: u32 = 0x03;
    pub const TYPE: u32 = 0x0f;
    pub const FIXED: u32 = 0x10;
    pub const ANONYMOUS: u32 = 0x20;
    pub const GROWSDOWN: u32 = 0x100;
    pub const DENYWRITE: u32 = 0x800;
    pub const EXECUTABLE: u32 = 0x1000;
    pub const LOCKED: u32 = 0x2000;
    pub const NORESERVE: u32 = 0x4000;
    pub const POPULATE: u32 = 0x8000;
    pub const NONBLOCK: u32 = 0x1_0000;
    pub const STACK: u32 = 0x2_0000;
    pub const HUGETLB: u32 = 0x4_0000;
    pub const SYNC: u32 = 0x8_0000;
    pub const FIXED_NOREPLACE: u32 = 0x10_0000;
    /// Flags accepted (and, past the mapping type, ignored where they are hints).
    pub const KNOWN: u32 = TYPE
        | FIXED
        | ANONYMOUS
        | GROWSDOWN
        | DENYWRITE
        | EXECUTABLE
        | LOCKED
        | NORESERVE
        | POPULATE
        | NONBLOCK
        | STACK
        | HUGETLB
        | SYNC
        | FIXED_NOREPLACE
        | (0x3f << 26); // MAP_HUGE_SHIFT size bits
}

/// Most VMAs an address space holds (Linux allows 65530; ours is bounded by the kernel
/// heap, which stores them).
pub const MAX_MAP_COUNT: usize = 16384;

/// The chunk allocator every address space (and the kernel's heap and stacks)
/// draws from. Lock order: after the memory lock of any space.
pub type Chunks = Arc<Mutex<ChunkAllocator>>;

/// The lowest address `mmap` hands out (the first 64 KiB stay unmapped, as Linux's
/// `mmap_min_addr`).
pub const MMAP_BOTTOM: u64 = 0x1_0000;

/// A chunk mapped in several address spaces (MAP_SHARED memory after fork): the
/// last space to let it go zeroes it and gives it back.
#[derive(Debug)]
pub struct SharedChunk {
    chunk: Mutex<Option<Chunk>>,
    chunks: Chunks,
}

impl Drop for SharedChunk {
    fn drop(&mut self) {
        if let Some(mut c) = self.chunk.get_mut().take() {
            c.zero(0, HUGE_PAGE_SIZE);
            self.chunks.lock().free(c);
        }
    }
}

/// A backed block's memory: the space's own chunk, one shared with other spaces
/// (MAP_SHARED: not zeroed when a mapping in it goes, the others may use it), or
/// private memory a fork left shared until written (copy-on-write).
#[derive(Debug)]
enum Block {
    Own(Chunk),
    Shared(Arc<SharedChunk>),
    Cow(Cow),
}

/// A copy-on-write block: `base` is the memory as it was at fork, mapped
/// read-only in every space that shares it; the pages this space wrote since
/// were copied to `copy` (bit `i` of `copied` for page `i`), where it maps them
/// writable. Only the pages written are copied (and later zeroed); a space that
/// is the last holder of `base` takes it back as its own.
#[derive(Debug)]
struct Cow {
    base: Arc<SharedChunk>,
    copy: Option<Chunk>,
    copied: [u64; 8],
}

/// Pages of a block copied one at a time before the rest is copied at once (each
/// write fault is an exception and a hostcall for its address here, far dearer
/// than copying a page).
const COW_PAGES_MAX: u32 = 16;

/// The pages of a block (4 KiB each).
const BLOCK_PAGES: u64 = HUGE_PAGE_SIZE / PAGE_SIZE;

impl Cow {
    fn new(base: Arc<SharedChunk>) -> Self {
        Cow { base, copy: None, copied: [0; 8] }
    }

    fn is_copied(&self, page: u64) -> bool {
        self.copied[(page / 64) as usize] & 1 << (page % 64) != 0
    }

    fn count(&self) -> u32 {
        self.copied.iter().map(|w| w.count_ones()).sum()
    }

    /// Gives the copy back (its written pages zeroed first) and lets go of the
    /// base.
    fn free(mut self, chunks: &Chunks) {
        if let Some(c) = self.copy.take() {
            free_copy(c, &self.copied, chunks);
        }
    }
}

/// Runs of pages `[first, end)` whose bit in `copied` is `want`.
fn runs(copied: &[u64; 8], want: bool) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for p in (0..BLOCK_PAGES).filter(|p| (copied[(*p / 64) as usize] & 1 << (p % 64) != 0) == want) {
        match out.last_mut() {
            Some((_, end)) if *end == p => *end = p + 1,
            _ => out.push((p, p + 1)),
        }
    }
    out
}

/// Frees the copy chunk of a copy-on-write block (no longer mapped), its
/// written pages (`copied`) zeroed first.
fn free_copy(mut copy: Chunk, copied: &[u64; 8], chunks: &Chunks) {
    for (a, b) in runs(copied, true) {
        copy.zero(a * PAGE_SIZE, (b - a) * PAGE_SIZE);
    }
    chunks.lock().free(copy);
}

impl SharedChunk {
    fn new(chunk: Chunk, chunks: &Chunks) -> Arc<Self> {
        Arc::new(SharedChunk { chunk: Mutex::new(Some(chunk)), chunks: chunks.clone() })
    }

    /// Runs `f` on the chunk.
    fn with<R>(&self, f: impl FnOnce(&mut Chunk) -> R) -> R {
        match self.chunk.lock().as_mut() {
            Some(c) => f(c),
            None => unreachable!("a shared chunk is only taken by its last holder"),
        }
    }

    /// The chunk, from its last holder.
    fn take(self: Arc<Self>) -> Result<Chunk, Arc<Self>> {
        let mut me = Arc::try_unwrap(self)?;
        match me.chunk.get_mut().take() {
            Some(c) => Ok(c),
            None => unreachable!("a shared chunk is only taken by its last holder"),
        }
    }
}

impl Block {
    /// Runs `f` on the chunk of a block this space may write as a whole (not a
    /// copy-on-write one: callers make those their own first).
    fn with<R>(&mut self, f: impl FnOnce(&mut Chunk) -> R) -> R {
        match self {
            Block::Own(c) => f(c),
            Block::Shared(s) => s.with(f),
            Block::Cow(_) => unreachable!("a copy-on-write block is made private before it is written whole"),
        }
    }

    /// Gives the block's memory back (an own chunk must be unmapped already and
    /// zero where it was used; a shared one goes when its last space lets go).
    fn free(self, chunks: &Chunks) {
        match self {
            Block::Own(c) => chunks.lock().free(c),
            Block::Shared(s) => drop(s),
            Block::Cow(c) => c.free(chunks),
        }
    }
}

/// Which blocks are backed, by which chunks, and the page tables that say so.
#[derive(Debug)]
struct Backing<M> {
    /// Backed 2 MiB blocks: virtual block address -> chunk.
    blocks: BTreeMap<u64, Block>,
    /// Blocks of file mappings being filled (`Fill`): not backed yet, and not to be
    /// backed by anything else meanwhile.
    filling: BTreeSet<u64>,
    /// Those of them whose mappings went meanwhile (`remove`): the fill is dropped.
    spoiled: BTreeSet<u64>,
    chunks: Chunks,
    mmu: M,
}

impl<M: Mmu> Backing<M> {
    /// Nothing backed yet, on the tables `mmu`.
    fn new(chunks: Chunks, mmu: M) -> Self {
        Backing { blocks: BTreeMap::new(), filling: BTreeSet::new(), spoiled: BTreeSet::new(), chunks, mmu }
    }

    /// Backs every block of `[start, end)`; on failure nothing new stays backed.
    /// When chunks are short, the heap gives back what the page cache can free
    /// (`ChunkAllocator::reclaim`: clean cached chunks, oldest first, then the
    /// heap's emptied regions) and the backing is tried again: ENOMEM only when
    /// nothing reclaimable is left.
    fn back(&mut self, start: u64, end: u64) -> Result<(), Errno> {
        match self.back_once(start, end) {
            Err(Errno::ENOMEM) => {
                // (One more chunk, for page-table pages; tried again only if
                // chunks came back.)
                let want = self.unbacked(start, end) as usize + 1;
                let mut chunks = self.chunks.lock();
                let before = chunks.free_chunks();
                chunks.reclaim(want);
                let more = chunks.free_chunks() > before;
                drop(chunks);
                if more {
                    self.back_once(start, end)
                } else {
                    Err(Errno::ENOMEM)
                }
            }
            r => r,
        }
    }

    /// [`back`](Self::back) with the chunks free now.
    /// Work is bounded by memory, not by the size of the range: a range with more
    /// unbacked blocks than there are free chunks fails at once.
    fn back_once(&mut self, start: u64, end: u64) -> Result<(), Errno> {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        if self.unbacked(start, end) > self.chunks.lock().free_chunks() as u64 {
            return Err(Errno::ENOMEM);
        }
        let mut added = Vec::new();
        for b in (lo..hi).step_by(HUGE_PAGE_SIZE as usize) {
            if self.blocks.contains_key(&b) || self.filling.contains(&b) {
                continue;
            }
            match self.map_new(b) {
                Ok(c) => {
                    self.blocks.insert(b, Block::Own(c));
                    added.push(b);
                }
                Err(e) => {
                    // Page-table pages may have used up the chunks: undo this call.
                    for b in added {
                        if let Some(c) = self.blocks.remove(&b) {
                            self.mmu.unmap_block(b);
                            c.free(&self.chunks); // untouched: still zero
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// A new chunk, mapped at block `b` (not recorded yet).
    fn map_new(&mut self, b: u64) -> Result<Chunk, Errno> {
        let mut chunks = self.chunks.lock();
        let c = chunks.alloc().ok_or(Errno::ENOMEM)?;
        match self.mmu.map_block(b, &c, &mut chunks, true) {
            Ok(()) => Ok(c),
            Err(e) => {
                chunks.free(c);
                Err(e)
            }
        }
    }

    /// Releases the backed blocks of `[start, end)` that no VMA uses any more.
    fn release_unused(&mut self, vmas: &VmaSet, start: u64, end: u64) {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        let candidates: Vec<u64> = self.blocks.range(lo..hi).map(|(b, _)| *b).collect();
        for b in candidates {
            if vmas.intersects(b, b + HUGE_PAGE_SIZE) {
                continue;
            }
            if let Some(c) = self.blocks.remove(&b) {
                self.mmu.unmap_block(b);
                c.free(&self.chunks);
            }
        }
    }

    /// Zeroes the backed parts of `[start, end)` the space owns (a shared block's
    /// memory is zeroed when its last space lets it go). A copy-on-write block
    /// that `vmas` still use is made this space's own first (ENOMEM if no chunk
    /// is left for that); one they no longer use is left for `free`.
    fn zero_backed(&mut self, start: u64, end: u64, vmas: &VmaSet) -> Result<(), Errno> {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        for b in self.cow_blocks(lo, hi) {
            if vmas.intersects(b, b + HUGE_PAGE_SIZE) {
                self.privatize(b)?;
            }
        }
        for (b, blk) in self.blocks.range_mut(lo..hi) {
            if let Block::Own(c) = blk {
                let s = start.max(*b);
                let e = end.min(b + HUGE_PAGE_SIZE);
                self.mmu.zero(s, e - s, c, s - b);
            }
        }
        Ok(())
    }

    /// The copy-on-write blocks of `[lo, hi)`.
    fn cow_blocks(&self, lo: u64, hi: u64) -> Vec<u64> {
        self.blocks.range(lo..hi).filter(|(_, k)| matches!(k, Block::Cow(_))).map(|(b, _)| *b).collect()
    }

    /// A free chunk, after reclaiming if there is none.
    fn alloc_chunk(&self) -> Result<Chunk, Errno> {
        let mut chunks = self.chunks.lock();
        if let Some(c) = chunks.alloc() {
            return Ok(c);
        }
        chunks.reclaim(1);
        chunks.alloc().ok_or(Errno::ENOMEM)
    }

    /// Makes the page at `page` of block `blk` this space's to write (a write
    /// fault, or the kernel about to write there): in a copy-on-write block the
    /// page is copied and mapped writable; the block becomes wholly this space's
    /// when no other space shares its base any more, or once it has had
    /// [`COW_PAGES_MAX`] pages copied. Nothing for other blocks. ENOMEM when no
    /// chunk is left for the copy.
    fn unshare_page(&mut self, blk: u64, page: u64) -> Result<(), Errno> {
        let idx = (page - blk) / PAGE_SIZE;
        let needs_copy = match self.blocks.get(&blk) {
            Some(Block::Cow(c)) if c.is_copied(idx) => return Ok(()),
            Some(Block::Cow(c)) if Arc::strong_count(&c.base) == 1 || c.count() >= COW_PAGES_MAX => {
                return self.privatize(blk)
            }
            Some(Block::Cow(c)) => c.copy.is_none(),
            _ => return Ok(()),
        };
        let fresh = if needs_copy { Some(self.alloc_chunk()?) } else { None };
        let Some(Block::Cow(Cow { base, copy, copied })) = self.blocks.get_mut(&blk) else { return Ok(()) };
        let copy = match (copy, fresh) {
            (c, Some(f)) => c.insert(f),
            (Some(c), None) => c,
            (None, None) => return Ok(()),
        };
        let first = copied.iter().all(|w| *w == 0);
        copied[(idx / 64) as usize] |= 1 << (idx % 64);
        let (mmu, chunks) = (&mut self.mmu, &self.chunks);
        let (off, va) = (idx * PAGE_SIZE, blk + idx * PAGE_SIZE);
        let mapped = base.with(|base| {
            mmu.copy(va, va, PAGE_SIZE, base, off, Some(copy), off);
            if first {
                mmu.split_block(blk, base, copy, copied, &mut chunks.lock())
            } else {
                mmu.map_copied_page(va);
                Ok(())
            }
        });
        if mapped.is_err() {
            // (No table page for the split: the page stays read-only and copied;
            // the block is made whole instead, which needs no table.)
            return self.privatize(blk);
        }
        Ok(())
    }

    /// Makes copy-on-write block `blk` this space's own, mapped writable: the
    /// base itself if no other space shares it any more (the pages this space
    /// copied are copied back), else a copy of it (the pages this space did not
    /// copy yet are copied now). ENOMEM, with the block as it was, when no chunk
    /// is left for the copy.
    fn privatize(&mut self, blk: u64) -> Result<(), Errno> {
        self.make_own(blk, true)
    }

    /// [`privatize`](Self::privatize), the block mapped `writable` or not (fork
    /// makes a partly copied block whole and read-only in one store).
    fn make_own(&mut self, blk: u64, writable: bool) -> Result<(), Errno> {
        if !matches!(self.blocks.get(&blk), Some(Block::Cow(_))) {
            return Ok(());
        }
        let Some(Block::Cow(Cow { base, copy, copied })) = self.blocks.remove(&blk) else {
            unreachable!("looked up above")
        };
        // (The others' hold on the base, if any, is kept until this space no
        // longer maps it: were they all to let go meanwhile, it would be freed.)
        let (chunk, spare, held) = match base.take() {
            Ok(mut base) => {
                if let Some(mut copy) = copy {
                    for (a, b) in runs(&copied, true) {
                        let (off, len) = (a * PAGE_SIZE, (b - a) * PAGE_SIZE);
                        self.mmu.copy(blk + off, blk + off, len, &mut copy, off, Some(&mut base), off);
                    }
                    (base, Some(copy), None)
                } else {
                    (base, None, None)
                }
            }
            Err(base) => {
                let mut copy = match copy {
                    Some(c) => c,
                    None => match self.alloc_chunk() {
                        Ok(c) => c,
                        Err(e) => {
                            self.blocks.insert(blk, Block::Cow(Cow { base, copy: None, copied }));
                            return Err(e);
                        }
                    },
                };
                let mmu = &mut self.mmu;
                for (a, b) in runs(&copied, false) {
                    let (off, len) = (a * PAGE_SIZE, (b - a) * PAGE_SIZE);
                    base.with(|base| mmu.copy(blk + off, blk + off, len, base, off, Some(&mut copy), off));
                }
                (copy, None, Some(base))
            }
        };
        let mapped = self.mmu.map_block(blk, &chunk, &mut self.chunks.lock(), writable);
        if mapped.is_err() {
            // (Cannot happen: the block's table exists. Were it to, nothing may
            // keep mapping the chunks freed below: a touch faults instead.)
            self.mmu.unmap_block(blk);
        }
        self.blocks.insert(blk, Block::Own(chunk));
        if let Some(copy) = spare {
            // No longer mapped (the block maps the base alone): zeroed where
            // written, and freed.
            free_copy(copy, &copied, &self.chunks);
        }
        drop(held);
        mapped
    }

    /// Copies the backed user range `[from, from + len)`, which lies in one block,
    /// to `[to, to + len)`, which is backed.
    fn copy(&mut self, from: u64, to: u64, len: u64) {
        let fb = align_down(from, HUGE_PAGE_SIZE);
        let mut done = 0;
        while done < len {
            let (s, t) = (from + done, to + done);
            let tb = align_down(t, HUGE_PAGE_SIZE);
            let n = (len - done).min(tb + HUGE_PAGE_SIZE - t);
            let mmu = &mut self.mmu;
            if tb == fb {
                if let Some(c) = self.blocks.get_mut(&fb) {
                    c.with(|c| mmu.copy(s, t, n, c, s - fb, None, t - tb));
                }
            } else if let Some(mut dst) = self.blocks.remove(&tb) {
                if let Some(src) = self.blocks.get_mut(&fb) {
                    src.with(|src| dst.with(|d| mmu.copy(s, t, n, src, s - fb, Some(d), t - tb)));
                }
                self.blocks.insert(tb, dst);
            }
            done += n;
        }
    }

    /// Blocks of `[start, end)` not backed yet (nor being filled).
    fn unbacked(&self, start: u64, end: u64) -> u64 {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        (hi - lo) / HUGE_PAGE_SIZE
            - self.blocks.range(lo..hi).count() as u64
            - self.filling.range(lo..hi).count() as u64
    }
}

/// What the page-fault handler should do about a fault at an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The block was backed now (or by another CPU a moment ago): run the
    /// instruction again.
    Retry,
    /// The block is backed: another CPU backed it a moment ago (run the instruction
    /// again), unless this thread faulted at this very address just before (SIGSEGV).
    Backed,
    /// No mapping allows access there: SIGSEGV.
    Segv,
    /// A legitimate first touch, but memory is exhausted.
    OutOfMemory,
    /// A first touch of a block that holds file mappings: it is filled from the
    /// files (or another CPU is filling it) off the fault stack, with no lock held
    /// (`AddressSpace::start_fill`), then the instruction runs again.
    Fill,
}

/// A block of file mappings to fill before it is mapped: its chunk (zeroed) and the
/// pieces of mappings in it. Taken under the memory lock ([`AddressSpace::start_fill`]),
/// filled without it ([`Fill::run`]: reading a file may take the tree's lock and
/// make host calls, and may copy into user memory that is itself a file mapping),
/// then mapped ([`AddressSpace::filled`]). Meanwhile nothing else backs the block:
/// whoever touches it waits.
#[derive(Debug)]
pub struct Fill {
    block: u64,
    chunk: Chunk,
    pieces: Vec<FilePiece>,
}

impl Fill {
    /// Reads each piece's file into the chunk. A read error leaves the rest of the
    /// piece zeros (Linux would raise SIGBUS on touching it).
    pub fn run(self) -> Self {
        let mem = BufferMem { base: self.block, mem: Mutex::new(self.chunk) };
        for (m, s, e) in &self.pieces {
            let _ = filemap::fill(&mem, m, *s, *e);
        }
        Fill { chunk: mem.mem.into_inner(), ..self }
    }
}

#[derive(Debug)]
pub struct AddressSpace<M> {
    pub vmas: VmaSet,
    backing: RefCell<Backing<M>>,
    /// The allocator (the same as the backing's, reachable without borrowing it).
    chunks: Chunks,
    /// A block of a lazy mapping `check` found backed last time (u64::MAX: none):
    /// system calls keep using the same stack and buffers, and this saves them the
    /// block lookup. Forgotten whenever blocks are released.
    hot: Cell<u64>,
    brk_start: u64,
    brk: u64,
    mmap_bottom: u64,
    mmap_top: u64,
    /// The file mappings, by the number their VMAs' kind carries.
    files: BTreeMap<u32, Arc<FileMap>>,
    next_file: u32,
    /// Records whose last VMA went, for the caller to drop outside the lock.
    orphans: Vec<Arc<FileMap>>,
}

impl<M: Mmu> AddressSpace<M> {
    pub fn new(chunks: Chunks, mmu: M, brk_start: u64, mmap_bottom: u64, mmap_top: u64) -> Self {
        let brk_start = align_up(brk_start, PAGE_SIZE);
        Self {
            vmas: VmaSet::new(),
            backing: RefCell::new(Backing::new(chunks.clone(), mmu)),
            chunks,
            hot: Cell::new(u64::MAX),
            brk_start,
            brk: brk_start,
            mmap_bottom,
            mmap_top,
            files: BTreeMap::new(),
            next_file: 0,
            orphans: Vec::new(),
        }
    }

    fn backing(&mut self) -> &mut Backing<M> {
        self.backing.get_mut()
    }

    /// The chunk allocator (shared by every space; thread kernel stacks come
    /// from it too), locked.
    pub fn chunks(&self) -> onering_arch::sync::MutexGuard<'_, ChunkAllocator> {
        self.chunks.lock()
    }

    /// The page-table editor.
    pub fn mmu(&mut self) -> &mut M {
        &mut self.backing().mmu
    }

    /// Bytes of guest memory not in use.
    pub fn free_bytes(&self) -> u64 {
        self.chunks.lock().free_chunks() as u64 * HUGE_PAGE_SIZE
    }

    /// Records blocks the VMM mapped before boot (virtual block address, chunk),
    /// and the VMAs they hold.
    pub fn adopt(&mut self, blocks: Vec<(u64, Chunk)>, vmas: &[Vma]) {
        for (virt, c) in blocks {
            self.backing().blocks.insert(virt, Block::Own(c));
        }
        for v in vmas {
            self.vmas.insert(*v);
        }
    }

    /// Makes `[start, end)` usable: backs it now if it is small; a large range is
    /// backed on first touch (returns true), unless it is more than all of memory
    /// (ENOMEM at once, as Linux's heuristic overcommit: a mapping larger than what
    /// is free now, but not than RAM, is allowed, and fails only when touched).
    fn commit(&mut self, start: u64, end: u64) -> Result<bool, Errno> {
        if end - start < LAZY_MIN {
            return self.back_around_files(start, end);
        }
        let b = self.backing();
        if b.unbacked(start, end) > (b.blocks.len() + b.chunks.lock().total_chunks()) as u64 {
            return Err(Errno::ENOMEM);
        }
        Ok(true)
    }

    /// Backs `[start, end)` but for its blocks that hold file mappings not filled yet
    /// (those are backed, filled, on first touch); whether there were any.
    fn back_around_files(&mut self, start: u64, end: u64) -> Result<bool, Errno> {
        let owed = self.owed(start, end);
        if owed.is_empty() {
            self.backing().back(start, end)?;
            return Ok(false);
        }
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        for b in (lo..hi).step_by(HUGE_PAGE_SIZE as usize).filter(|b| !owed.contains(b)) {
            if let Err(e) = self.backing().back(start.max(b), end.min(b + HUGE_PAGE_SIZE)) {
                // (The range's VMA is not in yet: what it backed is unused.)
                self.backing.get_mut().release_unused(&self.vmas, start, end);
                return Err(e);
            }
        }
        Ok(true)
    }

    /// The blocks of `[start, end)` not backed that hold file mappings (to fill
    /// before they are backed) or are being filled.
    fn owed(&self, start: u64, end: u64) -> Vec<u64> {
        let b = self.backing.borrow();
        if self.files.is_empty() && b.filling.is_empty() {
            return Vec::new();
        }
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        (lo..hi)
            .step_by(HUGE_PAGE_SIZE as usize)
            .filter(|blk| !b.blocks.contains_key(blk))
            .filter(|blk| {
                b.filling.contains(blk)
                    || (self.vmas.overlapping(*blk, blk + HUGE_PAGE_SIZE)).any(|v| matches!(v.kind, VmaKind::File(_)))
            })
            .collect()
    }

    /// Fills of blocks of `[start, end)` under way are dropped when they finish:
    /// the mappings there changed.
    fn spoil(&mut self, start: u64, end: u64) {
        let b = self.backing.get_mut();
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        let under_way: Vec<u64> = b.filling.range(lo..hi).copied().collect();
        b.spoiled.extend(under_way);
    }

    /// Takes block `block` (one [`check_for`](Self::check_for) or
    /// [`fault_in`](Self::fault_in) said is owed) to fill: None if it is being
    /// filled (wait) or was backed meanwhile (done); ENOMEM without a chunk.
    pub fn start_fill(&self, block: u64) -> Result<Option<Fill>, Errno> {
        let mut b = self.backing.borrow_mut();
        if b.blocks.contains_key(&block) || b.filling.contains(&block) {
            return Ok(None);
        }
        let chunk = b.alloc_chunk()?;
        let pieces = (self.vmas.overlapping(block, block + HUGE_PAGE_SIZE))
            .filter_map(|v| self.file_of(v).map(|m| (m.clone(), v.start.max(block), v.end.min(block + HUGE_PAGE_SIZE))))
            .collect();
        b.filling.insert(block);
        Ok(Some(Fill { block, chunk, pieces }))
    }

    /// A fill is done: its block is mapped, unless its mappings changed meanwhile
    /// (the chunk then goes back, zeroed: the next touch fills again). The pieces'
    /// records are given back, to drop outside the memory lock.
    pub fn filled(&mut self, fill: Fill) -> (Result<(), Errno>, Vec<FilePiece>) {
        let Fill { block, mut chunk, pieces } = fill;
        let b = self.backing.get_mut();
        b.filling.remove(&block);
        let mut r = Ok(());
        if !b.spoiled.remove(&block) && self.vmas.intersects(block, block + HUGE_PAGE_SIZE) {
            r = b.mmu.map_block(block, &chunk, &mut b.chunks.lock(), true);
            if r.is_ok() {
                b.blocks.insert(block, Block::Own(chunk));
                return (r, pieces);
            }
        }
        chunk.zero(0, HUGE_PAGE_SIZE);
        b.chunks.lock().free(chunk);
        (r, pieces)
    }

    /// The parts of `pieces` in backed blocks (only those can hold data: the rest
    /// is filled when first touched).
    pub fn backed_pieces(&self, pieces: Vec<FilePiece>) -> Vec<FilePiece> {
        let b = self.backing.borrow();
        let mut out: Vec<FilePiece> = Vec::new();
        for (m, s, e) in pieces {
            for (blk, _) in b.blocks.range(align_down(s, HUGE_PAGE_SIZE)..e) {
                let (ps, pe) = (s.max(*blk), e.min(blk + HUGE_PAGE_SIZE));
                match out.last_mut() {
                    Some((lm, _, le)) if Arc::ptr_eq(lm, &m) && *le == ps => *le = pe,
                    _ => out.push((m.clone(), ps, pe)),
                }
            }
        }
        out
    }

    /// Removes `[start, end)` from the address space (page aligned), zeroing what it
    /// held, whatever its recorded protection (the memory underneath is always
    /// writable), so that free chunks stay zero.
    fn remove(&mut self, start: u64, end: u64) -> Result<(), Errno> {
        // A copy-on-write block that keeps other mappings becomes this space's own
        // first (the part removed is zeroed in it), so that failing for want of
        // memory changes nothing.
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        let keep: Vec<u64> = (self.backing.get_mut().cow_blocks(lo, hi).into_iter())
            .filter(|b| {
                self.vmas.intersects(*b, start.max(*b))
                    || self.vmas.intersects(end.min(b + HUGE_PAGE_SIZE), b + HUGE_PAGE_SIZE)
            })
            .collect();
        for b in keep {
            self.backing.get_mut().privatize(b)?;
        }
        self.spoil(start, end);
        let mut gone = Vec::new();
        for v in self.vmas.remove_range(start, end) {
            // (Cannot fail: the blocks still used are this space's own now.)
            self.backing.get_mut().zero_backed(v.start, v.end, &self.vmas)?;
            if let VmaKind::File(n) = v.kind {
                gone.push(n);
            }
        }
        self.backing.get_mut().release_unused(&self.vmas, start, end);
        self.hot.set(u64::MAX);
        gone.retain(|n| !self.vmas.iter().any(|v| v.kind == VmaKind::File(*n)));
        for n in gone {
            self.orphans.extend(self.files.remove(&n));
        }
        Ok(())
    }

    /// File mapping records no VMA uses any more: the caller drops them once it no
    /// longer holds the memory lock.
    pub fn take_orphans(&mut self) -> Vec<Arc<FileMap>> {
        core::mem::take(&mut self.orphans)
    }

    fn file_of(&self, v: &Vma) -> Option<&Arc<FileMap>> {
        match v.kind {
            VmaKind::File(n) => self.files.get(&n),
            _ => None,
        }
    }

    /// The file mapping at `addr`, if it is one.
    pub fn file_at(&self, addr: u64) -> Option<Arc<FileMap>> {
        self.vmas.find(addr).and_then(|v| self.file_of(v)).cloned()
    }

    /// The pieces of shared file mappings in `[start, end)` that are backed: what
    /// to write back.
    pub fn shared_in(&self, start: u64, end: u64) -> Vec<FilePiece> {
        self.backed_pieces(self.file_pieces(start, end, true))
    }

    /// The pieces of file mappings (`shared`: shared ones only) in `[start, end)`.
    pub fn file_pieces(&self, start: u64, end: u64, shared: bool) -> Vec<FilePiece> {
        let pieces = self.vmas.overlapping(start, end);
        pieces
            .filter_map(|v| {
                self.file_of(v).filter(|m| m.shared || !shared).map(|m| (m.clone(), v.start.max(start), v.end.min(end)))
            })
            .collect()
    }

    /// Fails with ENOMEM when `more` further VMAs would exceed [`MAX_MAP_COUNT`].
    fn room_for(&self, more: usize) -> Result<(), Errno> {
        let chunk = || self.chunks.lock().alloc();
        if self.vmas.len() + more > MAX_MAP_COUNT || !onering_arch::heap::room(4096, chunk) {
            Err(Errno::ENOMEM)
        } else {
            Ok(())
        }
    }

    /// `brk(2)`: returns the new break, or the old one when it cannot move. The heap
    /// grows in small steps: always backed at once.
    pub fn brk(&mut self, want: u64) -> u64 {
        if want < self.brk_start || want >= USER_END {
            return self.brk;
        }
        let old_end = align_up(self.brk, PAGE_SIZE);
        let new_end = align_up(want, PAGE_SIZE);
        if new_end > old_end {
            if self.room_for(1).is_err() || self.vmas.intersects(old_end, new_end) {
                return self.brk;
            }
            let Ok(lazy) = self.back_around_files(old_end, new_end) else {
                return self.brk;
            };
            self.vmas.insert(Vma {
                start: old_end,
                end: new_end,
                prot: PROT_READ | PROT_WRITE,
                kind: VmaKind::Brk,
                lazy,
            });
        } else if new_end < old_end && (self.room_for(1).is_err() || self.remove(new_end, old_end).is_err()) {
            return self.brk;
        }
        self.brk = want;
        self.brk
    }

    /// Where the program break starts (and now is): after the image `execve` loaded.
    pub fn set_brk_start(&mut self, brk_start: u64) {
        self.brk_start = align_up(brk_start, PAGE_SIZE);
        self.brk = self.brk_start;
    }

    /// The main thread's stack, `[start, end)`, made by `execve` (backed on touch,
    /// as a large anonymous mapping).
    pub fn map_stack(&mut self, start: u64, end: u64, prot: u32) -> Result<(), Errno> {
        let (start, end) = self.place(start, end - start, prot, map_flags::PRIVATE | map_flags::FIXED)?;
        self.add(start, end, prot, VmaKind::Stack)
    }

    /// `mmap(2)` of anonymous memory; returns the address. A shared one (which
    /// a forked child shares) placed by the kernel takes whole 2 MiB blocks, so
    /// that no private mapping lands in its blocks (fork shares whole blocks).
    pub fn mmap_anon(&mut self, addr: u64, len: u64, prot: u32, flags: u32) -> Result<u64, Errno> {
        use map_flags::*;
        let shared = matches!(flags & TYPE, SHARED | SHARED_VALIDATE);
        let len = if shared && flags & (FIXED | FIXED_NOREPLACE) == 0 {
            len.checked_add(HUGE_PAGE_SIZE - 1).ok_or(Errno::ENOMEM)? & !(HUGE_PAGE_SIZE - 1)
        } else {
            len
        };
        let (start, end) = self.place(addr, len, prot, flags)?;
        self.add(start, end, prot, if shared { VmaKind::Shared } else { VmaKind::Anon })?;
        Ok(start)
    }

    /// `mmap(2)` of a file: the mapping is made (empty) and `make` gives its record
    /// from its address. The caller fills it (`filemap::fill`).
    pub fn mmap_file(
        &mut self,
        addr: u64,
        len: u64,
        prot: u32,
        flags: u32,
        make: impl FnOnce(u64) -> FileMap,
    ) -> Result<(u64, Arc<FileMap>), Errno> {
        let (start, end) = self.place(addr, len, prot, flags)?;
        let mut n = self.next_file;
        while self.files.contains_key(&n) {
            n = n.wrapping_add(1);
        }
        self.next_file = n.wrapping_add(1);
        self.add(start, end, prot, VmaKind::File(n))?;
        let map = Arc::new(make(start));
        self.files.insert(n, map.clone());
        Ok((start, map))
    }

    /// Adds the VMA `[start, end)`, backing it as `commit` says. A file mapping is
    /// backed as it is filled, up to the end of the file, and past it only where
    /// touched, with no overcommit check (a shared file mapping costs Linux no
    /// memory up front either).
    fn add(&mut self, start: u64, end: u64, prot: u32, kind: VmaKind) -> Result<(), Errno> {
        let lazy = self.lazy_for(start, end, prot, kind)?;
        self.vmas.insert(Vma { start, end, prot, kind, lazy });
        Ok(())
    }

    /// Backs `[start, end)` for a new VMA as `add` says: whether it is lazy.
    fn lazy_for(&mut self, start: u64, end: u64, prot: u32, kind: VmaKind) -> Result<bool, Errno> {
        match kind {
            VmaKind::File(_) => {
                self.spoil(start, end);
                Ok(true)
            }
            _ if prot != 0 => self.commit(start, end),
            _ => Ok(false),
        }
    }

    /// Checks `mmap`'s arguments and chooses where the mapping goes (removing what
    /// MAP_FIXED replaces): its page-aligned range.
    fn place(&mut self, addr: u64, len: u64, prot: u32, flags: u32) -> Result<(u64, u64), Errno> {
        use map_flags::*;
        if len == 0 || prot & !(PROT_READ | PROT_WRITE | PROT_EXEC) != 0 || flags & !KNOWN != 0 {
            return Err(Errno::EINVAL);
        }
        match flags & TYPE {
            SHARED | PRIVATE | SHARED_VALIDATE => {}
            _ => return Err(Errno::EINVAL),
        }
        let len = len.checked_add(PAGE_SIZE - 1).ok_or(Errno::ENOMEM)? & !(PAGE_SIZE - 1);
        if len >= USER_END {
            return Err(Errno::ENOMEM);
        }
        self.room_for(2)?;
        let fixed = flags & (FIXED | FIXED_NOREPLACE) != 0;
        let start = if fixed {
            if !addr.is_multiple_of(PAGE_SIZE) {
                return Err(Errno::EINVAL);
            }
            if addr.checked_add(len).is_none_or(|e| e > USER_END) || addr < PAGE_SIZE {
                return Err(Errno::ENOMEM);
            }
            if self.vmas.intersects(addr, addr + len) {
                if flags & FIXED_NOREPLACE != 0 {
                    return Err(Errno::EEXIST);
                }
                self.remove(addr, addr + len)?;
            }
            addr
        } else {
            let hint = align_down(addr, PAGE_SIZE);
            let hint_ok = hint >= PAGE_SIZE
                && hint.checked_add(len).is_some_and(|e| e <= USER_END)
                && !self.vmas.intersects(hint, hint + len);
            if hint_ok {
                hint
            } else {
                // Large mappings get 2 MiB alignment so they use whole blocks.
                let align = if len >= HUGE_PAGE_SIZE { HUGE_PAGE_SIZE } else { PAGE_SIZE };
                self.vmas.find_free_top_down(len, align, self.mmap_bottom, self.mmap_top).ok_or(Errno::ENOMEM)?
            }
        };
        Ok((start, start + len))
    }

    /// `munmap(2)`.
    pub fn munmap(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) || len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_add(PAGE_SIZE - 1))
            .map(|e| e & !(PAGE_SIZE - 1))
            .filter(|e| *e <= USER_END)
            .ok_or(Errno::EINVAL)?;
        self.room_for(1)?; // unmapping the middle of a VMA splits it
        self.remove(addr, end)
    }

    /// `mprotect(2)`: records the protection. Memory stays readable and writable
    /// underneath (2 MiB pages cannot carry per-page rights), except that making a
    /// reservation accessible backs it (or, if large, lets first touches back it).
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) || prot & !(PROT_READ | PROT_WRITE | PROT_EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        if len == 0 {
            return Ok(());
        }
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_add(PAGE_SIZE - 1))
            .map(|e| e & !(PAGE_SIZE - 1))
            .ok_or(Errno::ENOMEM)?;
        if !self.vmas.covers(addr, end) {
            return Err(Errno::ENOMEM);
        }
        if prot & PROT_WRITE != 0
            && self.vmas.overlapping(addr, end).any(|v| self.file_of(v).is_some_and(|m| !m.may_write))
        {
            return Err(Errno::EACCES);
        }
        self.room_for(2)?;
        let lazy = if prot != 0 { self.commit(addr, end)? } else { false };
        for v in self.vmas.remove_range(addr, end) {
            self.vmas.insert(Vma { prot, lazy: v.lazy || lazy, ..v });
        }
        Ok(())
    }

    /// Bytes of guest memory the address space can draw on (used and free chunks).
    pub fn total_bytes(&self) -> u64 {
        let blocks = self.backing.borrow().blocks.len();
        let free = self.chunks.lock().free_chunks();
        (blocks + free) as u64 * HUGE_PAGE_SIZE
    }

    /// The page-rounded end of `[addr, addr + len)` if every page of it is mapped
    /// (`msync`, `mlock`, `mincore`): EINVAL if it wraps, ENOMEM if a page is not.
    pub fn mapped_end(&self, addr: u64, len: u64) -> Result<u64, Errno> {
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_add(PAGE_SIZE - 1))
            .map(|e| e & !(PAGE_SIZE - 1))
            .ok_or(Errno::EINVAL)?;
        if end > USER_END || !self.vmas.covers(addr, end) {
            return Err(Errno::ENOMEM);
        }
        Ok(end)
    }

    /// Whether the page at `addr` has memory behind it (`mincore`).
    pub fn resident(&self, addr: u64) -> bool {
        self.backing.borrow().blocks.contains_key(&align_down(addr, HUGE_PAGE_SIZE))
    }

    /// `madvise(MADV_DONTNEED)`: anonymous memory in the range reads as zeros
    /// afterwards; a private file mapping's pieces are zeroed and returned, for the
    /// caller to fill from the file again; a shared one keeps its data (it is the
    /// file's, as Linux's page cache keeps it).
    pub fn discard(&mut self, addr: u64, len: u64) -> Result<Vec<FilePiece>, Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_add(PAGE_SIZE - 1))
            .map(|e| e & !(PAGE_SIZE - 1))
            .ok_or(Errno::EINVAL)?;
        if end > USER_END || !self.vmas.covers(addr, end) {
            return Err(Errno::ENOMEM);
        }
        let pieces: Vec<(Option<Arc<FileMap>>, u64, u64)> = self
            .vmas
            .overlapping(addr, end)
            .filter(|v| v.prot != 0)
            .map(|v| (self.file_of(v).cloned(), v.start.max(addr), v.end.min(end)))
            .filter(|(m, ..)| !m.as_ref().is_some_and(|m| m.shared))
            .collect();
        let mut refill = Vec::new();
        for (m, s, e) in pieces {
            self.backing.get_mut().zero_backed(s, e, &self.vmas)?;
            refill.extend(m.map(|m| (m, s, e)));
        }
        // (What is not backed is filled when touched.)
        Ok(self.backed_pieces(refill))
    }

    /// `mremap(2)`: grows or shrinks a mapping in place when it can, else moves it
    /// (with MREMAP_MAYMOVE), copying what is backed. A file mapping that grows is
    /// left for the caller to fill (what it grew by reads as zeros); one that moves
    /// gets a record of its own.
    pub fn mremap(&mut self, old: u64, old_len: u64, new_len: u64, may_move: bool) -> Result<u64, Errno> {
        if !old.is_multiple_of(PAGE_SIZE) || new_len == 0 || old_len == 0 || old_len >= USER_END {
            return Err(Errno::EINVAL);
        }
        let old_len = align_up(old_len, PAGE_SIZE);
        let new_len = new_len.checked_add(PAGE_SIZE - 1).ok_or(Errno::EINVAL)? & !(PAGE_SIZE - 1);
        let old_end = old.checked_add(old_len).filter(|e| *e <= USER_END).ok_or(Errno::EFAULT)?;
        let vma = *self.vmas.find(old).ok_or(Errno::EFAULT)?;
        if old_len == 0 || vma.end < old_end {
            return Err(Errno::EFAULT);
        }
        if new_len <= old_len {
            if new_len < old_len {
                self.munmap(old + new_len, old_len - new_len)?;
            }
            return Ok(old);
        }
        let grow_end = old.checked_add(new_len).filter(|e| *e <= USER_END);
        if let Some(ge) = grow_end {
            if !self.vmas.intersects(old_end, ge) {
                self.room_for(1)?;
                let lazy = self.lazy_for(old_end, ge, vma.prot, vma.kind)?;
                self.vmas.insert(Vma { start: old_end, end: ge, lazy: vma.lazy || lazy, ..vma });
                return Ok(old);
            }
        }
        if !may_move {
            return Err(Errno::ENOMEM);
        }
        let file = self.file_of(&vma).cloned();
        let new = match &file {
            Some(m) => self.mmap_file(0, new_len, vma.prot, map_flags::PRIVATE, |at| m.moved(old, at))?.0,
            None => self.mmap_anon(0, new_len, vma.prot, map_flags::PRIVATE | map_flags::ANONYMOUS)?,
        };
        if vma.prot != 0 || file.is_some() {
            // Only what is backed holds data (the rest reads as zeros, as the new
            // mapping's unbacked blocks do): back its counterpart and copy it.
            let (lo, hi) = (align_down(old, HUGE_PAGE_SIZE), align_up(old_end, HUGE_PAGE_SIZE));
            let backed: Vec<u64> = self.backing().blocks.range(lo..hi).map(|(b, _)| *b).collect();
            for b in backed {
                let (s, e) = (b.max(old), (b + HUGE_PAGE_SIZE).min(old_end));
                let to = new + (s - old);
                let made = self.backing().privatize(b).and_then(|()| self.backing().back(to, to + (e - s)));
                if let Err(err) = made {
                    let _ = self.munmap(new, new_len);
                    return Err(err);
                }
                self.backing().copy(s, to, e - s);
            }
        }
        self.munmap(old, old_len)?;
        Ok(new)
    }

    /// Checks that the program may access `[addr, addr + len)`: every byte lies in a
    /// mapping that allows it. The kernel calls this before touching user memory, so
    /// a bad pointer becomes EFAULT instead of a fault in the kernel. Blocks of
    /// mappings backed on first touch are backed here (ENOMEM if memory ran out),
    /// so that the kernel's own accesses never fault.
    pub fn check(&self, addr: u64, len: u64, write: bool) -> Result<(), Errno> {
        Self::none_owed(self.check_for(addr, len, if write { PROT_WRITE } else { PROT_READ }))
    }

    /// [`check`](Self::check) for the kernel's own accesses, which ignore the
    /// program's protections (filling and writing back file mappings): every byte
    /// mapped.
    pub fn check_mapped(&self, addr: u64, len: u64) -> Result<(), Errno> {
        Self::none_owed(self.check_for(addr, len, 0))
    }

    /// A block owed a fill is EFAULT for those who cannot fill it.
    fn none_owed(r: Result<Option<u64>, Errno>) -> Result<(), Errno> {
        r.and_then(|owed| owed.map_or(Ok(()), |_| Err(Errno::EFAULT)))
    }

    /// The checks of [`check`](Self::check) for protection `need` (0: mapped).
    /// Before backing, a block of the range that holds file mappings not filled
    /// yet, or being filled, is returned instead (the first): the caller fills it
    /// ([`start_fill`](Self::start_fill)) or waits, without the memory lock, and
    /// checks again.
    pub fn check_for(&self, addr: u64, len: u64, need: u32) -> Result<Option<u64>, Errno> {
        if len == 0 {
            return Ok(None);
        }
        let end = addr.checked_add(len).filter(|e| *e <= USER_END).ok_or(Errno::EFAULT)?;
        let mut at = addr;
        let mut lazy = false;
        for v in self.vmas.overlapping(addr, end) {
            if v.start > at || v.prot & need != need {
                return Err(Errno::EFAULT);
            }
            lazy |= v.lazy;
            at = v.end;
            if at >= end {
                if lazy {
                    let block = align_down(addr, HUGE_PAGE_SIZE);
                    let one = align_up(end, HUGE_PAGE_SIZE) - block == HUGE_PAGE_SIZE;
                    if !(one && self.hot.get() == block) {
                        if let Some(owed) = self.owed(addr, end).first() {
                            return Ok(Some(*owed));
                        }
                        self.backing.borrow_mut().back(addr, end)?;
                        if one {
                            self.hot.set(block);
                        }
                    }
                }
                return Ok(None);
            }
        }
        Err(Errno::EFAULT)
    }

    /// Whether VMA `v` is memory a forked child shares (MAP_SHARED, anonymous or
    /// of a file).
    fn is_shared(&self, v: &Vma) -> bool {
        v.kind == VmaKind::Shared || self.file_of(v).is_some_and(|m| m.shared)
    }

    /// `fork`: a copy of this address space for a child. Blocks of shared
    /// mappings (MAP_SHARED) become the same memory in both (the parent's own
    /// chunk turns into a shared one); every other backed block becomes
    /// copy-on-write: mapped read-only in both, its pages copied when either
    /// side writes them (`unshare_page`). A block this space had partly copied
    /// since an earlier fork is made whole first, so that a child gets one view
    /// of each block. The VMAs, the break and the file-mapping records are
    /// copied (a record is shared: it is the same file at the same place, and a
    /// shared one's page hashes are the same memory's). ENOMEM, with nothing
    /// left behind, when memory runs short (page-table pages; copies are made
    /// later, as written, and a write that finds no memory ends its process as
    /// Linux's OOM killer would).
    pub fn fork(&mut self) -> Result<Self, Errno> {
        let chunks = self.chunks.clone();
        {
            // Table pages for the child (a few, from one chunk at most).
            let mut c = chunks.lock();
            if c.free_chunks() < 2 && !c.reclaim(2) {
                return Err(Errno::ENOMEM);
            }
        }
        // Blocks partly copied since an earlier fork are made whole first (a
        // child gets one view of each block), read-only already, as the fork
        // leaves them.
        let partial: Vec<u64> = (self.backing.get_mut().blocks.iter())
            .filter(|(_, k)| matches!(k, Block::Cow(c) if c.copy.is_some()))
            .map(|(b, _)| *b)
            .collect();
        for blk in &partial {
            self.backing.get_mut().make_own(*blk, false)?;
        }
        let backed: Vec<u64> = self.backing.get_mut().blocks.keys().copied().collect();
        let shared: Vec<u64> = backed
            .into_iter()
            .filter(|blk| {
                matches!(self.backing.get_mut().blocks.get(blk), Some(Block::Shared(_)))
                    || self.vmas.overlapping(*blk, blk + HUGE_PAGE_SIZE).any(|v| self.is_shared(v))
            })
            .collect();
        let mmu = self.backing.get_mut().mmu.new_space(&mut chunks.lock())?;
        let mut child = AddressSpace {
            vmas: self.vmas.clone(),
            backing: RefCell::new(Backing::new(chunks.clone(), mmu)),
            chunks: chunks.clone(),
            hot: Cell::new(u64::MAX),
            brk_start: self.brk_start,
            brk: self.brk,
            mmap_bottom: self.mmap_bottom,
            mmap_top: self.mmap_top,
            files: self.files.clone(),
            next_file: self.next_file,
            orphans: Vec::new(),
        };
        let b = self.backing.get_mut();
        let cb = child.backing.get_mut();
        let blocks: Vec<u64> = b.blocks.keys().copied().collect();
        for blk in blocks {
            let Some(mine) = b.blocks.remove(&blk) else { continue };
            let is_shared = shared.contains(&blk);
            // The parent's own block turns read-only (the chunk stays mapped).
            let turn_read_only = matches!(mine, Block::Own(_)) && !is_shared && !partial.contains(&blk);
            let (mine, base, writable) = match mine {
                Block::Shared(a) => (Block::Shared(a.clone()), a, true),
                Block::Own(c) if is_shared => {
                    let a = SharedChunk::new(c, &chunks);
                    (Block::Shared(a.clone()), a, true)
                }
                Block::Own(c) => {
                    let a = SharedChunk::new(c, &chunks);
                    (Block::Cow(Cow::new(a.clone())), a, false)
                }
                Block::Cow(c) => {
                    let a = c.base.clone();
                    (Block::Cow(c), a, false)
                }
            };
            b.blocks.insert(blk, mine);
            let theirs = if writable { Block::Shared(base.clone()) } else { Block::Cow(Cow::new(base.clone())) };
            cb.blocks.insert(blk, theirs);
            let mapped = base.with(|c| {
                if turn_read_only {
                    b.mmu.map_block(blk, c, &mut chunks.lock(), false)?;
                }
                cb.mmu.map_block(blk, c, &mut chunks.lock(), writable)
            });
            if let Err(e) = mapped {
                // (The parent keeps its blocks read-only: its writes copy, or take
                // the base back once the child's hold is gone.)
                drop(child.teardown());
                return Err(e);
            }
        }
        Ok(child)
    }

    /// The space ends (its last process is gone): everything is unmapped, the
    /// page tables given back, the memory freed (what the program used zeroed
    /// first, a shared block when its last space lets go). Returns the file
    /// mapping records, for the caller to drop outside the memory lock. The space
    /// is empty afterwards and maps nothing.
    pub fn teardown(&mut self) -> Vec<Arc<FileMap>> {
        let vmas = core::mem::take(&mut self.vmas);
        let b = self.backing.get_mut();
        b.mmu.release();
        // A copy-on-write base no other space holds is this space's own again:
        // zeroed where mapped, as an own chunk (its copy goes with `free`).
        for blk in b.cow_blocks(0, USER_END) {
            if let Some(Block::Cow(c)) = b.blocks.remove(&blk) {
                let Cow { base, copy, copied } = c;
                match base.take() {
                    Ok(chunk) => {
                        if let Some(copy) = copy {
                            free_copy(copy, &copied, &b.chunks);
                        }
                        b.blocks.insert(blk, Block::Own(chunk));
                    }
                    Err(base) => {
                        b.blocks.insert(blk, Block::Cow(Cow { base, copy, copied }));
                    }
                }
            }
        }
        for v in vmas.iter() {
            // (Cannot fail: the copy-on-write blocks left are used by no VMA now.)
            let _ = b.zero_backed(v.start, v.end, &VmaSet::new());
        }
        for (_, blk) in core::mem::take(&mut b.blocks) {
            blk.free(&b.chunks);
        }
        self.hot.set(u64::MAX);
        let mut out = core::mem::take(&mut self.orphans);
        out.extend(core::mem::take(&mut self.files).into_values());
        out
    }

    /// Writes `data` at `addr` of this space, which need not be the one loaded
    /// (fork's CLONE_CHILD_SETTID goes to the child's memory): EFAULT unless
    /// the range is mapped writable.
    pub fn poke(&mut self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        self.check(addr, data.len() as u64, true)?;
        let b = self.backing.get_mut();
        let mut at = 0usize;
        while at < data.len() {
            let va = addr + at as u64;
            let blk = align_down(va, HUGE_PAGE_SIZE);
            let n = ((align_down(va, PAGE_SIZE) + PAGE_SIZE - va) as usize).min(data.len() - at);
            b.unshare_page(blk, align_down(va, PAGE_SIZE))?;
            let mmu = &mut b.mmu;
            match b.blocks.get_mut(&blk).ok_or(Errno::EFAULT)? {
                Block::Cow(Cow { copy: Some(c), .. }) => mmu.write(va, c, va - blk, &data[at..at + n]),
                Block::Cow(_) => return Err(Errno::EFAULT),
                chunk => chunk.with(|c| mmu.write(va, c, va - blk, &data[at..at + n])),
            }
            at += n;
        }
        Ok(())
    }

    /// Whether some block is memory shared with another space (MAP_SHARED
    /// memory after fork).
    pub fn has_shared(&self) -> bool {
        self.backing.borrow().blocks.values().any(|b| matches!(b, Block::Shared(_)))
    }

    /// Where `addr` lies in guest-physical memory if it is in memory shared with
    /// other spaces (the same in each of them), for process-shared futexes.
    pub fn shared_phys(&self, addr: u64) -> Option<u64> {
        let blk = align_down(addr, HUGE_PAGE_SIZE);
        match self.backing.borrow().blocks.get(&blk) {
            Some(Block::Shared(a)) => Some(a.with(|c| c.phys()) + (addr - blk)),
            _ => None,
        }
    }

    /// Makes the page at `addr` this space's to write now if it is a
    /// copy-on-write page (best effort: a write there faults otherwise).
    pub fn unshare(&mut self, addr: u64) {
        if addr < USER_END {
            let _ = self.backing.get_mut().unshare_page(align_down(addr, HUGE_PAGE_SIZE), align_down(addr, PAGE_SIZE));
        }
    }

    /// The program touched `addr` and faulted (`write`: a write): backs its block
    /// if a mapping allows access there and the block is not backed yet; copies
    /// the page if the block is copy-on-write and this was a write.
    pub fn fault_in(&self, addr: u64, write: bool) -> Fault {
        let Some(v) = self.vmas.find(addr).filter(|v| v.prot != 0) else {
            return Fault::Segv;
        };
        let mut b = self.backing.borrow_mut();
        let block = align_down(addr, HUGE_PAGE_SIZE);
        match b.blocks.get(&block) {
            Some(Block::Cow(_)) if write => {
                return match b.unshare_page(block, align_down(addr, PAGE_SIZE)) {
                    Ok(()) => Fault::Retry,
                    Err(_) => Fault::OutOfMemory,
                }
            }
            Some(_) => return Fault::Backed,
            None => {}
        }
        if !v.lazy {
            return Fault::Segv;
        }
        drop(b);
        if !self.owed(block, block + 1).is_empty() {
            return Fault::Fill;
        }
        let mut b = self.backing.borrow_mut();
        match b.back(block, block + HUGE_PAGE_SIZE) {
            Ok(()) => Fault::Retry,
            Err(_) => Fault::OutOfMemory,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const M: u64 = HUGE_PAGE_SIZE;

    #[derive(Default)]
    struct FakeMmu {
        /// Blocks mapped whole: virtual block -> chunk.
        mapped: BTreeMap<u64, u64>,
        /// Those of them mapped read-only.
        readonly: alloc::collections::BTreeSet<u64>,
        /// Blocks mapped page by page: virtual block -> (base, copy, pages on the copy).
        split: BTreeMap<u64, (u64, u64, [u64; 8])>,
        zeroed: Vec<(u64, u64)>,
        copied: Vec<(u64, u64, u64)>,
        written: Vec<(u64, Vec<u8>)>,
    }

    impl Mmu for FakeMmu {
        fn map_block(&mut self, virt: u64, chunk: &Chunk, _: &mut ChunkAllocator, writable: bool) -> Result<(), Errno> {
            // (Mapped already: the old mapping goes, as the real tables do.)
            self.mapped.insert(virt, chunk.phys());
            self.split.remove(&virt);
            if writable {
                self.readonly.remove(&virt);
            } else {
                self.readonly.insert(virt);
            }
            Ok(())
        }
        fn split_block(
            &mut self,
            virt: u64,
            base: &Chunk,
            copy: &Chunk,
            copied: &[u64; 8],
            _: &mut ChunkAllocator,
        ) -> Result<(), Errno> {
            assert_eq!(self.mapped.remove(&virt), Some(base.phys()), "a block is split from its base");
            self.readonly.remove(&virt);
            self.split.insert(virt, (base.phys(), copy.phys(), *copied));
            Ok(())
        }
        fn map_copied_page(&mut self, virt: u64) {
            let i = (virt % M) / PAGE_SIZE;
            let s = self.split.get_mut(&(virt - virt % M)).expect("a split block");
            s.2[(i / 64) as usize] |= 1 << (i % 64);
        }
        fn unmap_block(&mut self, virt: u64) {
            let was = self.mapped.remove(&virt).is_some() | self.split.remove(&virt).is_some();
            assert!(was, "unmapping an unmapped block");
            self.readonly.remove(&virt);
        }
        fn new_space(&mut self, _: &mut ChunkAllocator) -> Result<Self, Errno> {
            Ok(FakeMmu::default())
        }
        fn release(&mut self) {
            self.mapped.clear();
            self.split.clear();
            self.readonly.clear();
        }
        fn write(&mut self, virt: u64, _: &mut Chunk, _: u64, data: &[u8]) {
            self.written.push((virt, data.to_vec()));
        }
        fn zero(&mut self, virt: u64, len: u64, chunk: &mut Chunk, offset: u64) {
            if let Some(phys) = self.mapped.get(&(virt - offset)) {
                assert_eq!(*phys, chunk.phys(), "zeroing the block's own chunk");
            }
            self.zeroed.push((virt, len));
        }
        fn copy(&mut self, from: u64, to: u64, len: u64, _: &mut Chunk, _: u64, _: Option<&mut Chunk>, _: u64) {
            self.copied.push((from, to, len));
        }
    }

    type Space = AddressSpace<FakeMmu>;

    fn allocator(chunks: u64) -> Chunks {
        let mut c = ChunkAllocator::new();
        c.add_range(0x4000_0000, 0x4000_0000 + chunks * M);
        Arc::new(Mutex::new(c))
    }

    fn space(chunks: u64) -> Space {
        AddressSpace::new(allocator(chunks), FakeMmu::default(), 0x60_1234, 0x1000_0000, 0x2000_0000)
    }

    const RW: u32 = PROT_READ | PROT_WRITE;
    const ANON: u32 = map_flags::PRIVATE | map_flags::ANONYMOUS;

    #[test]
    fn small_mmaps_share_a_block() {
        let mut s = space(8);
        let a = s.mmap_anon(0, 0x1000, RW, ANON).unwrap();
        let b = s.mmap_anon(0, 0x3000, RW, ANON).unwrap();
        assert_eq!(a, 0x2000_0000 - 0x1000);
        assert_eq!(b, a - 0x3000);
        assert_eq!(s.mmu().mapped.len(), 1);
        s.check(b, 0x4000, true).unwrap();
        assert_eq!(s.check(b - 1, 2, false), Err(Errno::EFAULT));
        s.munmap(a, 0x1000).unwrap();
        assert_eq!(s.mmu().mapped.len(), 1, "block still used by b");
        assert_eq!(s.mmu().zeroed, [(a, 0x1000)]);
        s.munmap(b, 0x3000).unwrap();
        assert!(s.mmu().mapped.is_empty());
        assert_eq!(s.chunks().free_chunks(), 8);
    }

    #[test]
    fn large_mmap_is_block_aligned_and_out_of_memory_fails_cleanly() {
        let mut s = space(4);
        let a = s.mmap_anon(0, 3 * M / 2, RW, ANON).unwrap();
        assert_eq!(a % M, 0);
        assert_eq!(s.mmu().mapped.len(), 2, "small: backed at once");
        let b = s.mmap_anon(0, M, RW, ANON).unwrap();
        assert_eq!(s.mmu().mapped.len(), 3);
        assert_eq!(s.mmap_anon(0, 3 * M / 2, RW, ANON), Err(Errno::ENOMEM));
        assert_eq!(s.mmu().mapped.len(), 3);
        s.munmap(a, 3 * M / 2).unwrap();
        s.munmap(b, M).unwrap();
        // A reservation needs no memory.
        let r = s.mmap_anon(0, 64 * M, 0, ANON | map_flags::NORESERVE).unwrap();
        assert_eq!(s.check(r, 1, false), Err(Errno::EFAULT));
        // Committing part of it with MAP_FIXED backs just that part.
        s.mmap_anon(r + M, M, RW, ANON | map_flags::FIXED).unwrap();
        assert_eq!(s.mmu().mapped.len(), 1);
        s.check(r + M, M, true).unwrap();
    }

    #[test]
    fn moving_a_lazy_mapping_copies_only_what_is_backed() {
        let mut s = space(8);
        let big = s.mmap_anon(0, 4 * M, PROT_READ, ANON).unwrap();
        assert_eq!(s.fault_in(big + M, false), Fault::Retry);
        s.mmap_anon(big + 4 * M, 0x1000, PROT_READ, ANON | map_flags::FIXED).unwrap(); // no room to grow
        let moved = s.mremap(big, 4 * M, 8 * M, true).unwrap();
        assert_ne!(moved, big);
        assert_eq!(s.mmu().copied, [(big + M, moved + M, M)], "the one touched block, whatever the protection");
        assert_eq!(s.mmu().mapped.len(), 2, "its copy and the little mapping's block");
    }

    #[test]
    fn large_mappings_are_backed_on_first_touch() {
        let mut s = space(4);
        // Far more than memory, as long as it is not more than all of it.
        let a = s.mmap_anon(0, 4 * M, RW, ANON).unwrap();
        let b = s.mmap_anon(0, 4 * M, RW, ANON).unwrap();
        assert_eq!(s.mmap_anon(0, 5 * M, RW, ANON), Err(Errno::ENOMEM), "more than all memory");
        assert!(s.mmu().mapped.is_empty());
        // The program touches a block; the kernel vouches for a range.
        assert_eq!(s.fault_in(a + M + 5, false), Fault::Retry);
        assert_eq!(s.fault_in(a + M + 9, false), Fault::Backed);
        s.check(b + 3 * M - 8, 16, true).unwrap();
        assert_eq!(s.mmu().mapped.keys().copied().collect::<Vec<_>>(), [b + 2 * M, b + 3 * M, a + M]);
        assert_eq!(s.fault_in(b - M, false), Fault::Segv, "below the mapping");
        // Memory runs out: the fourth touch backs the last chunk, the fifth cannot.
        assert_eq!(s.fault_in(a, false), Fault::Retry);
        assert_eq!(s.fault_in(a + 2 * M, false), Fault::OutOfMemory);
        assert_eq!(s.check(a + 2 * M, 1, false), Err(Errno::ENOMEM));
        // Unmapping gives the blocks back, zeroed.
        s.munmap(b, 4 * M).unwrap();
        assert_eq!(s.chunks().free_chunks(), 2);
        assert_eq!(s.fault_in(a + 2 * M, false), Fault::Retry);
        // A large reservation made accessible by mprotect is lazy too; so is growth.
        let r = s.mmap_anon(0, 8 * M, 0, ANON).unwrap();
        assert_eq!(s.mprotect(r, 8 * M, RW), Err(Errno::ENOMEM), "more than all memory");
        s.mprotect(r, 4 * M, RW).unwrap();
        assert_eq!(s.fault_in(r + 3 * M, false), Fault::Retry);
        assert_eq!(s.mremap(a, 4 * M, 6 * M, false), Ok(a));
        assert!(s.mmu().copied.is_empty(), "grown in place");

        assert_eq!(s.vmas.find(a + 5 * M).map(|v| v.lazy), Some(true));
        // A reservation is never backed.
        let n = s.mmap_anon(0, 8 * M, 0, ANON).unwrap();
        assert_eq!(s.fault_in(n, false), Fault::Segv);
    }

    #[test]
    fn fixed_replaces_and_noreplace_refuses() {
        let mut s = space(8);
        let a = s.mmap_anon(0x3000_0000, 0x4000, RW, ANON | map_flags::FIXED).unwrap();
        assert_eq!(a, 0x3000_0000);
        assert_eq!(s.mmap_anon(a + 0x1000, 0x1000, RW, ANON | map_flags::FIXED_NOREPLACE), Err(Errno::EEXIST));
        s.mmap_anon(a + 0x1000, 0x1000, PROT_READ, ANON | map_flags::FIXED).unwrap();
        assert_eq!(s.check(a + 0x1000, 1, true), Err(Errno::EFAULT));
        s.check(a, 0x4000, false).unwrap();
        assert_eq!(s.vmas.iter().count(), 3);
    }

    #[test]
    fn mprotect_records_and_backs_reservations() {
        let mut s = space(8);
        let a = s.mmap_anon(0, 4 * M, 0, ANON).unwrap();
        assert!(s.mmu().mapped.is_empty());
        s.mprotect(a + M, M, RW).unwrap();
        assert_eq!(s.mmu().mapped.len(), 1);
        s.check(a + M, M, true).unwrap();
        s.mprotect(a + M, 0x1000, PROT_READ).unwrap();
        assert_eq!(s.check(a + M, 1, true), Err(Errno::EFAULT));
        s.check(a + M, 1, false).unwrap();
        assert_eq!(s.vmas.iter().count(), 4);
        assert_eq!(s.mprotect(a + 0x1001, 1, RW), Err(Errno::EINVAL));
        assert_eq!(s.mprotect(a, 1, 0x100), Err(Errno::EINVAL));
        assert_eq!(s.mprotect(0x1000, 0x1000, RW), Err(Errno::ENOMEM));
        assert_eq!(s.mprotect(a, 0, RW), Ok(()));
    }

    #[test]
    fn freed_memory_is_zeroed_whatever_its_protection() {
        let mut s = space(8);
        let a = s.mmap_anon(0, 0x4000, RW, ANON).unwrap();
        s.mprotect(a, 0x4000, 0).unwrap();
        s.munmap(a, 0x4000).unwrap();
        assert_eq!(s.mmu().zeroed, [(a, 0x4000)]);
        assert!(s.mmu().mapped.is_empty());
    }

    #[test]
    fn huge_ranges_fail_fast_and_leave_nothing_behind() {
        let mut s = space(4);
        assert_eq!(s.mmap_anon(0, 1 << 46, PROT_READ, ANON), Err(Errno::ENOMEM));
        let r = s.mmap_anon(1 << 44, 1 << 45, 0, ANON | map_flags::FIXED).unwrap();
        assert_eq!(s.mprotect(r, 1 << 45, RW), Err(Errno::ENOMEM));
        s.munmap(0x1000, USER_END - 0x1000).unwrap();
        assert_eq!(s.vmas.iter().count(), 0);
        assert_eq!(s.chunks().free_chunks(), 4);
    }

    #[test]
    fn failed_backing_is_undone() {
        // A mapper that runs out of page-table memory on the third block.
        struct Failing(FakeMmu, usize);
        impl Mmu for Failing {
            fn map_block(&mut self, v: u64, p: &Chunk, c: &mut ChunkAllocator, w: bool) -> Result<(), Errno> {
                self.1 += 1;
                if self.1 == 3 {
                    return Err(Errno::ENOMEM);
                }
                self.0.map_block(v, p, c, w)
            }
            fn split_block(
                &mut self,
                v: u64,
                b: &Chunk,
                p: &Chunk,
                s: &[u64; 8],
                c: &mut ChunkAllocator,
            ) -> Result<(), Errno> {
                self.0.split_block(v, b, p, s, c)
            }
            fn map_copied_page(&mut self, v: u64) {
                self.0.map_copied_page(v)
            }
            fn unmap_block(&mut self, v: u64) {
                self.0.unmap_block(v)
            }
            fn new_space(&mut self, c: &mut ChunkAllocator) -> Result<Self, Errno> {
                Ok(Failing(self.0.new_space(c)?, 0))
            }
            fn release(&mut self) {
                self.0.release()
            }
            fn write(&mut self, v: u64, c: &mut Chunk, o: u64, d: &[u8]) {
                self.0.write(v, c, o, d)
            }
            fn zero(&mut self, v: u64, l: u64, c: &mut Chunk, o: u64) {
                self.0.zero(v, l, c, o)
            }
            fn copy(&mut self, f: u64, t: u64, l: u64, s: &mut Chunk, so: u64, d: Option<&mut Chunk>, dof: u64) {
                self.0.copy(f, t, l, s, so, d, dof)
            }
        }
        let mut s =
            AddressSpace::new(allocator(8), Failing(FakeMmu::default(), 0), 0x60_1234, 0x1000_0000, 0x2000_0000);
        // Under LAZY_MIN but over three blocks: backed at once, and the third fails.
        let at = 0x3010_0000;
        assert_eq!(s.mmap_anon(at, 7 * M / 4, RW, ANON | map_flags::FIXED), Err(Errno::ENOMEM));
        assert!(s.mmu().0.mapped.is_empty());
        assert_eq!(s.chunks().free_chunks(), 8);
        assert_eq!(s.vmas.iter().count(), 0);
        // A lazy mapping whose backing fails when the kernel vouches for it.
        s.mmu().1 = 0;
        let a = s.mmap_anon(0, 4 * M, RW, ANON).unwrap();
        assert_eq!(s.check(a, 4 * M, true), Err(Errno::ENOMEM));
        assert!(s.mmu().0.mapped.is_empty());
        assert_eq!(s.chunks().free_chunks(), 8);
    }

    #[test]
    fn the_number_of_mappings_is_bounded() {
        let mut s = space(8);
        let r = s.mmap_anon(0, 2 * MAX_MAP_COUNT as u64 * 0x2000, 0, ANON).unwrap();
        let mut n = 0;
        let err = loop {
            match s.munmap(r + n * 0x2000, 0x1000) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err, Errno::ENOMEM);
        assert_eq!(s.vmas.iter().count(), MAX_MAP_COUNT);
    }

    #[test]
    fn bad_arguments() {
        let mut s = space(2);
        assert_eq!(s.mmap_anon(0, 0, RW, ANON), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(0, 1, RW, map_flags::ANONYMOUS), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(0, 1, 0x80, ANON), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(0, u64::MAX, RW, ANON), Err(Errno::ENOMEM));
        assert_eq!(s.mmap_anon(0x1001, 1, RW, ANON | map_flags::FIXED), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(USER_END - 0x1000, 0x2000, RW, ANON | map_flags::FIXED), Err(Errno::ENOMEM));
        assert_eq!(s.munmap(0x1001, 1), Err(Errno::EINVAL));
        assert_eq!(s.munmap(0x1000, 0), Err(Errno::EINVAL));
        assert_eq!(s.munmap(0x1000, u64::MAX), Err(Errno::EINVAL));
        assert_eq!(s.check(u64::MAX - 1, 4, false), Err(Errno::EFAULT));
        assert_eq!(s.check(0, 1, false), Err(Errno::EFAULT));
    }

    /// A file of nothing (the records are what is tested here).
    struct NoFile;

    impl crate::mm::filemap::MappedFile for NoFile {
        fn read_at(&self, _: &dyn crate::mm::user::UserMem, _: u64, _: u64, _: u64) -> Result<u64, Errno> {
            Ok(0)
        }
        fn write_at(&self, _: &dyn crate::mm::user::UserMem, _: u64, len: u64, _: u64) -> Result<u64, Errno> {
            Ok(len)
        }
        fn size(&self) -> u64 {
            0
        }
    }

    fn map_file(s: &mut Space, len: u64, prot: u32, shared: bool, may_write: bool) -> u64 {
        let flags = if shared { map_flags::SHARED } else { map_flags::PRIVATE };
        let (at, m) = s
            .mmap_file(0, len, prot, flags, |at| FileMap::new(Arc::new(NoFile), at, 0x3000, shared, may_write))
            .unwrap();
        assert_eq!((m.start, m.offset_of(at + 0x1000)), (at, 0x4000));
        at
    }

    #[test]
    fn file_blocks_are_filled_on_first_touch_without_the_lock() {
        let mut s = space(8);
        let a = map_file(&mut s, 8 * M, RW, false, true);
        // A touch: the block is owed a fill, taken once (a second toucher waits).
        assert_eq!(s.check_for(a + M / 2, 10, PROT_READ), Ok(Some(a)));
        assert_eq!(s.fault_in(a + 3 * M, false), Fault::Fill);
        assert_eq!(s.check(a + 5, 1, false), Err(Errno::EFAULT), "no fill here");
        let fill = s.start_fill(a).unwrap().unwrap();
        assert_eq!(fill.pieces.iter().map(|p| (p.1, p.2)).collect::<Vec<_>>(), [(a, a + M)]);
        assert!(s.start_fill(a).unwrap().is_none(), "being filled");
        assert_eq!(s.check_for(a, 1, PROT_READ), Ok(Some(a)), "still owed: wait");
        // A small mapping made meanwhile in its block is not backed over it; it
        // replaced a page of the mapping: the fill is dropped, the next one maps.
        let small = s.mmap_anon(a + M - 0x2000, 0x1000, RW, ANON | map_flags::FIXED).unwrap();
        assert!(!s.resident(small));
        let (r, pieces) = s.filled(fill.run());
        assert_eq!((r, pieces.len(), s.resident(a)), (Ok(()), 1, false));
        let fill = s.start_fill(a).unwrap().unwrap();
        assert_eq!(fill.pieces.len(), 2);
        assert_eq!(s.filled(fill.run()).0, Ok(()));
        assert!(s.resident(a) && s.mmu().mapped.contains_key(&a));
        assert_eq!(s.check_for(a + 5, 10, PROT_READ), Ok(None));
        assert_eq!(s.fault_in(a + 5, false), Fault::Backed);
        assert_eq!(
            s.backed_pieces(s.file_pieces(0, USER_END, false)).iter().map(|p| (p.1, p.2)).collect::<Vec<_>>(),
            [(a, a + M - 0x2000), (a + M - 0x1000, a + M)]
        );
        // A fill whose mapping went meanwhile is dropped, its chunk freed.
        let free = s.chunks().free_chunks();
        let fill = s.start_fill(a + 2 * M).unwrap().unwrap();
        s.munmap(a + 2 * M, M).unwrap();
        let (r, _) = s.filled(fill);
        assert_eq!((r, s.resident(a + 2 * M), s.chunks().free_chunks()), (Ok(()), false, free));
    }

    #[test]
    fn file_mappings_keep_their_records_while_a_piece_is_left() {
        let mut s = space(4);
        // Lazy, not backed, and not bounded by memory (backed as filled).
        let a = map_file(&mut s, 64 * M, RW, true, true);
        assert!(s.mmu().mapped.is_empty());
        let b = map_file(&mut s, 0x3000, PROT_READ, false, true);
        let pieces = |s: &Space, lo, hi| s.file_pieces(lo, hi, true).iter().map(|p| (p.1, p.2)).collect::<Vec<_>>();
        assert_eq!(pieces(&s, 0, USER_END), [(a, a + 64 * M)]);
        assert!(s.shared_in(0, USER_END).is_empty(), "nothing backed to write back");
        // Split by munmap and mprotect: one record still, found from every piece.
        s.munmap(a + M, 0x1000).unwrap();
        s.mprotect(a + 2 * M, M, PROT_READ).unwrap();
        assert!(Arc::ptr_eq(&s.file_at(a).unwrap(), &s.file_at(a + 3 * M).unwrap()));
        assert_eq!(pieces(&s, a, a + 4 * M).len(), 4);
        assert!(s.take_orphans().is_empty());
        s.munmap(a, 64 * M).unwrap();
        assert_eq!(s.take_orphans().len(), 1, "the last piece went");
        assert!(s.file_at(b).is_some());
        // A mapping of a file opened read-only cannot be made writable if shared.
        let c = map_file(&mut s, 0x2000, PROT_READ, true, false);
        assert_eq!(s.mprotect(c, 0x2000, RW), Err(Errno::EACCES));
        s.mprotect(b, 0x3000, RW).unwrap();
        // MADV_DONTNEED: private pieces are given back to fill, shared ones kept.
        assert!(s.discard(b, 0x3000).unwrap().is_empty(), "not backed: filled when touched");
        assert!(s.discard(c, 0x2000).unwrap().is_empty());
        // A moved mapping gets a record of its own, at the same place in the file.
        s.mmap_anon(b + 0x3000, 0x1000, RW, ANON | map_flags::FIXED).unwrap();
        let moved = s.mremap(b + 0x1000, 0x2000, 0x8000, true).unwrap();
        let m = s.file_at(moved).unwrap();
        assert_eq!((m.start, m.offset), (moved, 0x4000));
        assert!(s.take_orphans().is_empty(), "the first page of b stays");
    }

    #[test]
    fn brk_grows_shrinks_and_stops_at_mappings() {
        let mut s = space(8);
        // The image ends at 0x601234; its block [6M, 8M) was mapped by the VMM.
        let a = s.chunks().alloc().unwrap();
        let b = s.chunks().alloc().unwrap();
        s.adopt(
            alloc::vec![(0x40_0000, a), (0x60_0000, b)],
            &[Vma { start: 0x40_0000, end: 0x60_2000, prot: RW, kind: VmaKind::Image, lazy: false }],
        );
        assert_eq!(s.brk(0), 0x60_2000);
        assert_eq!(s.brk(0x60_3000), 0x60_3000);
        assert!(s.mmu().mapped.is_empty(), "inside the image's block: no new mapping");
        assert_eq!(s.brk(0x90_0000), 0x90_0000);
        assert_eq!(s.mmu().mapped.len(), 1);
        s.check(0x60_2000, 0x90_0000 - 0x60_2000, true).unwrap();
        assert_eq!(s.brk(0x60_4000), 0x60_4000);
        assert!(s.mmu().mapped.is_empty());
        assert_eq!(s.check(0x60_4000, 1, false), Err(Errno::EFAULT));
        s.mmap_anon(0xa0_0000, 0x1000, RW, ANON | map_flags::FIXED).unwrap();
        assert_eq!(s.brk(0xb0_0000), 0x60_4000, "blocked by a mapping");
        assert_eq!(s.brk(0x10), 0x60_4000, "below the start");
    }

    /// Every block `s` maps, whole or split, with its chunks.
    fn chunks_of(s: &mut Space) -> BTreeMap<u64, (u64, Option<u64>)> {
        let m = s.mmu();
        let whole = m.mapped.iter().map(|(b, p)| (*b, (*p, None)));
        whole.chain(m.split.iter().map(|(b, (base, copy, _))| (*b, (*base, Some(*copy))))).collect()
    }

    /// Tears `spaces` down; then all `total` chunks are free again.
    fn end_all<const N: usize>(spaces: [&mut Space; N], total: usize) {
        let chunks = spaces[0].chunks.clone();
        for s in spaces {
            drop(s.teardown());
        }
        assert_eq!(chunks.lock().free_chunks(), total, "every chunk given back");
    }

    #[test]
    fn fork_shares_private_blocks_copy_on_write_and_shared_ones_as_they_are() {
        let mut s = space(16);
        // A private small mapping, a shared anonymous one (whole blocks), a
        // private lazy one with one block touched, and the break.
        let p = s.mmap_anon(0, 0x3000, RW, ANON).unwrap();
        let sh = s.mmap_anon(0, 0x1000, RW, map_flags::SHARED | map_flags::ANONYMOUS).unwrap();
        assert_eq!((sh % M, s.vmas.find(sh).map(|v| v.end - v.start)), (0, Some(M)), "a whole block");
        let big = s.mmap_anon(0, 8 * M, RW, ANON).unwrap();
        assert_eq!(s.fault_in(big + 3 * M, false), Fault::Retry);
        assert_eq!(s.brk(0x90_0000), 0x90_0000);
        let parent_blocks: BTreeMap<u64, u64> = s.mmu().mapped.clone();
        let free = s.chunks().free_chunks();
        let mut c = s.fork().unwrap();
        // Same VMAs, same break, the same chunks mapped: nothing copied, every
        // private block read-only in both, the shared one writable in both.
        assert_eq!(c.vmas.iter().collect::<Vec<_>>(), s.vmas.iter().collect::<Vec<_>>());
        assert_eq!(c.brk(0), 0x90_0000);
        assert_eq!(c.mmu().mapped, parent_blocks);
        assert_eq!(s.mmu().mapped, parent_blocks);
        let private: Vec<u64> = parent_blocks.keys().copied().filter(|b| *b != sh).collect();
        assert_eq!(c.mmu().readonly.iter().copied().collect::<Vec<_>>(), private);
        assert_eq!(s.mmu().readonly.iter().copied().collect::<Vec<_>>(), private);
        assert!(s.mmu().copied.is_empty() && c.mmu().copied.is_empty());
        assert_eq!(s.chunks().free_chunks(), free, "no copies made");
        // Reads are no faults; a write fault copies the one page in the writer.
        let page = align_down(p, PAGE_SIZE);
        let blk = align_down(p, M);
        assert_eq!(c.fault_in(p + 5, true), Fault::Retry);
        assert_eq!(c.mmu().copied, [(page, page, PAGE_SIZE)]);
        let (base, copy) = chunks_of(&mut c)[&blk];
        assert_eq!((base, copy.is_some()), (parent_blocks[&blk], true), "split: the base and a copy");
        assert_eq!(s.chunks().free_chunks(), free - 1);
        assert_eq!(c.fault_in(p + 9, true), Fault::Retry, "copied already: nothing more");
        assert_eq!(c.mmu().copied.len(), 1);
        // The parent writing the same block copies its own page too: the base
        // stays as it was for the child.
        assert_eq!(s.fault_in(p + 0x1000, true), Fault::Retry);
        assert_eq!(chunks_of(&mut s)[&blk].0, parent_blocks[&blk]);
        // The child's own changes stay its own; a shared block outlives either
        // space's unmapping, and is zeroed and freed when the last one goes.
        c.munmap(sh, M).unwrap();
        assert!(c.mmu().zeroed.iter().all(|(v, _)| *v != sh), "shared memory is not zeroed under the parent");
        assert!(s.resident(sh));
        let before = s.chunks().free_chunks();
        s.munmap(sh, M).unwrap();
        assert_eq!(s.chunks().free_chunks(), before + 1, "the last user gave it back");
        // The child ends: its copy goes back; the parent's next write takes the
        // base back as its own (its one copied page copied back), writable.
        drop(c.teardown());
        assert_eq!(s.fault_in(p + 0x2000, true), Fault::Retry);
        assert_eq!(s.mmu().mapped.get(&blk), Some(&parent_blocks[&blk]));
        assert!(!s.mmu().readonly.contains(&blk) && !s.mmu().split.contains_key(&blk));
        assert_eq!(s.mmu().copied.last(), Some(&(page + 0x1000, page + 0x1000, PAGE_SIZE)));
        assert_eq!(s.chunks().free_chunks(), free + 1, "the shared block, and no copy, are free");
        drop(s.teardown());
        assert_eq!(s.chunks().free_chunks(), 16);
    }

    #[test]
    fn many_written_pages_make_the_block_whole() {
        let mut s = space(8);
        let a = s.mmap_anon(0, M, RW, ANON).unwrap();
        let mut c = s.fork().unwrap();
        for i in 0..u64::from(COW_PAGES_MAX) {
            assert_eq!(c.fault_in(a + i * 2 * PAGE_SIZE, true), Fault::Retry);
        }
        assert!(c.mmu().split.contains_key(&a));
        let copy = chunks_of(&mut c)[&a].1.unwrap();
        // One more: the rest is copied at once (the runs between the pages copied).
        assert_eq!(c.fault_in(a + 3 * PAGE_SIZE, true), Fault::Retry);
        assert_eq!(c.mmu().mapped.get(&a), Some(&copy));
        assert!(!c.mmu().readonly.contains(&a));
        let copied: u64 = c.mmu().copied.iter().map(|(_, _, l)| l).sum();
        assert_eq!(copied, M, "every page once");
        // The parent is the base's only holder now: its write takes it back.
        let base = s.mmu().mapped[&a];
        assert_eq!(s.fault_in(a, true), Fault::Retry);
        assert!(s.mmu().copied.is_empty() && !s.mmu().readonly.contains(&a));
        assert_eq!(s.mmu().mapped[&a], base);
        end_all([&mut c, &mut s], 8);
    }

    #[test]
    fn a_partly_copied_block_is_made_whole_before_the_next_fork() {
        let mut s = space(8);
        let a = s.mmap_anon(0, 0x4000, RW, ANON).unwrap();
        let blk = align_down(a, M);
        let mut c1 = s.fork().unwrap();
        assert_eq!(s.fault_in(a, true), Fault::Retry);
        let (base, copy) = chunks_of(&mut s)[&blk];
        // The second child gets the parent's view: its copy, made whole.
        let mut c2 = s.fork().unwrap();
        assert_eq!(chunks_of(&mut c2)[&blk], (copy.unwrap(), None));
        assert_eq!(chunks_of(&mut c1)[&blk], (base, None));
        assert!(c2.mmu().readonly.contains(&blk) && s.mmu().readonly.contains(&blk));
        end_all([&mut c1, &mut c2, &mut s], 8);
    }

    #[test]
    fn unmapping_part_of_a_shared_block_makes_it_private_first() {
        let mut s = space(8);
        let a = s.mmap_anon(0, 0x2000, RW, ANON).unwrap();
        let b = s.mmap_anon(0, 0x2000, RW, ANON).unwrap();
        let blk = align_down(a, M);
        assert_eq!(blk, align_down(b, M));
        let mut c = s.fork().unwrap();
        let base = c.mmu().mapped[&blk];
        c.munmap(a, 0x2000).unwrap();
        let own = c.mmu().mapped[&blk];
        assert_ne!(own, base, "the child's own copy");
        assert!(c.mmu().zeroed.contains(&(a, 0x2000)), "what went is zeroed in the copy");
        assert_eq!(s.mmu().mapped[&blk], base);
        // Unmapping a whole block copies nothing.
        let copies = s.mmu().copied.len();
        s.munmap(a, 0x2000).unwrap();
        s.munmap(b, 0x2000).unwrap();
        assert_eq!(s.mmu().copied.len(), copies);
        drop(c.teardown());
        assert_eq!(s.chunks().free_chunks(), 8);
    }

    #[test]
    fn fork_without_memory_fails_cleanly() {
        let mut s = space(3);
        s.mmap_anon(0, 0x1000, RW, ANON).unwrap();
        s.mmap_anon(0x3000_0000, M, RW, ANON | map_flags::FIXED).unwrap();
        assert_eq!(s.chunks().free_chunks(), 1);
        assert_eq!(s.fork().err(), Some(Errno::ENOMEM), "no chunk for the child's tables");
        assert_eq!(s.chunks().free_chunks(), 1, "nothing taken");
        s.munmap(0x3000_0000, M).unwrap();
        let mut c = s.fork().unwrap();
        // A write with no chunk left for its copy is out of memory.
        let _hog: Vec<Chunk> = (0..2).filter_map(|_| s.chunks().alloc()).collect();
        assert_eq!(c.fault_in(0x2000_0000 - 0x1000, true), Fault::OutOfMemory);
        drop(c.teardown());
    }

    #[test]
    fn a_child_tid_goes_to_the_childs_memory() {
        let mut s = space(8);
        let a = s.mmap_anon(0, 0x2000, RW, ANON).unwrap();
        let mut c = s.fork().unwrap();
        c.poke(a + 0x10, &7u32.to_le_bytes()).unwrap();
        assert_eq!(c.mmu().written, [(a + 0x10, 7u32.to_le_bytes().to_vec())]);
        assert!(s.mmu().written.is_empty());
        assert_eq!(c.poke(a + 0x2000, &[1]), Err(Errno::EFAULT));
        s.mprotect(a, 0x1000, PROT_READ).unwrap();
        assert!(s.poke(a, &[1]).is_err(), "read-only");
    }
}
