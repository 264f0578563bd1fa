//! Guest-physical memory in 2 MiB chunks, and the page tables that map them into
//! the program's half of the address space.
//!
//! User memory is backed only in whole 2 MiB chunks mapped by 2 MiB page-directory
//! entries: under the software hypervisor every page-table edit and every first
//! touch of a 4 KiB mapping costs microseconds, a 2 MiB mapping few. The one
//! exception is a fork's copy-on-write block that a process has written part of:
//! a table of 4 KiB entries maps each page to the block's base chunk (read-only)
//! or to its copy chunk (writable), [`PageTables::split_block`].
//!
//! A [`Chunk`] is an owned 2 MiB piece of guest RAM: it cannot be copied or made
//! up (only a [`ChunkAllocator`] built by `boot` hands chunks out, in the guest), so
//! whoever holds it may write it through the direct map. Invariant: a free chunk is
//! all zeros (guest RAM starts zeroed; whoever frees a chunk zeroes what it used).
//!
//! [`PageTables`] edits one address space's tables: the boot space's is the root
//! the VMM built (`BOOT_PT_PHYS`, `boot` claims it), each further space (fork) gets
//! a root page of its own ([`PageTables::new_space_for`]) whose upper half (PML4 slots
//! 256..511: the kernel image, the direct map, MMIO, and PVM's slot 256 as the VMM
//! left it) is a copy of the boot root's, so the kernel is mapped alike in every
//! space. Only entries of the lower (user) half are ever edited, and only to map
//! chunks; the kernel's own mappings are the VMM's and never change. Table pages
//! come from one pool for all spaces (4 KiB pages cut from chunks kept for the
//! kernel's life). A released space's tables go back to it whole
//! ([`PageTables::release`]: the root with the table pages linked under it, and
//! the blocks it mapped as *stale* entries) and are handed out whole again
//! ([`PageTables::new_space_for`], to a space of the same key first): under the
//! software hypervisor every store into a table page of a space that ran traps,
//! and the next space mostly maps the same blocks again; what it does not is
//! cleared before it runs ([`PageTables::settle`]). A root is only ever a root
//! again (a vCPU may still have it loaded), its upper half always the kernel's. A
//! table page taken from the free list is first unshadowed (one store that makes
//! the hypervisor stop shadowing it). A chunk mapped into a user half is memory the program
//! writes at will: until every mapping of it is gone (a shared chunk is mapped in
//! several spaces: `MAPPED` counts them) it cannot be freed (and so handed out
//! again) or kept as kernel memory; both check.
//!
//! Warm chunks (seed B-5): guest RAM the VM never touched costs a host fault per
//! 4 KiB page at its first touch (~9 µs here, 5 ms a chunk: measured, design.md),
//! and a free chunk is kept zeroed already, so what a pool of ready pages saves here
//! is that first touch. The allocator knows which chunks were ever touched (each
//! range's chunks below its `warm` mark); an idle vCPU takes the next cold one
//! ([`ChunkAllocator::take_cold`]), touches its pages ([`Chunk::touch`]) and gives it
//! back warm, while fewer than [`ChunkAllocator::warm_pool`] warm chunks are free:
//! [`WARM_POOL`] (32 MiB), but at most one chunk in [`WARM_SHARE`] of the VM's (none
//! below 64 MiB), so that a small VM that idles (a sleeper among a thousand on one
//! host) does not hold host memory its program never asked for. Chunks go out lowest first, so the
//! program gets the warm ones first.
//!
//! Reclaim under memory pressure: the kernel keeps memory it could do without
//! (the page cache of host files, in the kernel heap), and registers at boot a
//! function that gives some of it back ([`set_reclaim`]; this crate names nothing
//! of the kernel). When chunks run short, [`ChunkAllocator::reclaim`] hands back
//! the heap's regions that hold nothing ([`crate::heap::release`]) and, while that
//! is not enough, asks the registered function to free heap memory (oldest cache
//! chunks first) and tries again; only when it has nothing left does the caller
//! see ENOMEM. The heap asks it too before it fails to grow ([`crate::heap::room`]).
//! Lock order: the memory lock (the kernel's, around the allocator) may be held
//! when it is called; the function must then take no lock that is ever held while
//! the memory lock is taken (the kernel's file tree: it only tries it), and the
//! heap's lock is a leaf, never held while another is taken.
//!
//! On the host (tests) chunks and the allocator work the same; page tables and chunk
//! contents are not touched.

use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use onering_abi::layout::HUGE_PAGE_SIZE;

/// Guest RAM below this guest-physical address (the kernel heap's first region,
/// the first program's stack and image, placed by the VMM) is in small host
/// pages: there each 4 KiB page costs its own shadow fill the first time a mapping
/// touches it (~15 µs here). Set at boot ([`set_small_pages_end`]).
static SMALL_PAGES_END: AtomicU64 = AtomicU64::new(0);
/// Which of those chunks were merged into a host huge page already (bit per chunk
/// index; chunks beyond the bitmap are left as they are).
static MERGED: [AtomicU64; 16] = [const { AtomicU64::new(0) }; 16];
/// Copies and zeroings at least this long merge a small-paged chunk first (the
/// merge costs about what 20 small-page fills do; a whole chunk is 512).
const MERGE_MIN: u64 = 64 << 10;

/// Where the chunks with small host pages end (the boot info's `phys_free_start`).
pub(crate) fn set_small_pages_end(end: u64) {
    SMALL_PAGES_END.store(end, Relaxed);
}

/// Merges the chunk holding guest-physical `phys` into a host huge page, once,
/// if it is one of those in small host pages (below [`SMALL_PAGES_END`]).
pub(crate) fn prefer_huge(phys: u64) {
    if phys >= SMALL_PAGES_END.load(Relaxed) {
        return;
    }
    let i = (phys / HUGE_PAGE_SIZE) as usize;
    let Some(word) = MERGED.get(i / 64) else { return };
    let bit = 1u64 << (i % 64);
    // (A load first: the heap asks at most allocations, and the word is shared.)
    if word.load(Relaxed) & bit == 0 && word.fetch_or(bit, Relaxed) & bit == 0 {
        #[cfg(target_os = "none")]
        let _ = crate::hostcall::huge_pages(phys & !(HUGE_PAGE_SIZE - 1));
    }
}

/// An owned, 2 MiB aligned 2 MiB piece of guest RAM.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk {
    phys: u64,
}

impl Chunk {
    /// Its guest-physical address.
    pub fn phys(&self) -> u64 {
        self.phys
    }

    /// Before `len` bytes of the chunk are copied or zeroed through the direct map:
    /// a chunk in small host pages is merged into a huge page first, once, so that
    /// the copy costs one shadow fill instead of one per 4 KiB page (a fork's
    /// copy of the first program's image took ~7.7 ms of fills).
    fn prefer_huge(&self, len: u64) {
        if len >= MERGE_MIN {
            prefer_huge(self.phys);
        }
    }

    /// Zeroes `[offset, offset + len)` of the chunk (clamped to it).
    /// Touches pages `first..first + count` of the chunk (of 512), writing the
    /// zero each already holds: the host backs them now, not at the program's
    /// first touch.
    pub fn touch(&mut self, first: u64, count: u64) {
        let pages = HUGE_PAGE_SIZE / 4096;
        for p in first.min(pages)..(first + count).min(pages) {
            self.zero(p * 4096, 1);
        }
    }

    pub fn zero(&mut self, offset: u64, len: u64) {
        let (offset, len) = clamp(offset, len);
        self.prefer_huge(len);
        #[cfg(target_os = "none")]
        if len > 0 {
            let at = onering_abi::layout::direct(self.phys + offset);
            // SAFETY: the chunk is owned by the caller (`&mut`), the range lies inside
            // it (clamped), and it is reached through the direct map, which maps all
            // RAM. The program may map the chunk and write it concurrently: that is
            // memory outside Rust's objects, written here with `rep stosb`.
            unsafe {
                core::arch::asm!("rep stosb", inout("rdi") at => _, inout("rcx") len => _, in("al") 0u8, options(nostack, preserves_flags))
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = (offset, len);
    }

    /// Copies `len` bytes at `from_off` of `from` to `to_off` of `self` (each
    /// clamped to its chunk).
    pub fn copy_from(&mut self, to_off: u64, from: &Chunk, from_off: u64, len: u64) {
        let (to_off, l1) = clamp(to_off, len);
        let (from_off, l2) = clamp(from_off, len);
        let len = l1.min(l2);
        self.prefer_huge(len);
        from.prefer_huge(len);
        #[cfg(target_os = "none")]
        if len > 0 {
            let dst = onering_abi::layout::direct(self.phys + to_off);
            let src = onering_abi::layout::direct(from.phys + from_off);
            // SAFETY: both ranges lie inside their chunks (clamped) and are reached
            // through the direct map; `self` is owned mutably and `from` is another
            // chunk (two `Chunk`s never share memory), so the ranges do not overlap.
            unsafe {
                core::arch::asm!("rep movsb", inout("rdi") dst => _, inout("rsi") src => _, inout("rcx") len => _, options(nostack, preserves_flags))
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = (to_off, from_off, len, from);
    }

    /// Writes `data` at `offset` of the chunk (clamped to it): a store into another
    /// address space's memory, which is not the one loaded (fork's child tid).
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let (offset, len) = clamp(offset, data.len() as u64);
        #[cfg(target_os = "none")]
        if len > 0 {
            let dst = onering_abi::layout::direct(self.phys + offset);
            // `data` is kernel memory, never part of a chunk.
            // SAFETY: the range lies inside the chunk the caller owns mutably (clamped), reached through the direct map, and does not overlap `data`.
            unsafe {
                core::arch::asm!("rep movsb", inout("rdi") dst => _, inout("rsi") data.as_ptr() => _, inout("rcx") len => _, options(nostack, preserves_flags))
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = (offset, len);
    }

    /// Reads `buf.len()` bytes at `offset` of the chunk (clamped to it; the rest of
    /// `buf` is left as it is).
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        let (offset, len) = clamp(offset, buf.len() as u64);
        #[cfg(target_os = "none")]
        if len > 0 {
            let src = onering_abi::layout::direct(self.phys + offset);
            // `buf` is kernel memory, never part of a chunk.
            // SAFETY: the range lies inside the chunk (clamped), reached through the direct map, and does not overlap `buf`, which the caller lends mutably.
            unsafe {
                core::arch::asm!("rep movsb", inout("rdi") buf.as_mut_ptr() => _, inout("rsi") src => _, inout("rcx") len => _, options(nostack, preserves_flags))
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = (offset, len, buf);
    }

    /// Copies `len` bytes at `from_off` to `to_off` within the chunk (both clamped;
    /// overlapping ranges copy as `rep movsb` does, front to back).
    pub fn copy_within(&mut self, from_off: u64, to_off: u64, len: u64) {
        let (from_off, l1) = clamp(from_off, len);
        let (to_off, l2) = clamp(to_off, len);
        let len = l1.min(l2);
        self.prefer_huge(len);
        #[cfg(target_os = "none")]
        if len > 0 {
            let dst = onering_abi::layout::direct(self.phys + to_off);
            let src = onering_abi::layout::direct(self.phys + from_off);
            // SAFETY: both ranges lie inside the chunk the caller owns mutably
            // (clamped), reached through the direct map.
            unsafe {
                core::arch::asm!("rep movsb", inout("rdi") dst => _, inout("rsi") src => _, inout("rcx") len => _, options(nostack, preserves_flags))
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = (from_off, to_off, len);
    }
}

impl Chunk {
    /// The chunk at `phys`, for memory the caller owns as whole chunks that came
    /// out of a [`ChunkAllocator`] (the heap giving back a region it was made of).
    pub(crate) fn reclaimed(phys: u64) -> Chunk {
        Chunk { phys }
    }
}

/// `f(bytes)`: frees about `bytes` of kernel heap memory the kernel can do without
/// (oldest first), and says how many it freed (0: nothing left, or not now).
pub type Reclaim = fn(usize) -> usize;

static RECLAIM: spin::Once<Reclaim> = spin::Once::new();

/// Registers the kernel's reclaim function (once, at boot). It may be called with
/// the memory lock held, so it must not wait for a lock that is ever held while
/// the memory lock is taken (try it instead), nor for the heap's.
pub fn set_reclaim(f: Reclaim) {
    RECLAIM.call_once(|| f);
}

/// Asks the registered reclaim function for `bytes` of heap memory: the bytes freed.
pub fn reclaim(bytes: usize) -> usize {
    RECLAIM.get().map_or(0, |f| f(bytes))
}

fn clamp(offset: u64, len: u64) -> (u64, u64) {
    let offset = offset.min(HUGE_PAGE_SIZE);
    (offset, len.min(HUGE_PAGE_SIZE - offset))
}

#[derive(Debug)]
struct Range {
    base: u64,
    chunks: usize,
    /// Bit set = chunk in use.
    used: Vec<u64>,
    /// Chunks below this index were touched (handed out once, or warmed).
    warm: usize,
}

/// How many warm free chunks idle vCPUs keep ready at most (32 MiB).
pub const WARM_POOL: usize = 16;
/// ... and at most one chunk in this many of the allocator's (rounded down: none
/// for `--mem 64M`, 2 MiB for 128M, 6 MiB for 256M, 30 MiB for 1G).
pub const WARM_SHARE: usize = 32;

/// Allocator of 2 MiB chunks, one bit per chunk.
#[derive(Debug, Default)]
pub struct ChunkAllocator {
    ranges: Vec<Range>,
    free: usize,
    /// Free chunks below their range's warm mark.
    warm_free: usize,
}

impl ChunkAllocator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[start, end)` (rounded inwards to 2 MiB) to the free pool. In the guest
    /// only `boot` does this, from the boot info; host tests make up their own.
    #[cfg(target_os = "none")]
    pub(crate) fn add_range(&mut self, start: u64, end: u64) {
        self.add(start, end)
    }

    #[cfg(not(target_os = "none"))]
    pub fn add_range(&mut self, start: u64, end: u64) {
        self.add(start, end)
    }

    fn add(&mut self, start: u64, end: u64) {
        let base = start.saturating_add(HUGE_PAGE_SIZE - 1) & !(HUGE_PAGE_SIZE - 1);
        let end = end & !(HUGE_PAGE_SIZE - 1);
        if end <= base {
            return;
        }
        let chunks = ((end - base) / HUGE_PAGE_SIZE) as usize;
        self.ranges.push(Range { base, chunks, used: vec![0; chunks.div_ceil(64)], warm: 0 });
        self.free += chunks;
    }

    pub fn free_chunks(&self) -> usize {
        self.free
    }

    /// Every chunk this allocator manages, free or not.
    pub fn total_chunks(&self) -> usize {
        self.ranges.iter().map(|r| r.chunks).sum()
    }

    /// A zeroed chunk, lowest first.
    pub fn alloc(&mut self) -> Option<Chunk> {
        for r in &mut self.ranges {
            for (w, word) in r.used.iter_mut().enumerate() {
                if *word == u64::MAX {
                    continue;
                }
                let bit = (!*word).trailing_zeros() as usize;
                let idx = w * 64 + bit;
                if idx >= r.chunks {
                    break;
                }
                *word |= 1 << bit;
                self.free -= 1;
                if idx < r.warm {
                    self.warm_free -= 1;
                } else {
                    r.warm = idx + 1;
                }
                return Some(Chunk { phys: r.base + idx as u64 * HUGE_PAGE_SIZE });
            }
        }
        None
    }

    /// `n` zeroed chunks, each right after the one before (the lowest such run),
    /// or None if no range has `n` free in a row.
    pub fn alloc_run(&mut self, n: usize) -> Option<Vec<Chunk>> {
        if n <= 1 {
            return self.alloc().map(|c| vec![c]);
        }
        for r in &mut self.ranges {
            let free = |i: usize| r.used[i / 64] & (1 << (i % 64)) == 0;
            let (mut start, mut len) = (0, 0);
            let mut found = None;
            for i in 0..r.chunks {
                if free(i) {
                    if len == 0 {
                        start = i;
                    }
                    len += 1;
                    if len == n {
                        found = Some(start);
                        break;
                    }
                } else {
                    len = 0;
                }
            }
            if let Some(start) = found {
                let mut run = Vec::new();
                run.try_reserve_exact(n).ok()?;
                for i in start..start + n {
                    r.used[i / 64] |= 1 << (i % 64);
                    run.push(Chunk { phys: r.base + i as u64 * HUGE_PAGE_SIZE });
                    if i < r.warm {
                        self.warm_free -= 1;
                    }
                }
                r.warm = r.warm.max(start + n);
                self.free -= n;
                return Some(run);
            }
        }
        None
    }

    /// Returns a chunk, which the caller has zeroed where it wrote. A chunk of
    /// another allocator (the boot-time image and stack) is dropped: its memory is
    /// never reused.
    pub fn free(&mut self, chunk: Chunk) {
        let phys = chunk.phys;
        assert_unmapped(phys);
        for r in &mut self.ranges {
            let end = r.base + r.chunks as u64 * HUGE_PAGE_SIZE;
            if phys >= r.base && phys < end {
                let idx = ((phys - r.base) / HUGE_PAGE_SIZE) as usize;
                let (w, bit) = (idx / 64, idx % 64);
                if r.used[w] & (1 << bit) != 0 {
                    r.used[w] &= !(1 << bit);
                    self.free += 1;
                    if idx < r.warm {
                        self.warm_free += 1;
                    }
                }
                return;
            }
        }
    }

    /// How many warm free chunks idle vCPUs keep ready: [`WARM_POOL`], or one in
    /// [`WARM_SHARE`] of all chunks if that is fewer.
    pub fn warm_pool(&self) -> usize {
        (self.total_chunks() / WARM_SHARE).min(WARM_POOL)
    }

    /// Whether an idle vCPU should warm a chunk: fewer than
    /// [`warm_pool`](Self::warm_pool) warm chunks are free, and a cold one is left.
    pub fn wants_warming(&self) -> bool {
        self.warm_free < self.warm_pool() && self.any_cold()
    }

    /// The lowest free chunk never touched, taken out (it counts as warm from
    /// now: give it back with [`free`](Self::free) once touched); None if none
    /// is left or the pool is full.
    pub fn take_cold(&mut self) -> Option<Chunk> {
        if !self.wants_warming() {
            return None;
        }
        for r in &mut self.ranges {
            while r.warm < r.chunks {
                let i = r.warm;
                r.warm += 1;
                if r.used[i / 64] & (1 << (i % 64)) == 0 {
                    r.used[i / 64] |= 1 << (i % 64);
                    self.free -= 1;
                    return Some(Chunk { phys: r.base + i as u64 * HUGE_PAGE_SIZE });
                }
            }
        }
        None
    }

    /// Whether any chunk was never touched.
    pub fn any_cold(&self) -> bool {
        self.ranges.iter().any(|r| r.warm < r.chunks)
    }

    /// Free chunks that were touched (for tests and `--stats`).
    pub fn warm_free(&self) -> usize {
        self.warm_free
    }

    /// Tries to make `n` chunks free: the heap's wholly free regions come back
    /// first, then, while that is not enough, the registered reclaim function frees
    /// heap memory (the page cache, oldest first) and the regions that emptied come
    /// back. True if `n` chunks are free now. Called with the memory lock held
    /// (this allocator lives under it): see the lock order above.
    pub fn reclaim(&mut self, n: usize) -> bool {
        loop {
            crate::heap::release(|c| self.free(c));
            if self.free >= n {
                return true;
            }
            // (Scattered cache chunks free holes first and whole regions later:
            // at least a chunk's worth at a time.)
            let want = ((n - self.free) * HUGE_PAGE_SIZE as usize).max(HUGE_PAGE_SIZE as usize);
            if reclaim(want) == 0 {
                return false;
            }
        }
    }
}

/// Why a mapping could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// No chunk left for a page-table page.
    NoMemory,
    /// The address is not a 2 MiB aligned address of the program's half.
    BadAddress,
}

/// One address space's page tables: its root and the user-half entries under it.
/// The boot space's is claimed once (`claim`, by `boot`); others come from
/// [`PageTables::new_space_for`].
#[derive(Debug)]
pub struct PageTables {
    /// Guest-physical address of the PML4 (0 once released).
    root: u64,
    /// Table pages below the root this instance took from the pool (freed with it).
    pages: Vec<u64>,
    /// What each mapped block maps: virtual block address -> how.
    mapped: alloc::collections::BTreeMap<u64, Mapping>,
    /// Blocks whose page-directory entry may still hold what an earlier space
    /// mapped there (tables handed out again whole, [`PageTables::new_space_for`]):
    /// cleared by [`PageTables::settle`] before the root is first loaded, unless
    /// this space maps the block first.
    stale: Vec<u64>,
    /// Which spaces these tables suit best (the parent's root for a fork's child,
    /// the program file's identity for an execve's, 0 otherwise): tables are
    /// handed out again to a space of the same key first, whose entries are
    /// mostly the same.
    key: u64,
}

/// A released space's tables, kept whole for the next space: its root, the table
/// pages under it (still linked), its stale blocks and key (`mapped` empty).
#[cfg(target_os = "none")]
struct Tree {
    tables: PageTables,
    /// Its user half must be cleared before use: a space that mapped more than
    /// [`STALE_MAX`] blocks gave back its table pages one by one instead.
    clear: bool,
}

/// Above this many mapped blocks (128 MiB), a released space's tables are not
/// kept whole: clearing what the next space does not map again would cost more
/// traps than fresh tables.
#[cfg(target_os = "none")]
const STALE_MAX: usize = 64;

/// How one 2 MiB block of a user half is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// One 2 MiB entry for the chunk at `phys`, writable or read-only (a block
    /// that fork left shared until one side writes it).
    Block { phys: u64, writable: bool },
    /// A table of 4 KiB entries (`table`): each page is `base`'s, read-only,
    /// until it is copied to `copy` and mapped there writable (copy-on-write at
    /// page size: only what a process writes after fork is copied).
    Split { base: u64, copy: u64, table: u64 },
}

impl Mapping {
    /// The chunks it maps.
    fn chunks(&self) -> impl Iterator<Item = u64> {
        let (a, b) = match *self {
            Mapping::Block { phys, .. } => (phys, None),
            Mapping::Split { base, copy, .. } => (base, Some(copy)),
        };
        core::iter::once(a).chain(b)
    }
}

/// The table-page pool, shared by every space: the rest of the last chunk cut up,
/// pages given back, and released spaces' tables, kept whole (roots are only ever
/// reused as roots).
#[cfg(target_os = "none")]
struct Pool {
    next: u64,
    end: u64,
    /// Chunks holding table pages (kept for the kernel's life).
    held: Vec<Chunk>,
    free: Vec<u64>,
    trees: Vec<Tree>,
}

#[cfg(target_os = "none")]
static POOL: spin::Mutex<Pool> =
    spin::Mutex::new(Pool { next: 0, end: 0, held: Vec::new(), free: Vec::new(), trees: Vec::new() });

impl PageTables {
    const fn with_root(root: u64) -> Self {
        PageTables { root, pages: Vec::new(), mapped: alloc::collections::BTreeMap::new(), stale: Vec::new(), key: 0 }
    }

    /// The boot space's tables, the VMM's root (None the second time).
    #[cfg(target_os = "none")]
    pub(crate) fn claim() -> Option<PageTables> {
        static CLAIMED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
        (!CLAIMED.swap(true, core::sync::atomic::Ordering::AcqRel))
            .then(|| PageTables::with_root(onering_abi::layout::BOOT_PT_PHYS))
    }

    /// The guest-physical address of the root (what CR3 holds while it runs).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// How many blocks it maps.
    pub fn mapped_blocks(&self) -> usize {
        self.mapped.len()
    }

    /// How the block at `virt` is mapped (None: not at all).
    pub fn mapping(&self, virt: u64) -> Option<Mapping> {
        self.mapped.get(&virt).copied()
    }
}

#[cfg(target_os = "none")]
mod tables {
    use super::*;
    use core::ptr::{read_volatile, write_volatile};
    use onering_abi::layout::{self, direct, PAGE_SIZE};

    const PTE_PRESENT: u64 = 1;
    const PTE_WRITE: u64 = 2;
    const PTE_USER: u64 = 4;
    const PTE_HUGE: u64 = 0x80;
    /// The accessed and dirty bits, which the processor (or the hypervisor)
    /// sets in an entry it uses: an entry that differs only in them holds what
    /// would be stored.
    const PTE_USED: u64 = 0x60;
    const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;
    /// The first PML4 slot of the upper half (the kernel's).
    const KERNEL_SLOT: u64 = 256;

    /// Entry `index` of the table page at `table_phys`, through the direct map.
    fn entry(table_phys: u64, index: u64) -> *mut u64 {
        (direct(table_phys) + (index & 511) * 8) as *mut u64
    }

    /// Reads entry `index` of table page `table`.
    fn read(table: u64, index: u64) -> u64 {
        // `table` is a page-table page in RAM: a root (the VMM's or one of the
        // pool's) or a page named by a present entry the VMM or this module wrote.
        // SAFETY: its entries are aligned u64s in the direct map, and this only reads one.
        unsafe { read_volatile(entry(table, index)) }
    }

    /// Ends the hypervisor's shadowing of a table page given back: one two-byte
    /// store of what its first entry holds already (no change), which a shadowing
    /// hypervisor cannot treat as a table update and so stops shadowing the page.
    fn unshadow(t: u64) {
        let p = direct(t) as *mut u16;
        // SAFETY: `t` is a pool page given back, linked into no table; rewriting the low half-word of its first entry with its own value changes nothing.
        unsafe { write_volatile(p, read_volatile(p)) };
    }

    impl Pool {
        /// A zeroed page from the pool (cutting a new chunk when it is empty).
        fn page(&mut self, chunks: &mut ChunkAllocator) -> Result<u64, MapError> {
            let t = self.page_unzeroed(chunks)?;
            // A stray entry in a table page would become a mapping: clear it, but
            // only the entries that are not zero already (reads are free; a store
            // into a page the hypervisor still shadows as a table traps). A page
            // given back was unlinked from its space's tables first.
            for i in 0..512 {
                if read(t, i) != 0 {
                    // SAFETY: `t` is a page of a chunk the pool owns (`held`), reached through the direct map and part of no table now; the entry is an aligned u64.
                    unsafe { write_volatile(entry(t, i), 0) };
                }
            }
            Ok(t)
        }

        /// A page from the pool as it is, for a caller that writes all of it
        /// before linking it (a split block's table: zeroing first would double
        /// the stores into a page the hypervisor may still shadow).
        fn page_unzeroed(&mut self, chunks: &mut ChunkAllocator) -> Result<u64, MapError> {
            Ok(match self.free.pop() {
                Some(t) => {
                    unshadow(t);
                    t
                }
                None => {
                    if self.next == self.end {
                        let c = chunks.alloc().ok_or(MapError::NoMemory)?;
                        self.held.try_reserve(1).map_err(|_| MapError::NoMemory)?;
                        self.next = c.phys();
                        self.end = c.phys() + HUGE_PAGE_SIZE;
                        self.held.push(c);
                    }
                    let t = self.next;
                    self.next += PAGE_SIZE;
                    t
                }
            })
        }
    }

    impl PageTables {
        /// Tables for a new address space (`key`: see [`PageTables`]): a root
        /// whose upper half is the boot root's (the kernel's mappings), whose
        /// lower half maps nothing once [`settle`](Self::settle)d.
        ///
        /// A released space's tables are handed out whole, a tree of the same key
        /// first: every table page the hypervisor shadows (all those of a space
        /// that ran) costs a trap per store, so links already in place are kept,
        /// an entry that already holds what is mapped is not stored again (a
        /// fork's child maps its parent's blocks where the last child did), and
        /// its shadow stays valid, so the new space's first touches find it
        /// filled. What the new space does not map again is cleared by `settle`.
        pub fn new_space_for(chunks: &mut ChunkAllocator, key: u64) -> Result<PageTables, MapError> {
            let mut pool = POOL.lock();
            let pick = pool.trees.iter().rposition(|t| t.tables.key == key).or(pool.trees.len().checked_sub(1));
            if let Some(i) = pick {
                let Tree { mut tables, clear } = pool.trees.remove(i);
                if clear {
                    // (Not unshadowed: a vCPU may still have this root loaded,
                    // and a root is better kept tracked store by store than
                    // dropped under a vCPU. A few slots at most.)
                    for i in 0..KERNEL_SLOT {
                        if read(tables.root, i) != 0 {
                            // SAFETY: an aligned user-half entry of a root given back, which no space uses now; no vCPU runs a thread with it loaded (each switch loads its space's root again), so clearing it unmaps nothing anyone uses.
                            unsafe { write_volatile(entry(tables.root, i), 0) };
                        }
                    }
                }
                tables.key = key;
                return Ok(tables);
            }
            pool.trees.try_reserve(1).map_err(|_| MapError::NoMemory)?;
            let root = pool.page(chunks)?;
            for i in KERNEL_SLOT..512 {
                let v = read(layout::BOOT_PT_PHYS, i);
                if v != 0 {
                    // The upper-half entry becomes the boot root's, which names the
                    // VMM's kernel tables (never edited): the kernel is mapped here
                    // as in every space.
                    // SAFETY: `root` is a zeroed pool page no vCPU has loaded yet; the entry is an aligned u64 in the direct map.
                    unsafe { write_volatile(entry(root, i), v) };
                }
            }
            let mut tables = PageTables::with_root(root);
            tables.key = key;
            Ok(tables)
        }

        /// Clears the entries of the blocks an earlier space mapped and this one
        /// has not mapped again: before the root is first loaded, and only then
        /// (a block this space maps is no longer stale).
        pub fn settle(&mut self) {
            self.settle_range(0, onering_abi::layout::USER_END);
        }

        /// [`settle`](Self::settle) for the blocks that meet `[start, end)`
        /// only: before the kernel touches that range of a space it is still
        /// building (execve), so that an earlier space's entry never takes the
        /// place of the fault that backs the block.
        pub fn settle_range(&mut self, start: u64, end: u64) {
            if self.stale.is_empty() {
                return;
            }
            let first = start & !(HUGE_PAGE_SIZE - 1);
            let (hit, kept): (Vec<u64>, Vec<u64>) = self.stale.iter().partition(|v| **v >= first && **v < end);
            self.stale = kept;
            let mut any = false;
            for virt in hit {
                if let Some(e) = self.pd_entry(virt, None) {
                    // SAFETY: `e` is the aligned page-directory entry, in the direct map, of a user-half block in a table page of this instance (`pages`, or the boot tables) whose space runs no program code yet; clearing it unmaps what an earlier space left there.
                    if unsafe { read_volatile(e) } != 0 {
                        // SAFETY: as above.
                        unsafe { write_volatile(e, 0) };
                        any = true;
                    }
                }
            }
            if any {
                crate::supervisor::flush_tlb();
            }
        }

        /// The block at `virt` is this space's now (its entry is about to be
        /// written, or holds what it maps already).
        fn unstale(&mut self, virt: u64) {
            if let Some(i) = self.stale.iter().position(|v| *v == virt) {
                self.stale.swap_remove(i);
            }
        }

        /// The table entry `index` of `table` points at, created when absent.
        fn next_level(&mut self, table: u64, index: u64, chunks: &mut ChunkAllocator) -> Result<u64, MapError> {
            let v = read(table, index);
            if v & PTE_PRESENT != 0 {
                return Ok(v & PTE_ADDR);
            }
            self.pages.try_reserve(1).map_err(|_| MapError::NoMemory)?;
            let t = POOL.lock().page(chunks)?;
            self.pages.push(t);
            // `table` is this space's root or one of its user-half table pages,
            // edited only through this instance (`&mut`).
            // SAFETY: an aligned entry in the direct map, now naming a zeroed table page this instance owns (`pages`): it maps nothing yet.
            unsafe { write_volatile(entry(table, index), t | PTE_PRESENT | PTE_WRITE | PTE_USER) };
            Ok(t)
        }

        /// The page-directory entry of `virt`, creating the levels above if `chunks`
        /// is given; None if absent (or out of memory).
        fn pd_entry(&mut self, virt: u64, chunks: Option<&mut ChunkAllocator>) -> Option<*mut u64> {
            let idx = |shift: u64| (virt >> shift) & 511;
            match chunks {
                Some(c) => {
                    let pdpt = self.next_level(self.root, idx(39), c).ok()?;
                    let pd = self.next_level(pdpt, idx(30), c).ok()?;
                    Some(entry(pd, idx(21)))
                }
                None => {
                    let mut table = self.root;
                    for shift in [39, 30] {
                        let v = read(table, idx(shift));
                        if v & PTE_PRESENT == 0 {
                            return None;
                        }
                        table = v & PTE_ADDR;
                    }
                    Some(entry(table, idx(21)))
                }
            }
        }

        /// Points the page-directory entry of `virt` at the chunk `phys` (a 2 MiB
        /// page, writable or not), replacing what it held (one store).
        pub(super) fn set(
            &mut self,
            virt: u64,
            phys: u64,
            writable: bool,
            chunks: &mut ChunkAllocator,
        ) -> Result<(), MapError> {
            let e = self.pd_entry(virt, Some(chunks)).ok_or(MapError::NoMemory)?;
            self.unstale(virt);
            let w = if writable { PTE_WRITE } else { 0 };
            let v = phys | PTE_PRESENT | w | PTE_USER | PTE_HUGE;
            // (Tables handed out again often hold this very entry: no store then.)
            // SAFETY: `e` is the aligned page-directory entry, in the direct map, of a user-half `virt` (checked by the caller) in a table page only this instance edits.
            if unsafe { read_volatile(e) } & !PTE_USED != v {
                // SAFETY: as above; it maps the chunk at `phys`, which `MAPPED` keeps from being freed or kept as kernel memory until it is unmapped.
                unsafe { write_volatile(e, v) };
                crate::supervisor::flush_tlb();
            }
            Ok(())
        }

        /// Points the page-directory entry of `virt` at a new table of 4 KiB
        /// entries: page `i` is `copy`'s (writable) where bit `i` of `copied` is
        /// set, `base`'s (read-only) elsewhere. Returns the table page.
        pub(super) fn set_split(
            &mut self,
            virt: u64,
            base: u64,
            copy: u64,
            copied: &[u64; 8],
            chunks: &mut ChunkAllocator,
        ) -> Result<u64, MapError> {
            let e = self.pd_entry(virt, Some(chunks)).ok_or(MapError::NoMemory)?;
            self.unstale(virt);
            self.pages.try_reserve(1).map_err(|_| MapError::NoMemory)?;
            let t = POOL.lock().page_unzeroed(chunks)?;
            self.pages.push(t);
            for i in 0..512u64 {
                let v = if copied[(i / 64) as usize] & 1 << (i % 64) != 0 {
                    (copy + i * PAGE_SIZE) | PTE_PRESENT | PTE_WRITE | PTE_USER
                } else {
                    (base + i * PAGE_SIZE) | PTE_PRESENT | PTE_USER
                };
                // (A recycled table often holds these very entries already: the
                // same chunks at the same place. Only what differs is stored.)
                if read(t, i) & !PTE_USED != v {
                    // SAFETY: `t` is a pool page this instance now owns (`pages`), linked into no table yet (every entry is written before it is); the entry is an aligned u64 in the direct map.
                    unsafe { write_volatile(entry(t, i), v) };
                }
            }
            // SAFETY: as in `set`: the aligned page-directory entry of a user-half `virt`, now naming the table just filled, whose entries map only `base` and `copy` (counted in `MAPPED` by the caller).
            unsafe { write_volatile(e, t | PTE_PRESENT | PTE_WRITE | PTE_USER) };
            crate::supervisor::flush_tlb();
            Ok(t)
        }

        /// Maps page `index` of a split block's table `table` to page `index` of
        /// the chunk `copy`, writable.
        pub(super) fn set_page(&mut self, table: u64, index: u64, copy: u64) {
            // SAFETY: `table` is a split table of this instance (`pages`, named by one of its page-directory entries) and `index` < 512 (masked by `entry`); the page it now maps is the block's copy chunk, already counted in `MAPPED`.
            unsafe {
                write_volatile(
                    entry(table, index),
                    (copy + (index & 511) * PAGE_SIZE) | PTE_PRESENT | PTE_WRITE | PTE_USER,
                )
            };
            crate::supervisor::flush_tlb();
        }

        pub(super) fn clear(&mut self, virt: u64) {
            self.unstale(virt);
            if let Some(e) = self.pd_entry(virt, None) {
                // SAFETY: `e` is the aligned page-directory entry, in the direct map,
                // of a user-half `virt` (checked by `unmap_block`) in a table page
                // only this instance edits; clearing it only unmaps the program's
                // block there.
                unsafe { write_volatile(e, 0) };
                crate::supervisor::flush_tlb();
            }
        }

        /// Gives the table page of a split block back to the pool (its entry
        /// cleared already).
        pub(super) fn free_table(&mut self, table: u64) {
            if let Some(i) = self.pages.iter().position(|p| *p == table) {
                self.pages.swap_remove(i);
                let mut pool = POOL.lock();
                if pool.free.try_reserve(1).is_ok() {
                    pool.free.push(table);
                }
            }
        }

        /// Gives the tables back to the pool whole (the root and the table pages
        /// linked under it, as they are, with `stale`: the blocks whose entries
        /// the next space must overwrite or clear), except split blocks' tables
        /// (`splits`), which go back one by one. No thread of this space runs any
        /// more, and a vCPU that still has the root loaded loads another (or
        /// this one, for its next space: a reload, which drops what the TLB
        /// held) before it runs one.
        pub(super) fn unlink(&mut self, splits: &[u64], stale: Vec<u64>) {
            if self.root == 0 {
                return;
            }
            let mut pool = POOL.lock();
            let mut pages = core::mem::take(&mut self.pages);
            let clear = stale.len() > STALE_MAX;
            let (mut back, stale) = if clear {
                (core::mem::take(&mut pages), Vec::new())
            } else {
                pages.retain(|p| !splits.contains(p));
                (splits.to_vec(), stale)
            };
            // (Giving pages back must not fail: a page that cannot be recorded is
            // lost, never handed out twice.)
            if pool.free.try_reserve(back.len()).is_ok() {
                pool.free.append(&mut back);
            }
            if pool.trees.try_reserve(1).is_ok() {
                let mut tables = PageTables::with_root(self.root);
                (tables.pages, tables.stale, tables.key) = (pages, stale, self.key);
                pool.trees.push(Tree { tables, clear });
            }
            self.root = 0;
        }
    }
}

impl PageTables {
    /// Maps the 2 MiB block of the program's half at `virt` to `chunk`, writable or
    /// read-only, taking chunks for page-table pages from `chunks` as needed. A
    /// block mapped to the same chunk already only changes its rights (one store).
    pub fn map_block(
        &mut self,
        virt: u64,
        chunk: &Chunk,
        chunks: &mut ChunkAllocator,
        writable: bool,
    ) -> Result<(), MapError> {
        Self::check_block(virt)?;
        if self.root == 0 {
            return Err(MapError::BadAddress);
        }
        let new = Mapping::Block { phys: chunk.phys, writable };
        match self.mapped.get(&virt) {
            Some(Mapping::Block { phys, .. }) if *phys == chunk.phys => {}
            // (A block mapped again: the old mapping is released first.)
            _ => {
                self.unmap_block(virt);
                #[cfg(target_os = "none")]
                remember(chunk.phys);
            }
        }
        #[cfg(target_os = "none")]
        if let Err(e) = self.set(virt, chunk.phys, writable, chunks) {
            forget(chunk.phys);
            self.mapped.remove(&virt);
            return Err(e);
        }
        #[cfg(not(target_os = "none"))]
        let _ = chunks;
        self.mapped.insert(virt, new);
        Ok(())
    }

    /// Maps the block at `virt` page by page: page `i` to `copy`'s page `i`
    /// (writable) where bit `i` of `copied` is set, else to `base`'s (read-only).
    /// A fork's copy-on-write block once this space has written part of it.
    pub fn split_block(
        &mut self,
        virt: u64,
        base: &Chunk,
        copy: &Chunk,
        copied: &[u64; 8],
        chunks: &mut ChunkAllocator,
    ) -> Result<(), MapError> {
        Self::check_block(virt)?;
        if self.root == 0 {
            return Err(MapError::BadAddress);
        }
        self.unmap_block_keeping_entry(virt);
        #[cfg(target_os = "none")]
        let table = {
            remember(base.phys);
            remember(copy.phys);
            match self.set_split(virt, base.phys, copy.phys, copied, chunks) {
                Ok(t) => t,
                Err(e) => {
                    self.clear(virt);
                    forget(base.phys);
                    forget(copy.phys);
                    return Err(e);
                }
            }
        };
        #[cfg(not(target_os = "none"))]
        let table = {
            let _ = (copied, chunks);
            0
        };
        self.mapped.insert(virt, Mapping::Split { base: base.phys, copy: copy.phys, table });
        Ok(())
    }

    /// Maps page `virt` (4 KiB aligned) of a split block to its copy, writable:
    /// the page was copied there. Nothing if the block is not split.
    pub fn map_copied_page(&mut self, virt: u64) {
        let block = virt & !(HUGE_PAGE_SIZE - 1);
        let Some(Mapping::Split { copy, table, .. }) = self.mapped.get(&block).copied() else { return };
        #[cfg(target_os = "none")]
        self.set_page(table, (virt - block) >> 12, copy);
        #[cfg(not(target_os = "none"))]
        let _ = (copy, table);
    }

    fn check_block(virt: u64) -> Result<(), MapError> {
        if !virt.is_multiple_of(HUGE_PAGE_SIZE) || virt >= onering_abi::layout::USER_END {
            return Err(MapError::BadAddress);
        }
        Ok(())
    }

    /// Forgets the mapping of the block at `virt` (its chunks' counts, a split
    /// table) but leaves its entry for the caller to overwrite in one store.
    fn unmap_block_keeping_entry(&mut self, virt: u64) {
        let Some(m) = self.mapped.remove(&virt) else { return };
        #[cfg(target_os = "none")]
        {
            if let Mapping::Split { table, .. } = m {
                // The entry still names the table: it is cleared before the table
                // goes back to the pool.
                self.clear(virt);
                self.free_table(table);
            }
            m.chunks().for_each(forget);
        }
        #[cfg(not(target_os = "none"))]
        let _ = m;
    }

    /// Removes the mapping of the block at `virt` (if it is one of the program's).
    pub fn unmap_block(&mut self, virt: u64) {
        if !self.mapped.contains_key(&virt) {
            return;
        }
        #[cfg(target_os = "none")]
        self.clear(virt);
        self.unmap_block_keeping_entry(virt);
    }

    /// The space ends: every block is unmapped (its chunk's count dropped), the
    /// user half unlinked from the root, and the table pages and the root go back
    /// to the pool. Nothing is mapped afterwards, and nothing can be.
    pub fn release(&mut self) {
        let mapped = core::mem::take(&mut self.mapped);
        #[cfg(target_os = "none")]
        {
            let splits: Vec<u64> = mapped
                .values()
                .filter_map(|m| match m {
                    Mapping::Split { table, .. } => Some(*table),
                    Mapping::Block { .. } => None,
                })
                .collect();
            let mut stale = core::mem::take(&mut self.stale);
            stale.extend(mapped.keys().copied());
            self.unlink(&splits, stale);
            mapped.values().flat_map(Mapping::chunks).for_each(forget);
        }
        #[cfg(not(target_os = "none"))]
        {
            drop(mapped);
            self.root = 0;
        }
    }
}

/// One mapping of chunk `phys` more.
#[cfg(target_os = "none")]
fn remember(phys: u64) {
    *MAPPED.lock().entry(phys).or_insert(0) += 1;
}

/// One mapping of chunk `phys` fewer.
#[cfg(target_os = "none")]
fn forget(phys: u64) {
    let mut m = MAPPED.lock();
    if let Some(n) = m.get_mut(&phys) {
        *n -= 1;
        if *n == 0 {
            m.remove(&phys);
        }
    }
}

/// Host tests: a page-table editor that changes nothing (its root is made up).
#[cfg(not(target_os = "none"))]
pub fn host_page_tables() -> PageTables {
    PageTables::with_root(onering_abi::layout::BOOT_PT_PHYS)
}

#[cfg(not(target_os = "none"))]
impl PageTables {
    /// Host tests: another editor that changes nothing.
    pub fn new_space_for(_: &mut ChunkAllocator, _key: u64) -> Result<PageTables, MapError> {
        Ok(host_page_tables())
    }

    /// Host tests: nothing to clear.
    pub fn settle(&mut self) {}

    /// Host tests: nothing to clear.
    pub fn settle_range(&mut self, _start: u64, _end: u64) {}
}

/// The boot-time chunks the VMM placed (program image, stack), by virtual block
/// address: the kernel adopts them into the address space.
pub type BootBlocks = Vec<(u64, Chunk)>;

/// The blocks the VMM mapped before boot (`maps`), recorded in the page tables
/// `pt` as mapped: each must be a 2 MiB aligned block of the program's half backed
/// by a 2 MiB aligned chunk below `free_start` (RAM the allocator never hands out).
#[cfg(target_os = "none")]
pub(crate) fn boot_blocks(maps: &[onering_abi::UserMapping], free_start: u64, pt: &mut PageTables) -> BootBlocks {
    let mut out = Vec::new();
    for m in maps {
        let ok = m.virt.is_multiple_of(HUGE_PAGE_SIZE)
            && m.phys.is_multiple_of(HUGE_PAGE_SIZE)
            && m.size.is_multiple_of(HUGE_PAGE_SIZE)
            && crate::user::in_user_half(m.virt, m.size)
            && m.phys.checked_add(m.size).is_some_and(|end| end <= free_start);
        assert!(
            ok,
            "boot mapping {:#x} -> {:#x} ({:#x} bytes) is not a set of user blocks below the free memory",
            m.virt, m.phys, m.size
        );
        for off in (0..m.size).step_by(HUGE_PAGE_SIZE as usize) {
            let (virt, phys) = (m.virt + off, m.phys + off);
            pt.mapped.insert(virt, Mapping::Block { phys, writable: true });
            remember(phys);
            out.push((virt, Chunk { phys }));
        }
    }
    out
}

/// Stack memory for tasks: arch keeps the chunks it cuts kernel stacks from for
/// the kernel's life (the token is consumed; the memory is never freed).
pub(crate) fn keep(chunk: Chunk) -> u64 {
    assert_unmapped(chunk.phys);
    chunk.phys
}

/// How many user mappings each mapped chunk has (guest-physical address -> count).
#[cfg(target_os = "none")]
static MAPPED: spin::Mutex<alloc::collections::BTreeMap<u64, u32>> =
    spin::Mutex::new(alloc::collections::BTreeMap::new());

/// A chunk the program can still reach must not become free or kernel memory.
fn assert_unmapped(phys: u64) {
    #[cfg(target_os = "none")]
    assert!(!MAPPED.lock().contains_key(&phys), "chunk {phys:#x} released while the program can still reach it");
    #[cfg(not(target_os = "none"))]
    let _ = phys;
}

#[cfg(test)]
mod tests {
    use super::*;
    const M: u64 = HUGE_PAGE_SIZE;

    #[test]
    fn the_warm_pool_counts_touched_free_chunks() {
        let mut a = ChunkAllocator::new();
        a.add_range(0, 600 * M);
        assert_eq!(a.warm_pool(), WARM_POOL);
        assert!(a.wants_warming() && a.any_cold() && a.warm_free() == 0);
        let first = a.alloc().unwrap();
        assert_eq!(first.phys(), 0);
        // Warming takes the next cold chunk out, and it comes back warm.
        let c = a.take_cold().unwrap();
        assert_eq!((c.phys(), a.free_chunks()), (M, 598));
        a.free(c);
        assert_eq!(a.warm_free(), 1);
        // The program gets the warm chunk first.
        assert_eq!(a.alloc().unwrap().phys(), M);
        assert_eq!(a.warm_free(), 0);
        // Up to the pool's size, then no more warming.
        for _ in 0..WARM_POOL {
            let c = a.take_cold().unwrap();
            a.free(c);
        }
        assert_eq!(a.warm_free(), WARM_POOL);
        assert!(!a.wants_warming() && a.take_cold().is_none() && a.any_cold());
        // A chunk the program gave back is warm too.
        a.free(first);
        assert_eq!(a.warm_free(), WARM_POOL + 1);
    }

    #[test]
    fn a_small_vm_keeps_a_small_warm_pool() {
        let mut a = ChunkAllocator::new();
        a.add_range(0, 21 * M); // what `--mem 64M` leaves free after boot
        assert_eq!(a.warm_pool(), 0);
        assert!(!a.wants_warming() && a.take_cold().is_none() && a.any_cold());
        a.add_range(64 * M, 128 * M); // 85 chunks in all
        assert_eq!(a.warm_pool(), 2);
        let c = a.take_cold().unwrap();
        a.free(c);
        assert!(a.wants_warming());
    }

    #[test]
    fn allocates_lowest_and_reuses() {
        let mut a = ChunkAllocator::new();
        a.add_range(M + 5, 4 * M + 7); // rounds to [2M, 4M): 2 chunks
        a.add_range(10 * M, 11 * M);
        assert_eq!(a.free_chunks(), 3);
        let c2 = a.alloc().unwrap();
        let c3 = a.alloc().unwrap();
        let c10 = a.alloc().unwrap();
        assert_eq!((c2.phys(), c3.phys(), c10.phys()), (2 * M, 3 * M, 10 * M));
        assert_eq!(a.alloc(), None);
        a.free(c3);
        a.free(Chunk { phys: 77 * M }); // not this allocator's: ignored
        assert_eq!(a.free_chunks(), 1);
        assert_eq!(a.alloc().map(|c| c.phys()), Some(3 * M));
    }

    #[test]
    fn many_chunks_cross_words() {
        let mut a = ChunkAllocator::new();
        a.add_range(0, 130 * M);
        for i in 0..130 {
            assert_eq!(a.alloc().map(|c| c.phys()), Some(i * M));
        }
        assert_eq!(a.alloc(), None);
    }

    #[test]
    fn runs_of_consecutive_chunks() {
        let mut a = ChunkAllocator::new();
        a.add_range(0, 4 * M);
        a.add_range(10 * M, 80 * M);
        let c0 = a.alloc().unwrap();
        let _c1 = a.alloc().unwrap();
        a.free(c0); // [0] free, [1] used, [2, 4) free
        let run = a.alloc_run(3).unwrap(); // not in the first range: 10..13
        assert_eq!(run.iter().map(|c| c.phys() / M).collect::<Vec<_>>(), [10, 11, 12]);
        let run = a.alloc_run(2).unwrap();
        assert_eq!(run.iter().map(|c| c.phys() / M).collect::<Vec<_>>(), [2, 3]);
        // Across bitmap words, up to the end of the range, and no further.
        let big = a.alloc_run(67).unwrap();
        assert_eq!((big[0].phys() / M, big[66].phys() / M), (13, 79));
        assert_eq!(a.alloc_run(2), None);
        assert_eq!(a.free_chunks(), 1);
        assert_eq!(a.alloc_run(1).map(|r| r[0].phys()), Some(0));
    }

    #[test]
    fn only_user_blocks_can_be_mapped() {
        let mut a = ChunkAllocator::new();
        a.add_range(0, 4 * M);
        let c = a.alloc().unwrap();
        let mut pt = host_page_tables();
        assert_eq!(pt.map_block(0x1000, &c, &mut a, true), Err(MapError::BadAddress));
        assert_eq!(pt.map_block(onering_abi::layout::USER_END, &c, &mut a, true), Err(MapError::BadAddress));
        assert_eq!(pt.map_block(0x4000_0000, &c, &mut a, true), Ok(()));
    }
}
