//! The kernel heap: first-fit list allocators (`linked_list_allocator`) over
//! regions of guest memory, used through the direct map. The first region is the
//! one the VMM reserved (`BootInfo::heap_phys`, `heap_size`); more 2 MiB chunks
//! join when the heap runs low, so kernel objects the program makes (threads,
//! sockets and their buffers) are bounded by `--mem`, not by a fixed heap. A
//! block larger than half a chunk (a big table: smoltcp's socket storage, a
//! descriptor table of many thousands) gets a region of its own made of
//! consecutive chunks ([`ensure_block`]).
//!
//! The allocator itself never takes chunks: it may run under any lock, the memory
//! lock included. Growing happens at points that know which locks they hold
//! ([`room`], given a way to get a chunk). Calls that create lasting objects ask
//! for room first and fail with an errno when there is none; the reserve that
//! `room` keeps is for the allocations every call makes along the way, which
//! cannot fail gracefully. Growing structures use `try_reserve` where a program
//! can make them large. Chunks that joined stay in the heap while the program's
//! memory has chunks enough: their memory is reused by later kernel objects.
//!
//! Under memory pressure the heap gives memory back (`mm`'s reclaim): [`room`]
//! and [`ensure_block`], when no chunk is left, ask the kernel's reclaim function
//! to free heap memory (the page cache) and look again; and [`release`] takes the
//! regions that hold nothing any more (not the VMM's first; keeping the reserve
//! free) out of the heap, zeroes them and hands their chunks back to the chunk
//! allocator, for the program's memory. A released region's slot and its chunks'
//! entries in the owner table are free for the next region.
//!
//! Finding a block's region on free is a table lookup (the chunk a block lies in
//! names its region), so thousands of regions cost a free nothing; an allocation
//! tries the region the last one came from first.
//!
//! Small blocks (up to 2 KiB: packets' headers, queue nodes, tree nodes) come from
//! size classes in front of the lists: a free list per power of two, refilled a
//! slab at a time from the lists. Taking or returning one is a pointer swap, so
//! the heap's lock, which every vCPU takes, is held for a few instructions instead
//! of a first-fit walk. Blocks stay in their class once carved (the classes hold
//! at most what the program's peak needed of each size).

use crate::mm::Chunk;
use onering_abi::layout::HUGE_PAGE_SIZE;

/// Most regions: the VMM's, and up to this many runs of chunks minus one (2 GiB
/// of 2 MiB chunks).
const MAX_REGIONS: usize = 1024;
/// Chunk numbers (guest-physical address / 2 MiB) the region table covers: all
/// of guest RAM, which ends below MAX_RAM plus the MMIO hole.
const MAX_CHUNK_INDEX: usize =
    ((onering_abi::layout::MAX_RAM + onering_abi::layout::HIGH_RAM_START) / HUGE_PAGE_SIZE) as usize;

#[cfg(target_os = "none")]
mod global {
    use super::{MAX_CHUNK_INDEX, MAX_REGIONS};
    use core::alloc::{GlobalAlloc, Layout};
    use core::ptr::NonNull;
    use linked_list_allocator::Heap;
    use onering_abi::layout::{DIRECT_MAP_BASE, HUGE_PAGE_SIZE};

    /// Size classes: 16 B to 2 KiB, powers of two.
    const CLASSES: usize = 8;
    const MIN_CLASS: usize = 16;
    /// Bytes carved into blocks at once when a class is empty.
    const SLAB: usize = 16 * 1024;

    /// The class of a layout, if it has one: a block of the class's size is big
    /// enough and aligned enough (slabs are aligned to their class's size).
    fn class_of(layout: Layout) -> Option<usize> {
        let size = layout.size().max(layout.align()).max(MIN_CLASS).next_power_of_two();
        let c = (size.trailing_zeros() - MIN_CLASS.trailing_zeros()) as usize;
        (c < CLASSES).then_some(c)
    }

    /// No region owns this chunk (the table holds region + 1, so that it is all
    /// zeros at first, in .bss rather than the image).
    const NONE: u16 = 0;

    pub(super) struct Heaps {
        pub regions: [Heap; MAX_REGIONS],
        pub n: usize,
        /// The region the last allocation came from: tried first.
        hint: usize,
        /// For each chunk of guest RAM, the region made of it (regions added
        /// after the first are whole chunks), or NONE.
        owner: [u16; MAX_CHUNK_INDEX],
        /// Each size class's free blocks: the address of the first (0: none);
        /// each free block holds the address of the next.
        free: [usize; CLASSES],
    }

    pub(super) struct Locked(pub spin::Mutex<Heaps>);

    #[global_allocator]
    pub(super) static HEAP: Locked = Locked(spin::Mutex::new(Heaps {
        regions: [const { Heap::empty() }; MAX_REGIONS],
        n: 0,
        hint: 0,
        owner: [NONE; MAX_CHUNK_INDEX],
        free: [0; CLASSES],
    }));

    /// The chunk number of a direct-map address.
    fn chunk_index(p: *const u8) -> usize {
        ((p as u64).wrapping_sub(DIRECT_MAP_BASE) / HUGE_PAGE_SIZE) as usize
    }

    impl Heaps {
        /// Adds a region (false if there is no room for another).
        ///
        /// # Safety
        /// `[bottom, bottom + size)` is guest memory given to the heap for good,
        /// mapped (through the direct map) and used by nothing else.
        pub unsafe fn add(&mut self, bottom: *mut u8, size: usize) -> bool {
            // A slot a released region left, else the next one.
            let slot = match (1..self.n).find(|i| self.regions[*i].size() == 0) {
                Some(i) => i,
                None if self.n < MAX_REGIONS => self.n,
                None => return false,
            };
            // Region `slot` was never used, or was released and reset to `Heap::empty()`.
            // SAFETY: region `slot` is empty and the memory is the heap's alone (our contract).
            unsafe { self.regions[slot].init(bottom, size) };
            // Chunk-aligned regions (all but the VMM's) are found by the table.
            if slot > 0 {
                let first = chunk_index(bottom);
                let count = size.div_ceil(HUGE_PAGE_SIZE as usize);
                for i in first..(first + count).min(MAX_CHUNK_INDEX) {
                    self.owner[i] = slot as u16 + 1;
                }
            }
            if slot == self.n {
                self.n += 1;
            }
            true
        }

        pub fn full(&self) -> bool {
            self.n == MAX_REGIONS && (1..self.n).all(|i| self.regions[i].size() != 0)
        }

        /// Takes out a region that holds nothing (not the first, the VMM's) if
        /// the heap keeps its reserve free without it: the guest-physical address
        /// of its first chunk and how many chunks, which the caller now owns.
        pub fn take_empty(&mut self) -> Option<(u64, usize)> {
            let (mut used, mut free) = (0, 0);
            for r in &self.regions[..self.n] {
                used += r.used();
                free += r.free();
            }
            let total = used + free;
            let i = (1..self.n).find(|i| {
                let r = &self.regions[*i];
                let size = r.size();
                size != 0 && r.used() == 0 && free - size >= super::reserve(total - size)
            })?;
            let bottom = self.regions[i].bottom();
            let count = self.regions[i].size().div_ceil(HUGE_PAGE_SIZE as usize);
            let first = chunk_index(bottom);
            for c in first..(first + count).min(MAX_CHUNK_INDEX) {
                self.owner[c] = NONE;
            }
            self.regions[i] = Heap::empty();
            if self.hint == i {
                self.hint = 0;
            }
            Some(((bottom as u64).wrapping_sub(DIRECT_MAP_BASE), count))
        }

        /// A block from the lists, first fit (null if none fits).
        fn first_fit(&mut self, layout: Layout) -> *mut u8 {
            let Heaps { regions, n, hint, .. } = self;
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

        /// A block of class `c`: the first free one, or one of a new slab (null
        /// when the lists have no room for a slab or a block).
        fn take(&mut self, c: usize) -> *mut u8 {
            let size = MIN_CLASS << c;
            if self.free[c] == 0 {
                let Ok(slab) = Layout::from_size_align(SLAB, size) else {
                    return core::ptr::null_mut();
                };
                let p = self.first_fit(slab);
                if p.is_null() {
                    // No room for a slab: one block alone.
                    return Layout::from_size_align(size, size).map_or(core::ptr::null_mut(), |l| self.first_fit(l));
                }
                for i in (0..SLAB / size).rev() {
                    // SAFETY: the slab is ours alone and SLAB bytes long; block i
                    // lies inside it, aligned to `size` (>= 8), so its first word
                    // can hold the list's next address.
                    unsafe {
                        let b = p.add(i * size);
                        b.cast::<usize>().write(self.free[c]);
                        self.free[c] = b as usize;
                    }
                }
            }
            let b = self.free[c] as *mut u8;
            // SAFETY: a free block of the class, carved above or given back by
            // `give`; its first word holds the next free block's address.
            self.free[c] = unsafe { b.cast::<usize>().read() };
            b
        }

        /// Returns a block of class `c` to its list.
        ///
        /// # Safety
        /// `b` came from `take(c)` and is not used any more.
        unsafe fn give(&mut self, c: usize, b: *mut u8) {
            // SAFETY: the block is at least MIN_CLASS bytes, aligned, and ours now
            // (the caller's contract).
            unsafe { b.cast::<usize>().write(self.free[c]) };
            self.free[c] = b as usize;
        }

        /// The region holding `ptr`.
        fn region_of(&mut self, ptr: *mut u8) -> Option<&mut Heap> {
            let first = &self.regions[0];
            if self.n > 0 && first.bottom() <= ptr && ptr < first.top() {
                return Some(&mut self.regions[0]);
            }
            let r = *self.owner.get(chunk_index(ptr))?;
            if r == NONE {
                return None;
            }
            self.regions.get_mut(r as usize - 1)
        }
    }

    /// How far into a 2 MiB chunk of the heap's first region an allocation must
    /// reach for the chunk to be merged into a host huge page.
    const DEEP: u64 = 512 << 10;

    // SAFETY: every block handed out lies inside one region and is handed out
    // once until freed (linked_list_allocator's contract, and a class's list holds
    // each of its blocks once); the class of a layout is fixed, so `dealloc` gives
    // a block back to the class it was taken from, or to the region whose range
    // contains it, the one it came from (the owner table maps every chunk of a
    // region to it, and regions never overlap).
    unsafe impl GlobalAlloc for Locked {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let mut h = self.0.lock();
            let p = match class_of(layout) {
                Some(c) => h.take(c),
                None => h.first_fit(layout),
            };
            drop(h);
            // The heap's first region lies where the host backs RAM with small
            // pages: once it is used deep into a chunk (the page cache of the
            // libraries a program loads), that chunk gets a host huge page.
            let end = (p as u64).wrapping_add(layout.size() as u64);
            if !p.is_null() && end % onering_abi::layout::HUGE_PAGE_SIZE >= DEEP {
                crate::mm::prefer_huge(end.wrapping_sub(onering_abi::layout::DIRECT_MAP_BASE));
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let mut h = self.0.lock();
            if let Some(c) = class_of(layout) {
                // SAFETY: a block of this layout came from `take(c)` (alloc's
                // choice depends on the layout alone); the caller is done with it.
                unsafe { h.give(c, ptr) };
                return;
            }
            if let Some(r) = h.region_of(ptr) {
                if let Some(p) = NonNull::new(ptr) {
                    // SAFETY: `ptr` came from this region's `allocate_first_fit`
                    // with this layout (GlobalAlloc's contract on the caller).
                    unsafe { r.deallocate(p, layout) };
                }
            }
        }
    }

    /// Whether some region has a free block of `layout` now (allocated and freed
    /// at once).
    pub(super) fn has_block(layout: Layout) -> bool {
        // SAFETY: `alloc` is called with a valid non-zero-size layout (the caller
        // builds it from a size above half a chunk); a non-null block it returns is
        // used by nothing and given straight back to `dealloc` with the same layout,
        // as GlobalAlloc requires.
        unsafe {
            let p = HEAP.alloc(layout);
            if p.is_null() {
                return false;
            }
            HEAP.dealloc(p, layout);
        }
        true
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
/// `chunk` as needed, and when none is left asking the kernel to free heap memory
/// it can do without (`mm::reclaim`: the page cache); false if it cannot (the
/// caller fails with EAGAIN, ENOMEM, ENOBUFS...). `chunk` must not need a lock
/// the caller holds.
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
        let grown = !full() && chunk().map(grow).is_some();
        if !grown && crate::mm::reclaim((reserve(total) + more).saturating_sub(free)) == 0 {
            return false;
        }
    }
}

/// Gives the heap's regions that hold nothing back to the chunk allocator through
/// `free` (zeroed, as free chunks are), keeping the reserve free and the VMM's
/// region: how many chunks. Called with the memory lock held (by
/// `ChunkAllocator::reclaim`); takes only the heap's lock.
pub fn release(mut free: impl FnMut(Chunk)) -> usize {
    #[cfg(target_os = "none")]
    let mut n = 0;
    #[cfg(target_os = "none")]
    loop {
        let taken = global::HEAP.0.lock().take_empty();
        let Some((phys, count)) = taken else { break };
        for i in 0..count as u64 {
            let mut c = Chunk::reclaimed(phys + i * HUGE_PAGE_SIZE);
            c.zero(0, HUGE_PAGE_SIZE);
            free(c);
        }
        n += count;
    }
    #[cfg(target_os = "none")]
    return n;
    #[cfg(not(target_os = "none"))]
    {
        let _ = &mut free;
        0
    }
}

/// The way to get consecutive chunks for [`ensure`] and [`ensure_block`]
/// (`f(n)`: `n` chunks, each right after the one before), registered by the
/// kernel at boot.
static CHUNKS: spin::Once<ChunkSource> = spin::Once::new();

/// `f(n)`: `n` consecutive chunks, or None.
pub type ChunkSource = fn(usize) -> Option<alloc::vec::Vec<Chunk>>;

/// Registers how [`ensure`] gets chunks (it takes the memory lock).
pub fn set_chunk_source(f: ChunkSource) {
    CHUNKS.call_once(|| f);
}

/// [`room`] with the registered chunk source: never call it with the memory
/// lock held.
pub fn ensure(more: usize) -> bool {
    match CHUNKS.get() {
        Some(f) => room(more, || f(1).and_then(|mut v| v.pop())),
        None => room(more, || None),
    }
}

/// Makes sure one block of `size` bytes can be allocated (beyond the reserve),
/// adding a region of consecutive chunks for it if no region has such a block
/// (free bytes scattered over holes do not make one); false if guest memory has
/// no such run of free chunks. For tables larger than half a chunk and buffers
/// that grow (a file's), before a `try_reserve` (which then finds the block
/// unless another CPU took it first: the allocation stays fallible). Never call it
/// with the memory lock held.
pub fn ensure_block(size: usize) -> bool {
    if !ensure(size.min(HUGE_PAGE_SIZE as usize / 2)) {
        return false;
    }
    #[cfg(target_os = "none")]
    {
        let Ok(layout) = core::alloc::Layout::from_size_align(size.max(1), 16) else { return false };
        if global::has_block(layout) {
            return true;
        }
        let Some(f) = CHUNKS.get() else { return false };
        // (The region's own bookkeeping is a few words at its start.)
        let n = (size + 4096).div_ceil(HUGE_PAGE_SIZE as usize);
        loop {
            if !full() {
                if let Some(run) = f(n) {
                    return grow_run(run);
                }
            }
            // No run of chunks: the page cache frees heap memory until a block
            // fits, or has nothing left.
            if crate::mm::reclaim(size) == 0 {
                return false;
            }
            if global::has_block(layout) {
                return true;
            }
        }
    }
    #[cfg(not(target_os = "none"))]
    true
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
    grow_run(alloc::vec![c]);
}

/// Adds consecutive chunks to the heap for good, as one region; false if they
/// are not consecutive or no region is left (the chunks are then lost to the
/// program, which cannot happen with the kernel's chunk source).
fn grow_run(run: alloc::vec::Vec<Chunk>) -> bool {
    let Some(first) = run.first() else { return false };
    let phys = first.phys();
    if run.iter().enumerate().any(|(i, c)| c.phys() != phys + i as u64 * HUGE_PAGE_SIZE) {
        return false;
    }
    let size = run.len() * HUGE_PAGE_SIZE as usize;
    // The heap owns the chunks from now on: they never go back to the allocator
    // (a Chunk is only a name for its memory; dropping it frees nothing).
    drop(run);
    #[cfg(target_os = "none")]
    {
        let bottom = onering_abi::layout::direct(phys) as *mut u8;
        // SAFETY: the chunks came out of the chunk allocator, so no one else uses
        // them; they are consecutive (checked above); their `Chunk` names are
        // dropped without being freed, so the allocator never hands them out again;
        // all RAM is in the direct map.
        unsafe { global::HEAP.0.lock().add(bottom, size) }
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = size;
        true
    }
}
