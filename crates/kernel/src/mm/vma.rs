//! The set of user mappings (VMAs) of the address space: sorted, non-overlapping,
//! page-granular ranges. Pure bookkeeping; backing memory is `space.rs`'s business,
//! and what a file mapping maps is `filemap.rs`'s.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// Protection bits, as in `mmap(2)`.
pub const PROT_READ: u32 = 1;
pub const PROT_WRITE: u32 = 2;
pub const PROT_EXEC: u32 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmaKind {
    /// The program's loaded segments.
    Image,
    /// The heap grown by `brk`.
    Brk,
    /// The main thread's stack.
    Stack,
    /// An anonymous `mmap`.
    Anon,
    /// A shared anonymous `mmap` (MAP_SHARED|MAP_ANONYMOUS): its blocks stay the
    /// same memory in a forked child.
    Shared,
    /// A file `mmap`: the address space's record number `n` (`space::FileMap`) says
    /// which file, where in it, and whether shared. Pieces of one mapping keep the
    /// number (and merge back when they touch again).
    File(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub prot: u32,
    pub kind: VmaKind,
    /// Backed block by block on first touch (so it may have unbacked blocks).
    pub lazy: bool,
}

#[derive(Default, Debug, Clone)]
pub struct VmaSet {
    /// Keyed by start address.
    map: BTreeMap<u64, Vma>,
}

impl VmaSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Vma> {
        self.map.values()
    }

    /// VMAs intersecting `[start, end)`, in address order.
    /// An empty or inverted range (`end <= start`) intersects nothing.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = &Vma> {
        // The VMA containing `start`, if any, starts below it: begin the scan there.
        let from = self.map.range(..=start).next_back().map(|(s, _)| *s).unwrap_or(start);
        // `from..end` with `from > end` would panic in the map: scan nothing then.
        self.map.range(from..end.max(from)).map(|(_, v)| v).filter(move |v| v.end > start && v.start < end)
    }

    pub fn intersects(&self, start: u64, end: u64) -> bool {
        self.overlapping(start, end).next().is_some()
    }

    /// The VMA containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Vma> {
        self.map.range(..=addr).next_back().map(|(_, v)| v).filter(|v| addr < v.end)
    }

    /// Adds a VMA (the range must be free), merging it with neighbours that touch it
    /// and have the same protection and kind (the result is lazy if either was).
    pub fn insert(&mut self, mut vma: Vma) {
        debug_assert!(vma.start < vma.end && !self.intersects(vma.start, vma.end));
        let same = |a: &Vma, b: &Vma| a.prot == b.prot && a.kind == b.kind;
        if let Some(prev) = self.map.range(..vma.start).next_back().map(|(_, v)| *v) {
            if prev.end == vma.start && same(&prev, &vma) {
                self.map.remove(&prev.start);
                vma.start = prev.start;
                vma.lazy |= prev.lazy;
            }
        }
        if let Some(next) = self.map.get(&vma.end).copied() {
            if same(&next, &vma) {
                self.map.remove(&next.start);
                vma.end = next.end;
                vma.lazy |= next.lazy;
            }
        }
        self.map.insert(vma.start, vma);
    }

    /// Removes `[start, end)` from every VMA, splitting those that straddle it.
    /// Returns the removed pieces.
    pub fn remove_range(&mut self, start: u64, end: u64) -> Vec<Vma> {
        let hit: Vec<Vma> = self.overlapping(start, end).copied().collect();
        let mut removed = Vec::with_capacity(hit.len());
        for v in hit {
            self.map.remove(&v.start);
            if v.start < start {
                self.map.insert(v.start, Vma { end: start, ..v });
            }
            if v.end > end {
                self.map.insert(end, Vma { start: end, ..v });
            }
            removed.push(Vma { start: v.start.max(start), end: v.end.min(end), ..v });
        }
        removed
    }

    /// Whether `[start, end)` is covered by VMAs without holes (an inverted range
    /// never is).
    pub fn covers(&self, start: u64, end: u64) -> bool {
        if end < start {
            return false;
        }
        let mut at = start;
        for v in self.overlapping(start, end) {
            if v.start > at {
                return false;
            }
            at = v.end;
            if at >= end {
                return true;
            }
        }
        at >= end
    }

    /// The highest free range of `len` bytes (`align`-aligned) inside `[bottom, top)`.
    pub fn find_free_top_down(&self, len: u64, align: u64, bottom: u64, top: u64) -> Option<u64> {
        let mut ceiling = top;
        let mut iter = self.map.range(..top).rev().peekable();
        loop {
            // The gap is [floor, ceiling) where floor is the end of the next VMA below.
            let floor = iter.peek().map(|(_, v)| v.end.max(bottom)).unwrap_or(bottom);
            if ceiling >= len {
                let start = (ceiling - len) & !(align - 1);
                if start >= floor && start + len <= ceiling && ceiling <= top {
                    return Some(start);
                }
            }
            match iter.next() {
                Some((_, v)) => {
                    ceiling = ceiling.min(v.start);
                    if ceiling <= bottom {
                        return None;
                    }
                }
                None => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(start: u64, end: u64) -> Vma {
        Vma { start, end, prot: PROT_READ | PROT_WRITE, kind: VmaKind::Anon, lazy: false }
    }

    #[test]
    fn remove_splits_and_reports() {
        let mut s = VmaSet::new();
        s.insert(anon(0x1000, 0x5000));
        s.insert(anon(0x6000, 0x8000));
        let removed = s.remove_range(0x2000, 0x7000);
        assert_eq!(removed, [anon(0x2000, 0x5000), anon(0x6000, 0x7000)]);
        let left: Vec<_> = s.iter().copied().collect();
        assert_eq!(left, [anon(0x1000, 0x2000), anon(0x7000, 0x8000)]);
    }

    #[test]
    fn covers_detects_holes() {
        let mut s = VmaSet::new();
        s.insert(anon(0x1000, 0x3000));
        s.insert(anon(0x3000, 0x4000));
        s.insert(anon(0x5000, 0x6000));
        assert!(s.covers(0x1000, 0x4000));
        assert!(s.covers(0x2fff, 0x3001));
        assert!(!s.covers(0x3000, 0x5001));
        assert!(!s.covers(0x0, 0x1001));
        assert!(s.find(0x5fff).is_some());
        assert!(s.find(0x6000).is_none());
    }

    #[test]
    fn free_range_top_down() {
        let mut s = VmaSet::new();
        assert_eq!(s.find_free_top_down(0x2000, 0x1000, 0x1000, 0x10000), Some(0xe000));
        s.insert(anon(0xe000, 0x10000));
        assert_eq!(s.find_free_top_down(0x2000, 0x1000, 0x1000, 0x10000), Some(0xc000));
        s.insert(anon(0x3000, 0xd000));
        assert_eq!(s.find_free_top_down(0x1000, 0x1000, 0x1000, 0x10000), Some(0xd000));
        assert_eq!(s.find_free_top_down(0x2000, 0x1000, 0x1000, 0x10000), Some(0x1000));
        assert_eq!(s.find_free_top_down(0x3000, 0x1000, 0x1000, 0x10000), None);
        assert_eq!(s.find_free_top_down(0x1000, 0x1000, 0x8000, 0x10000), Some(0xd000));
    }

    #[test]
    fn insert_merges_alike_neighbours() {
        let mut s = VmaSet::new();
        s.insert(anon(0x1000, 0x2000));
        s.insert(anon(0x3000, 0x4000));
        s.insert(anon(0x2000, 0x3000));
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), [anon(0x1000, 0x4000)]);
        s.insert(Vma { prot: PROT_READ, ..anon(0x4000, 0x5000) });
        assert_eq!(s.iter().count(), 2);
    }

    #[test]
    fn overlapping_finds_straddler() {
        let mut s = VmaSet::new();
        s.insert(anon(0x1000, 0x9000));
        assert_eq!(s.overlapping(0x4000, 0x5000).count(), 1);
        assert!(!s.intersects(0x9000, 0xa000));
    }
}
