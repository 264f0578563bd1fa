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
//! - [`testing`]: hand-made ELF files for tests (here and in the VMM's).
//! - [`fuzz`]: a seeded generator, a fuzz driver and the fuzz targets (byte
//!   functions the tests and cargo-fuzz share).
#![forbid(unsafe_code)]

pub mod bytes;
pub mod elf;
pub mod functions;
pub mod fuzz;
pub mod rewrite;
pub mod testing;
pub mod x86len;
