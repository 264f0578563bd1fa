//! The kernel heap: a first-fit list allocator over the range the VMM reserved
//! (`BootInfo::heap_phys`, `heap_size`), used through the direct map. Growing
//! structures use `try_reserve` where a program can make them large, so that an
//! exhausted heap is ENOMEM or ENOSPC for the program, not a kernel panic.

#[cfg(target_os = "none")]
#[global_allocator]
static HEAP: linked_list_allocator::LockedHeap = linked_list_allocator::LockedHeap::empty();

#[cfg(target_os = "none")]
pub(crate) fn init(info: &onering_abi::BootInfo) {
    // SAFETY: the VMM reserved [heap_phys, heap_phys + heap_size) for the heap alone
    // and it is mapped through the direct map; this runs once, on CPU 0, before
    // any allocation.
    unsafe {
        HEAP.lock().init(onering_abi::layout::direct(info.heap_phys) as *mut u8, info.heap_size as usize);
    }
}

/// Whether the heap is down to its reserve: calls that would create lasting kernel
/// objects (threads, descriptors, mappings) refuse then (EAGAIN, ENFILE, ENOMEM),
/// so that the allocations every call makes along the way, which cannot fail
/// gracefully, always find memory. The reserve is a sixteenth of the heap, at
/// least 256 KiB.
pub fn low() -> bool {
    let (used, free) = usage();
    let total = used + free;
    total != 0 && free < (total / 16).max(256 << 10)
}

/// Bytes of heap in use and free.
pub fn usage() -> (usize, usize) {
    #[cfg(target_os = "none")]
    {
        let h = HEAP.lock();
        (h.used(), h.free())
    }
    #[cfg(not(target_os = "none"))]
    (0, 0)
}
