//! The onering library kernel.
//!
//! It runs in guest ring 3 beside the program it serves: a system call is a function
//! call into [`syscall::dispatch`], not a trip to ring 0. A tiny ring-0 part (entry
//! stubs in [`arch`]) handles only what the hardware forces: the `syscall` trap and
//! exceptions, both of which it hands straight back to ring 3.
//!
//! Pure logic (memory bookkeeping, the console buffer, the syscall table) builds and
//! is unit-tested on the host; the parts that touch the machine build only for
//! `x86_64-unknown-none`. All unsafe code lives in `arch`.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_code)]

extern crate alloc;

pub mod console;
pub mod errno;
pub mod fault;
pub mod fs;
pub mod futex;
pub mod mm;
pub mod placement;
pub mod rng;
pub mod signal;
pub mod syscall;
pub mod time;

#[cfg(target_os = "none")]
#[allow(unsafe_code)]
pub mod arch;
#[cfg(target_os = "none")]
pub mod boot;
#[cfg(target_os = "none")]
pub mod kernel;
#[cfg(target_os = "none")]
pub mod sched;
