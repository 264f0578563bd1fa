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
    let mut buf = Buf { b: [0; 2048], n: 0 };
    let _ = write!(buf, "{info}");
    if let Some(note) = NOTE.get() {
        note(&mut buf, &Panicking(()));
    }
    crate::hostcall::hostcall(onering_abi::Hostcall::Panic, &[buf.b.as_ptr() as u64, buf.n as u64]);
    halt_forever()
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
