//! What a CPU exception in the program means: the signal Linux would send.

use crate::sigframe::sig;

/// Exception vectors.
pub mod vector {
    pub const DIVIDE: u64 = 0;
    pub const DEBUG: u64 = 1;
    pub const BREAKPOINT: u64 = 3;
    pub const OVERFLOW: u64 = 4;
    pub const BOUND: u64 = 5;
    pub const INVALID_OPCODE: u64 = 6;
    pub const DEVICE_NOT_AVAILABLE: u64 = 7;
    pub const SEGMENT_NOT_PRESENT: u64 = 11;
    pub const STACK: u64 = 12;
    pub const GENERAL_PROTECTION: u64 = 13;
    pub const PAGE_FAULT: u64 = 14;
    pub const X87: u64 = 16;
    pub const ALIGNMENT: u64 = 17;
    pub const SIMD: u64 = 19;
}

/// The `si_code` Linux reports with the signal for exception `vector`.
pub fn si_code(vector: u64) -> i32 {
    use crate::sigframe::code::*;
    use vector::*;
    match vector {
        DIVIDE => FPE_INTDIV,
        INVALID_OPCODE => ILL_ILLOPN,
        ALIGNMENT => BUS_ADRALN,
        DEBUG | BREAKPOINT => TRAP_BRKPT,
        PAGE_FAULT => SEGV_MAPERR,
        // #GP and friends: SI_KERNEL, as Linux reports a general protection fault.
        _ => 0x80,
    }
}

/// The signal Linux delivers for exception `vector` raised by user code.
pub fn signal_for(vector: u64) -> u64 {
    use vector::*;
    match vector {
        DIVIDE | X87 | SIMD => sig::SIGFPE,
        DEBUG | BREAKPOINT => sig::SIGTRAP,
        INVALID_OPCODE => sig::SIGILL,
        ALIGNMENT => sig::SIGBUS,
        OVERFLOW | BOUND | SEGMENT_NOT_PRESENT | STACK | GENERAL_PROTECTION | PAGE_FAULT => sig::SIGSEGV,
        _ => sig::SIGKILL,
    }
}

/// How many page faults in a row on one page whose mapping is in place a thread
/// runs the instruction again before the fault is the program's (SIGSEGV): the
/// hypervisor may deliver a fault for a mapping it has not caught up with yet
/// (another vCPU just changed the table; PVM's specification allows spurious
/// faults and promises progress on retry), and since exceptions stopped exiting
/// to the VMM the retry comes within microseconds. A mapping that keeps faulting
/// (a protection the tables do not show) still ends as a signal.
pub const SPURIOUS_RETRIES: u64 = 16;

/// Records a fault at `addr` that found its mapping in place in `last` (a
/// thread's word: the page and a count, in its low 12 bits) and says whether to
/// run the instruction again. Any other kind of fault resets the word to
/// `u64::MAX`.
pub fn retry_spurious(last: &core::sync::atomic::AtomicU64, addr: u64) -> bool {
    use core::sync::atomic::Ordering::Relaxed;
    let page = addr & !0xfff;
    let before = last.load(Relaxed);
    let n = if before != u64::MAX && before & !0xfff == page { (before & 0xfff) + 1 } else { 1 };
    last.store(page | n.min(0xfff), Relaxed);
    n <= SPURIOUS_RETRIES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spurious_faults_are_retried_a_bounded_number_of_times() {
        let last = core::sync::atomic::AtomicU64::new(u64::MAX);
        for _ in 0..SPURIOUS_RETRIES {
            assert!(retry_spurious(&last, 0x40_1880));
        }
        assert!(!retry_spurious(&last, 0x40_1884), "the same page, once too often");
        assert!(retry_spurious(&last, 0x40_2000), "another page starts again");
        last.store(u64::MAX, core::sync::atomic::Ordering::Relaxed);
        assert!(retry_spurious(&last, 0x40_2000));
    }

    #[test]
    fn linux_mapping() {
        assert_eq!(signal_for(vector::PAGE_FAULT), sig::SIGSEGV);
        assert_eq!(signal_for(vector::GENERAL_PROTECTION), sig::SIGSEGV);
        assert_eq!(signal_for(vector::INVALID_OPCODE), sig::SIGILL);
        assert_eq!(signal_for(vector::DIVIDE), sig::SIGFPE);
        assert_eq!(signal_for(vector::BREAKPOINT), sig::SIGTRAP);
        assert_eq!(signal_for(vector::ALIGNMENT), sig::SIGBUS);
        assert_eq!(signal_for(8), sig::SIGKILL);
    }
}
