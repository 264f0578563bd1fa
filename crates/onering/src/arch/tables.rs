//! The descriptor tables the VMM writes into guest memory before boot: the GDT
//! (ring-0 and ring-3 segments, a TSS descriptor per CPU), each CPU's TSS (every
//! exception and interrupt on IST1) and the IDT (gates into the kernel's ring-0 stubs).

use super::{write_u64, ArchError, Result};
use onering_abi::layout::{self, direct};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

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

pub fn tss_virt(cpu: u64) -> u64 {
    direct(layout::TSS_PHYS + cpu * layout::TSS_STRIDE)
}

/// TSS of `cpu`: exceptions arrive on IST1 (`ist_top`, as does anything that would
/// use RSP0), the APIC timer and the reschedule IPI on IST2, other interrupts on
/// IST3 (`layout::IST2_BELOW_TOP`: an exception's ring-3 landing runs on IST1 with
/// interrupts on until it has copied the frame away).
pub fn write_tss(mem: &GuestMemoryMmap, cpu: u64, ist_top: u64) -> Result<()> {
    let base = layout::TSS_PHYS + cpu * layout::TSS_STRIDE;
    write_u64(mem, base + 4, ist_top)?; // rsp0
    write_u64(mem, base + 0x24, ist_top)?; // ist1
    write_u64(mem, base + 0x2c, ist_top - layout::IST2_BELOW_TOP)?; // ist2
    write_u64(mem, base + 0x34, ist_top - layout::IST3_BELOW_TOP)?; // ist3
    mem.write_obj(104u16, GuestAddress(base + 102)).map_err(|_| ArchError::Memory(base))
    // no I/O bitmap
}

use onering_abi::vectors;
const TIMER_VECTOR: u64 = vectors::TIMER as u64;
const RESCHEDULE_VECTOR: u64 = vectors::RESCHEDULE as u64;

/// The kernel's ring-0 entry points the IDT points at.
pub struct Stubs {
    /// 32 exception stubs, 16 bytes apart.
    pub exceptions: u64,
    /// Ignores an interrupt.
    pub interrupt: u64,
    /// The local APIC timer and the reschedule IPI: preempts the program.
    pub preempt: u64,
}

/// IDT: vectors 0-31 go to the kernel's exception stubs (#UD's also serves the
/// supervisor calls), the APIC timer and the reschedule IPI to the preemption
/// stub, the rest to a stub that ignores them. Exceptions use IST1, the timer and
/// the IPI IST2, the rest IST3; only `int3` and `into` may be raised from ring 3.
pub fn write_idt(mem: &GuestMemoryMmap, stubs: &Stubs) -> Result<()> {
    for v in 0..256u64 {
        let (handler, ist) = match v {
            0..32 => (stubs.exceptions + 16 * v, 1),
            TIMER_VECTOR | RESCHEDULE_VECTOR => (stubs.preempt, 2),
            _ => (stubs.interrupt, 3),
        };
        let dpl: u64 = if v == 3 || v == 4 { 3 } else { 0 };
        let type_attr = 0x8e | (dpl << 5); // present, 64-bit interrupt gate
        let low = (handler & 0xffff)
            | (u64::from(layout::KERNEL_CS) << 16)
            | (ist << 32)
            | (type_attr << 40)
            | (((handler >> 16) & 0xffff) << 48);
        let at = layout::IDT_PHYS + v * 16;
        write_u64(mem, at, low)?;
        write_u64(mem, at + 8, handler >> 32)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap()
    }

    #[test]
    fn idt_gate_encoding() {
        let m = mem();
        let stubs = Stubs {
            exceptions: 0xffff_ffff_8020_1000,
            interrupt: 0xffff_ffff_8020_2000,
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
        let ist = |v: u64| (m.read_obj::<u64>(GuestAddress(layout::IDT_PHYS + v * 16)).unwrap() >> 32) & 7;
        assert_eq!((ist(TIMER_VECTOR), ist(RESCHEDULE_VECTOR), ist(0xff), ist(0)), (2, 2, 3, 1));
        assert_eq!((lo >> 40) & 0xff, 0x8e);
        let bp: u64 = m.read_obj(GuestAddress(layout::IDT_PHYS + 3 * 16)).unwrap();
        assert_eq!((bp >> 40) & 0xff, 0xee, "int3 allowed from ring 3");
    }
}
