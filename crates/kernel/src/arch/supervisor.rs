//! The few operations only ring 0 could do on real hardware, behind one interface.
//!
//! On PVM (our machines) ring 0 cannot execute `hlt`, `invlpg` or `wrmsr`: they raise
//! #GP once ring 3 has run. The default implementations work there: the hypervisor
//! write-protects shadowed page tables, so a page-table store already drops the stale
//! translation and no flush is needed; halting (a later issue) is a hostcall. On
//! hardware KVM (`flags::PRIVILEGED_RING0`) a ring-0 variant can use `invlpg`/`hlt`.

/// Drops any cached translation of `virt` after its page-table entry changed.
pub fn flush_tlb(_virt: u64) {
    // PVM: nothing to do (see the module note). Hardware KVM would trap into ring 0
    // and `invlpg`; not yet wired, since no machine here can run it.
}
