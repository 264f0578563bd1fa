//! Guest-physical memory in 2 MiB chunks, and the page tables that map them into
//! the program's half of the address space.
//!
//! User memory is backed only in whole 2 MiB chunks mapped by 2 MiB page-directory
//! entries: under the software hypervisor every page-table edit and every first
//! touch of a 4 KiB mapping costs microseconds, a 2 MiB mapping few.
//!
//! A [`Chunk`] is an owned 2 MiB piece of guest RAM: it cannot be copied or made
//! up (only a [`ChunkAllocator`] built by `boot` hands chunks out, in the guest), so
//! whoever holds it may write it through the direct map. Invariant: a free chunk is
//! all zeros (guest RAM starts zeroed; whoever frees a chunk zeroes what it used).
//!
//! [`PageTables`] edits the live tables the VMM built (root at `BOOT_PT_PHYS`),
//! only ever entries of the lower (user) half, and only to map chunks; the kernel's
//! own mappings (image, direct map, MMIO) are the VMM's and never change. There is
//! one instance (`boot` claims it). A chunk mapped into the program's half is
//! memory the program writes at will: until it is unmapped it cannot be freed
//! (and so handed out again) or kept as kernel memory; both check (`MAPPED`).
//!
//! Warm chunks (seed B-5): guest RAM the VM never touched costs a host fault per
//! 4 KiB page at its first touch (~9 µs here, 5 ms a chunk: measured, design.md),
//! and a free chunk is kept zeroed already, so what a pool of ready pages saves here
//! is that first touch. The allocator knows which chunks were ever touched (each
//! range's chunks below its `warm` mark); an idle vCPU takes the next cold one
//! ([`ChunkAllocator::take_cold`]), touches its pages ([`Chunk::touch`]) and gives it
//! back warm, while fewer than [`WARM_POOL`] warm chunks are free. Chunks go out
//! lowest first, so the program gets the warm ones first.
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
use onering_abi::layout::HUGE_PAGE_SIZE;

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

    /// Copies `len` bytes at `from_off` to `to_off` within the chunk (both clamped;
    /// overlapping ranges copy as `rep movsb` does, front to back).
    pub fn copy_within(&mut self, from_off: u64, to_off: u64, len: u64) {
        let (from_off, l1) = clamp(from_off, len);
        let (to_off, l2) = clamp(to_off, len);
        let len = l1.min(l2);
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

/// How many warm free chunks idle vCPUs keep ready (32 MiB).
pub const WARM_POOL: usize = 16;

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

    /// Whether an idle vCPU should warm a chunk: fewer than [`WARM_POOL`] warm
    /// chunks are free, and a cold one is left.
    pub fn wants_warming(&self) -> bool {
        self.warm_free < WARM_POOL && self.ranges.iter().any(|r| r.warm < r.chunks)
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

/// The live page tables' user half. One instance exists (`claim`, by `boot`).
#[derive(Debug)]
pub struct PageTables {
    /// Page-table pages not used yet: the rest of the last chunk taken for them.
    pool_next: u64,
    pool_end: u64,
    /// Chunks holding page-table pages (kept for the kernel's life).
    held: Vec<Chunk>,
    /// What each mapped block maps: virtual block address -> chunk address.
    mapped: alloc::collections::BTreeMap<u64, u64>,
}

impl PageTables {
    const fn new() -> Self {
        PageTables { pool_next: 0, pool_end: 0, held: Vec::new(), mapped: alloc::collections::BTreeMap::new() }
    }

    /// The one editor of the live tables (None the second time).
    #[cfg(target_os = "none")]
    pub(crate) fn claim() -> Option<PageTables> {
        static CLAIMED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
        (!CLAIMED.swap(true, core::sync::atomic::Ordering::AcqRel)).then(PageTables::new)
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
    const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

    /// Entry `index` of the table page at `table_phys`, through the direct map.
    fn entry(table_phys: u64, index: u64) -> *mut u64 {
        (direct(table_phys) + (index & 511) * 8) as *mut u64
    }

    impl PageTables {
        /// A zeroed page for a new table.
        fn alloc_table(&mut self, chunks: &mut ChunkAllocator) -> Result<u64, MapError> {
            if self.pool_next == self.pool_end {
                let c = chunks.alloc().ok_or(MapError::NoMemory)?;
                self.pool_next = c.phys();
                self.pool_end = c.phys() + HUGE_PAGE_SIZE;
                self.held.push(c);
            }
            let t = self.pool_next;
            self.pool_next += PAGE_SIZE;
            // SAFETY: `t` is a page of a chunk this structure owns (`held`), reached
            // through the direct map, not yet part of any table. Free chunks should
            // be zero, but a stray byte here would become a mapping: clear it.
            unsafe { core::ptr::write_bytes(direct(t) as *mut u8, 0, PAGE_SIZE as usize) };
            Ok(t)
        }

        /// The table entry `index` of `table` points at, created when absent.
        fn next_level(&mut self, table: u64, index: u64, chunks: &mut ChunkAllocator) -> Result<u64, MapError> {
            let e = entry(table, index);
            // SAFETY: `table` is a page-table page in RAM (the VMM's root, or one read
            // from a present entry written by the VMM or by `alloc_table`); its
            // entries are aligned u64s in the direct map. Only this structure (one
            // instance, `claim`, used through `&mut`) edits user-half entries, so the
            // entry cannot change under us.
            let v = unsafe { read_volatile(e) };
            if v & PTE_PRESENT != 0 {
                return Ok(v & PTE_ADDR);
            }
            let t = self.alloc_table(chunks)?;
            // SAFETY: `e` is an aligned entry, in the direct map, of a page-table page
            // in RAM that only this one instance edits (as for the read above); the
            // new entry points at a zeroed table page we own (`held`), so the
            // translation it adds maps nothing yet.
            unsafe { write_volatile(e, t | PTE_PRESENT | PTE_WRITE | PTE_USER) };
            Ok(t)
        }

        /// The page-directory entry of `virt`, creating the levels above if `chunks`
        /// is given; None if absent (or out of memory).
        fn pd_entry(&mut self, virt: u64, chunks: Option<&mut ChunkAllocator>) -> Option<*mut u64> {
            let idx = |shift: u64| (virt >> shift) & 511;
            match chunks {
                Some(c) => {
                    let pdpt = self.next_level(layout::BOOT_PT_PHYS, idx(39), c).ok()?;
                    let pd = self.next_level(pdpt, idx(30), c).ok()?;
                    Some(entry(pd, idx(21)))
                }
                None => {
                    let mut table = layout::BOOT_PT_PHYS;
                    for shift in [39, 30] {
                        // SAFETY: `table` is the VMM's root or a table page named by a
                        // present entry (the VMM's or `alloc_table`'s), a page of RAM
                        // whose aligned entries the direct map reaches; a read.
                        let v = unsafe { read_volatile(entry(table, idx(shift))) };
                        if v & PTE_PRESENT == 0 {
                            return None;
                        }
                        table = v & PTE_ADDR;
                    }
                    Some(entry(table, idx(21)))
                }
            }
        }

        pub(super) fn set(&mut self, virt: u64, chunk: &Chunk, chunks: &mut ChunkAllocator) -> Result<(), MapError> {
            let e = self.pd_entry(virt, Some(chunks)).ok_or(MapError::NoMemory)?;
            // SAFETY: `e` is the aligned page-directory entry, in the direct map, of a
            // user-half `virt` (checked by `map_block`) in a table page only this
            // instance edits; the entry maps `chunk`, which `MAPPED` now keeps from
            // being freed or kept as kernel memory until it is unmapped.
            unsafe { write_volatile(e, chunk.phys() | PTE_PRESENT | PTE_WRITE | PTE_USER | PTE_HUGE) };
            Ok(())
        }

        pub(super) fn clear(&mut self, virt: u64) {
            if let Some(e) = self.pd_entry(virt, None) {
                // SAFETY: `e` is the aligned page-directory entry, in the direct map,
                // of a user-half `virt` (checked by `unmap_block`) in a table page
                // only this instance edits; clearing it only unmaps the program's
                // block there.
                unsafe { write_volatile(e, 0) };
                crate::supervisor::flush_tlb();
            }
        }
    }
}

impl PageTables {
    /// Maps the 2 MiB block of the program's half at `virt` to `chunk`, taking
    /// chunks for page-table pages from `chunks` as needed.
    pub fn map_block(&mut self, virt: u64, chunk: &Chunk, chunks: &mut ChunkAllocator) -> Result<(), MapError> {
        if !virt.is_multiple_of(HUGE_PAGE_SIZE) || virt >= onering_abi::layout::USER_END {
            return Err(MapError::BadAddress);
        }
        // (A block mapped again: the old chunk is released first.)
        self.unmap_block(virt);
        #[cfg(target_os = "none")]
        {
            *MAPPED.lock().entry(chunk.phys).or_insert(0) += 1;
            if let Err(e) = self.set(virt, chunk, chunks) {
                self.forget(chunk.phys);
                return Err(e);
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = chunks;
        self.mapped.insert(virt, chunk.phys);
        Ok(())
    }

    /// Removes the mapping of the block at `virt` (if it is one of the program's).
    pub fn unmap_block(&mut self, virt: u64) {
        let Some(phys) = self.mapped.remove(&virt) else { return };
        #[cfg(target_os = "none")]
        {
            self.clear(virt);
            self.forget(phys);
        }
        #[cfg(not(target_os = "none"))]
        let _ = phys;
    }

    /// One mapping of chunk `phys` fewer.
    #[cfg(target_os = "none")]
    fn forget(&self, phys: u64) {
        let mut m = MAPPED.lock();
        if let Some(n) = m.get_mut(&phys) {
            *n -= 1;
            if *n == 0 {
                m.remove(&phys);
            }
        }
    }
}

/// Host tests: a page-table editor that changes nothing.
#[cfg(not(target_os = "none"))]
pub fn host_page_tables() -> PageTables {
    PageTables::new()
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
            pt.mapped.insert(virt, phys);
            *MAPPED.lock().entry(phys).or_insert(0) += 1;
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
        a.add_range(0, 40 * M);
        assert!(a.wants_warming() && a.any_cold() && a.warm_free() == 0);
        let first = a.alloc().unwrap();
        assert_eq!(first.phys(), 0);
        // Warming takes the next cold chunk out, and it comes back warm.
        let c = a.take_cold().unwrap();
        assert_eq!((c.phys(), a.free_chunks()), (M, 38));
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
        let mut pt = PageTables::new();
        assert_eq!(pt.map_block(0x1000, &c, &mut a), Err(MapError::BadAddress));
        assert_eq!(pt.map_block(onering_abi::layout::USER_END, &c, &mut a), Err(MapError::BadAddress));
        assert_eq!(pt.map_block(0x4000_0000, &c, &mut a), Ok(()));
    }
}
