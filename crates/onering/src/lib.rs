//! onering's VMM, as a library: everything but the process entry (`main.rs`, which
//! only calls [`cli::main`]). It builds one KVM virtual machine for one static
//! Linux program and serves it: the guest kernel (`crates/kernel`) runs the program
//! in guest ring 3, and asks the VMM for what it cannot do itself through hostcalls.
//!
//! Modules by layer, each using only those below it (`tests/layers.rs` checks):
//!
//! - `cli`: options, exit statuses, messages.
//! - `oci`: the OCI runtime command line (runc's, for podman and containerd):
//!   bundles become `onering run` processes.
//! - `builder`: builds the VM from a `VmConfig` and starts it.
//! - `vstate`: KVM's VM and vCPU state: file descriptors, guest memory, vCPU
//!   threads, halting and kicking.
//! - `exit`: what to do when a vCPU exits; hostcalls.
//! - `hostfs`: the host file server (`-v` volumes, `--rootfs DIR`) behind the `Fs`
//!   hostcall.
//! - `devices`: the MMIO bus and the devices on it.
//! - `event_loop`: an epoll thread on which device back ends wait for file
//!   descriptors (started only when one registers).
//! - `loader`: the guest's memory layout at boot: kernel, program, initial stack,
//!   boot info, `--rootfs`.
//! - `arch`: x86 machine state: page tables, descriptor tables, registers, CPUID.
//! - `observe`: `--trace` lines, `--stats` counters and summary, `--perf`.
//! - `layout`, `embedded`, `trace`, `sys`: where things go in guest memory, the
//!   embedded kernel and vDSO, boot-phase timing, and the only unsafe code (host
//!   calls the standard library and rust-vmm crates do not wrap).
//!
//! - `plancache`: rewrite plans kept on disk, named by content.
//!
//! The program file is parsed, and its `syscall` instructions rewritten, by the pure
//! crate `onering_rewrite`. See docs/design.md (The VMM).
#![deny(unsafe_code)]

/// A message of onering's own on stderr. Never panics: a closed stderr must not
/// turn the program's exit status into an abort.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}

macro_rules! say_raw {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($t)*);
    }};
}

pub mod arch;
pub mod builder;
pub mod cli;
pub mod devices;
pub mod embedded;
pub mod event_loop;
pub mod exit;
pub mod hostfs;
pub mod layout;
pub mod loader;
pub mod observe;
pub mod oci;
pub mod plancache;
pub mod profile;
pub mod sys;
pub mod trace;
pub mod vstate;
