//! Where the VMM puts things in guest-physical memory, beyond the fixed addresses of
//! `onering_abi::layout`: the RAM ranges around the 32-bit MMIO hole, the per-CPU
//! stacks after the kernel image, where a vCPU starts, where a fatal exception's
//! frame lies and where each vCPU's hostcall block is. Plain arithmetic shared by the
//! loader (which lays memory out), `vstate` (which starts vCPUs) and the exit handler
//! (which reads what the guest left there); it depends on nothing but the ABI and the
//! embedded kernel's addresses.

use crate::embedded::kernel_image;
use onering_abi::layout::{self, align_up, direct, HUGE_PAGE_SIZE};
use vm_memory::GuestAddress;

/// Guest-physical RAM ranges for `size` bytes: below the 32-bit MMIO hole, then above 4 GiB.
pub fn ram_ranges(size: u64) -> Vec<(GuestAddress, usize)> {
    let low = size.min(layout::MMIO_HOLE_START);
    let mut r = vec![(GuestAddress(0), low as usize)];
    if size > low {
        r.push((GuestAddress(layout::HIGH_RAM_START), (size - low) as usize));
    }
    r
}

/// Guest-physical start of the per-CPU stacks: the first chunk after the kernel.
pub fn stacks_base() -> u64 {
    align_up(kernel_image::MEM_END - layout::KERNEL_VBASE, HUGE_PAGE_SIZE)
}

/// Guest-physical tops of the stacks of `cpu`: (kernel stack, fault stack, IST).
pub fn cpu_stack_tops(cpu: u64) -> (u64, u64, u64) {
    let k = stacks_base() + cpu * layout::CPU_STACKS_SIZE + layout::KERNEL_STACK_SIZE;
    let f = k + layout::FAULT_STACK_SIZE;
    (k, f, f + layout::IST_STACK_SIZE)
}

/// Where a fatal exception's frame is (vector, error code, rip, cs, rflags, rsp, ss):
/// the top of the CPU's IST stack, where the ring-0 stub leaves it.
pub fn fatal_frame_phys(cpu: u64) -> u64 {
    cpu_stack_tops(cpu).2 - 7 * 8
}

/// The kernel's first-instruction state for CPU `cpu`: (entry, stack, rdi).
pub fn cpu_start(cpu: u64) -> (u64, u64, u64) {
    let (kstack, _, _) = cpu_stack_tops(cpu);
    (kernel_image::ENTRY, direct(kstack), direct(layout::BOOT_INFO_PHYS))
}

/// Guest-physical address of vCPU `cpu`'s hostcall block (in its per-CPU header).
pub fn hostcall_block(cpu: u64) -> u64 {
    layout::PERCPU_PHYS + cpu * layout::PERCPU_STRIDE + onering_abi::percpu_offsets::HOSTCALL as u64
}

/// Guest-physical address of vCPU `cpu`'s deferred host-file operations (in its
/// per-CPU page, `onering_abi::hostfs::DEFERRED_OFFSET`).
pub fn deferred_ops(cpu: u64) -> u64 {
    layout::PERCPU_PHYS + cpu * layout::PERCPU_STRIDE + onering_abi::hostfs::DEFERRED_OFFSET
}

/// Guest-physical address of vCPU `cpu`'s poll slot (in its per-CPU page,
/// `onering_abi::hostcall::PollSlot`).
pub fn poll_slot(cpu: u64) -> u64 {
    layout::PERCPU_PHYS + cpu * layout::PERCPU_STRIDE + onering_abi::hostcall::POLL_OFFSET
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ram_skips_the_mmio_hole() {
        assert_eq!(ram_ranges(256 << 20), [(GuestAddress(0), 256 << 20)]);
        let r = ram_ranges(4 << 30);
        assert_eq!(r[0], (GuestAddress(0), layout::MMIO_HOLE_START as usize));
        assert_eq!(r[1], (GuestAddress(layout::HIGH_RAM_START), ((4 << 30) - layout::MMIO_HOLE_START) as usize));
        const { assert!(layout::MMIO_HOLE_START <= layout::LAPIC_PHYS && layout::HOSTCALL_DOORBELL_PHYS < (4 << 30)) };
    }

    #[test]
    fn stacks_follow_the_kernel_and_do_not_overlap() {
        assert!(stacks_base() >= kernel_image::MEM_END - layout::KERNEL_VBASE);
        let (k0, f0, i0) = cpu_stack_tops(0);
        assert!(k0 < f0 && f0 < i0 && i0 <= cpu_stack_tops(1).0 - layout::KERNEL_STACK_SIZE);
        assert!(fatal_frame_phys(0) < i0);
    }
}
