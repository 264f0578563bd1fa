//! The guest's boot page tables, and walking them. The VMM maps the kernel, the
//! direct map of all RAM, the MMIO page, the program's image and its stack with 2 MiB
//! pages (every page-table store and first touch of a 4 KiB page costs microseconds
//! under the software hypervisor). `translate` is how the exit handler reads
//! guest-virtual memory: the tables are the guest's to scribble on, so every entry it
//! follows is checked to lie in guest memory.

use super::{read_u64, write_u64, ArchError, Result};
use onering_abi::layout::{self, HUGE_PAGE_SIZE, PAGE_SIZE};
use std::cell::Cell;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub const PTE_PRESENT: u64 = 1;
pub const PTE_WRITE: u64 = 2;
pub const PTE_USER: u64 = 4;
pub const PTE_PWT: u64 = 8;
pub const PTE_PCD: u64 = 0x10;
pub const PTE_HUGE: u64 = 0x80;
pub const PTE_GLOBAL: u64 = 0x100;
pub const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

/// Builds the boot page tables, root at `BOOT_PT_PHYS`, tables taken from the boot area.
pub struct PageTables<'a> {
    mem: &'a GuestMemoryMmap,
    next: u64,
}

impl<'a> PageTables<'a> {
    pub fn new(mem: &'a GuestMemoryMmap) -> Self {
        Self { mem, next: layout::BOOT_PT_PHYS + PAGE_SIZE }
    }

    fn table(&mut self, table: u64, index: u64) -> Result<u64> {
        let pa = table + index * 8;
        let e = read_u64(self.mem, pa)?;
        if e & PTE_PRESENT != 0 {
            return Ok(e & PTE_ADDR);
        }
        if self.next >= layout::BOOT_PT_END {
            return Err(ArchError::PageTablesFull);
        }
        let t = self.next;
        self.next += PAGE_SIZE;
        write_u64(self.mem, pa, t | PTE_PRESENT | PTE_WRITE | PTE_USER)?;
        Ok(t)
    }

    /// Maps the 2 MiB page at `virt` to `phys`; every mapping is user-accessible
    /// (the kernel runs in ring 3). `extra` adds flags (cache control, global).
    pub fn map_2m(&mut self, virt: u64, phys: u64, extra: u64) -> Result<()> {
        let pdpt = self.table(layout::BOOT_PT_PHYS, (virt >> 39) & 511)?;
        let pd = self.table(pdpt, (virt >> 30) & 511)?;
        write_u64(self.mem, pd + ((virt >> 21) & 511) * 8, phys | PTE_PRESENT | PTE_WRITE | PTE_USER | PTE_HUGE | extra)
    }

    /// Maps `[virt, virt + size)` to `[phys, ...)` with 2 MiB pages.
    pub fn map_range(&mut self, virt: u64, phys: u64, size: u64, extra: u64) -> Result<()> {
        for off in (0..size).step_by(HUGE_PAGE_SIZE as usize) {
            self.map_2m(virt + off, phys + off, extra)?;
        }
        Ok(())
    }
}

thread_local! {
    /// The root (CR3) of the vCPU this thread runs, as the guest published it at
    /// its last hostcall ([`guest_root`]): guest-virtual arguments of its
    /// hostcalls translate through it; the kernel's half is the same in every root.
    static ROOT: Cell<u64> = const { Cell::new(layout::BOOT_PT_PHYS) };
}

/// The root this vCPU thread translates through.
pub fn current_root() -> u64 {
    ROOT.with(Cell::get)
}

/// Records that this thread's vCPU now runs on `root` (already checked).
pub fn set_current_root(root: u64) {
    ROOT.with(|r| r.set(root));
}

/// The root vCPU `cpu` runs on, as its kernel published it in the vCPU's poll
/// slot before loading it (`PollSlot::root`: the kernel switches address spaces
/// itself, without an exit); the boot root while that word is not a page of
/// guest RAM (never switched, or garbage: translating through the boot root then
/// finds nothing the guest did not map for itself).
pub fn guest_root(mem: &GuestMemoryMmap, cpu: u64) -> u64 {
    let at = crate::layout::poll_slot(cpu) + onering_abi::hostcall::poll_offsets::ROOT;
    match mem.read_obj::<u64>(GuestAddress(at)) {
        Ok(root) if root != 0 && valid_root(mem, root) => root,
        _ => layout::BOOT_PT_PHYS,
    }
}

/// Whether `root` can be a root: a page-aligned page of guest RAM.
pub fn valid_root(mem: &GuestMemoryMmap, root: u64) -> bool {
    use vm_memory::GuestMemoryBackend;
    root.is_multiple_of(PAGE_SIZE)
        && root
            .checked_add(PAGE_SIZE - 1)
            .is_some_and(|last| mem.address_in_range(GuestAddress(root)) && mem.address_in_range(GuestAddress(last)))
}

/// Translates a guest-virtual address through the page tables rooted at `cr3`.
/// Returns the guest-physical address and how many bytes of the page follow it.
/// Every entry is checked to point into guest memory: a guest that scribbled on its
/// page tables gets `None`, never a VMM crash.
pub fn translate(mem: &GuestMemoryMmap, cr3: u64, virt: u64) -> Option<(u64, u64)> {
    // Non-canonical addresses have no translation.
    let top = virt >> 47;
    if top != 0 && top != 0x1ffff {
        return None;
    }
    let mut table = cr3 & PTE_ADDR;
    for (level, shift) in [(4, 39u64), (3, 30), (2, 21), (1, 12)] {
        let e = read_u64(mem, table + ((virt >> shift) & 511) * 8).ok()?;
        if e & PTE_PRESENT == 0 {
            return None;
        }
        let size = 1u64 << shift;
        if level == 1 || (e & PTE_HUGE != 0 && (level == 2 || level == 3)) {
            let base = e & PTE_ADDR & !(size - 1);
            let off = virt & (size - 1);
            return Some((base + off, size - off));
        }
        table = e & PTE_ADDR;
    }
    None
}

/// Copies `len` bytes at guest-virtual `virt` out of the guest, through the
/// calling vCPU's page tables ([`current_root`]); `None` if any byte has no
/// translation.
pub fn read_guest(mem: &GuestMemoryMmap, virt: u64, len: u64) -> Option<Vec<u8>> {
    read_guest_in(mem, current_root(), virt, len)
}

/// `n` (address, length) pairs of u64 at guest-virtual `virt` (an iovec array, a
/// list of pieces), through the calling vCPU's page tables.
pub fn read_guest_pairs(mem: &GuestMemoryMmap, virt: u64, n: u64) -> Option<Vec<(u64, u64)>> {
    let raw = read_guest(mem, virt, n.checked_mul(16)?)?;
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or_default());
    Some(raw.chunks_exact(16).map(|p| (word(&p[..8]), word(&p[8..]))).collect())
}

/// Copies `data` into the guest at guest-virtual `virt`, through the calling
/// vCPU's page tables; `None` (nothing written) if any byte has no translation.
pub fn write_guest(mem: &GuestMemoryMmap, virt: u64, data: &[u8]) -> Option<()> {
    write_guest_in(mem, current_root(), virt, data)
}

/// [`read_guest`] through the page tables rooted at `root` (the gdb stub's, for
/// another thread than the vCPU's).
pub fn read_guest_in(mem: &GuestMemoryMmap, root: u64, virt: u64, len: u64) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    let mut done = 0u64;
    while done < len {
        let (pa, avail) = translate(mem, root, virt.checked_add(done)?)?;
        let n = avail.min(len - done);
        mem.read_slice(&mut out[done as usize..(done + n) as usize], GuestAddress(pa)).ok()?;
        done += n;
    }
    Some(out)
}

/// [`write_guest`] through the page tables rooted at `root`.
pub fn write_guest_in(mem: &GuestMemoryMmap, root: u64, virt: u64, data: &[u8]) -> Option<()> {
    let len = data.len() as u64;
    let mut pieces = Vec::new();
    let mut done = 0u64;
    while done < len {
        let (pa, avail) = translate(mem, root, virt.checked_add(done)?)?;
        let n = avail.min(len - done);
        pieces.push((pa, done as usize, n as usize));
        done += n;
    }
    for (pa, at, n) in pieces {
        mem.write_slice(&data[at..at + n], GuestAddress(pa)).ok()?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{Bytes, GuestAddress};

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap()
    }

    #[test]
    fn map_and_translate() {
        let m = mem();
        let mut pt = PageTables::new(&m);
        pt.map_2m(0x40_0000, 0x60_0000, 0).unwrap();
        pt.map_2m(layout::KERNEL_VBASE + 0x20_0000, 0x20_0000, PTE_GLOBAL).unwrap();
        assert_eq!(translate(&m, layout::BOOT_PT_PHYS, 0x40_1234), Some((0x60_1234, HUGE_PAGE_SIZE - 0x1234)));
        assert_eq!(
            translate(&m, layout::BOOT_PT_PHYS, layout::KERNEL_VBASE + 0x20_0010),
            Some((0x20_0010, HUGE_PAGE_SIZE - 0x10))
        );
        assert_eq!(translate(&m, layout::BOOT_PT_PHYS, 0x80_0000), None);
        assert_eq!(translate(&m, layout::BOOT_PT_PHYS, 0x0000_8000_0000_0000), None, "non-canonical");
    }

    #[test]
    fn translate_survives_garbage_tables() {
        let m = mem();
        // Root entries pointing far outside guest memory, or at themselves.
        m.write_obj(0xdead_beef_f000u64 | 7, GuestAddress(layout::BOOT_PT_PHYS)).unwrap();
        assert_eq!(translate(&m, layout::BOOT_PT_PHYS, 0x1000), None);
        m.write_obj(layout::BOOT_PT_PHYS | 7, GuestAddress(layout::BOOT_PT_PHYS)).unwrap();
        let _ = translate(&m, layout::BOOT_PT_PHYS, 0x1000);
        assert_eq!(translate(&m, 1 << 40, 0x1000), None, "root outside memory");
    }
}
