//! The console device: the program's stdout and stderr (and onering's own
//! messages) on their way to the host, in the order written, whatever the thread
//! or vCPU.
//!
//! Bytes are gathered in the buffer (`crate::console`, which also decides when to
//! send) under a short lock. Sending is a `Write` hostcall, which can block in the
//! VMM for as long as the host's stdout is full, so it happens outside the lock,
//! by one vCPU at a time (`flushing`): while one sends, the others keep appending
//! if there is room, and a writer that cannot go on (no room, another stream, a
//! large write) reports EAGAIN so that its system call waits on the console's key,
//! outside every lock, until the sender is done. A large write goes straight from
//! the program's memory to the host after what was buffered before it.
//!
//! When to send (the buffer decides most: a full buffer, the other stream, a
//! newline on a terminal): also when the program goes idle (the scheduler's poll,
//! `flush_pending`: whoever waits for the output gets it as soon as the program
//! waits for something), and `console::DELAY` after the oldest buffered byte while
//! the program keeps running (`flush_due`; the first byte of a batch makes sure this
//! CPU's timer fires by then).

use crate::console::{ConsoleBuf, Step, DELAY};
use crate::errno::{Errno, SysResult};
use crate::mm::user::UserMem;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use onering_arch::sync::Mutex;

struct State {
    buf: ConsoleBuf,
    /// A vCPU is sending to the host.
    flushing: bool,
}

pub struct Console {
    st: Mutex<State>,
    /// When the oldest buffered byte came (0: nothing buffered), for looks without
    /// the lock.
    since: AtomicU64,
}

impl Default for Console {
    fn default() -> Self {
        Self::new(0b110)
    }
}

/// Where the bytes of a write are: the program's memory (and its length), or the
/// kernel's.
#[derive(Clone, Copy)]
enum Src<'a> {
    User(&'a dyn UserMem, u64, usize),
    Kernel(&'a [u8]),
}

/// Sends bytes to the host's `fd` (the VMM reads them through the page tables):
/// the count, or EPIPE/EIO.
fn send(fd: u32, src: Src) -> Result<u64, Errno> {
    let r = match src {
        Src::Kernel(data) => onering_arch::hostcall::write(fd, data),
        Src::User(_, addr, len) => onering_arch::hostcall::write_user(fd, addr, len as u64),
    };
    match r {
        r if r >= 0 => Ok(r as u64),
        // The VMM returns -errno; guard against nonsense rather than trust it.
        r if r == -(Errno::EPIPE as i64) => Err(Errno::EPIPE),
        r if r == -(Errno::EFAULT as i64) => Err(Errno::EFAULT),
        _ => Err(Errno::EIO),
    }
}

impl Console {
    /// A console whose streams in `lines` (bit n: fd n; terminals) flush at newlines.
    pub const fn new(lines: u32) -> Self {
        Console {
            st: Mutex::new(State { buf: ConsoleBuf::with_line_streams(lines), flushing: false }),
            since: AtomicU64::new(0),
        }
    }

    /// Publishes when the oldest buffered byte came (with the lock held).
    fn publish(&self, st: &State) {
        self.since.store(st.buf.since().map_or(0, |t| t.max(1)), Relaxed);
    }

    /// Sends what is buffered if the oldest byte has waited `DELAY` (the scheduler
    /// calls this when it looks for work; cheap when nothing is buffered).
    pub fn flush_due(&self) {
        let s = self.since.load(Relaxed);
        if s != 0 && crate::time::mono_now() >= s.saturating_add(DELAY) {
            self.flush_pending();
        }
    }

    /// When buffered output must go at the latest (monotonic ns; u64::MAX when
    /// nothing is buffered).
    pub fn deadline(&self) -> u64 {
        match self.since.load(Relaxed) {
            0 => u64::MAX,
            s => s.saturating_add(DELAY),
        }
    }

    /// Sends what is buffered, unless a send is in progress (which sends it too).
    pub fn flush_pending(&self) {
        if self.since.load(Relaxed) == 0 {
            return;
        }
        let st = self.st.lock();
        if !st.flushing {
            let _ = self.send_locked(st);
        }
    }

    /// What a writer that got EAGAIN waits on.
    pub fn key(&self) -> u64 {
        crate::file::key_of(self)
    }

    /// Writes `len` bytes of user memory at `addr` to `fd` (1 or 2). EAGAIN while
    /// another vCPU sends and this write cannot be buffered meanwhile.
    pub fn write(&self, user: &dyn UserMem, fd: u32, addr: u64, len: u64) -> SysResult {
        if len == 0 {
            return Ok(0);
        }
        self.put(fd, Src::User(user, addr, len as usize), len as usize)
    }

    /// Writes onering's own bytes (its messages), waiting if need be.
    pub fn write_kernel(&self, fd: u32, data: &[u8]) {
        while let Err(Errno::EAGAIN) = self.put(fd, Src::Kernel(data), data.len()) {
            self.wait_turn();
        }
    }

    fn put(&self, fd: u32, src: Src, len: usize) -> SysResult {
        loop {
            let mut st = self.st.lock();
            let step = st.buf.plan(fd, len);
            if st.flushing && step != Step::Append {
                return Err(Errno::EAGAIN);
            }
            match step {
                Step::FlushFirst => {
                    let taken = st.buf.take();
                    st.flushing = true;
                    self.publish(&st);
                    drop(st);
                    let r = taken.map(|(f, bytes)| {
                        let r = send(f, Src::Kernel(&bytes));
                        self.st.lock().buf.recycle(bytes);
                        r
                    });
                    self.done();
                    if let Some(Err(e)) = r {
                        return Err(e);
                    }
                }
                Step::Direct => {
                    if let Src::User(user, addr, len) = src {
                        user.check(addr, len as u64, false)?;
                    }
                    st.flushing = true;
                    drop(st);
                    let r = send(fd, src);
                    self.done();
                    return r;
                }
                Step::Append => {
                    let first = st.buf.pending() == 0;
                    let t = if first { crate::time::mono_now() } else { 0 };
                    let now = st.buf.append(fd, len, t, |dst| match src {
                        Src::User(user, addr, _) => user.read(addr, dst),
                        Src::Kernel(data) => {
                            dst.copy_from_slice(data);
                            Ok(())
                        }
                    })?;
                    if now && !st.flushing {
                        self.send_locked(st)?;
                    } else {
                        self.publish(&st);
                        drop(st);
                        if first {
                            // The batch's deadline: this CPU looks by then.
                            crate::task::sched::timer_by(t.saturating_add(DELAY));
                        }
                    }
                    return Ok(len as u64);
                }
            }
        }
    }

    /// Sends what is buffered (`st` is the held lock; released while sending), and
    /// again whatever others appended meanwhile.
    fn send_locked<'a>(&'a self, mut st: onering_arch::sync::MutexGuard<'a, State>) -> Result<(), Errno> {
        let mut result = Ok(());
        while let Some((fd, bytes)) = st.buf.take() {
            st.flushing = true;
            self.publish(&st);
            drop(st);
            let r = send(fd, Src::Kernel(&bytes));
            st = self.st.lock();
            st.buf.recycle(bytes);
            if let Err(e) = r {
                result = Err(e);
                break;
            }
        }
        st.flushing = false;
        self.publish(&st);
        drop(st);
        crate::task::sched::wake_all(self.key());
        result
    }

    /// The sender is done: what others appended meanwhile goes too (they counted
    /// on it), then others may go on.
    fn done(&self) {
        let _ = self.send_locked(self.st.lock());
    }

    /// Waits until no vCPU is sending (a thread sleeps; the idle loop spins).
    fn wait_turn(&self) {
        let Some(_me) = crate::task::thread::try_current() else {
            core::hint::spin_loop();
            return;
        };
        let key = self.key();
        crate::task::sched::prepare_wait(key);
        if self.st.lock().flushing {
            let _ = crate::task::sched::block(None);
        }
        crate::task::sched::finish_wait(key);
    }

    /// Sends everything buffered, after any send in progress (program exit, a fatal
    /// signal, onering's messages).
    pub fn flush(&self) {
        loop {
            let st = self.st.lock();
            if !st.flushing {
                let _ = self.send_locked(st);
                return;
            }
            drop(st);
            self.wait_turn();
        }
    }

    /// Bytes waiting to be sent.
    pub fn pending(&self) -> usize {
        self.st.lock().buf.pending()
    }
}
