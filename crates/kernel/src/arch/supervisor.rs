//! The few operations only ring 0 can do, behind one interface.
//!
//! On PVM (our machines) ring 0 cannot execute `invlpg`, `mov cr3`, `hlt` or `wrmsr`:
//! they raise #GP once ring 3 has run. The defaults work there: the hypervisor
//! write-protects the page tables it shadows, so a page-table store already drops the
//! stale translation, and halting (a later issue) is a hostcall. On hardware KVM
//! (`flags::PRIVILEGED_RING0`, set by the VMM when the host CPU has VMX or SVM), the
//! TLB is the guest's own: a flush traps into ring 0 through `int $0x81`, whose stub
//! reloads CR3.

use core::sync::atomic::{AtomicBool, Ordering};

static PRIVILEGED: AtomicBool = AtomicBool::new(false);

/// Chooses the implementation from the boot flags.
pub fn init(flags: u64) {
    PRIVILEGED.store(flags & onering_abi::flags::PRIVILEGED_RING0 != 0, Ordering::Relaxed);
}

/// Drops any cached translation of `virt` after its page-table entry changed.
pub fn flush_tlb(_virt: u64) {
    if PRIVILEGED.load(Ordering::Relaxed) {
        // vector 0x81 is the TLB-flush stub (a DPL-3 gate the VMM installs);
        // it changes no register and returns with iretq.
        // SAFETY: as explained above.
        unsafe { core::arch::asm!("int 0x81", options(nostack)) };
    }
}
