//! A vCPU's register state at its first instruction: long mode with paging, ring-3
//! segments, the GS base at the CPU's per-CPU header, `syscall` MSRs, XCR0, and the
//! local APIC as the kernel expects it. Plain structs in, plain structs out; `vstate`
//! hands them to KVM.

use super::tables::{tss_selector, tss_virt};
use kvm_bindings::{kvm_lapic_state, kvm_regs, kvm_segment, kvm_sregs};
use onering_abi::layout::{self, direct};

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

/// The local APIC as the kernel expects it (`onering_abi::lapic`): enabled, timer
/// one-shot on `vectors::TIMER` counting nanoseconds. `state` comes from KVM_GET_LAPIC.
pub fn lapic(state: &mut kvm_lapic_state) {
    use onering_abi::lapic;
    let mut set = |reg: u64, v: u32| {
        for (i, b) in v.to_le_bytes().iter().enumerate() {
            if let Some(r) = state.regs.get_mut(reg as usize + i) {
                *r = *b as _;
            }
        }
    };
    set(lapic::SPURIOUS, lapic::SPURIOUS_ENABLE);
    set(lapic::TIMER_DIVIDE, lapic::DIVIDE_BY_1);
    set(lapic::LVT_TIMER, u32::from(onering_abi::vectors::TIMER));
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn lapic_is_enabled_with_a_one_shot_timer() {
        let mut s = kvm_lapic_state::default();
        lapic(&mut s);
        let reg = |r: u64| u32::from_le_bytes(std::array::from_fn(|i| s.regs[r as usize + i] as u8));
        assert_eq!(reg(onering_abi::lapic::SPURIOUS), onering_abi::lapic::SPURIOUS_ENABLE);
        assert_eq!(reg(onering_abi::lapic::LVT_TIMER), u32::from(onering_abi::vectors::TIMER));
    }
}
