//! This vCPU: its number, the words of its per-CPU page that the ring-0 stubs and
//! the kernel share (reschedule request, timer armed), its `--stats` counters, the
//! TSC and the FS base, and `CurrentSlot`, the kernel's typed per-CPU pointer.
//!
//! The GS base points at the vCPU's per-CPU page (the VMM sets it; ring 0 here
//! cannot `swapgs`, so it never changes). The page starts with the ABI's
//! `PerCpuHeader`; the kernel-owned words live past it at the offsets below. Only
//! this vCPU and its interrupt stubs touch its page, so plain loads and stores are
//! enough; the reschedule word, which an interrupt may set while the kernel clears
//! it, is swapped atomically.
//!
//! On the host (unit tests of the kernel) the same functions exist for one pretend
//! CPU, backed by plain statics.

use onering_abi::MAX_CPUS;

/// Where, in each per-CPU page, `entry::full_return` finds the registers to load.
pub(crate) const FULL_REGS: usize = 0x800;
/// The running task (0 while the CPU runs its idle loop).
pub(crate) const CURRENT_TASK: usize = 0x900;
/// Set by the preemption stub when an interrupt landed in the kernel's own code:
/// the kernel looks at its run queue on its way back to the program.
pub(crate) const RESCHED: usize = 0x908;
/// When (monotonic ns) this CPU's APIC timer is armed to fire; 0 when it is not.
/// The preemption stub clears it.
pub(crate) const TIMER_ARMED: usize = 0x910;
/// The kernel's per-CPU pointer (`CurrentSlot`).
pub(crate) const KERNEL_SLOT: usize = 0x918;
/// The address of this CPU's last page fault: the #PF stub stores CR2 here.
pub(crate) const FAULT_CR2: usize = 0x920;

const _: () = assert!(FULL_REGS + core::mem::size_of::<crate::frame::UserRegs>() <= CURRENT_TASK);
const _: () = assert!(FAULT_CR2 + 8 <= onering_abi::STEAL_TIME_OFFSET as usize);
const _: () = assert!(FAULT_CR2 + 8 <= onering_abi::hostfs::DEFERRED_OFFSET as usize);
const _: () = assert!(core::mem::size_of::<onering_abi::PerCpuHeader>() <= FULL_REGS);

/// The counters of a CPU's header that the kernel (not a ring-0 stub) keeps.
#[derive(Clone, Copy, Debug)]
pub enum Counter {
    LapicWrites,
    Switches,
    /// Page-cache chunks given back under memory pressure.
    Reclaimed,
    /// Exceptions taken in ring 3 (page faults and others).
    Faults,
    /// Address-space switches (`supervisor::set_root`).
    RootLoads,
}

#[cfg(target_os = "none")]
mod imp {
    use super::*;

    /// This CPU's per-CPU page.
    pub(crate) fn page() -> *mut u8 {
        let base: u64;
        // SAFETY: rdgsbase only reads the GS base into a register (the VMM set
        // CR4.FSGSBASE); it touches no memory.
        unsafe { core::arch::asm!("rdgsbase {}", out(reg) base, options(nomem, nostack, preserves_flags)) };
        base as *mut u8
    }

    /// An aligned u64 of this CPU's page at `offset`, read through GS.
    macro_rules! gs_load {
        ($offset:expr) => {{
            let v: u64;
            // SAFETY: GS points at this CPU's per-CPU page (the VMM set the base and
            // mapped the page for the kernel's whole life); `$offset` is an aligned
            // u64 field of it; the load writes nothing.
            unsafe {
                core::arch::asm!("mov {}, gs:[{}]", out(reg) v, const $offset, options(nostack, readonly, preserves_flags))
            };
            v
        }};
    }

    /// Stores `v` into the aligned u64 of this CPU's page at `offset`.
    macro_rules! gs_store {
        ($offset:expr, $v:expr) => {{
            let v: u64 = $v;
            // SAFETY: GS points at this CPU's per-CPU page (the VMM set the base and
            // mapped the page for the kernel's whole life); `$offset` is an aligned
            // u64 field of it that only this CPU (and its own ring-0 stubs, which
            // read it) uses, so a plain store there cannot break anyone else.
            unsafe { core::arch::asm!("mov gs:[{}], {}", const $offset, in(reg) v, options(nostack, preserves_flags)) };
        }};
    }

    #[inline(always)]
    pub fn cpu_id() -> usize {
        gs_load!(onering_abi::percpu_offsets::CPU) as usize % MAX_CPUS
    }

    /// Where the entry stubs put the next system call's or interrupt's frame.
    ///
    /// # Safety
    /// `top` is the top of a kernel stack that belongs to the task this CPU is
    /// about to run, and nothing else runs on it.
    pub(crate) unsafe fn set_kstack_top(top: u64) {
        gs_store!(onering_abi::percpu_offsets::KSTACK_TOP, top)
    }

    pub(crate) fn clear_in_fault() {
        gs_store!(onering_abi::percpu_offsets::IN_FAULT, 0)
    }

    #[inline(always)]
    pub fn resched_pending() -> bool {
        let v: u64;
        // SAFETY: an aligned load through the GS base of a kernel-owned word of this
        // CPU's page (mapped for the kernel's life); it writes nothing.
        unsafe {
            core::arch::asm!("mov {}, gs:[{}]", out(reg) v, const RESCHED, options(nostack, readonly, preserves_flags))
        };
        v != 0
    }

    pub fn take_resched() -> bool {
        let old: u64;
        // SAFETY: RESCHED is an aligned, mapped word of this CPU's page; `xchg` with
        // memory is atomic, so an interrupt on this CPU setting it meanwhile is not
        // lost.
        unsafe {
            core::arch::asm!("xchg {}, gs:[{}]", inout(reg) 0u64 => old, const RESCHED, options(nostack, preserves_flags))
        };
        old != 0
    }

    pub fn timer_armed() -> u64 {
        gs_load!(TIMER_ARMED)
    }

    pub fn set_timer_armed(at: u64) {
        gs_store!(TIMER_ARMED, at)
    }

    pub fn count(c: Counter) {
        count_by(c, 1)
    }

    pub fn count_by(c: Counter, n: u64) {
        let offset = match c {
            Counter::LapicWrites => onering_abi::percpu_offsets::LAPIC_WRITES,
            Counter::Switches => onering_abi::percpu_offsets::SWITCHES,
            Counter::Reclaimed => onering_abi::percpu_offsets::RECLAIMED,
            Counter::Faults => onering_abi::percpu_offsets::FAULTS,
            Counter::RootLoads => onering_abi::percpu_offsets::ROOT_LOADS,
        };
        // GS points at this CPU's header (mapped for the kernel's life); `offset` is
        // one of its u64 counters, which only this CPU writes.
        // SAFETY: one aligned `add` to this CPU's own counter, which an interrupt cannot split.
        unsafe { core::arch::asm!("add qword ptr gs:[{}], {}", in(reg) offset, in(reg) n, options(nostack)) };
    }

    pub fn rdtsc() -> u64 {
        // SAFETY: rdtsc reads the time-stamp counter; no memory, no side effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    pub fn set_fs_base(v: u64) {
        // SAFETY: wrfsbase only changes the FS base, which the kernel itself never
        // uses (its per-CPU data is reached through GS).
        unsafe { core::arch::asm!("wrfsbase {}", in(reg) v, options(nomem, nostack, preserves_flags)) }
    }

    pub fn fs_base() -> u64 {
        let v: u64;
        // SAFETY: rdfsbase reads the FS base into a register.
        unsafe { core::arch::asm!("rdfsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
        v
    }

    /// The running task's address (0: the idle loop).
    #[inline(always)]
    pub(crate) fn current_task_word() -> u64 {
        gs_load!(CURRENT_TASK)
    }

    pub(crate) fn set_current_task_word(p: u64) {
        gs_store!(CURRENT_TASK, p)
    }

    #[inline(always)]
    pub(crate) fn kernel_slot() -> u64 {
        gs_load!(KERNEL_SLOT)
    }

    pub(crate) fn set_kernel_slot(p: u64) {
        gs_store!(KERNEL_SLOT, p)
    }

    /// The address of this CPU's last page fault (CR2, saved by the #PF stub).
    pub fn fault_addr() -> u64 {
        gs_load!(FAULT_CR2)
    }
}

#[cfg(not(target_os = "none"))]
mod imp {
    //! One pretend CPU for host tests.
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

    static RESCHED_FLAG: AtomicU64 = AtomicU64::new(0);
    static TIMER: AtomicU64 = AtomicU64::new(0);
    static FS: AtomicU64 = AtomicU64::new(0);
    static CURRENT: AtomicU64 = AtomicU64::new(0);

    pub fn cpu_id() -> usize {
        0
    }
    /// # Safety
    /// None on the host (nothing uses it); the guest version's contract applies.
    pub(crate) unsafe fn set_kstack_top(_: u64) {}
    pub fn resched_pending() -> bool {
        RESCHED_FLAG.load(Relaxed) != 0
    }
    pub fn take_resched() -> bool {
        RESCHED_FLAG.swap(0, Relaxed) != 0
    }
    pub fn timer_armed() -> u64 {
        TIMER.load(Relaxed)
    }
    pub fn set_timer_armed(at: u64) {
        TIMER.store(at, Relaxed)
    }
    pub fn fault_addr() -> u64 {
        0
    }
    pub fn count(_: Counter) {}
    pub fn count_by(_: Counter, _: u64) {}
    pub fn rdtsc() -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    }
    pub fn set_fs_base(v: u64) {
        FS.store(v, Relaxed)
    }
    pub fn fs_base() -> u64 {
        FS.load(Relaxed)
    }
    pub(crate) fn current_task_word() -> u64 {
        CURRENT.load(Relaxed)
    }
    pub(crate) fn set_current_task_word(p: u64) {
        CURRENT.store(p, Relaxed)
    }
    static SLOT: AtomicU64 = AtomicU64::new(0);
    pub(crate) fn kernel_slot() -> u64 {
        SLOT.load(Relaxed)
    }
    pub(crate) fn set_kernel_slot(p: u64) {
        SLOT.store(p, Relaxed)
    }
}

#[cfg(target_os = "none")]
pub(crate) use imp::{clear_in_fault, page};
pub use imp::{
    count, count_by, cpu_id, fault_addr, fs_base, rdtsc, resched_pending, set_fs_base, set_timer_armed, take_resched,
    timer_armed,
};
pub(crate) use imp::{current_task_word, kernel_slot, set_current_task_word, set_kernel_slot, set_kstack_top};

/// The kernel's one per-CPU pointer that costs a single `%gs` load to read (the
/// current thread): a `&'static T` in a word of the per-CPU page. Only one slot
/// exists, handed out once by [`CurrentSlot::claim`], so the word only ever holds
/// the `T` of that one claim, and reading it back as a `&'static T` is sound.
pub struct CurrentSlot<T: 'static>(core::marker::PhantomData<fn() -> &'static T>);

static SLOT_CLAIMED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

impl<T: Sync + 'static> CurrentSlot<T> {
    /// The slot, the first time this is called (None after).
    pub fn claim() -> Option<CurrentSlot<T>> {
        (!SLOT_CLAIMED.swap(true, core::sync::atomic::Ordering::AcqRel))
            .then_some(CurrentSlot(core::marker::PhantomData))
    }

    /// This CPU's value.
    #[inline(always)]
    pub fn get(&self) -> Option<&'static T> {
        let p = kernel_slot() as *const T;
        // SAFETY: the word is 0 or holds a pointer `set` made from a `&'static T` of
        // this slot's `T` (the only slot, the only writer), valid and shared forever.
        unsafe { p.as_ref() }
    }

    /// Sets this CPU's value.
    pub fn set(&self, v: Option<&'static T>) {
        set_kernel_slot(v.map_or(0, |r| r as *const T as u64));
    }
}

impl<T: 'static> core::fmt::Debug for CurrentSlot<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CurrentSlot")
    }
}
