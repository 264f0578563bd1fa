//! The program's address space: VMAs, their backing by 2 MiB chunks, `brk`, `mmap`
//! and `munmap`, and the checks behind every user-memory access.
//!
//! Memory is mapped eagerly when a mapping is made, in whole 2 MiB blocks: the first
//! mapping that touches a block backs it with a zeroed chunk and one page-directory
//! entry; later mappings inside the block cost nothing; the block is released when the
//! last mapping in it goes. No page faults and no 4 KiB page tables, which are what
//! cost microseconds on our hypervisor. `PROT_NONE` mappings (reservations) get no
//! backing, so touching them faults as on Linux. Page-table writes go through the
//! [`Mmu`] trait, so this logic runs in host unit tests with a fake.

use super::chunks::ChunkAllocator;
use super::vma::{Vma, VmaKind, VmaSet, PROT_EXEC, PROT_READ, PROT_WRITE};
use crate::errno::Errno;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use onering_abi::layout::{align_down, align_up, HUGE_PAGE_SIZE, PAGE_SIZE, USER_END};

/// Page-table operations on the live address space.
pub trait Mmu {
    /// Maps the 2 MiB block at `virt` to the chunk at `phys`; may take chunks for
    /// page-table pages from `chunks`.
    fn map_block(&mut self, virt: u64, phys: u64, chunks: &mut ChunkAllocator) -> Result<(), Errno>;
    /// Removes the mapping of the 2 MiB block at `virt`.
    fn unmap_block(&mut self, virt: u64);
    /// Zeroes the mapped user range `[virt, virt + len)`.
    fn zero(&mut self, virt: u64, len: u64);
}

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

#[derive(Debug)]
pub struct AddressSpace {
    pub vmas: VmaSet,
    /// Backed 2 MiB blocks: virtual block address -> chunk.
    blocks: BTreeMap<u64, u64>,
    pub chunks: ChunkAllocator,
    brk_start: u64,
    brk: u64,
    mmap_bottom: u64,
    mmap_top: u64,
}

impl AddressSpace {
    pub fn new(chunks: ChunkAllocator, brk_start: u64, mmap_bottom: u64, mmap_top: u64) -> Self {
        let brk_start = align_up(brk_start, PAGE_SIZE);
        Self { vmas: VmaSet::new(), blocks: BTreeMap::new(), chunks, brk_start, brk: brk_start, mmap_bottom, mmap_top }
    }

    /// Records a range the VMM mapped before boot: `size` bytes at `virt` backed by
    /// contiguous chunks at `phys` (all 2 MiB aligned), holding VMA `vma`.
    pub fn adopt(&mut self, virt: u64, size: u64, phys: u64, vma: Vma) {
        for off in (0..size).step_by(HUGE_PAGE_SIZE as usize) {
            self.blocks.insert(virt + off, phys + off);
        }
        self.vmas.insert(vma);
    }

    /// Backs every block of `[start, end)`; on failure nothing new stays backed.
    /// Work is bounded by memory, not by the size of the range: a range with more
    /// unbacked blocks than there are free chunks fails at once.
    fn back(&mut self, start: u64, end: u64, mmu: &mut impl Mmu) -> Result<(), Errno> {
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
                Some(phys) => {
                    mmu.map_block(b, phys, &mut self.chunks).map(|_| phys).inspect_err(|_| self.chunks.free(phys))
                }
                None => Err(Errno::ENOMEM),
            };
            match mapped {
                Ok(phys) => {
                    self.blocks.insert(b, phys);
                    added.push(b);
                }
                Err(e) => {
                    // Page-table pages may have used up the chunks: undo this call.
                    for b in added {
                        if let Some(phys) = self.blocks.remove(&b) {
                            mmu.unmap_block(b);
                            self.chunks.free(phys); // untouched: still zero
                        }
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Releases the backed blocks of `[start, end)` that no VMA uses any more.
    fn release_unused(&mut self, start: u64, end: u64, mmu: &mut impl Mmu) {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        let candidates: Vec<u64> = self.blocks.range(lo..hi).map(|(b, _)| *b).collect();
        for b in candidates {
            if self.vmas.intersects(b, b + HUGE_PAGE_SIZE) {
                continue;
            }
            if let Some(phys) = self.blocks.remove(&b) {
                mmu.unmap_block(b);
                self.chunks.free(phys);
            }
        }
    }

    /// Zeroes the backed parts of `[start, end)`.
    fn zero_backed(&self, start: u64, end: u64, mmu: &mut impl Mmu) {
        let (lo, hi) = (align_down(start, HUGE_PAGE_SIZE), align_up(end, HUGE_PAGE_SIZE));
        for (b, _) in self.blocks.range(lo..hi) {
            let s = start.max(*b);
            let e = end.min(b + HUGE_PAGE_SIZE);
            mmu.zero(s, e - s);
        }
    }

    /// Removes `[start, end)` from the address space (page aligned), zeroing what it
    /// held, whatever its recorded protection (the memory underneath is always
    /// writable), so that free chunks stay zero.
    fn remove(&mut self, start: u64, end: u64, mmu: &mut impl Mmu) {
        for v in self.vmas.remove_range(start, end) {
            self.zero_backed(v.start, v.end, mmu);
        }
        self.release_unused(start, end, mmu);
    }

    /// Fails with ENOMEM when `more` further VMAs would exceed [`MAX_MAP_COUNT`].
    fn room_for(&self, more: usize) -> Result<(), Errno> {
        if self.vmas.len() + more > MAX_MAP_COUNT {
            Err(Errno::ENOMEM)
        } else {
            Ok(())
        }
    }

    /// `brk(2)`: returns the new break, or the old one when it cannot move.
    pub fn brk(&mut self, want: u64, mmu: &mut impl Mmu) -> u64 {
        if want < self.brk_start || want >= USER_END {
            return self.brk;
        }
        let old_end = align_up(self.brk, PAGE_SIZE);
        let new_end = align_up(want, PAGE_SIZE);
        if new_end > old_end {
            if self.room_for(1).is_err()
                || self.vmas.intersects(old_end, new_end)
                || self.back(old_end, new_end, mmu).is_err()
            {
                return self.brk;
            }
            self.vmas.insert(Vma { start: old_end, end: new_end, prot: PROT_READ | PROT_WRITE, kind: VmaKind::Brk });
        } else if new_end < old_end {
            if self.room_for(1).is_err() {
                return self.brk;
            }
            self.remove(new_end, old_end, mmu);
        }
        self.brk = want;
        self.brk
    }

    /// `mmap(2)` of anonymous memory; returns the address.
    pub fn mmap_anon(&mut self, addr: u64, len: u64, prot: u32, flags: u32, mmu: &mut impl Mmu) -> Result<u64, Errno> {
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
                self.remove(addr, addr + len, mmu);
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
        let end = start + len;
        if prot != 0 {
            self.back(start, end, mmu)?;
        }
        self.vmas.insert(Vma { start, end, prot, kind: VmaKind::Anon });
        Ok(start)
    }

    /// `munmap(2)`.
    pub fn munmap(&mut self, addr: u64, len: u64, mmu: &mut impl Mmu) -> Result<(), Errno> {
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
        self.remove(addr, end, mmu);
        Ok(())
    }

    /// `mprotect(2)`: records the protection. Memory stays readable and writable
    /// underneath (2 MiB pages cannot carry per-page rights), except that making a
    /// reservation accessible backs it.
    pub fn mprotect(&mut self, addr: u64, len: u64, prot: u32, mmu: &mut impl Mmu) -> Result<(), Errno> {
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
        self.room_for(2)?;
        if prot != 0 {
            self.back(addr, end, mmu)?;
        }
        for v in self.vmas.remove_range(addr, end) {
            self.vmas.insert(Vma { prot, ..v });
        }
        Ok(())
    }

    /// Bytes of guest memory the address space can draw on (used and free chunks).
    pub fn total_bytes(&self) -> u64 {
        (self.blocks.len() + self.chunks.free_chunks()) as u64 * HUGE_PAGE_SIZE
    }

    /// `madvise(MADV_DONTNEED)`: the range reads as zeros afterwards.
    pub fn discard(&mut self, addr: u64, len: u64, mmu: &mut impl Mmu) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let end =
            addr.checked_add(len).map(|e| align_up(e, PAGE_SIZE)).filter(|e| *e <= USER_END).ok_or(Errno::EINVAL)?;
        if !self.vmas.covers(addr, end) {
            return Err(Errno::ENOMEM);
        }
        let pieces: Vec<(u64, u64)> = self
            .vmas
            .overlapping(addr, end)
            .filter(|v| v.prot != 0)
            .map(|v| (v.start.max(addr), v.end.min(end)))
            .collect();
        for (s, e) in pieces {
            self.zero_backed(s, e, mmu);
        }
        Ok(())
    }

    /// `mremap(2)`: grows or shrinks a mapping in place when it can, else moves it
    /// (with MREMAP_MAYMOVE) through `copy(from, to, len)`.
    pub fn mremap(
        &mut self,
        old: u64,
        old_len: u64,
        new_len: u64,
        may_move: bool,
        mmu: &mut impl Mmu,
        copy: impl FnOnce(u64, u64, u64),
    ) -> Result<u64, Errno> {
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
                self.munmap(old + new_len, old_len - new_len, mmu)?;
            }
            return Ok(old);
        }
        let grow_end = old.checked_add(new_len).filter(|e| *e <= USER_END);
        if let Some(ge) = grow_end {
            if !self.vmas.intersects(old_end, ge) {
                self.room_for(1)?;
                if vma.prot != 0 {
                    self.back(old_end, ge, mmu)?;
                }
                self.vmas.insert(Vma { start: old_end, end: ge, ..vma });
                return Ok(old);
            }
        }
        if !may_move {
            return Err(Errno::ENOMEM);
        }
        let flags = map_flags::PRIVATE | map_flags::ANONYMOUS;
        let new = self.mmap_anon(0, new_len, vma.prot, flags, mmu)?;
        if vma.prot != 0 {
            copy(old, new, old_len);
        }
        self.munmap(old, old_len, mmu)?;
        Ok(new)
    }

    /// Checks that the program may access `[addr, addr + len)`: every byte lies in a
    /// mapping that allows it. The kernel calls this before touching user memory, so
    /// a bad pointer becomes EFAULT instead of a fault in the kernel.
    pub fn check(&self, addr: u64, len: u64, write: bool) -> Result<(), Errno> {
        if len == 0 {
            return Ok(());
        }
        let end = addr.checked_add(len).filter(|e| *e <= USER_END).ok_or(Errno::EFAULT)?;
        let need = if write { PROT_WRITE } else { PROT_READ };
        let mut at = addr;
        for v in self.vmas.overlapping(addr, end) {
            if v.start > at || v.prot & need == 0 {
                return Err(Errno::EFAULT);
            }
            at = v.end;
            if at >= end {
                return Ok(());
            }
        }
        Err(Errno::EFAULT)
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
    }

    impl Mmu for FakeMmu {
        fn map_block(&mut self, virt: u64, phys: u64, _: &mut ChunkAllocator) -> Result<(), Errno> {
            assert!(self.mapped.insert(virt, phys).is_none(), "block mapped twice");
            Ok(())
        }
        fn unmap_block(&mut self, virt: u64) {
            assert!(self.mapped.remove(&virt).is_some(), "unmapping an unmapped block");
        }
        fn zero(&mut self, virt: u64, len: u64) {
            self.zeroed.push((virt, len));
        }
    }

    fn space(chunks: u64) -> AddressSpace {
        let mut c = ChunkAllocator::new();
        c.add_range(0x4000_0000, 0x4000_0000 + chunks * M);
        AddressSpace::new(c, 0x60_1234, 0x1000_0000, 0x2000_0000)
    }

    const RW: u32 = PROT_READ | PROT_WRITE;
    const ANON: u32 = map_flags::PRIVATE | map_flags::ANONYMOUS;

    #[test]
    fn small_mmaps_share_a_block() {
        let (mut s, mut m) = (space(8), FakeMmu::default());
        let a = s.mmap_anon(0, 0x1000, RW, ANON, &mut m).unwrap();
        let b = s.mmap_anon(0, 0x3000, RW, ANON, &mut m).unwrap();
        assert_eq!(a, 0x2000_0000 - 0x1000);
        assert_eq!(b, a - 0x3000);
        assert_eq!(m.mapped.len(), 1);
        s.check(b, 0x4000, true).unwrap();
        assert_eq!(s.check(b - 1, 2, false), Err(Errno::EFAULT));
        s.munmap(a, 0x1000, &mut m).unwrap();
        assert_eq!(m.mapped.len(), 1, "block still used by b");
        assert_eq!(m.zeroed, [(a, 0x1000)]);
        s.munmap(b, 0x3000, &mut m).unwrap();
        assert!(m.mapped.is_empty());
        assert_eq!(s.chunks.free_chunks(), 8);
    }

    #[test]
    fn large_mmap_is_block_aligned_and_out_of_memory_fails_cleanly() {
        let (mut s, mut m) = (space(4), FakeMmu::default());
        let a = s.mmap_anon(0, 3 * M, RW, ANON, &mut m).unwrap();
        assert_eq!(a % M, 0);
        assert_eq!(m.mapped.len(), 3);
        assert_eq!(s.mmap_anon(0, 2 * M, RW, ANON, &mut m), Err(Errno::ENOMEM));
        assert_eq!(m.mapped.len(), 3);
        // A reservation needs no memory.
        let r = s.mmap_anon(0, 64 * M, 0, ANON | map_flags::NORESERVE, &mut m).unwrap();
        assert_eq!(s.check(r, 1, false), Err(Errno::EFAULT));
        // Committing part of it with MAP_FIXED backs just that part.
        s.mmap_anon(r + M, M, RW, ANON | map_flags::FIXED, &mut m).unwrap();
        assert_eq!(m.mapped.len(), 4);
        s.check(r + M, M, true).unwrap();
    }

    #[test]
    fn fixed_replaces_and_noreplace_refuses() {
        let (mut s, mut m) = (space(8), FakeMmu::default());
        let a = s.mmap_anon(0x3000_0000, 0x4000, RW, ANON | map_flags::FIXED, &mut m).unwrap();
        assert_eq!(a, 0x3000_0000);
        assert_eq!(s.mmap_anon(a + 0x1000, 0x1000, RW, ANON | map_flags::FIXED_NOREPLACE, &mut m), Err(Errno::EEXIST));
        s.mmap_anon(a + 0x1000, 0x1000, PROT_READ, ANON | map_flags::FIXED, &mut m).unwrap();
        assert_eq!(s.check(a + 0x1000, 1, true), Err(Errno::EFAULT));
        s.check(a, 0x4000, false).unwrap();
        assert_eq!(s.vmas.iter().count(), 3);
    }

    #[test]
    fn mprotect_records_and_backs_reservations() {
        let (mut s, mut m) = (space(8), FakeMmu::default());
        let a = s.mmap_anon(0, 4 * M, 0, ANON, &mut m).unwrap();
        assert!(m.mapped.is_empty());
        s.mprotect(a + M, M, RW, &mut m).unwrap();
        assert_eq!(m.mapped.len(), 1);
        s.check(a + M, M, true).unwrap();
        s.mprotect(a + M, 0x1000, PROT_READ, &mut m).unwrap();
        assert_eq!(s.check(a + M, 1, true), Err(Errno::EFAULT));
        s.check(a + M, 1, false).unwrap();
        assert_eq!(s.vmas.iter().count(), 4);
        assert_eq!(s.mprotect(a + 0x1001, 1, RW, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.mprotect(a, 1, 0x100, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.mprotect(0x1000, 0x1000, RW, &mut m), Err(Errno::ENOMEM));
        assert_eq!(s.mprotect(a, 0, RW, &mut m), Ok(()));
    }

    #[test]
    fn freed_memory_is_zeroed_whatever_its_protection() {
        let (mut s, mut m) = (space(8), FakeMmu::default());
        let a = s.mmap_anon(0, 0x4000, RW, ANON, &mut m).unwrap();
        s.mprotect(a, 0x4000, 0, &mut m).unwrap();
        s.munmap(a, 0x4000, &mut m).unwrap();
        assert_eq!(m.zeroed, [(a, 0x4000)]);
        assert!(m.mapped.is_empty());
    }

    #[test]
    fn huge_ranges_fail_fast_and_leave_nothing_behind() {
        let (mut s, mut m) = (space(4), FakeMmu::default());
        assert_eq!(s.mmap_anon(0, 1 << 46, PROT_READ, ANON, &mut m), Err(Errno::ENOMEM));
        let r = s.mmap_anon(1 << 44, 1 << 45, 0, ANON | map_flags::FIXED, &mut m).unwrap();
        assert_eq!(s.mprotect(r, 1 << 45, RW, &mut m), Err(Errno::ENOMEM));
        s.munmap(0x1000, USER_END - 0x1000, &mut m).unwrap();
        assert_eq!(s.vmas.iter().count(), 0);
        assert_eq!(s.chunks.free_chunks(), 4);
    }

    #[test]
    fn failed_backing_is_undone() {
        // A mapper that runs out of page-table memory on the third block.
        struct Failing(FakeMmu, usize);
        impl Mmu for Failing {
            fn map_block(&mut self, v: u64, p: u64, c: &mut ChunkAllocator) -> Result<(), Errno> {
                self.1 += 1;
                if self.1 == 3 {
                    return Err(Errno::ENOMEM);
                }
                self.0.map_block(v, p, c)
            }
            fn unmap_block(&mut self, v: u64) {
                self.0.unmap_block(v)
            }
            fn zero(&mut self, v: u64, l: u64) {
                self.0.zero(v, l)
            }
        }
        let mut s = space(8);
        let mut m = Failing(FakeMmu::default(), 0);
        assert_eq!(s.mmap_anon(0, 4 * M, RW, ANON, &mut m), Err(Errno::ENOMEM));
        assert!(m.0.mapped.is_empty());
        assert_eq!(s.chunks.free_chunks(), 8);
        assert_eq!(s.vmas.iter().count(), 0);
    }

    #[test]
    fn the_number_of_mappings_is_bounded() {
        let (mut s, mut m) = (space(8), FakeMmu::default());
        let r = s.mmap_anon(0, 2 * MAX_MAP_COUNT as u64 * 0x2000, 0, ANON, &mut m).unwrap();
        let mut n = 0;
        let err = loop {
            match s.munmap(r + n * 0x2000, 0x1000, &mut m) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err, Errno::ENOMEM);
        assert_eq!(s.vmas.iter().count(), MAX_MAP_COUNT);
    }

    #[test]
    fn bad_arguments() {
        let (mut s, mut m) = (space(2), FakeMmu::default());
        assert_eq!(s.mmap_anon(0, 0, RW, ANON, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(0, 1, RW, map_flags::ANONYMOUS, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(0, 1, 0x80, ANON, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(0, u64::MAX, RW, ANON, &mut m), Err(Errno::ENOMEM));
        assert_eq!(s.mmap_anon(0x1001, 1, RW, ANON | map_flags::FIXED, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.mmap_anon(USER_END - 0x1000, 0x2000, RW, ANON | map_flags::FIXED, &mut m), Err(Errno::ENOMEM));
        assert_eq!(s.munmap(0x1001, 1, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.munmap(0x1000, 0, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.munmap(0x1000, u64::MAX, &mut m), Err(Errno::EINVAL));
        assert_eq!(s.check(u64::MAX - 1, 4, false), Err(Errno::EFAULT));
        assert_eq!(s.check(0, 1, false), Err(Errno::EFAULT));
    }

    #[test]
    fn brk_grows_shrinks_and_stops_at_mappings() {
        let (mut s, mut m) = (space(8), FakeMmu::default());
        // The image ends at 0x601234; its block [6M, 8M) was mapped by the VMM.
        s.adopt(
            0x40_0000,
            2 * M,
            0x4000_0000,
            Vma { start: 0x40_0000, end: 0x60_2000, prot: RW, kind: VmaKind::Image },
        );
        s.chunks = {
            let mut c = ChunkAllocator::new();
            c.add_range(0x4000_0000 + 2 * M, 0x4000_0000 + 8 * M);
            c
        };
        assert_eq!(s.brk(0, &mut m), 0x60_2000);
        assert_eq!(s.brk(0x60_3000, &mut m), 0x60_3000);
        assert!(m.mapped.is_empty(), "inside the image's block: no new mapping");
        assert_eq!(s.brk(0x90_0000, &mut m), 0x90_0000);
        assert_eq!(m.mapped.len(), 1);
        s.check(0x60_2000, 0x90_0000 - 0x60_2000, true).unwrap();
        assert_eq!(s.brk(0x60_4000, &mut m), 0x60_4000);
        assert!(m.mapped.is_empty());
        assert_eq!(s.check(0x60_4000, 1, false), Err(Errno::EFAULT));
        s.mmap_anon(0xa0_0000, 0x1000, RW, ANON | map_flags::FIXED, &mut m).unwrap();
        assert_eq!(s.brk(0xb0_0000, &mut m), 0x60_4000, "blocked by a mapping");
        assert_eq!(s.brk(0x10, &mut m), 0x60_4000, "below the start");
    }
}
