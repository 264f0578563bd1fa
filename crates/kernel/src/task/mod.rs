//! Tasks: the layer that runs things. Threads and the scheduler, processes, the
//! kernel's state and the context a system call runs in, signal delivery, futex
//! and file-lock waits, how threads and processes end, job-control stops (`job`) and job control on the terminal (`tty`), and the
//! console and stdin devices (which must be able to make a thread wait).
//!
//! It builds on the pure libraries below it (memory, the file tree, the file
//! interface, the signal frame...) and on `onering_arch` for the machine; the file
//! objects (`crate::fs`) and the system calls (`crate::syscall`) build on it.

pub mod console;
pub mod ctx;
pub mod exit;
pub mod filelock;
pub mod futex;
pub mod hostexec;
pub mod itimer;
pub mod job;
pub mod kernel;
pub mod process;
pub mod sched;
pub mod signal;
pub mod stdin;
pub mod thread;
pub mod tty;

pub use ctx::Ctx;
pub use kernel::{kernel, Kernel};
pub use process::Process;
pub use thread::{current, Thread};
