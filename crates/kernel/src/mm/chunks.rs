//! Allocator of 2 MiB chunks of guest-physical memory, one bit per chunk.
//!
//! User memory is backed only in whole 2 MiB chunks mapped by 2 MiB page-table
//! entries: under the software hypervisor every page-table edit and every first touch
//! of a 4 KiB mapping costs microseconds, a 2 MiB mapping few. Invariant: a free chunk
//! is all zeros (guest RAM starts zeroed; whoever frees a chunk zeroes what it used).

use alloc::vec;
use alloc::vec::Vec;
use onering_abi::layout::HUGE_PAGE_SIZE;

#[derive(Debug)]
struct Range {
    base: u64,
    chunks: usize,
    /// Bit set = chunk in use.
    used: Vec<u64>,
}

#[derive(Debug, Default)]
pub struct ChunkAllocator {
    ranges: Vec<Range>,
    free: usize,
}

impl ChunkAllocator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `[start, end)` (rounded inwards to 2 MiB) to the free pool.
    pub fn add_range(&mut self, start: u64, end: u64) {
        let base = (start + HUGE_PAGE_SIZE - 1) & !(HUGE_PAGE_SIZE - 1);
        let end = end & !(HUGE_PAGE_SIZE - 1);
        if end <= base {
            return;
        }
        let chunks = ((end - base) / HUGE_PAGE_SIZE) as usize;
        self.ranges.push(Range { base, chunks, used: vec![0; chunks.div_ceil(64)] });
        self.free += chunks;
    }

    pub fn free_chunks(&self) -> usize {
        self.free
    }

    /// A zeroed chunk's physical address, lowest first.
    pub fn alloc(&mut self) -> Option<u64> {
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
                return Some(r.base + idx as u64 * HUGE_PAGE_SIZE);
            }
        }
        None
    }

    /// Returns a chunk (which the caller has zeroed). Unknown or free chunks are ignored.
    pub fn free(&mut self, phys: u64) {
        for r in &mut self.ranges {
            let end = r.base + r.chunks as u64 * HUGE_PAGE_SIZE;
            if phys >= r.base && phys < end && (phys - r.base).is_multiple_of(HUGE_PAGE_SIZE) {
                let idx = ((phys - r.base) / HUGE_PAGE_SIZE) as usize;
                let (w, bit) = (idx / 64, idx % 64);
                if r.used[w] & (1 << bit) != 0 {
                    r.used[w] &= !(1 << bit);
                    self.free += 1;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const M: u64 = HUGE_PAGE_SIZE;

    #[test]
    fn allocates_lowest_and_reuses() {
        let mut a = ChunkAllocator::new();
        a.add_range(M + 5, 4 * M + 7); // rounds to [2M, 4M): 2 chunks
        a.add_range(10 * M, 11 * M);
        assert_eq!(a.free_chunks(), 3);
        assert_eq!(a.alloc(), Some(2 * M));
        assert_eq!(a.alloc(), Some(3 * M));
        assert_eq!(a.alloc(), Some(10 * M));
        assert_eq!(a.alloc(), None);
        a.free(3 * M);
        a.free(3 * M); // double free is ignored
        a.free(77 * M); // unknown is ignored
        assert_eq!(a.free_chunks(), 1);
        assert_eq!(a.alloc(), Some(3 * M));
    }

    #[test]
    fn many_chunks_cross_words() {
        let mut a = ChunkAllocator::new();
        a.add_range(0, 130 * M);
        for i in 0..130 {
            assert_eq!(a.alloc(), Some(i * M));
        }
        assert_eq!(a.alloc(), None);
    }
}
