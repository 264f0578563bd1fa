//! The program's address space: VMAs, their backing by 2 MiB chunks, `brk`, `mmap`
//! and `munmap`, and the checks behind every user-memory access.
//!
//! Memory is backed in whole 2 MiB blocks: a block gets a zeroed chunk and one
//! page-directory entry; other mappings inside the block cost nothing more; the block
//! is released when the last mapping in it goes. No 4 KiB page tables, which are what
//! cost microseconds on our hypervisor. Small mappings (under [`LAZY_MIN`]) are backed
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
//! write back; the filling and writing, which copy user memory and so run without
//! the lock, are `filemap`'s. File mappings are lazy: backed as they are filled,
//! so that what lies past the end of the file is backed only when touched.
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

use super::filemap::{FileMap, FilePiece};
use super::vma::{Vma, VmaKind, VmaSet, PROT_EXEC, PROT_READ, PROT_WRITE};
use crate::errno::Errno;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use onering_abi::layout::{align_down, align_up, HUGE_PAGE_SIZE, PAGE_SIZE, USER_END};
use onering_arch::mm::{Chunk, ChunkAllocator};

/// Page-table operations on the live address space, and the contents of the
/// chunks behind it.
pub trait Mmu {
    /// Maps the 2 MiB block at `virt` to `chunk`; may take chunks for page-table
    /// pages from `chunks`.
    fn map_block(&mut self, virt: u64, chunk: &Chunk, chunks: &mut ChunkAllocator) -> Result<(), Errno>;
    /// Removes the mapping of the 2 MiB block at `virt`.
    fn unmap_block(&mut self, virt: u64);
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

/// Which blocks are backed, by which chunks, and the page tables that say so.
#[derive(Debug)]
struct Backing<M> {
    /// Backed 2 MiB blocks: virtual block address -> chunk.
    blocks: BTreeMap<u64, Chunk>,
    chunks: ChunkAllocator,
    mmu: M,
}

impl<M: Mmu> Backing<M> {
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
                let before = self.chunks.free_chunks();
                self.chunks.reclaim(self.unbacked(start, end) as usize + 1);
                if self.chunks.free_chunks() > before {
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
        let have = self.blocks.range(lo..hi).count() as u64;
        if (hi - lo) / HUGE_PAGE_SIZE - have > self.chunks.free_chunks() as u64 {
            return Err(Errno::ENOMEM);
        }
        let mut added = Vec::new();
        for b in (lo..hi).step_by(HUGE_PAGE_SIZE as usize) {
            if self.blocks.contains_key(&b) {
                continue;
            }
            let mapped = match self.chunks.alloc() {
                Some(c) => match self.mmu.map_block(b, &c, &mut self.chunks) {
                    Ok(()) => Ok(c),
                    Err(e) => {
                        self.chunks.free(c);
                        Err(e)
                    }
                },
                None => Err(Errno::ENOMEM),
            };
            match mapped {
                Ok(c) => {
                    self.blocks.insert(b, c);
                    added.push(b);
                }
                Err(e) => {
                    // Page-table pages may have used up the chunks: undo this call.
                    for b in added {
                        if let Some(c) = self.blocks.remove(&b) {
                            self.mmu.unmap_block(b);
                            self.chunks.free(c); // untouched: still zero
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
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
                self.chunks.free(c);
            }
        }
    }

    /// Zeroes the backed parts of `[start, end)`.
    fn zero_backed(&mut self, start: u64, end: u64) {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        for (b, c) in self.blocks.range_mut(lo..hi) {
            let s = start.max(*b);
            let e = end.min(b + HUGE_PAGE_SIZE);
            self.mmu.zero(s, e - s, c, s - b);
        }
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
            if tb == fb {
                if let Some(c) = self.blocks.get_mut(&fb) {
                    self.mmu.copy(s, t, n, c, s - fb, None, t - tb);
                }
            } else if let Some(mut dst) = self.blocks.remove(&tb) {
                if let Some(src) = self.blocks.get_mut(&fb) {
                    self.mmu.copy(s, t, n, src, s - fb, Some(&mut dst), t - tb);
                }
                self.blocks.insert(tb, dst);
            }
            done += n;
        }
    }

    /// Blocks of `[start, end)` not backed yet.
    fn unbacked(&self, start: u64, end: u64) -> u64 {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        (hi - lo) / HUGE_PAGE_SIZE - self.blocks.range(lo..hi).count() as u64
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
}

#[derive(Debug)]
pub struct AddressSpace<M> {
    pub vmas: VmaSet,
    backing: RefCell<Backing<M>>,
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
    pub fn new(chunks: ChunkAllocator, mmu: M, brk_start: u64, mmap_bottom: u64, mmap_top: u64) -> Self {
        let brk_start = align_up(brk_start, PAGE_SIZE);
        Self {
            vmas: VmaSet::new(),
            backing: RefCell::new(Backing { blocks: BTreeMap::new(), chunks, mmu }),
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

    /// The chunk allocator (thread kernel stacks come from it too).
    pub fn chunks(&mut self) -> &mut ChunkAllocator {
        &mut self.backing().chunks
    }

    /// The page-table editor.
    pub fn mmu(&mut self) -> &mut M {
        &mut self.backing().mmu
    }

    /// Bytes of guest memory not in use.
    pub fn free_bytes(&self) -> u64 {
        self.backing.borrow().chunks.free_chunks() as u64 * HUGE_PAGE_SIZE
    }

    /// Records blocks the VMM mapped before boot (virtual block address, chunk),
    /// and the VMAs they hold.
    pub fn adopt(&mut self, blocks: Vec<(u64, Chunk)>, vmas: &[Vma]) {
        for (virt, c) in blocks {
            self.backing().blocks.insert(virt, c);
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
            self.backing().back(start, end)?;
            return Ok(false);
        }
        let b = self.backing();
        if b.unbacked(start, end) > (b.blocks.len() + b.chunks.total_chunks()) as u64 {
            return Err(Errno::ENOMEM);
        }
        Ok(true)
    }

    /// Removes `[start, end)` from the address space (page aligned), zeroing what it
    /// held, whatever its recorded protection (the memory underneath is always
    /// writable), so that free chunks stay zero.
    fn remove(&mut self, start: u64, end: u64) {
        let mut gone = Vec::new();
        for v in self.vmas.remove_range(start, end) {
            self.backing.get_mut().zero_backed(v.start, v.end);
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

    /// The pieces of shared file mappings in `[start, end)`: what to write back.
    pub fn shared_in(&self, start: u64, end: u64) -> Vec<FilePiece> {
        let pieces = self.vmas.overlapping(start, end);
        pieces
            .filter_map(|v| {
                self.file_of(v).filter(|m| m.shared).map(|m| (m.clone(), v.start.max(start), v.end.min(end)))
            })
            .collect()
    }

    /// Fails with ENOMEM when `more` further VMAs would exceed [`MAX_MAP_COUNT`].
    fn room_for(&self, more: usize) -> Result<(), Errno> {
        let chunk = || self.backing.borrow_mut().chunks.alloc();
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
            if self.room_for(1).is_err()
                || self.vmas.intersects(old_end, new_end)
                || self.backing().back(old_end, new_end).is_err()
            {
                return self.brk;
            }
            self.vmas.insert(Vma {
                start: old_end,
                end: new_end,
                prot: PROT_READ | PROT_WRITE,
                kind: VmaKind::Brk,
                lazy: false,
            });
        } else if new_end < old_end {
            if self.room_for(1).is_err() {
                return self.brk;
            }
            self.remove(new_end, old_end);
        }
        self.brk = want;
        self.brk
    }

    /// `execve`: everything the program had mapped goes (file mappings' records to
    /// the orphans) and the break starts again at `brk_start`.
    pub fn clear(&mut self, brk_start: u64) {
        self.remove(0, USER_END);
        self.set_brk_start(brk_start);
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

    /// `mmap(2)` of anonymous memory; returns the address.
    pub fn mmap_anon(&mut self, addr: u64, len: u64, prot: u32, flags: u32) -> Result<u64, Errno> {
        let (start, end) = self.place(addr, len, prot, flags)?;
        self.add(start, end, prot, VmaKind::Anon)?;
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
        let lazy = match kind {
            VmaKind::File(_) => true,
            _ if prot != 0 => self.commit(start, end)?,
            _ => false,
        };
        self.vmas.insert(Vma { start, end, prot, kind, lazy });
        Ok(())
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
                self.remove(addr, addr + len);
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
        self.remove(addr, end);
        Ok(())
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
        let b = self.backing.borrow();
        (b.blocks.len() + b.chunks.free_chunks()) as u64 * HUGE_PAGE_SIZE
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
            self.backing().zero_backed(s, e);
            refill.extend(m.map(|m| (m, s, e)));
        }
        Ok(refill)
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
                let lazy = if vma.prot != 0 { self.commit(old_end, ge)? } else { false };
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
                if let Err(err) = self.backing().back(to, to + (e - s)) {
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
        self.check_for(addr, len, if write { PROT_WRITE } else { PROT_READ })
    }

    /// [`check`](Self::check) for the kernel's own accesses, which ignore the
    /// program's protections (filling and writing back file mappings): every byte
    /// mapped.
    pub fn check_mapped(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.check_for(addr, len, 0)
    }

    fn check_for(&self, addr: u64, len: u64, need: u32) -> Result<(), Errno> {
        if len == 0 {
            return Ok(());
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
                        self.backing.borrow_mut().back(addr, end)?;
                        if one {
                            self.hot.set(block);
                        }
                    }
                }
                return Ok(());
            }
        }
        Err(Errno::EFAULT)
    }

    /// The program touched `addr` and faulted: backs its block if a mapping allows
    /// access there and the block is not backed yet.
    pub fn fault_in(&self, addr: u64) -> Fault {
        let Some(v) = self.vmas.find(addr).filter(|v| v.prot != 0) else {
            return Fault::Segv;
        };
        let mut b = self.backing.borrow_mut();
        let block = align_down(addr, HUGE_PAGE_SIZE);
        if b.blocks.contains_key(&block) {
            return Fault::Backed;
        }
        if !v.lazy {
            return Fault::Segv;
        }
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
        mapped: BTreeMap<u64, u64>,
        zeroed: Vec<(u64, u64)>,
        copied: Vec<(u64, u64, u64)>,
    }

    impl Mmu for FakeMmu {
        fn map_block(&mut self, virt: u64, chunk: &Chunk, _: &mut ChunkAllocator) -> Result<(), Errno> {
            assert!(self.mapped.insert(virt, chunk.phys()).is_none(), "block mapped twice");
            Ok(())
        }
        fn unmap_block(&mut self, virt: u64) {
            assert!(self.mapped.remove(&virt).is_some(), "unmapping an unmapped block");
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

    fn space(chunks: u64) -> Space {
        let mut c = ChunkAllocator::new();
        c.add_range(0x4000_0000, 0x4000_0000 + chunks * M);
        AddressSpace::new(c, FakeMmu::default(), 0x60_1234, 0x1000_0000, 0x2000_0000)
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
        assert_eq!(s.fault_in(big + M), Fault::Retry);
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
        assert_eq!(s.fault_in(a + M + 5), Fault::Retry);
        assert_eq!(s.fault_in(a + M + 9), Fault::Backed);
        s.check(b + 3 * M - 8, 16, true).unwrap();
        assert_eq!(s.mmu().mapped.keys().copied().collect::<Vec<_>>(), [b + 2 * M, b + 3 * M, a + M]);
        assert_eq!(s.fault_in(b - M), Fault::Segv, "below the mapping");
        // Memory runs out: the fourth touch backs the last chunk, the fifth cannot.
        assert_eq!(s.fault_in(a), Fault::Retry);
        assert_eq!(s.fault_in(a + 2 * M), Fault::OutOfMemory);
        assert_eq!(s.check(a + 2 * M, 1, false), Err(Errno::ENOMEM));
        // Unmapping gives the blocks back, zeroed.
        s.munmap(b, 4 * M).unwrap();
        assert_eq!(s.chunks().free_chunks(), 2);
        assert_eq!(s.fault_in(a + 2 * M), Fault::Retry);
        // A large reservation made accessible by mprotect is lazy too; so is growth.
        let r = s.mmap_anon(0, 8 * M, 0, ANON).unwrap();
        assert_eq!(s.mprotect(r, 8 * M, RW), Err(Errno::ENOMEM), "more than all memory");
        s.mprotect(r, 4 * M, RW).unwrap();
        assert_eq!(s.fault_in(r + 3 * M), Fault::Retry);
        assert_eq!(s.mremap(a, 4 * M, 6 * M, false), Ok(a));
        assert!(s.mmu().copied.is_empty(), "grown in place");

        assert_eq!(s.vmas.find(a + 5 * M).map(|v| v.lazy), Some(true));
        // A reservation is never backed.
        let n = s.mmap_anon(0, 8 * M, 0, ANON).unwrap();
        assert_eq!(s.fault_in(n), Fault::Segv);
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
            fn map_block(&mut self, v: u64, p: &Chunk, c: &mut ChunkAllocator) -> Result<(), Errno> {
                self.1 += 1;
                if self.1 == 3 {
                    return Err(Errno::ENOMEM);
                }
                self.0.map_block(v, p, c)
            }
            fn unmap_block(&mut self, v: u64) {
                self.0.unmap_block(v)
            }
            fn zero(&mut self, v: u64, l: u64, c: &mut Chunk, o: u64) {
                self.0.zero(v, l, c, o)
            }
            fn copy(&mut self, f: u64, t: u64, l: u64, s: &mut Chunk, so: u64, d: Option<&mut Chunk>, dof: u64) {
                self.0.copy(f, t, l, s, so, d, dof)
            }
        }
        let mut c = ChunkAllocator::new();
        c.add_range(0x4000_0000, 0x4000_0000 + 8 * M);
        let mut s = AddressSpace::new(c, Failing(FakeMmu::default(), 0), 0x60_1234, 0x1000_0000, 0x2000_0000);
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
    fn file_mappings_keep_their_records_while_a_piece_is_left() {
        let mut s = space(4);
        // Lazy, not backed, and not bounded by memory (backed as filled).
        let a = map_file(&mut s, 64 * M, RW, true, true);
        assert!(s.mmu().mapped.is_empty());
        let b = map_file(&mut s, 0x3000, PROT_READ, false, true);
        assert_eq!(s.shared_in(0, USER_END).iter().map(|p| (p.1, p.2)).collect::<Vec<_>>(), [(a, a + 64 * M)]);
        // Split by munmap and mprotect: one record still, found from every piece.
        s.munmap(a + M, 0x1000).unwrap();
        s.mprotect(a + 2 * M, M, PROT_READ).unwrap();
        assert!(Arc::ptr_eq(&s.file_at(a).unwrap(), &s.file_at(a + 3 * M).unwrap()));
        assert_eq!(s.shared_in(a, a + 4 * M).len(), 4);
        assert!(s.take_orphans().is_empty());
        s.munmap(a, 64 * M).unwrap();
        assert_eq!(s.take_orphans().len(), 1, "the last piece went");
        assert!(s.file_at(b).is_some());
        // A mapping of a file opened read-only cannot be made writable if shared.
        let c = map_file(&mut s, 0x2000, PROT_READ, true, false);
        assert_eq!(s.mprotect(c, 0x2000, RW), Err(Errno::EACCES));
        s.mprotect(b, 0x3000, RW).unwrap();
        // MADV_DONTNEED: private pieces are given back to fill, shared ones kept.
        assert_eq!(s.discard(b, 0x3000).unwrap().len(), 1);
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
        let (a, b) = (s.chunks().alloc().unwrap(), s.chunks().alloc().unwrap());
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
}
