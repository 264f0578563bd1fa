//! onering's kernel framework: every line of unsafe code and assembly the guest
//! kernel needs, behind interfaces that are sound to call from safe code (the
//! pattern of Asterinas's OSTD). The kernel crate above it is
//! `#![forbid(unsafe_code)]`.
//!
//! - `entry`: the first instruction, the ring-0 trap stubs, the ring-3 landings, and
//!   the return with every register chosen; the kernel's hooks are named once with
//!   [`entry_point!`].
//! - `frame`: the user context the entry code saves (pure types).
//! - `cpu`: this vCPU's number and per-CPU words, counters, TSC, FS base, and
//!   typed per-CPU pointers; `sref`: a changeable `&'static T`.
//! - `cpuid`: rewritten `cpuid` instructions answered from the VMM's table.
//! - `task`: kernel stacks, context switches, extended register state.
//! - `user`: fallible copies to and from the program's memory (faults caught).
//! - `mm`: 2 MiB chunks of guest RAM (owned tokens) and the page tables' user half.
//! - `boot`, `heap`, `hostcall`, `events`, `supervisor`, `panic`: boot resources,
//!   the kernel heap, the VMM doorbell, the VMM's device completions, the
//!   privileged operations, the panic handler.
//! - `sync`: the kernel's lock, whose long waits yield the host CPU.
//! - `virtio`: the network device (`virtio-drivers` over the MMIO transport).
//!
//! Layering: this crate names nothing above it. It depends only on `onering-abi`
//! (the VMM interface) and three no_std crates (spin locks, a list allocator, the
//! virtio drivers).
//!
//! On the host (the kernel's unit tests) the crate builds too: the pure parts work
//! as in the guest; the machine parts are stand-ins for one pretend CPU (no context
//! switch, no user memory, hostcalls answered by a test handler).
#![cfg_attr(target_os = "none", no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
// Host builds leave the machine parts unused.
#![cfg_attr(not(target_os = "none"), allow(dead_code, unused_imports))]

extern crate alloc;

pub mod boot;
pub mod cpu;
pub mod cpuid;
#[cfg(target_os = "none")]
pub mod entry;
pub mod events;
pub mod frame;
pub mod heap;
pub mod hostcall;
pub mod mm;
pub mod panic;
pub mod sref;
pub mod supervisor;
pub mod sync;
pub mod task;
pub mod user;
pub mod virtio;

pub use frame::{FaultFrame, SyscallFrame, UserRegs};
/// Names the kernel's five entry hooks, which the assembly calls:
/// - `main`: `fn(Option<onering_arch::boot::Boot>) -> !`, each CPU's first Rust
///   code (CPU 0 gets the boot resources, the others `None`);
/// - `syscall`: `fn(&mut SyscallFrame)`, every system call, on the thread's kernel
///   stack; it leaves the result in `rax`;
/// - `syscall_observed`: the same, when the VMM chose the observed entry
///   (`--trace`, `--stats`): it may time, count and trace the call;
/// - `fault`: `fn(&FaultFrame) -> !`, every exception raised in ring 3, on the
///   CPU's fault stack;
/// - `interrupt`: `fn(&FaultFrame) -> !`, a timer or reschedule interrupt that
///   preempted the program, on its thread's kernel stack.
///
/// Used once, in the kernel image's `main.rs`. The hooks are plain safe Rust
/// functions; the glue (a jump per hook) is assembly this crate owns.
#[macro_export]
macro_rules! entry_point {
    (main: $main:path, syscall: $syscall:path, syscall_observed: $observed:path, fault: $fault:path, interrupt: $interrupt:path $(,)?) => {
        #[allow(improper_ctypes_definitions)]
        extern "C" fn __onering_main(boot: &mut Option<$crate::boot::Boot>) -> ! {
            $main(boot.take())
        }
        extern "C" fn __onering_syscall(frame: &mut $crate::frame::SyscallFrame) {
            $syscall(frame)
        }
        extern "C" fn __onering_syscall_observed(frame: &mut $crate::frame::SyscallFrame) {
            $observed(frame)
        }
        extern "C" fn __onering_fault(frame: &$crate::frame::FaultFrame) -> ! {
            $fault(frame)
        }
        extern "C" fn __onering_interrupt(frame: &$crate::frame::FaultFrame) -> ! {
            $interrupt(frame)
        }
        core::arch::global_asm!(
            ".pushsection .text.entry, \"ax\"",
            ".global onering_hook_main",
            "onering_hook_main: jmp {main}",
            ".global onering_hook_syscall",
            "onering_hook_syscall: jmp {syscall}",
            ".global onering_hook_syscall_observed",
            "onering_hook_syscall_observed: jmp {observed}",
            ".global onering_hook_fault",
            "onering_hook_fault: jmp {fault}",
            ".global onering_hook_interrupt",
            "onering_hook_interrupt: jmp {interrupt}",
            ".popsection",
            main = sym __onering_main,
            syscall = sym __onering_syscall,
            observed = sym __onering_syscall_observed,
            fault = sym __onering_fault,
            interrupt = sym __onering_interrupt,
        );
    };
}
