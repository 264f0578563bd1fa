//! The host's stdin as a device (`-i`): the guest asks (`StdinRequest` hostcall),
//! the VMM answers when the host has input, and no vCPU ever waits for it.
//!
//! A request names a guest buffer (guest-virtual, translated through the guest's
//! page tables, as every hostcall address) and a length of at most 64 KiB. The
//! hostcall returns at once; the request waits on the event loop for the host's
//! stdin to be readable, then one `read(2)` fills (part of) the buffer, the result
//! goes to the events page (`onering_abi::events`: the result word, then the
//! device's pending bit), and the guest is woken: every vCPU gets a (sticky) kick,
//! which wakes a halted one and makes a halting one return at once, and vCPU 0
//! gets an interrupt (the reschedule vector, by an MSI through KVM's in-kernel
//! APIC), in case every vCPU is busy running the program. The guest's scheduler
//! takes the pending bit and wakes the reader.
//!
//! A request of length 0 is a watch (the guest's `poll` of stdin): the same wait,
//! but nothing is read: the VMM posts `STDIN_READY` once the host's stdin is
//! readable, or at end of file.
//!
//! A stdin epoll cannot watch (a regular file, /dev/null) is read at once, on the
//! vCPU's thread: such reads do not wait. Reads take exactly what was asked, no
//! more (a file's offset is the program's: it may `lseek` its stdin). Without `-i` a request is EBADF: the VMM,
//! not only the guest kernel, keeps the host's stdin from a program that was not
//! given it.

use crate::arch::translate;
use crate::event_loop::{LazyEventLoop, Next};
use onering_abi::{events, layout};
use std::io::Read;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileMemory};

/// Largest request.
pub const MAX_REQUEST: u64 = 64 * 1024;
const EBADF: i64 = 9;
const EFAULT: i64 = 14;
const EBUSY: i64 = 16;
const EIO: i64 = 5;
const EINVAL: i64 = 22;

/// What the guest asked for (a length of 0: only a watch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    virt: u64,
    len: u64,
}

pub struct Stdin {
    forwarded: bool,
    pending: Mutex<Option<Request>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether every byte of `[virt, virt + len)` has a translation.
fn mapped(mem: &GuestMemoryMmap, virt: u64, len: u64) -> bool {
    let mut done = 0;
    while done < len {
        let Some((_, avail)) = virt.checked_add(done).and_then(|va| translate(mem, layout::BOOT_PT_PHYS, va)) else {
            return false;
        };
        done += avail;
    }
    true
}

/// Copies `data` to guest-virtual `virt`, page by page; stops at the first byte
/// without a translation (the guest may have changed its tables: its problem).
fn copy_in(mem: &GuestMemoryMmap, virt: u64, data: &[u8]) -> usize {
    let mut done = 0usize;
    while done < data.len() {
        let Some((pa, avail)) = virt.checked_add(done as u64).and_then(|va| translate(mem, layout::BOOT_PT_PHYS, va))
        else {
            break;
        };
        let n = (avail as usize).min(data.len() - done);
        if mem.write_slice(&data[done..done + n], GuestAddress(pa)).is_err() {
            break;
        }
        done += n;
    }
    done
}

/// Posts a stdin result in the events page: the result, then the pending bit.
pub fn post(mem: &GuestMemoryMmap, result: i64) {
    let at = |off: u64| GuestAddress(layout::EVENTS_PHYS + off);
    let _ = mem.store(result as u64, at(events::STDIN_RESULT), Ordering::Release);
    post_pending(mem, events::STDIN);
}

/// Or's `bits` into the events page's word at `off` (async-signal-safe: an atomic
/// on guest memory).
fn or_event(mem: &GuestMemoryMmap, off: u64, bits: u64) {
    if let Ok(slice) = mem.get_slice(GuestAddress(layout::EVENTS_PHYS + off), 8) {
        if let Ok(word) = slice.get_atomic_ref::<AtomicU64>(0) {
            word.fetch_or(bits, Ordering::AcqRel);
        }
    }
}

/// Posts device bits `bits` (`onering_abi::events`) in the pending word.
pub fn post_pending(mem: &GuestMemoryMmap, bits: u64) {
    or_event(mem, events::PENDING, bits);
}

/// Posts that the host's stdin is readable (a watch's answer): the pending bit.
pub fn post_ready(mem: &GuestMemoryMmap) {
    post_pending(mem, events::STDIN_READY);
}

/// Posts host signal `sig` for the program in the events page: its bit in the
/// signals word (the terminal's signals word when `from_tty`), then the pending
/// bit. Async-signal-safe (atomics on guest memory; no allocation, no lock).
pub fn post_signal(mem: &GuestMemoryMmap, sig: u64, from_tty: bool) {
    if !(1..=64).contains(&sig) {
        return;
    }
    or_event(mem, if from_tty { events::TTY_SIGNALS } else { events::SIGNALS }, 1u64 << (sig - 1));
    post_pending(mem, events::SIGNAL);
}

impl Stdin {
    pub fn new(forwarded: bool) -> Self {
        Stdin { forwarded, pending: Mutex::new(None) }
    }

    /// Takes a request: 0, or -EBADF (no `-i`), -EBUSY (one is outstanding),
    /// -EINVAL (over 64 KiB), -EFAULT (the buffer is not mapped). A length of 0 is
    /// a watch. `watch` is called to have the host's stdin watched (or read at once).
    pub fn request(&self, mem: &GuestMemoryMmap, virt: u64, len: u64) -> Result<(), i64> {
        if !self.forwarded {
            return Err(-EBADF);
        }
        if len > MAX_REQUEST {
            return Err(-EINVAL);
        }
        if len > 0 && !mapped(mem, virt, len) {
            return Err(-EFAULT);
        }
        let mut p = lock(&self.pending);
        if p.is_some() {
            return Err(-EBUSY);
        }
        *p = Some(Request { virt, len });
        Ok(())
    }

    /// The host's stdin is readable (or cannot be watched): one read for the
    /// outstanding request, posted to the guest. False if there was none.
    pub fn complete(&self, mem: &GuestMemoryMmap, input: &mut impl Read) -> bool {
        let Some(req) = lock(&self.pending).take() else {
            return false;
        };
        if req.len == 0 {
            post_ready(mem);
            return true;
        }
        let mut buf = vec![0u8; req.len as usize];
        let result = loop {
            match input.read(&mut buf) {
                Ok(n) => break copy_in(mem, req.virt, &buf[..n]) as i64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break -EIO,
            }
        };
        post(mem, result);
        true
    }
}

/// Starts watching the host's stdin for the outstanding request: on the event loop,
/// or, for a stdin epoll cannot watch, by reading now. `wake` tells the guest.
pub fn watch(
    stdin: &'static Stdin,
    mem: &'static GuestMemoryMmap,
    events: &LazyEventLoop,
    wake: impl Fn() + Send + 'static,
) {
    let dup = std::io::stdin().as_fd().try_clone_to_owned().map(std::fs::File::from);
    let registered = match (dup, events.get()) {
        (Ok(file), Ok(l)) => l
            .register(file, vmm_sys_util::epoll::EventSet::IN | vmm_sys_util::epoll::EventSet::HANG_UP, move |f, _| {
                if stdin.complete(mem, f) {
                    wake();
                }
                Next::Remove
            })
            .is_ok(),
        _ => false,
    };
    if !registered {
        // A regular file or /dev/null (epoll refuses them): reading does not wait.
        // Unbuffered (not Rust's `Stdin`, which reads ahead): the program's `lseek`
        // on its stdin moves the host's offset, which must be where it read up to.
        match std::io::stdin().as_fd().try_clone_to_owned().map(std::fs::File::from) {
            Ok(mut f) => {
                let _ = stdin.complete(mem, &mut f);
            }
            Err(_) => {
                let _ = stdin.complete(mem, &mut std::io::empty());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::PageTables;

    fn memory() -> GuestMemoryMmap {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
        let mut pt = PageTables::new(&mem);
        pt.map_2m(0x40_0000, 0x40_0000, 0).unwrap();
        mem
    }

    #[test]
    fn requests_are_checked_and_answered() {
        let mem = memory();
        let off = Stdin::new(false);
        assert_eq!(off.request(&mem, 0x40_0000, 10), Err(-EBADF), "no -i: the VMM refuses");
        let s = Stdin::new(true);
        assert_eq!(s.request(&mem, 0x40_0000, MAX_REQUEST + 1), Err(-EINVAL));
        assert_eq!(s.request(&mem, 0x1000_0000, 10), Err(-EFAULT), "not mapped");
        assert_eq!(s.request(&mem, 0x5f_fff0, 32), Err(-EFAULT), "runs off the mapping");
        assert_eq!(s.request(&mem, 0x40_0000, 10), Ok(()));
        assert_eq!(s.request(&mem, 0x40_0000, 10), Err(-EBUSY));
        assert!(s.complete(&mem, &mut &b"hello world"[..]));
        let mut got = [0u8; 10];
        mem.read_slice(&mut got, GuestAddress(0x40_0000)).unwrap();
        assert_eq!(&got, b"hello worl", "at most what was asked");
        let word = |off| mem.read_obj::<u64>(GuestAddress(layout::EVENTS_PHYS + off)).unwrap();
        assert_eq!(word(events::STDIN_RESULT), 10);
        assert_eq!(word(events::PENDING), events::STDIN);
        assert!(!s.complete(&mem, &mut &b"x"[..]), "nothing outstanding");
        // End of file.
        assert_eq!(s.request(&mem, 0x40_0000, 10), Ok(()));
        assert!(s.complete(&mem, &mut &b""[..]));
        assert_eq!(word(events::STDIN_RESULT), 0);
        // A watch reads nothing and posts readiness.
        assert_eq!(s.request(&mem, 0, 0), Ok(()), "a watch needs no buffer");
        let mut input = &b"keep"[..];
        assert!(s.complete(&mem, &mut input));
        assert_eq!(input, b"keep", "nothing read");
        assert_eq!(word(events::PENDING) & events::STDIN_READY, events::STDIN_READY);
    }
}
