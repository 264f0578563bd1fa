//! The host's stdin (with `-i`), as a request and a wait: no vCPU ever blocks in
//! the VMM for input. A read with nothing buffered posts a request (the
//! `StdinRequest` hostcall returns at once) and reports EAGAIN; the system call then
//! sleeps on the device's key like any blocking read, and other threads run. The
//! VMM's event loop reads the host's stdin when it has input, writes the bytes into
//! this device's buffer, posts the result in the events page and wakes a vCPU,
//! whose scheduler calls [`Stdin::complete`] (see `service_events`), which wakes
//! the reader.
//!
//! A request asks for at most what the program asked for (up to 64 KiB), so onering
//! takes no more of the host's stdin than the program did. End of file is reported
//! to one read; the next read asks the host again (as a terminal's Ctrl-D).
//!
//! `poll` (and epoll) with nothing buffered asks the VMM to watch (a request of
//! length 0: nothing is read), and reports readable once the VMM says the host's
//! stdin is (`ready`); the read that follows then asks for its bytes.
//!
//! One device per input (`onering_abi::exec::input_of`): the program's stdin,
//! and one per exec slot, the stdin `onering exec`'s client handed over. A slot
//! serves one process after another: each start is a new epoch ([`Stdin::reset`]),
//! and files opened in an older one read end of file (a child the old process
//! left behind does not take the next client's input), as does a result the VMM
//! posts for an older epoch's request (the VMM ends a slot's outstanding
//! request, end of file, when its process ends).

use crate::errno::{Errno, SysResult};
use crate::file::{ev, key_of, Readiness};
use crate::mm::user::UserMem;
use alloc::boxed::Box;
use alloc::vec;
use onering_arch::hostcall::{stdin_done, stdin_request, stdin_watch, StdinRefused};
use onering_arch::sync::Mutex;

/// Largest request.
const CAPACITY: usize = 64 * 1024;

#[derive(Default)]
struct State {
    /// Bytes from the host: `len` of them from `head`. While a request is
    /// outstanding its buffer is lent to the VMM (held by `onering_arch`).
    buf: Box<[u8]>,
    head: usize,
    len: usize,
    requested: bool,
    eof: bool,
    error: bool,
    gen: u64,
    /// A watch is outstanding, and the host said its stdin is readable.
    watching: bool,
    ready: bool,
    /// The process the device serves now (an exec slot's count of starts), and
    /// the one the outstanding request was made for.
    epoch: u64,
    requested_in: u64,
}

pub struct Stdin {
    /// Which host stdin (`onering_abi::exec::input_of`).
    input: usize,
    /// `-i`: reads go to the host; without it stdin is empty.
    forwarded: bool,
    st: Mutex<State>,
}

impl Stdin {
    pub fn new(input: usize, forwarded: bool) -> Self {
        Stdin { input, forwarded, st: Mutex::new(State::default()) }
    }

    /// A new process reads this input from now on: what was buffered or pending
    /// for the last one goes; its epoch (files opened in an older one read end
    /// of file: [`Stdin::read`]).
    pub fn reset(&self) -> u64 {
        let mut st = self.st.lock();
        st.epoch += 1;
        st.len = 0;
        st.eof = false;
        st.error = false;
        st.ready = false;
        st.gen += 1;
        st.epoch
    }

    /// What a reader that got EAGAIN waits on.
    pub fn key(&self) -> u64 {
        key_of(self)
    }

    /// Reads up to `len` bytes into user memory at `addr` for a file opened in
    /// epoch `epoch`: what is buffered, end of file, or EAGAIN after asking the
    /// host (never waits). A file of an older epoch reads end of file (checked
    /// under the same lock as the read: a reset between the two cannot give it
    /// the next process's input).
    pub fn read(&self, epoch: u64, user: &dyn UserMem, addr: u64, len: u64) -> SysResult {
        if !self.forwarded || len == 0 {
            return Ok(0);
        }
        let mut st = self.st.lock();
        if st.epoch != epoch {
            return Ok(0);
        }
        if st.len > 0 {
            let n = (len as usize).min(st.len);
            let start = st.head;
            user.write(addr, &st.buf[start..start + n])?;
            st.head += n;
            st.len -= n;
            st.gen += 1;
            return Ok(n as u64);
        }
        if st.eof {
            st.eof = false;
            return Ok(0);
        }
        if st.error {
            st.error = false;
            return Err(Errno::EIO);
        }
        if !st.requested && !st.watching {
            st.ready = false;
            let want = (len as usize).min(CAPACITY);
            let buf =
                if st.buf.len() == want { core::mem::take(&mut st.buf) } else { vec![0u8; want].into_boxed_slice() };
            match stdin_request(self.input, buf) {
                Ok(()) => {
                    st.requested = true;
                    st.requested_in = st.epoch;
                }
                Err((why, buf)) => {
                    st.buf = buf;
                    return match why {
                        // Not forwarded after all (the VMM decides too): an empty stdin.
                        StdinRefused::NotForwarded => Ok(0),
                        _ => Err(Errno::EIO),
                    };
                }
            }
        }
        Err(Errno::EAGAIN)
    }

    /// The VMM posted the outstanding request's result: its buffer comes back with
    /// the bytes read (or end of file, or an error), and readers may go on.
    pub fn complete(&self) {
        let Some((buf, result)) = stdin_done(self.input) else { return };
        self.settle(buf, result);
        super::sched::wake_all(self.key());
    }

    fn settle(&self, buf: Box<[u8]>, result: i64) {
        let mut st = self.st.lock();
        st.requested = false;
        st.head = 0;
        st.len = 0;
        match result {
            _ if st.requested_in != st.epoch => {} // (for a process gone)
            r if r > 0 => st.len = (r as usize).min(buf.len()),
            0 => st.eof = true,
            _ => st.error = true,
        }
        st.buf = buf;
        st.gen += 1;
    }

    /// The VMM said the host's stdin is readable (the watch `poll` asked for).
    pub fn host_ready(&self) {
        {
            let mut st = self.st.lock();
            st.watching = false;
            st.ready = true;
            st.gen += 1;
        }
        super::sched::wake_all(self.key());
    }

    /// Drops buffered bytes and a pending end of file (the program moved the
    /// host's offset).
    pub fn forget_buffered(&self) {
        let mut st = self.st.lock();
        st.len = 0;
        st.eof = false;
        st.gen += 1;
    }

    /// Readable when bytes, end of file or an error wait to be read, or the host
    /// said its stdin is readable; otherwise the VMM is asked to watch (unless a
    /// read or a watch is outstanding already: either wakes the key).
    /// Readiness for a file opened in epoch `epoch` (one of an older epoch is
    /// at end of file: readable, and nothing is asked of the host for it).
    pub fn poll(&self, epoch: u64) -> Readiness {
        let mut st = self.st.lock();
        let ready = !self.forwarded || st.epoch != epoch || st.len > 0 || st.eof || st.error || st.ready;
        if !ready && !st.requested && !st.watching {
            match stdin_watch(self.input) {
                Ok(()) => st.watching = true,
                // Not forwarded after all: an empty stdin, readable (end of file).
                Err(StdinRefused::NotForwarded) => st.eof = true,
                Err(_) => st.error = true,
            }
        }
        let ready = ready || st.eof || st.error;
        Readiness { events: if ready { ev::IN | ev::RDNORM } else { 0 }, gen: st.gen, key: self.key() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mm::user::BufferMem;

    #[test]
    fn without_i_stdin_is_empty() {
        let s = Stdin::new(0, false);
        let u = BufferMem::new(0x1000, 64);
        assert_eq!(s.read(0, &u, 0x1000, 10), Ok(0));
        assert_eq!(s.poll(0).events, ev::IN | ev::RDNORM);
    }

    #[test]
    fn a_request_then_its_bytes_then_end_of_file() {
        let s = Stdin::new(0, true);
        let u = BufferMem::new(0x1000, 64);
        let vmm = |data: &[u8]| {
            onering_arch::hostcall::host_complete_stdin(0, data);
            let _ = onering_arch::events::take_pending();
            s.complete();
        };
        // (The host test's hostcalls return 0: the request is accepted.)
        assert_eq!(s.read(0, &u, 0x1000, 10), Err(Errno::EAGAIN));
        assert_eq!(s.poll(0).events, 0);
        assert_eq!(s.read(0, &u, 0x1000, 10), Err(Errno::EAGAIN), "still outstanding: no second request");
        vmm(b"abc");
        assert_eq!(s.poll(0).events, ev::IN | ev::RDNORM);
        assert_eq!(s.read(0, &u, 0x1000, 2), Ok(2));
        assert_eq!(s.read(0, &u, 0x1002, 2), Ok(1));
        assert_eq!(u.mem.lock()[..3], *b"abc");
        assert_eq!(s.read(0, &u, 0x1000, 10), Err(Errno::EAGAIN));
        vmm(b"");
        assert_eq!(s.read(0, &u, 0x1000, 10), Ok(0), "end of file, once");
        assert_eq!(s.read(0, &u, 0x1000, 10), Err(Errno::EAGAIN), "then the host is asked again");
        s.complete();
        assert_eq!(s.read(0, &u, 0x1000, 10), Err(Errno::EAGAIN), "nothing was posted: still waiting");
    }

    #[test]
    fn an_exec_slots_input_is_its_own_and_a_new_process_starts_afresh() {
        let slot = onering_abi::exec::INPUTS - 1;
        let s = Stdin::new(slot, true);
        let u = BufferMem::new(0x1000, 64);
        let vmm = |data: &[u8]| {
            onering_arch::hostcall::host_complete_stdin(slot, data);
            let _ = onering_arch::events::take_pending();
            s.complete();
        };
        let first = s.reset();
        assert_eq!(s.read(first, &u, 0x1000, 10), Err(Errno::EAGAIN));
        vmm(b"hi\n");
        assert_eq!(s.read(first, &u, 0x1000, 10), Ok(3));
        assert_eq!(u.mem.lock()[..3], *b"hi\n");
        assert_eq!(s.read(first, &u, 0x1000, 10), Err(Errno::EAGAIN));
        // The process ends with a request outstanding; the next one starts before
        // the VMM's end of file for it arrives: that end is not the new one's.
        let second = s.reset();
        assert_eq!(s.read(first, &u, 0x1000, 10), Ok(0), "the old process's files are at their end");
        assert_eq!(s.poll(first).events, ev::IN | ev::RDNORM);
        vmm(b"");
        assert_eq!(s.read(second, &u, 0x1000, 10), Err(Errno::EAGAIN), "a new request, no end of file");
        vmm(b"");
        assert_eq!(s.read(second, &u, 0x1000, 10), Ok(0), "its own end of file");
    }
}
