//! Everything that needs `unsafe` or assembly, and nothing else: entry stubs, per-CPU
//! access through the GS base, the hostcall doorbell, FS base, the TSC, page-table
//! writes, and raw access to user memory after the address space has vouched for it.
//! The rest of the kernel is safe Rust (`#![deny(unsafe_code)]`).
//!
//! Privileged operations (halting, TLB flushes) go through [`supervisor`], whose
//! default works on PVM, where ring 0 cannot execute them.

mod entry;
pub mod supervisor;
pub mod thread;

pub use entry::enter_user;

use crate::errno::Errno;
use crate::mm::chunks::ChunkAllocator;
use crate::mm::space::{AddressSpace, Mmu};

/// The program's address space, with the live page tables.
pub type UserSpace = AddressSpace<GuestMmu>;
use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
use onering_abi::layout::{self, direct, HUGE_PAGE_SIZE, PAGE_SIZE};
use onering_abi::{BootInfo, Hostcall, PerCpuHeader};

#[global_allocator]
static HEAP: linked_list_allocator::LockedHeap = linked_list_allocator::LockedHeap::empty();

/// Gives the kernel heap its memory (the range the VMM reserved in the boot info).
pub fn init_heap(bi: &BootInfo) {
    // the VMM reserved [heap_phys, heap_phys + heap_size) for the heap alone;
    // it is mapped through the direct map; called once, before any allocation.
    // SAFETY: as explained above.
    unsafe {
        HEAP.lock().init(direct(bi.heap_phys) as *mut u8, bi.heap_size as usize);
    }
}

/// The boot info the VMM wrote.
pub fn boot_info(ptr: u64) -> &'static BootInfo {
    // SAFETY: the VMM passes the address of a BootInfo it wrote in the boot area, which nothing writes afterwards.
    unsafe { &*(ptr as *const BootInfo) }
}

fn percpu_ptr() -> *mut PerCpuHeader {
    let base: u64;
    // SAFETY: rdgsbase only reads the GS base (CR4.FSGSBASE is set by the VMM).
    unsafe { core::arch::asm!("rdgsbase {}", out(reg) base, options(nomem, nostack, preserves_flags)) };
    base as *mut PerCpuHeader
}

/// Makes a hostcall (see `onering_abi::hostcall`) and returns its result.
pub fn hostcall(nr: Hostcall, args: &[u64]) -> u64 {
    let pc = percpu_ptr();
    // the block lies in this CPU's header (GS base); the doorbell is an MMIO
    // page mapped in the direct map. Volatile accesses keep the order the VMM sees.
    // SAFETY: as explained above.
    unsafe {
        let blk = addr_of_mut!((*pc).hostcall);
        for (i, a) in args.iter().take(6).enumerate() {
            write_volatile(addr_of_mut!((*blk).args[i]), *a);
        }
        write_volatile(direct(layout::HOSTCALL_DOORBELL_PHYS) as *mut u64, nr as u64);
        read_volatile(addr_of!((*blk).ret))
    }
}

/// Stores `v` into local-APIC register `reg` (an offset in `onering_abi::lapic`).
pub(crate) fn lapic_write(reg: u64, v: u32) {
    // the APIC's page is mapped uncached in the direct map (the VMM maps the
    // 2 MiB MMIO page holding it); KVM's APIC emulation handles the store, and
    // each vCPU reaches its own APIC at the same address.
    // SAFETY: as explained above.
    unsafe { write_volatile((direct(layout::LAPIC_PHYS) + (reg & 0xff0)) as *mut u32, v) }
    count(Counter::LapicWrites);
}

/// The counters of a CPU's header that the kernel (not a ring-0 stub) keeps.
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    LapicWrites,
    Switches,
}

/// Adds one to a counter of this CPU's header (`--stats`). Only this CPU writes
/// its counters, with one `inc` instruction, which an interrupt cannot split.
pub(crate) fn count(c: Counter) {
    let offset = match c {
        Counter::LapicWrites => onering_abi::percpu_offsets::LAPIC_WRITES,
        Counter::Switches => onering_abi::percpu_offsets::SWITCHES,
    };
    // SAFETY: GS points at this CPU's header (mapped for the kernel's life) and `offset` is one of its u64 counters.
    unsafe { core::arch::asm!("inc qword ptr gs:[{}]", in(reg) offset, options(nostack)) };
}

/// Sets the FS base (thread pointer) of the running thread.
pub fn set_fs_base(v: u64) {
    // SAFETY: wrfsbase only changes the FS base, which the kernel does not use.
    unsafe { core::arch::asm!("wrfsbase {}", in(reg) v, options(nomem, nostack, preserves_flags)) }
}

pub fn fs_base() -> u64 {
    let v: u64;
    // SAFETY: reads the FS base.
    unsafe { core::arch::asm!("rdfsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Borrow `[addr, addr + len)` of user memory after `space` vouched for it.
pub fn user_slice(space: &UserSpace, addr: u64, len: u64) -> Result<&[u8], Errno> {
    space.check(addr, len, false)?;
    if len == 0 {
        return Ok(&[]);
    }
    // `check` found the whole range inside readable mappings and backed every
    // block of it; the borrow of `space` keeps them from being unmapped.
    // SAFETY: as explained above.
    Ok(unsafe { core::slice::from_raw_parts(addr as *const u8, len as usize) })
}

/// Mutably borrow `[addr, addr + len)` of user memory after `space` vouched for it.
pub fn user_slice_mut(space: &mut UserSpace, addr: u64, len: u64) -> Result<&mut [u8], Errno> {
    space.check(addr, len, true)?;
    if len == 0 {
        return Ok(&mut []);
    }
    // `check` found the range inside writable mappings and backed it; the borrow of
    // `space` keeps them mapped, and being mutable, no other slice of user memory
    // made through it can be alive.
    // SAFETY: as explained above.
    Ok(unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len as usize) })
}

/// The NUL-terminated string at `addr` (without the NUL), at most `max` bytes:
/// `ENAMETOOLONG` if longer, `EFAULT` if it runs into unmapped memory.
pub fn user_cstr(space: &UserSpace, addr: u64, max: usize) -> Result<&[u8], Errno> {
    let mut len = 0u64;
    loop {
        // Scan what the mapping at `addr + len` allows, one piece at a time.
        let at = addr.checked_add(len).ok_or(Errno::EFAULT)?;
        let vma = space.vmas.find(at).filter(|v| v.prot & crate::mm::vma::PROT_READ != 0).ok_or(Errno::EFAULT)?;
        let piece = (vma.end - at).min(max as u64 + 1 - len);
        let bytes = user_slice(space, at, piece)?;
        if let Some(nul) = bytes.iter().position(|b| *b == 0) {
            return user_slice(space, addr, len + nul as u64);
        }
        len += piece;
        if len > max as u64 {
            return Err(Errno::ENAMETOOLONG);
        }
    }
}

/// Bytes the VMM placed in guest memory for the kernel's whole life (the rootfs
/// image, the working directory), through the direct map.
pub fn static_bytes(phys: u64, len: u64) -> &'static [u8] {
    if len == 0 {
        return &[];
    }
    // the VMM reserved [phys, phys + len) in RAM below phys_free_start for
    // this data, which nothing writes after boot.
    // SAFETY: as explained above.
    unsafe { core::slice::from_raw_parts(direct(phys) as *const u8, len as usize) }
}

/// Copies `buf.len()` bytes of user memory at `addr` into `buf`.
pub fn copy_from_user(space: &UserSpace, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
    buf.copy_from_slice(user_slice(space, addr, buf.len() as u64)?);
    Ok(())
}

/// Copies `data` to user memory at `addr`.
pub fn copy_to_user(space: &UserSpace, addr: u64, data: &[u8]) -> Result<(), Errno> {
    space.check(addr, data.len() as u64, true)?;
    // SAFETY: `check` found the range inside writable, backed mappings.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    Ok(())
}

/// Copies `len` bytes of user memory from `from` to `to` (ranges the address space
/// has just vouched for, as in `mremap`).
pub fn copy_user_within(from: u64, to: u64, len: u64) {
    // the caller (AddressSpace::mremap) passes two mapped, backed ranges of
    // `len` bytes that do not overlap (the new one was free a moment ago).
    // SAFETY: as explained above.
    unsafe { core::ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, len as usize) }
}

/// Reads a `u64` from user memory.
pub fn read_user_u64(space: &UserSpace, addr: u64) -> Result<u64, Errno> {
    let mut b = [0u8; 8];
    copy_from_user(space, addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

const PTE_PRESENT: u64 = 1;
const PTE_WRITE: u64 = 2;
const PTE_USER: u64 = 4;
const PTE_HUGE: u64 = 0x80;
const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

/// The live page tables (root at `BOOT_PT_PHYS`, built by the VMM), edited through
/// the direct map. Page-table pages come from a chunk cut into 4 KiB pages.
#[derive(Debug, Default)]
pub struct GuestMmu {
    pool_next: u64,
    pool_end: u64,
}

fn entry_ptr(table_phys: u64, index: u64) -> *mut u64 {
    (direct(table_phys) + index * 8) as *mut u64
}

impl GuestMmu {
    fn alloc_table(&mut self, chunks: &mut ChunkAllocator) -> Result<u64, Errno> {
        if self.pool_next == self.pool_end {
            let c = chunks.alloc().ok_or(Errno::ENOMEM)?;
            self.pool_next = c;
            self.pool_end = c + HUGE_PAGE_SIZE;
        }
        let t = self.pool_next;
        self.pool_next += PAGE_SIZE;
        // a page of a chunk this pool owns, reached through the direct map.
        // Free chunks should be zero, but a stray non-zero byte here would become a
        // page-table entry: clear it whatever happened before.
        // SAFETY: as explained above.
        unsafe { core::ptr::write_bytes(direct(t) as *mut u8, 0, PAGE_SIZE as usize) };
        Ok(t)
    }

    /// The table the entry `index` of `table` points at, created when absent.
    fn next_level(&mut self, table: u64, index: u64, chunks: &mut ChunkAllocator) -> Result<u64, Errno> {
        let e = entry_ptr(table, index);
        // `table` is a page-table page in RAM (the root, or read from a present
        // entry written by the VMM or by us), reached through the direct map.
        // SAFETY: as explained above.
        let v = unsafe { read_volatile(e) };
        if v & PTE_PRESENT != 0 {
            return Ok(v & PTE_ADDR);
        }
        let t = self.alloc_table(chunks)?;
        // SAFETY: as above.
        unsafe { write_volatile(e, t | PTE_PRESENT | PTE_WRITE | PTE_USER) };
        Ok(t)
    }

    fn pd_entry(&mut self, virt: u64, chunks: Option<&mut ChunkAllocator>) -> Option<*mut u64> {
        let idx = |shift: u64| (virt >> shift) & 511;
        match chunks {
            Some(c) => {
                let pdpt = self.next_level(layout::BOOT_PT_PHYS, idx(39), c).ok()?;
                let pd = self.next_level(pdpt, idx(30), c).ok()?;
                Some(entry_ptr(pd, idx(21)))
            }
            None => {
                let mut table = layout::BOOT_PT_PHYS;
                for shift in [39, 30] {
                    // SAFETY: walking present page-table entries through the direct map.
                    let v = unsafe { read_volatile(entry_ptr(table, idx(shift))) };
                    if v & PTE_PRESENT == 0 {
                        return None;
                    }
                    table = v & PTE_ADDR;
                }
                Some(entry_ptr(table, idx(21)))
            }
        }
    }
}

impl Mmu for GuestMmu {
    fn map_block(&mut self, virt: u64, phys: u64, chunks: &mut ChunkAllocator) -> Result<(), Errno> {
        let e = self.pd_entry(virt, Some(chunks)).ok_or(Errno::ENOMEM)?;
        // SAFETY: `e` is the page-directory entry of `virt` in a live table.
        unsafe { write_volatile(e, phys | PTE_PRESENT | PTE_WRITE | PTE_USER | PTE_HUGE) };
        Ok(())
    }

    fn unmap_block(&mut self, virt: u64) {
        if let Some(e) = self.pd_entry(virt, None) {
            // SAFETY: as in map_block.
            unsafe { write_volatile(e, 0) };
            supervisor::flush_tlb(virt);
        }
    }

    fn zero(&mut self, virt: u64, len: u64) {
        // SAFETY: the address space calls this only for mapped, backed user ranges.
        unsafe { core::ptr::write_bytes(virt as *mut u8, 0, len as usize) }
    }
}
