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
//! The read follows a zero-timeout `poll` (another reader of the same open file
//! may have taken the input since epoll said so): the event loop never waits.
//!
//! A stdin epoll cannot watch (a regular file, /dev/null) is read at once, on the
//! vCPU's thread: such reads do not wait. Reads take exactly what was asked, no
//! more (a file's offset is the program's: it may `lseek` its stdin). Without `-i` a request is EBADF: the VMM,
//! not only the guest kernel, keeps the host's stdin from a program that was not
//! given it.
//!
//! The same device serves each process `onering exec` starts (`exec`): one
//! [`Stdin`] per input (`onering_abi::exec::input_of`), each with its own result
//! word and bits in the events page, reading the stdin its client handed over.
//! Each request has a number and its watch serves only that request: one
//! that fires after its request was cancelled finds nothing to do, and
//! [`Stdin::cancel`] ends a slot's outstanding request (end of file) and its
//! watch when its process ends (so no watch outlives its request for long).

use crate::arch::translate;
use crate::event_loop::{LazyEventLoop, Next, Token};
use onering_abi::{events, layout};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd};
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

/// What the guest asked for (a length of 0: only a watch), and its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    virt: u64,
    len: u64,
    seq: u64,
}

pub struct Stdin {
    /// Which input (its words and bits in the events page).
    input: usize,
    forwarded: bool,
    pending: Mutex<Option<Request>>,
    /// Requests so far (each one's number).
    requests: AtomicU64,
    /// The event loop's watch for the outstanding request (for [`Stdin::cancel`]).
    watch: Mutex<Option<Token>>,
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

/// Posts input `input`'s stdin result in the events page: the result, then the
/// pending bit.
pub fn post(mem: &GuestMemoryMmap, input: usize, result: i64) {
    let at = |off: u64| GuestAddress(layout::EVENTS_PHYS + off);
    let _ = mem.store(result as u64, at(events::result_word(input)), Ordering::Release);
    post_pending(mem, events::done_bit(input));
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

/// Posts that input `input`'s host stdin is readable (a watch's answer): the
/// pending bit.
pub fn post_ready(mem: &GuestMemoryMmap, input: usize) {
    post_pending(mem, events::ready_bit(input));
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
    /// Input `input`'s device (below `onering_abi::exec::INPUTS`).
    pub fn new(input: usize, forwarded: bool) -> Self {
        Stdin { input, forwarded, pending: Mutex::new(None), requests: AtomicU64::new(0), watch: Mutex::new(None) }
    }

    /// Takes a request: its number, or -EBADF (no `-i`), -EBUSY (one is outstanding),
    /// -EINVAL (over 64 KiB), -EFAULT (the buffer is not mapped). A length of 0 is
    /// a watch. `watch` is called to have the host's stdin watched (or read at once).
    pub fn request(&self, mem: &GuestMemoryMmap, virt: u64, len: u64) -> Result<u64, i64> {
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
        let seq = self.requests.fetch_add(1, Ordering::Relaxed);
        *p = Some(Request { virt, len, seq });
        Ok(seq)
    }

    /// Whether request `seq` is outstanding.
    fn outstanding(&self, seq: u64) -> bool {
        lock(&self.pending).is_some_and(|r| r.seq == seq)
    }

    /// The host's stdin is readable (or cannot be watched): one read for
    /// request `seq`, posted to the guest. False if it is not outstanding.
    pub fn complete(&self, mem: &GuestMemoryMmap, input: &mut impl Read, seq: u64) -> bool {
        let Some(req) = lock(&self.pending).take_if(|r| r.seq == seq) else {
            return false;
        };
        if req.len == 0 {
            post_ready(mem, self.input);
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
        post(mem, self.input, result);
        true
    }

    /// Ends the outstanding request, if any, as at end of file (a watch: as
    /// readable), and stops its watch; whether something was posted (the guest
    /// is then to be woken).
    pub fn cancel(&self, mem: &GuestMemoryMmap, events: &LazyEventLoop) -> bool {
        if let (Some(t), true) = (lock(&self.watch).take(), events.is_started()) {
            if let Ok(l) = events.get() {
                l.remove(t);
            }
        }
        let Some(req) = lock(&self.pending).take() else { return false };
        match req.len {
            0 => post_ready(mem, self.input),
            _ => post(mem, self.input, 0),
        }
        true
    }
}

/// Starts watching `source` (a host stdin) for `stdin`'s request `seq`: on the
/// event loop, or, for a stdin epoll cannot watch, by reading now. `wake` tells
/// the guest.
pub fn watch(
    stdin: &'static Stdin,
    source: &impl AsFd,
    mem: &'static GuestMemoryMmap,
    events: &LazyEventLoop,
    seq: u64,
    wake: impl Fn() + Send + 'static,
) {
    let dup = || source.as_fd().try_clone_to_owned().map(std::fs::File::from);
    let registered = match (dup(), events.get()) {
        (Ok(file), Ok(l)) => l
            .register(file, vmm_sys_util::epoll::EventSet::IN | vmm_sys_util::epoll::EventSet::HANG_UP, move |f, _| {
                // (Taken meanwhile by another reader: the loop's thread must not wait.)
                if !crate::sys::stdio::ready_now(f.as_raw_fd()) {
                    return Next::Keep;
                }
                if stdin.complete(mem, f, seq) {
                    wake();
                }
                Next::Remove
            })
            .map(|t| {
                // Kept for a cancel while its request is outstanding; a request
                // cancelled before this point leaves no watch behind.
                let mut w = lock(&stdin.watch);
                if stdin.outstanding(seq) {
                    *w = Some(t);
                } else {
                    l.remove(t);
                }
            })
            .is_ok(),
        _ => false,
    };
    if !registered {
        // A regular file or /dev/null (epoll refuses them): reading does not wait.
        // Unbuffered (not Rust's `Stdin`, which reads ahead): the program's `lseek`
        // on its stdin moves the host's offset, which must be where it read up to.
        match dup() {
            Ok(mut f) => {
                let _ = stdin.complete(mem, &mut f, seq);
            }
            Err(_) => {
                let _ = stdin.complete(mem, &mut std::io::empty(), seq);
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
        let off = Stdin::new(0, false);
        assert_eq!(off.request(&mem, 0x40_0000, 10), Err(-EBADF), "no -i: the VMM refuses");
        let s = Stdin::new(0, true);
        assert_eq!(s.request(&mem, 0x40_0000, MAX_REQUEST + 1), Err(-EINVAL));
        assert_eq!(s.request(&mem, 0x1000_0000, 10), Err(-EFAULT), "not mapped");
        assert_eq!(s.request(&mem, 0x5f_fff0, 32), Err(-EFAULT), "runs off the mapping");
        assert_eq!(s.request(&mem, 0x40_0000, 10), Ok(0));
        assert_eq!(s.request(&mem, 0x40_0000, 10), Err(-EBUSY));
        assert!(s.complete(&mem, &mut &b"hello world"[..], 0));
        let mut got = [0u8; 10];
        mem.read_slice(&mut got, GuestAddress(0x40_0000)).unwrap();
        assert_eq!(&got, b"hello worl", "at most what was asked");
        let word = |off| mem.read_obj::<u64>(GuestAddress(layout::EVENTS_PHYS + off)).unwrap();
        assert_eq!(word(events::STDIN_RESULT), 10);
        assert_eq!(word(events::PENDING), events::STDIN);
        assert!(!s.complete(&mem, &mut &b"x"[..], 0), "nothing outstanding");
        // End of file.
        assert_eq!(s.request(&mem, 0x40_0000, 10), Ok(1));
        assert!(s.complete(&mem, &mut &b""[..], 1));
        assert_eq!(word(events::STDIN_RESULT), 0);
        // A watch reads nothing and posts readiness.
        assert_eq!(s.request(&mem, 0, 0), Ok(2), "a watch needs no buffer");
        let mut input = &b"keep"[..];
        assert!(s.complete(&mem, &mut input, 2));
        assert_eq!(input, b"keep", "nothing read");
        assert_eq!(word(events::PENDING) & events::STDIN_READY, events::STDIN_READY);
    }

    #[test]
    fn an_exec_slots_input_posts_its_own_words_and_a_cancel_ends_it() {
        let mem = memory();
        let input = onering_abi::exec::INPUTS - 1;
        let s = Stdin::new(input, true);
        let word = |off| mem.read_obj::<u64>(GuestAddress(layout::EVENTS_PHYS + off)).unwrap();
        let events = LazyEventLoop::default();
        assert!(!s.cancel(&mem, &events), "nothing outstanding");
        assert_eq!(s.request(&mem, 0x40_0000, 10), Ok(0));
        assert!(!s.complete(&mem, &mut &b"stale"[..], 1), "a watch for another request");
        assert!(s.complete(&mem, &mut &b"abc"[..], 0));
        assert_eq!(word(events::result_word(input)), 3);
        assert_eq!(word(events::STDIN_RESULT), 0, "the program's word is untouched");
        assert_eq!(word(events::PENDING), events::done_bit(input));
        // The process ends with a request outstanding: end of file.
        mem.write_obj(u64::MAX, GuestAddress(layout::EVENTS_PHYS + events::result_word(input))).unwrap();
        assert_eq!(s.request(&mem, 0x40_0000, 10), Ok(1));
        assert!(s.cancel(&mem, &events));
        assert_eq!(word(events::result_word(input)), 0);
        assert!(!s.complete(&mem, &mut &b"late"[..], 1), "the watch that fires after finds nothing");
        assert_eq!(s.request(&mem, 0, 0), Ok(2));
        assert!(s.cancel(&mem, &events));
        assert_ne!(word(events::PENDING) & events::ready_bit(input), 0);
        assert!(!events.is_started(), "a cancel starts no event loop");
    }
}
