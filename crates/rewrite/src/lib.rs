//! onering-rewrite: what onering reads out of a program's ELF file before running it,
//! and the load-time rewriting of its `syscall` instructions into calls into the
//! guest kernel. Pure: byte slices in, plans out; no KVM, no I/O, no unsafe code. So
//! it is tested, and fuzzed, on the host; the VMM (`crates/onering`) only copies the
//! result into guest memory.
//!
//! - [`bytes`]: total reads of the untrusted file, the only way the parsers read it.
//! - [`elf`]: the ELF and program headers: is this a static x86-64 executable, and
//!   what is loaded where (exit status 126 and a reason otherwise).
//! - [`functions`]: where functions start and end (symbol table, `.eh_frame`,
//!   `.eh_frame_hdr`), so code is decoded function by function.
//! - [`x86len`]: the instruction-length decoder of the rewriter's first pass.
//! - [`rewrite`]: finding `syscall` sites and planning their patches and trampolines.
//! - [`stack`]: the program's initial stack (argv, envp, auxv), for the VMM's first
//!   program and the kernel's `execve`.
//! - [`testing`]: hand-made ELF files for tests (here and in the VMM's).
//! - [`fuzz`]: a seeded generator, a fuzz driver and the fuzz targets (byte
//!   functions the tests and cargo-fuzz share).
//!
//! Without the default `plan` feature only `bytes`, `elf` and `stack` are built,
//! in `no_std` (the guest kernel parses the programs `execve` loads with them).
#![forbid(unsafe_code)]
#![cfg_attr(not(any(feature = "plan", test)), no_std)]

extern crate alloc;

pub mod bytes;
pub mod elf;
#[cfg(feature = "plan")]
pub mod functions;
#[cfg(feature = "plan")]
pub mod fuzz;
#[cfg(feature = "plan")]
pub mod rewrite;
pub mod stack;
#[cfg(feature = "plan")]
pub mod testing;
#[cfg(feature = "plan")]
pub mod x86len;
