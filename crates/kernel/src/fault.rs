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

#[cfg(test)]
mod tests {
    use super::*;

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
