//! Memory layout: where things live in guest-physical and guest-virtual memory.
//!
//! Guest-physical: region 0 starts at 0 and stops at the 32-bit MMIO hole (3 GiB);
//! RAM beyond that continues at 4 GiB. The first 2 MiB hold what the VMM builds
//! (page tables, GDT, IDT, TSSs, boot info, per-CPU headers); the kernel image follows
//! at 2 MiB. Everything else is handed out in 2 MiB chunks.
//!
//! Guest-virtual: the program owns the lower half as on Linux. The kernel's image is
//! mapped at `KERNEL_VBASE + phys` (the top 2 GiB, so its code can use 32-bit absolute
//! addresses), and all RAM is mapped again at `DIRECT_MAP_BASE + phys`. Every page is
//! user-accessible: the kernel runs in ring 3 next to the program. PVM reserves the
//! first slot of the upper half (PML4 entry 256) for itself, so the direct map starts
//! at entry 257.

pub const PAGE_SIZE: u64 = 0x1000;
pub const HUGE_PAGE_SIZE: u64 = 0x20_0000;

/// Exclusive end of user virtual memory (47-bit lower half).
pub const USER_END: u64 = 0x0000_8000_0000_0000;
/// All of RAM, mapped linearly (PML4 entry 257; entry 256 belongs to PVM).
pub const DIRECT_MAP_BASE: u64 = 0xffff_8080_0000_0000;
/// The kernel image's mapping: `KERNEL_VBASE + phys` for the first GiB of RAM.
pub const KERNEL_VBASE: u64 = 0xffff_ffff_8000_0000;
/// Where the kernel image is loaded (and linked, at `KERNEL_VBASE + KERNEL_PHYS`).
pub const KERNEL_PHYS: u64 = 0x20_0000;

/// Page-table pages the VMM builds at boot.
pub const BOOT_PT_PHYS: u64 = 0x1000;
pub const BOOT_PT_END: u64 = 0x10_0000;
pub const GDT_PHYS: u64 = 0x10_0000;
pub const IDT_PHYS: u64 = 0x10_1000;
pub const TSS_PHYS: u64 = 0x10_2000;
pub const TSS_STRIDE: u64 = 0x80;
pub const BOOT_INFO_PHYS: u64 = 0x10_4000;
pub const PERCPU_PHYS: u64 = 0x10_5000;
pub const PERCPU_STRIDE: u64 = 0x1000;
/// The CPUID table (`crate::cpuid`), one page.
pub const CPUID_PHYS: u64 = 0x1f_e000;
/// The events page (`crate::events`): device completions posted by the VMM.
pub const EVENTS_PHYS: u64 = 0x1f_f000;
/// End of the boot area.
pub const BOOT_AREA_END: u64 = 0x20_0000;

/// Start of the 32-bit MMIO hole; RAM beyond it continues at `HIGH_RAM_START`.
pub const MMIO_HOLE_START: u64 = 0xc000_0000;
pub const HIGH_RAM_START: u64 = 0x1_0000_0000;
/// Largest supported guest RAM (the boot page tables must fit below `BOOT_PT_END`).
pub const MAX_RAM: u64 = 64 << 30;

/// The local APIC's MMIO page (KVM emulates it).
pub const LAPIC_PHYS: u64 = 0xfee0_0000;
/// Writing a hostcall number here exits to the VMM (no memory behind it).
pub const HOSTCALL_DOORBELL_PHYS: u64 = 0xfef0_0000;
/// The virtio-net device's registers (virtio-mmio version 2, one page: registers
/// from 0, the device's configuration from 0x100), when the VM has one
/// (`BootInfo::net`). In the page after the doorbell, so the direct map's MMIO
/// page already maps it.
pub const VIRTIO_NET_PHYS: u64 = 0xfef0_1000;
/// The 2 MiB page holding the LAPIC, the doorbell and the virtio-net registers,
/// mapped in the direct map.
pub const MMIO_PAGE_PHYS: u64 = 0xfee0_0000;

/// Per-CPU kernel stacks, allocated by the VMM after the kernel image.
pub const KERNEL_STACK_SIZE: u64 = 0x1_0000;
pub const FAULT_STACK_SIZE: u64 = 0x8000;
pub const IST_STACK_SIZE: u64 = 0x4000;
/// The IST region holds three stacks, each a top below the region's top: IST1
/// (exceptions) at the top, IST2 (the APIC timer and the reschedule IPI) this far
/// below it, IST3 (interrupts nobody asked for) this far below it. An exception's
/// ring-3 landing runs on IST1, interrupts on, until it has copied the frame away,
/// so interrupts must land elsewhere.
pub const IST2_BELOW_TOP: u64 = 0x2000;
pub const IST3_BELOW_TOP: u64 = 0x3000;
pub const CPU_STACKS_SIZE: u64 = KERNEL_STACK_SIZE + FAULT_STACK_SIZE + IST_STACK_SIZE;

/// User virtual layout.
pub const STACK_TOP: u64 = 0x7fff_ffe0_0000;
pub const STACK_SIZE: u64 = 0x80_0000;
/// Load address of position-independent programs (static-pie).
pub const PIE_BASE: u64 = 0x5555_5540_0000;
/// Anonymous mappings are placed top-down below this address.
pub const MMAP_TOP: u64 = STACK_TOP - STACK_SIZE - HUGE_PAGE_SIZE;

/// GDT selectors. The user selectors follow the order `syscall`/`sysret` expect.
pub const KERNEL_CS: u16 = 0x08;
pub const KERNEL_DS: u16 = 0x10;
pub const USER_DS: u16 = 0x20 | 3;
pub const USER_CS: u16 = 0x28 | 3;
/// Selector of CPU `n`'s TSS is `TSS_SELECTOR_BASE + 16 * n`.
pub const TSS_SELECTOR_BASE: u16 = 0x30;
/// GDT entries: null, kernel code, kernel data, user code32, user data, user code,
/// then a 16-byte TSS descriptor per CPU.
pub const GDT_ENTRIES: usize = 6 + 2 * crate::MAX_CPUS;

/// Guest-physical address to its direct-map virtual address.
pub const fn direct(phys: u64) -> u64 {
    DIRECT_MAP_BASE + phys
}

/// The virtual address of CPU `cpu`'s per-CPU header.
pub const fn percpu_virt(cpu: u64) -> u64 {
    direct(PERCPU_PHYS + cpu * PERCPU_STRIDE)
}

/// Round `x` up to a multiple of `align` (a power of two).
pub const fn align_up(x: u64, align: u64) -> u64 {
    (x + align - 1) & !(align - 1)
}

/// Round `x` down to a multiple of `align` (a power of two).
pub const fn align_down(x: u64, align: u64) -> u64 {
    x & !(align - 1)
}

const _: () = {
    assert!(PERCPU_PHYS + crate::MAX_CPUS as u64 * PERCPU_STRIDE <= CPUID_PHYS);
    assert!(CPUID_PHYS + PAGE_SIZE <= EVENTS_PHYS);
    assert!(EVENTS_PHYS + PAGE_SIZE <= BOOT_AREA_END);
    assert!(TSS_PHYS + crate::MAX_CPUS as u64 * TSS_STRIDE <= BOOT_INFO_PHYS);
    assert!(GDT_ENTRIES * 8 <= 0x1000);
    assert!(STACK_TOP.is_multiple_of(HUGE_PAGE_SIZE) && PIE_BASE.is_multiple_of(HUGE_PAGE_SIZE));
};
