//! The kernel's panic handler: the message (and whatever the kernel's registered
//! note adds: which thread, in which system call) goes to the VMM with the `Panic`
//! hostcall, which ends the VM with status 125. Formatting uses a fixed buffer: the
//! heap may be what broke.

use core::fmt::Write;
use spin::Once;

/// Adds context to a panic message (the kernel registers one at boot). The token
/// unlocks what may only be looked at when nothing will run again
/// (`Task::syscall_frame`).
pub type Note = fn(&mut dyn Write, &Panicking);

/// Proof that the kernel is panicking: made only by the panic handler.
#[derive(Debug)]
pub struct Panicking(());

static NOTE: Once<Note> = Once::new();

/// Registers what a panic message ends with.
pub fn set_note(note: Note) {
    NOTE.call_once(|| note);
}

struct Buf {
    b: [u8; 2048],
    n: usize,
}

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let take = s.len().min(self.b.len() - self.n);
        self.b[self.n..self.n + take].copy_from_slice(&s.as_bytes()[..take]);
        self.n += take;
        Ok(())
    }
}

/// One panic at a time: a second CPU (or a panic inside the note) just waits.
static PANICKING: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    if PANICKING.swap(true, core::sync::atomic::Ordering::AcqRel) {
        loop {
            core::hint::spin_loop();
        }
    }
    if on_program_stack() {
        // Kernel code runs only on kernel stacks: this is kernel code the program
        // jumped into, which went astray. The program's fault (SIGSEGV), not the
        // kernel's; the address it jumped to is not known any more.
        crate::hostcall::hostcall(onering_abi::Hostcall::Killed, &[11, 0, 0]);
        halt_forever()
    }
    let mut buf = Buf { b: [0; 2048], n: 0 };
    let _ = write!(buf, "{info}");
    if let Some(note) = NOTE.get() {
        note(&mut buf, &Panicking(()));
    }
    let mut frames = [0u64; onering_abi::hostcall::MAX_BACKTRACE];
    let n = backtrace(&mut frames);
    crate::hostcall::hostcall(
        onering_abi::Hostcall::Panic,
        &[buf.b.as_ptr() as u64, buf.n as u64, frames.as_ptr() as u64, n as u64],
    );
    halt_forever()
}

/// The return addresses of the call stack, innermost first, by the frame-pointer
/// chain (the kernel is built with frame pointers). Only frames on the stack the
/// panic runs on are read, so a broken chain ends the walk instead of faulting: a
/// thread's 32 KiB-aligned kernel stack in the direct map, or the CPU's stacks in
/// the kernel image's mapping.
#[cfg(target_os = "none")]
fn backtrace(out: &mut [u64]) -> usize {
    use onering_abi::layout::{DIRECT_MAP_BASE, KERNEL_VBASE};
    let (sp, mut fp): (u64, u64);
    // SAFETY: reads two registers; no memory is touched.
    unsafe {
        core::arch::asm!("mov {}, rsp", "mov {}, rbp", out(reg) sp, out(reg) fp, options(nomem, nostack, preserves_flags))
    };
    let top = if sp >= KERNEL_VBASE {
        // A CPU's stacks: well inside the image's mapping; bounded by the largest.
        sp.saturating_add(onering_abi::layout::KERNEL_STACK_SIZE)
    } else if sp >= DIRECT_MAP_BASE {
        (sp | (crate::task::KSTACK_SIZE - 1)) + 1
    } else {
        return 0;
    };
    let mut n = 0;
    while n < out.len() && fp >= sp && fp.is_multiple_of(8) && fp.checked_add(16).is_some_and(|e| e <= top) {
        // SAFETY: [fp, fp + 16) lies on the stack this code runs on, between the
        // stack pointer and the stack's top (checked just above): mapped memory.
        let (next, ret) = unsafe { ((fp as *const u64).read_volatile(), (fp as *const u64).add(1).read_volatile()) };
        if ret < KERNEL_VBASE {
            break;
        }
        out[n] = ret;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

/// Whether the stack pointer lies in the program's half of the address space.
#[cfg(target_os = "none")]
fn on_program_stack() -> bool {
    let sp: u64;
    // SAFETY: reads the stack pointer into a register; no memory is touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    (sp as i64) >= 0
}

/// The VMM never resumes a vCPU after Exit, Killed or Panic; if it somehow did,
/// spinning is the only safe thing left.
pub fn halt_forever() -> ! {
    loop {
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_truncates() {
        let mut b = Buf { b: [0; 2048], n: 0 };
        for _ in 0..300 {
            let _ = write!(b, "0123456789");
        }
        assert_eq!(b.n, 2048);
    }
}
