//! The kernel heap: first-fit list allocators (`linked_list_allocator`) over
//! regions of guest memory, used through the direct map. The first region is the
//! one the VMM reserved (`BootInfo::heap_phys`, `heap_size`); more 2 MiB chunks
//! join when the heap runs low, so kernel objects the program makes (threads,
//! sockets and their buffers) are bounded by `--mem`, not by a fixed heap.
//!
//! The allocator itself never takes chunks: it may run under any lock, the memory
//! lock included. Growing happens at points that know which locks they hold
//! ([`room`], given a way to get a chunk). Calls that create lasting objects ask
//! for room first and fail with an errno when there is none; the reserve that
//! `room` keeps is for the allocations every call makes along the way, which
//! cannot fail gracefully. Growing structures use `try_reserve` where a program
//! can make them large. Chunks that joined stay in the heap (their memory is
//! reused by later kernel objects, not given back to the program).

use crate::mm::Chunk;
use onering_abi::layout::HUGE_PAGE_SIZE;

/// Most regions: the VMM's, and up to this many 2 MiB chunks minus one (1 GiB).
const MAX_REGIONS: usize = 512;

#[cfg(target_os = "none")]
mod global {
    use super::MAX_REGIONS;
    use core::alloc::{GlobalAlloc, Layout};
    use core::ptr::NonNull;
    use linked_list_allocator::Heap;

    pub(super) struct Heaps {
        pub regions: [Heap; MAX_REGIONS],
        pub n: usize,
        /// The region the last allocation came from: tried first.
        hint: usize,
    }

    pub(super) struct Locked(pub spin::Mutex<Heaps>);

    #[global_allocator]
    pub(super) static HEAP: Locked =
        Locked(spin::Mutex::new(Heaps { regions: [const { Heap::empty() }; MAX_REGIONS], n: 0, hint: 0 }));

    impl Heaps {
        /// Adds a region (false if there is no room for another).
        ///
        /// # Safety
        /// `[bottom, bottom + size)` is guest memory given to the heap for good,
        /// mapped (through the direct map) and used by nothing else.
        pub unsafe fn add(&mut self, bottom: *mut u8, size: usize) -> bool {
            if self.n == MAX_REGIONS {
                return false;
            }
            // SAFETY: region `n` is still empty, and the memory is the heap's
            // alone (this function's contract).
            unsafe { self.regions[self.n].init(bottom, size) };
            self.n += 1;
            true
        }

        pub fn full(&self) -> bool {
            self.n == MAX_REGIONS
        }
    }

    // SAFETY: every block handed out lies inside one region and is handed out
    // once until freed (linked_list_allocator's contract); `dealloc` returns a
    // block to the region whose range contains it, the one it came from.
    unsafe impl GlobalAlloc for Locked {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let mut h = self.0.lock();
            let Heaps { regions, n, hint } = &mut *h;
            if let Ok(p) = regions[*hint].allocate_first_fit(layout) {
                return p.as_ptr();
            }
            for (i, r) in regions[..*n].iter_mut().enumerate() {
                if let Ok(p) = r.allocate_first_fit(layout) {
                    *hint = i;
                    return p.as_ptr();
                }
            }
            core::ptr::null_mut()
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let mut h = self.0.lock();
            let n = h.n;
            if let Some(r) = h.regions[..n].iter_mut().find(|r| r.bottom() <= ptr && ptr < r.top()) {
                if let Some(p) = NonNull::new(ptr) {
                    // SAFETY: `ptr` came from this region's `allocate_first_fit`
                    // with this layout (GlobalAlloc's contract on the caller).
                    unsafe { r.deallocate(p, layout) };
                }
            }
        }
    }
}

#[cfg(target_os = "none")]
pub(crate) fn init(info: &onering_abi::BootInfo) {
    let bottom = onering_abi::layout::direct(info.heap_phys) as *mut u8;
    // SAFETY: the VMM reserved [heap_phys, heap_phys + heap_size) for the heap
    // alone, and the direct map maps it; this runs once, before any allocation.
    unsafe { global::HEAP.0.lock().add(bottom, info.heap_size as usize) };
}

/// Bytes of heap in use and free, over all regions.
pub fn usage() -> (usize, usize) {
    #[cfg(target_os = "none")]
    {
        let h = global::HEAP.0.lock();
        h.regions[..h.n].iter().fold((0, 0), |(u, f), r| (u + r.used(), f + r.free()))
    }
    #[cfg(not(target_os = "none"))]
    (0, 0)
}

/// The free bytes `room` keeps in reserve: a sixteenth of the heap, at least
/// 512 KiB.
fn reserve(total: usize) -> usize {
    (total / 16).max(512 << 10)
}

/// Whether the heap is down to its reserve.
pub fn low() -> bool {
    let (used, free) = usage();
    let total = used + free;
    total != 0 && free < reserve(total)
}

/// Makes sure the heap has `more` bytes beyond its reserve, adding chunks from
/// `chunk` as needed; false if it cannot (the caller fails with EAGAIN, ENOMEM,
/// ENOBUFS...). `chunk` must not need a lock the caller holds.
pub fn room(more: usize, mut chunk: impl FnMut() -> Option<Chunk>) -> bool {
    loop {
        let (used, free) = usage();
        let total = used + free;
        if total == 0 || free >= reserve(total) + more {
            return true;
        }
        // Larger than a chunk: only the VMM's region could hold it.
        if more > HUGE_PAGE_SIZE as usize / 2 {
            return false;
        }
        if full() {
            return false;
        }
        match chunk() {
            Some(c) => grow(c),
            None => return false,
        }
    }
}

/// The way to get a chunk for [`ensure`], registered by the kernel at boot.
static CHUNKS: spin::Once<fn() -> Option<Chunk>> = spin::Once::new();

/// Registers how [`ensure`] gets chunks (it takes the memory lock).
pub fn set_chunk_source(f: fn() -> Option<Chunk>) {
    CHUNKS.call_once(|| f);
}

/// [`room`] with the registered chunk source: never call it with the memory
/// lock held.
pub fn ensure(more: usize) -> bool {
    match CHUNKS.get() {
        Some(f) => room(more, f),
        None => room(more, || None),
    }
}

fn full() -> bool {
    #[cfg(target_os = "none")]
    return global::HEAP.0.lock().full();
    #[cfg(not(target_os = "none"))]
    true
}

/// Adds chunk `c` to the heap for good (the caller checked there is room for
/// another region).
fn grow(c: Chunk) {
    // The heap owns the chunk from now on: it never goes back to the allocator.
    let phys = c.phys();
    #[cfg(target_os = "none")]
    {
        let bottom = onering_abi::layout::direct(phys) as *mut u8;
        // SAFETY: the chunk came out of the chunk allocator, so no one else uses
        // it, and it is forgotten, so it never goes back; all RAM is in the direct
        // map.
        unsafe { global::HEAP.0.lock().add(bottom, HUGE_PAGE_SIZE as usize) };
    }
    #[cfg(not(target_os = "none"))]
    let _ = phys;
}
