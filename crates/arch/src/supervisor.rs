//! The few operations that need ring 0 or the hypervisor, behind one interface:
//! TLB flushes, address-space switches, halting an idle vCPU, kicking a halted
//! one, interrupting a running one, and arming this vCPU's timer.
//!
//! On PVM (our machines) ring 0 entered by `syscall` cannot execute `invlpg`,
//! `mov cr3`, `hlt`, `sti` or `wrmsr`: they raise #GP once ring 3 has run. Ring 0
//! entered through the IDT is emulated instruction by instruction instead, and
//! there `mov cr3` works (entry.rs). The defaults work there:
//! - TLB: the hypervisor write-protects the page tables it shadows, so a page-table
//!   store already drops the stale translation on every vCPU.
//! - Address-space switch (fork's processes each have page tables of their own,
//!   [`set_root`]): a supervisor call, a `ud2` at a known kernel address whose #UD
//!   stub loads CR3 and returns (~8 µs here: the exception's delivery and six
//!   emulated instructions; the `SetRoot` hostcall it replaced, an exit and two
//!   ioctls in the VMM, cost 35-90 µs). The root is also published in this vCPU's
//!   poll slot, which the VMM translates the vCPU's hostcall arguments through.
//! - Halt and kick: hostcalls (`Halt`, `Kick`); the vCPU thread sleeps in the VMM.
//!   An exit costs ~18 µs, which is why the scheduler spins before it halts and
//!   kicks only vCPUs that really halted.
//! - Interrupting a running vCPU (reschedule IPI) and the one-shot timer: stores to
//!   the local APIC's MMIO page, which KVM's in-kernel APIC handles (the VMM set the
//!   APIC up: timer vector, one-shot, 1 count per ns), one exit each.
//!
//! - Steal time: KVM's steal-time record in each vCPU's per-CPU page (the VMM
//!   enabled it with `KVM_SET_MSRS`), which KVM updates as the vCPU enters the
//!   guest; [`steal_ns`] reads any vCPU's. PVM keeps `steal` (measured equal to the
//!   vCPU thread's host run-queue wait) but never sets `preempted`, so a waiter
//!   cannot tell that another vCPU is off its core right now, only that vCPUs
//!   have been kept waiting recently.
//!
//! On hardware KVM (`flags::PRIVILEGED_RING0`, set by the VMM when the host CPU has
//! VMX or SVM) the TLB is the guest's own: after a page-table edit the kernel
//! reloads CR3 with the second supervisor call (ring 0 runs natively there, so
//! the calls cost a trap each). Halting there could use `hlt` and the APIC (no
//! exit to the VMM); it uses the hostcalls, which work on both, until we can
//! measure that variant on such a machine.

use crate::cpu::{count, cpu_id, Counter};
use crate::hostcall::hostcall;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use onering_abi::{lapic, vectors, Hostcall, MAX_CPUS};

static PRIVILEGED: AtomicBool = AtomicBool::new(false);

/// Chooses the implementation from the boot flags.
pub(crate) fn init(flags: u64) {
    PRIVILEGED.store(flags & onering_abi::flags::PRIVILEGED_RING0 != 0, Ordering::Relaxed);
}

// SAFETY: defined in entry.rs's assembly: a `ud2` the #UD stub recognizes, then
// `ret`. `load` loads rax into CR3; `flush` reloads CR3 (clobbering rax). Neither
// touches the stack beyond the call's return address, nor any other register.
extern "C" {
    fn onering_supervisor_load();
    fn onering_supervisor_flush();
}

/// Drops any cached translation after a page-table entry changed.
pub(crate) fn flush_tlb() {
    #[cfg(target_os = "none")]
    if PRIVILEGED.load(Ordering::Relaxed) {
        // SAFETY: the flush call reloads CR3 with the root already loaded (the same translations, minus the stale ones) and clobbers only rax.
        unsafe { core::arch::asm!("call {f}", f = sym onering_supervisor_flush, out("rax") _) };
    }
}

/// What one [`set_root`] to another address space costs, roughly (ns): on PVM the
/// supervisor call (~8 µs) and the shadow entries PVM fills again for the new root
/// (measured with `bench/proc.sh`'s ping-pong, docs/perf.md); on hardware KVM a
/// trap, a `mov cr3` and the TLB refilled after it. The scheduler weighs a switch
/// against waiting with this.
pub fn switch_cost_ns() -> u64 {
    if PRIVILEGED.load(Ordering::Relaxed) {
        2_000
    } else {
        SWITCH_COST_PVM_NS
    }
}

/// [`switch_cost_ns`] on PVM.
const SWITCH_COST_PVM_NS: u64 = 25_000;

/// Makes this vCPU translate through the page tables rooted at `root` (an
/// address space's `mm::PageTables::root`, whose upper half is the kernel's):
/// a context switch to a thread of another address space. The root is published
/// in this vCPU's poll slot first (the VMM translates the vCPU's hostcall
/// arguments through it), then loaded by the supervisor call. The caller skips it
/// when the vCPU runs that root already, so a program that never forks never
/// calls it.
pub fn set_root(root: &crate::mm::PageTables) {
    let root = root.root();
    if root == 0 {
        return;
    }
    count(Counter::RootLoads);
    #[cfg(target_os = "none")]
    {
        crate::hostcall::poll_root(root);
        // SAFETY: `root` is a live space's root page (held by `PageTables` until released) whose upper half maps the kernel as every root does, so the code and stack in use stay mapped; the call clobbers only rax.
        unsafe { core::arch::asm!("call {f}", f = sym onering_supervisor_load, inout("rax") root => _) };
    }
}

/// Halts this vCPU for at most `ns` nanoseconds or until [`kick`]ed (a kick sent
/// since the last halt makes it return at once).
pub fn halt(ns: u64) {
    // (Host-file closes and unlocks waiting for a hostcall go first: the VM may
    // idle for long.)
    crate::hostcall::fs::flush();
    hostcall(Hostcall::Halt, &[ns]);
}

/// Wakes vCPU `cpu` from [`halt`], starting it if it never ran.
pub fn kick(cpu: usize) {
    hostcall(Hostcall::Kick, &[cpu as u64]);
}

/// Gives this vCPU thread's host CPU away once (`sync`: a long wait on another
/// vCPU that the host may have preempted). The VMM writes no result.
pub fn yield_host() {
    hostcall(Hostcall::Yield, &[]);
}

/// Stores `v` into local-APIC register `reg` (an offset in `onering_abi::lapic`).
fn lapic_write(reg: u64, v: u32) {
    #[cfg(target_os = "none")]
    {
        use onering_abi::layout::{direct, LAPIC_PHYS};
        // SAFETY: the APIC's page is mapped uncached in the direct map (the VMM maps
        // the 2 MiB MMIO page holding it) and no memory is behind it: KVM's APIC
        // emulation handles the store; each vCPU reaches its own APIC there.
        unsafe { core::ptr::write_volatile((direct(LAPIC_PHYS) + (reg & 0xff0)) as *mut u32, v) }
    }
    #[cfg(not(target_os = "none"))]
    let _ = (reg, v);
    count(Counter::LapicWrites);
}

/// The destination last written to each vCPU's ICR high half (+1; 0 = none).
static ICR_DEST: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Interrupts vCPU `cpu` (not this one) with the reschedule vector: it looks at
/// its run queue and at its thread's pending signals.
pub fn reschedule(cpu: usize) {
    let me = cpu_id();
    // The APIC ID is the vCPU number (KVM's default). The high half keeps its
    // value, so it is written only when the destination changes.
    if ICR_DEST[me].swap(cpu as u32 + 1, Ordering::Relaxed) != cpu as u32 + 1 {
        lapic_write(lapic::ICR_HIGH, (cpu as u32) << 24);
    }
    lapic_write(lapic::ICR_LOW, lapic::ICR_FIXED | u32::from(vectors::RESCHEDULE));
}

/// Arms this vCPU's one-shot timer to fire in `ns` nanoseconds (1 ns to ~4.3 s).
pub fn arm_timer(ns: u64) {
    lapic_write(lapic::TIMER_INITIAL, ns.clamp(1, u64::from(u32::MAX)) as u32);
}

/// How long (ns) vCPU `cpu`'s host thread has waited, runnable, for a host CPU so
/// far, as KVM last recorded it (0 when the host's KVM keeps no record).
pub fn steal_ns(cpu: usize) -> u64 {
    #[cfg(target_os = "none")]
    {
        use onering_abi::layout::{direct, PERCPU_PHYS, PERCPU_STRIDE};
        let rec = direct(PERCPU_PHYS + cpu as u64 * PERCPU_STRIDE + onering_abi::STEAL_TIME_OFFSET);
        let version = rec + 8;
        loop {
            // The record lies in vCPU `cpu`'s per-CPU page, guest RAM that the
            // direct map covers and nothing frees; KVM writes it between two updates
            // of `version` (odd while it writes): a torn read is retried.
            // SAFETY: an aligned volatile read of the record's `version` word, in mapped RAM.
            let v0 = unsafe { core::ptr::read_volatile(version as *const u32) };
            // SAFETY: an aligned volatile read of `steal`, the record's first word, in mapped RAM.
            let steal = unsafe { core::ptr::read_volatile(rec as *const u64) };
            // SAFETY: an aligned volatile read of the record's `version` word, in mapped RAM.
            let v1 = unsafe { core::ptr::read_volatile(version as *const u32) };
            if v0 == v1 && v0 & 1 == 0 {
                return steal;
            }
            core::hint::spin_loop();
        }
    }
    #[cfg(not(target_os = "none"))]
    {
        let _ = cpu;
        0
    }
}
