//! The onering library kernel.
//!
//! It runs in guest ring 3 beside the program it serves: a system call is a
//! function call into [`syscall::dispatch`], not a trip to ring 0. Everything that
//! needs raw pointers or assembly (entry stubs, context switches, user-memory
//! copies, page tables, hostcalls) is the framework crate `onering_arch`; this crate
//! is safe Rust, which the compiler enforces (Cargo.toml forbids the lint).
//!
//! Layers, each using only those before it (docs/design.md has the diagram):
//!
//! 1. `onering_arch` (another crate): the machine.
//! 2. Pure libraries, unit-tested on the host: `errno`, `time` (the clock),
//!    `rng`, `sysnames` (`onering_abi`'s), `strace` (the `--trace` decoder),
//!    `observe` (`--trace` lines and `--stats` counts), `placement`, `futex` (the wait table), `sigframe`,
//!    `fault`, `console` (the output buffer), `pipebuf`, `mm` (VMAs, the address
//!    space, user memory), `vfs` (the file tree), `filelock` (the file-lock
//!    table), `file` (the file and socket interfaces and the descriptor table).
//! 3. Tasks (`task`): threads and the scheduler, processes, the kernel's state
//!    and a system call's context, signal delivery, futex waits, exits, the
//!    console device.
//! 4. File objects (`fs`): pipes, eventfd, epoll, devices, the standard streams,
//!    tree nodes, /proc and /sys; sockets (`net`).
//! 5. System calls (`syscall`): the table and one file of handlers per family.
//! 6. `boot` (guest only): setup and the entry hooks.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

// 2. Pure libraries.
pub mod console;
pub mod errno;
pub mod fault;
pub mod file;
pub mod filelock;
pub mod futex;
pub mod mm;
pub mod observe;
pub mod pipebuf;
pub mod placement;
pub mod rng;
pub mod sigframe;
pub mod strace;
pub use onering_abi::sysnames;
pub mod time;
pub mod vfs;

// 3. Tasks.
pub mod task;

// 4. File objects.
pub mod fs;
pub mod net;

// 5. System calls.
pub mod syscall;

// 6. Boot and the entry hooks.
#[cfg(target_os = "none")]
pub mod boot;
