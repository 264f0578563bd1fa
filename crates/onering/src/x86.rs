//! x86-64 machine state the VMM builds before the first instruction: page tables,
//! GDT, IDT, TSS, and each vCPU's registers. PLATFORM.md explains why the VMM does
//! all of it: the guest cannot write control registers or MSRs here, and ring-0 code
//! before the first ring-3 entry runs emulated, 1-2 µs per instruction.
//!
//! Pure functions over guest memory (vm-memory) and plain register structs, so they
//! are unit-tested without /dev/kvm.

use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use onering_abi::layout::{self, direct, HUGE_PAGE_SIZE, PAGE_SIZE};
use thiserror::Error;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub const PTE_PRESENT: u64 = 1;
pub const PTE_WRITE: u64 = 2;
pub const PTE_USER: u64 = 4;
pub const PTE_PWT: u64 = 8;
pub const PTE_PCD: u64 = 0x10;
pub const PTE_HUGE: u64 = 0x80;
pub const PTE_GLOBAL: u64 = 0x100;
pub const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

#[derive(Debug, Error)]
pub enum X86Error {
    #[error("boot page tables do not fit in the boot area")]
    PageTablesFull,
    #[error("guest memory access at {0:#x} failed")]
    Memory(u64),
}

type Result<T> = std::result::Result<T, X86Error>;

fn write_u64(mem: &GuestMemoryMmap, pa: u64, v: u64) -> Result<()> {
    mem.write_obj(v, GuestAddress(pa)).map_err(|_| X86Error::Memory(pa))
}

fn read_u64(mem: &GuestMemoryMmap, pa: u64) -> Result<u64> {
    mem.read_obj(GuestAddress(pa)).map_err(|_| X86Error::Memory(pa))
}

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
            return Err(X86Error::PageTablesFull);
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

/// GDT: null, kernel code, kernel data, user code32 (for `sysret`'s layout), user
/// data, user code, then a TSS descriptor per CPU.
pub fn write_gdt(mem: &GuestMemoryMmap, ncpus: u64) -> Result<()> {
    let base = layout::GDT_PHYS;
    let entries: [u64; 6] = [
        0,
        0x00af_9b00_0000_ffff,
        0x00cf_9300_0000_ffff,
        0x00cf_fb00_0000_ffff,
        0x00cf_f300_0000_ffff,
        0x00af_fb00_0000_ffff,
    ];
    for (i, e) in entries.iter().enumerate() {
        write_u64(mem, base + i as u64 * 8, *e)?;
    }
    for cpu in 0..ncpus {
        let tss = tss_virt(cpu);
        let limit = 103u64;
        let low = limit | ((tss & 0xff_ffff) << 16) | (0x89 << 40) | (((tss >> 24) & 0xff) << 56);
        let at = base + u64::from(tss_selector(cpu));
        write_u64(mem, at, low)?;
        write_u64(mem, at + 8, tss >> 32)?;
    }
    Ok(())
}

pub fn tss_selector(cpu: u64) -> u16 {
    layout::TSS_SELECTOR_BASE + 16 * cpu as u16
}

fn tss_virt(cpu: u64) -> u64 {
    direct(layout::TSS_PHYS + cpu * layout::TSS_STRIDE)
}

/// TSS of `cpu`: every exception arrives on IST1 (`ist_top`), as does anything that
/// would use RSP0.
pub fn write_tss(mem: &GuestMemoryMmap, cpu: u64, ist_top: u64) -> Result<()> {
    let base = layout::TSS_PHYS + cpu * layout::TSS_STRIDE;
    write_u64(mem, base + 4, ist_top)?; // rsp0
    write_u64(mem, base + 0x24, ist_top)?; // ist1
    mem.write_obj(104u16, GuestAddress(base + 102)).map_err(|_| X86Error::Memory(base))
    // no I/O bitmap
}

use onering_abi::vectors;
const TLB_FLUSH_VECTOR: u64 = vectors::TLB_FLUSH as u64;
const TIMER_VECTOR: u64 = vectors::TIMER as u64;
const RESCHEDULE_VECTOR: u64 = vectors::RESCHEDULE as u64;

/// The kernel's ring-0 entry points the IDT points at.
pub struct Stubs {
    /// 32 exception stubs, 16 bytes apart.
    pub exceptions: u64,
    /// Ignores an interrupt.
    pub interrupt: u64,
    /// Flushes the TLB.
    pub tlb_flush: u64,
    /// The local APIC timer and the reschedule IPI: preempts the program.
    pub preempt: u64,
}

/// IDT: vectors 0-31 go to the kernel's exception stubs, the APIC timer and the
/// reschedule IPI to the preemption stub, `TLB_FLUSH_VECTOR` to the flush stub, the
/// rest to a stub that ignores them. All use IST1; `int3`, `into`
/// and the flush may be raised from ring 3.
pub fn write_idt(mem: &GuestMemoryMmap, stubs: &Stubs) -> Result<()> {
    for v in 0..256u64 {
        let handler = match v {
            0..32 => stubs.exceptions + 16 * v,
            TLB_FLUSH_VECTOR => stubs.tlb_flush,
            TIMER_VECTOR | RESCHEDULE_VECTOR => stubs.preempt,
            _ => stubs.interrupt,
        };
        let dpl: u64 = if v == 3 || v == 4 || v == TLB_FLUSH_VECTOR { 3 } else { 0 };
        let type_attr = 0x8e | (dpl << 5); // present, 64-bit interrupt gate
        let low = (handler & 0xffff)
            | (u64::from(layout::KERNEL_CS) << 16)
            | (1 << 32)
            | (type_attr << 40)
            | (((handler >> 16) & 0xffff) << 48);
        let at = layout::IDT_PHYS + v * 16;
        write_u64(mem, at, low)?;
        write_u64(mem, at + 8, handler >> 32)?;
    }
    Ok(())
}

const CR0_PE: u64 = 1;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const CR4_PGE: u64 = 1 << 7;
const CR4_OSFXSR: u64 = 1 << 9;
const CR4_OSXMMEXCPT: u64 = 1 << 10;
const CR4_FSGSBASE: u64 = 1 << 16;
const CR4_OSXSAVE: u64 = 1 << 18;
const EFER_SCE: u64 = 1;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
const EFER_NXE: u64 = 1 << 11;

pub const MSR_STAR: u32 = 0xc000_0081;
pub const MSR_LSTAR: u32 = 0xc000_0082;
pub const MSR_SFMASK: u32 = 0xc000_0084;
pub const MSR_TSC: u32 = 0x10;
/// Flags `syscall` clears: TF, DF, IOPL, NT, AC. Not IF: on PVM, a `syscall` that
/// clears IF leaves the vCPU unable to take interrupts even after the stub's
/// `iretq` sets it again (measured: no APIC timer interrupt ever arrives after the
/// first trapped call). The stub is safe with interrupts on: an interrupt there
/// lands on its own IST stack and is deferred, as in any kernel code.
pub const SFMASK: u64 = 0x4_7500;

/// STAR: kernel CS for `syscall`, user code32 selector base for `sysret`.
pub fn star() -> u64 {
    (u64::from(layout::KERNEL_CS) << 32) | (u64::from(0x18u16 | 3) << 48)
}

fn segment(selector: u16, code: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 11 } else { 3 },
        present: 1,
        dpl: (selector & 3) as u8,
        db: u8::from(!code),
        s: 1,
        l: u8::from(code),
        g: 1,
        ..Default::default()
    }
}

/// Special registers of `cpu`: long mode with paging, ring 3 segments, GS base at the
/// per-CPU header, this CPU's TSS. `base` comes from KVM_GET_SREGS.
pub fn sregs(mut base: kvm_sregs, cpu: u64) -> kvm_sregs {
    base.cs = segment(layout::USER_CS, true);
    let ds = segment(layout::USER_DS, false);
    base.ds = ds;
    base.es = ds;
    base.ss = ds;
    base.fs = ds;
    base.gs = kvm_segment { base: layout::percpu_virt(cpu), ..ds };
    base.tr = kvm_segment {
        base: tss_virt(cpu),
        limit: 103,
        selector: tss_selector(cpu),
        type_: 11,
        present: 1,
        ..Default::default()
    };
    base.gdt.base = direct(layout::GDT_PHYS);
    base.gdt.limit = (layout::GDT_ENTRIES * 8 - 1) as u16;
    base.idt.base = direct(layout::IDT_PHYS);
    base.idt.limit = 256 * 16 - 1;
    base.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    base.cr3 = layout::BOOT_PT_PHYS;
    base.cr4 = CR4_PAE | CR4_PGE | CR4_OSFXSR | CR4_OSXMMEXCPT | CR4_FSGSBASE | CR4_OSXSAVE;
    base.efer = EFER_SCE | EFER_LME | EFER_LMA | EFER_NXE;
    base
}

/// General registers: ring 3 at `entry` on `stack_top`, `rdi` = `arg`, interrupts
/// on (ring 3 cannot change IF later, and the kernel defers an interrupt that lands
/// in its own code).
pub fn regs(entry: u64, stack_top: u64, arg: u64) -> kvm_regs {
    kvm_regs { rip: entry, rsp: stack_top, rdi: arg, rflags: 0x202, ..Default::default() }
}

/// XCR0 to enable: what the CPU supports among x87, SSE, AVX and AVX-512 state.
pub fn xcr0(supported: u64) -> u64 {
    supported & 0xe7 | 1
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn idt_gate_encoding() {
        let m = mem();
        let stubs = Stubs {
            exceptions: 0xffff_ffff_8020_1000,
            interrupt: 0xffff_ffff_8020_2000,
            tlb_flush: 0xffff_ffff_8020_3000,
            preempt: 0xffff_ffff_8020_4000,
        };
        write_idt(&m, &stubs).unwrap();
        let gate = |v: u64| {
            let lo: u64 = m.read_obj(GuestAddress(layout::IDT_PHYS + v * 16)).unwrap();
            let hi: u64 = m.read_obj(GuestAddress(layout::IDT_PHYS + v * 16 + 8)).unwrap();
            (lo & 0xffff) | ((lo >> 32) & 0xffff_0000) | (hi << 32)
        };
        assert_eq!(gate(TIMER_VECTOR), stubs.preempt);
        assert_eq!(gate(RESCHEDULE_VECTOR), stubs.preempt);
        assert_eq!(gate(0xff), stubs.interrupt);
        let lo: u64 = m.read_obj(GuestAddress(layout::IDT_PHYS + 14 * 16)).unwrap();
        let hi: u64 = m.read_obj(GuestAddress(layout::IDT_PHYS + 14 * 16 + 8)).unwrap();
        let handler = (lo & 0xffff) | ((lo >> 32) & 0xffff_0000) | (hi << 32);
        assert_eq!(handler, 0xffff_ffff_8020_1000 + 14 * 16);
        assert_eq!((lo >> 16) & 0xffff, u64::from(layout::KERNEL_CS));
        assert_eq!((lo >> 32) & 7, 1, "IST1");
        assert_eq!((lo >> 40) & 0xff, 0x8e);
        let bp: u64 = m.read_obj(GuestAddress(layout::IDT_PHYS + 3 * 16)).unwrap();
        assert_eq!((bp >> 40) & 0xff, 0xee, "int3 allowed from ring 3");
    }

    #[test]
    fn sregs_are_long_mode_ring3() {
        let s = sregs(kvm_sregs::default(), 1);
        assert_eq!(s.cs.dpl, 3);
        assert_eq!(s.cs.l, 1);
        assert_eq!(s.gs.base, layout::percpu_virt(1));
        assert_eq!(s.tr.selector, layout::TSS_SELECTOR_BASE + 16);
        assert_ne!(s.efer & EFER_LMA, 0);
        assert_eq!(s.cr0 & (1 << 18), 0, "no alignment checks in ring 3");
    }
}
