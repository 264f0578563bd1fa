//! `onering exec` on the VMM's side: processes the host starts in the running VM
//! (`onering_abi::exec`). With `--exec-socket PATH` the VMM listens on that unix
//! socket (the OCI runtime puts it in the container's state directory). A client
//! sends one byte carrying its three standard streams (SCM_RIGHTS), then one
//! JSON line: `{"args": [...], "env": [...], "cwd": "/"}`; later lines are
//! `{"signal": N}`. The VMM answers with JSON lines: `{"error": "..."}` (then
//! closes), `{"failed": ERRNO}` (the program could not be started),
//! `{"started": PID}` once it runs, and `{"status": WAIT_STATUS}` when it ended. A client that goes away
//! before then gets its process killed (SIGKILL): nobody could collect its status.
//!
//! Each request takes a slot (at most `exec::MAX_EXECS` at once); the slot holds
//! the streams, which the guest reaches as host streams `exec::stream(slot, fd)`
//! through the stdio hostcalls, until the guest reports the end (`ExecDone`):
//! output to 1 and 2 (`Write`), and input from 0 through the slot's own stdin
//! device (`StdinRequest`, the device `-i` gives the program: `stdin`), which
//! reads the client's stdin when it has input; when the process ends, an
//! outstanding request ends (end of file) and its watch goes. The guest takes the queued
//! messages with `ExecTake`, told by the events page's EXEC bit and a wake-up.
//!
//! Nothing the guest says is trusted: `ExecDone` or `StdinRequest` for a slot
//! nobody holds is EINVAL or EBADF, a message is written only to guest memory
//! that translates, a slot has one stdin request at a time (of at most 64 KiB),
//! and a guest that never takes or never ends a request only keeps its client
//! waiting (the slots are bounded; a full table refuses new requests with a
//! message).

use super::stdin::Stdin;
use crate::event_loop::LazyEventLoop;
use onering_abi::exec::{self, Message, Spawn, MAX_EXECS, MAX_MESSAGE};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use vm_memory::GuestMemoryMmap;

const EBADF: i64 = 9;
const EINVAL: i64 = 22;
const EFAULT: i64 = 14;
const ENOSPC: i64 = 28;
/// Most messages waiting for the guest (signals beyond it are dropped).
const MAX_QUEUED: usize = 1024;

/// A request's process on the host side.
struct Slot {
    /// Its standard streams (as the client sent them).
    streams: [Arc<File>; 3],
    /// Where its end goes.
    client: UnixStream,
    /// Which request holds it (a slot is reused).
    id: u64,
    /// The guest said it runs (said once: so a slot's client gets at most two
    /// lines, which its socket's buffer always takes, and a guest cannot make
    /// a vCPU wait on a client that does not read).
    started: bool,
}

pub struct Execs {
    slots: Mutex<Vec<Option<Slot>>>,
    queue: Mutex<VecDeque<Vec<u8>>>,
    /// Requests so far (each one's id).
    requests: std::sync::atomic::AtomicU64,
    /// Each slot's stdin device (input 1 + slot).
    inputs: [Stdin; MAX_EXECS as usize],
}

impl Default for Execs {
    fn default() -> Self {
        Execs {
            slots: Mutex::default(),
            queue: Mutex::default(),
            requests: Default::default(),
            inputs: std::array::from_fn(|slot| Stdin::new(1 + slot, true)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A request line.
#[derive(serde::Deserialize)]
struct Request {
    args: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    cwd: Option<String>,
}

/// A later line from the client.
#[derive(serde::Deserialize)]
struct Later {
    signal: u64,
}

fn answer(mut to: &UnixStream, v: serde_json::Value) {
    let _ = to.write_all(format!("{v}\n").as_bytes());
}

impl Execs {
    /// The host file behind stream `s` of a slot in use (descriptor 0 only if
    /// `input`: never written to).
    pub fn stream(&self, s: u64, input: bool) -> Option<Arc<File>> {
        let (slot, fd) = exec::slot_of(s)?;
        if fd == 0 && !input {
            return None;
        }
        lock(&self.slots).get(slot as usize)?.as_ref().map(|sl| sl.streams[fd as usize].clone())
    }

    /// The `StdinRequest` hostcall for slot `slot`'s stdin (see `stdin`): 0 or
    /// -errno (-EBADF: no process holds the slot). `wake` tells the guest.
    pub fn stdin_request(
        &'static self,
        mem: &'static GuestMemoryMmap,
        events: &LazyEventLoop,
        slot: u64,
        (virt, len): (u64, u64),
        wake: impl Fn() + Send + 'static,
    ) -> i64 {
        let (source, seq) = {
            let slots = lock(&self.slots);
            let Some(s) = slots.get(slot as usize).and_then(Option::as_ref) else { return -EBADF };
            // (Under the slots' lock: the slot's end cancels it after, not before.)
            match self.inputs[slot as usize].request(mem, virt, len) {
                Ok(seq) => (s.streams[0].clone(), seq),
                Err(e) => return e,
            }
        };
        super::stdin::watch(&self.inputs[slot as usize], &*source, mem, events, seq, wake);
        0
    }

    /// The `ExecTake` hostcall: the next message into `len` bytes at guest-virtual
    /// `virt`; its length, 0 (none), -ENOSPC or -EFAULT (it stays queued).
    pub fn take(&self, mem: &GuestMemoryMmap, virt: u64, len: u64) -> i64 {
        let mut q = lock(&self.queue);
        let Some(m) = q.front() else { return 0 };
        if m.len() as u64 > len {
            return -ENOSPC;
        }
        if crate::arch::paging::write_guest(mem, virt, m).is_none() {
            return -EFAULT;
        }
        q.pop_front().map_or(0, |m| m.len() as i64)
    }

    /// The `ExecDone` hostcall: slot `slot`'s process ended (`exec::ENDED`, wait
    /// status `value`), could not start (`exec::FAILED`, errno `value`) or runs
    /// `exec::STARTED`, pid `value`, keeps the slot). An end also ends the slot's
    /// stdin request (`Stdin::cancel`), posted for the guest, which looks at its
    /// events after this call without a wake-up.
    pub fn done(&self, slot: u64, how: u64, value: u64, mem: &GuestMemoryMmap, events: &LazyEventLoop) -> i64 {
        let mut slots = lock(&self.slots);
        let Some(entry) = slots.get_mut(slot as usize) else { return -EINVAL };
        let (reply, s) = match how {
            exec::STARTED => {
                let Some(s) = entry.as_mut().filter(|s| !s.started) else { return -EINVAL };
                s.started = true;
                let Ok(client) = s.client.try_clone() else { return 0 };
                (serde_json::json!({ "started": value }), client)
            }
            exec::FAILED | exec::ENDED => {
                let Some(s) = entry.take() else { return -EINVAL };
                self.inputs[slot as usize].cancel(mem, events);
                let key = if how == exec::FAILED { "failed" } else { "status" };
                (serde_json::json!({ key: value }), s.client)
            }
            _ => return -EINVAL,
        };
        drop(slots);
        answer(&s, reply);
        if how != exec::STARTED {
            // (The client and the thread reading it see the end.)
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        0
    }

    /// Queues `m` for the guest; false if the queue is full.
    fn queue(&self, m: Message) -> bool {
        let mut q = lock(&self.queue);
        if q.len() >= MAX_QUEUED {
            return false;
        }
        q.push_back(m.encode());
        true
    }

    /// Takes a free slot for a request with `streams` and `client`: the slot and
    /// the request's id.
    fn claim(&self, streams: [Arc<File>; 3], client: UnixStream) -> Option<(u64, u64)> {
        let mut slots = lock(&self.slots);
        if slots.is_empty() {
            slots.resize_with(MAX_EXECS as usize, || None);
        }
        let free = slots.iter().position(Option::is_none)?;
        let id = self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        slots[free] = Some(Slot { streams, client, id, started: false });
        Some((free as u64, id))
    }

    /// Whether slot `slot` is still held by request `id`.
    fn holds(&self, slot: u64, id: u64) -> bool {
        lock(&self.slots).get(slot as usize).and_then(Option::as_ref).is_some_and(|s| s.id == id)
    }
}

/// Listens on `path` (made anew) for `onering exec` clients of `m`'s VM, on a
/// thread of its own.
pub fn listen(path: &Path, m: &'static super::Machine) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::thread::Builder::new().name("exec".into()).spawn(move || {
        crate::sys::signals::block_forwarded();
        for conn in listener.incoming().flatten() {
            let _ = std::thread::Builder::new().name("exec-client".into()).spawn(move || serve(conn, m));
        }
    })?;
    Ok(())
}

/// Reads a request from `conn` and queues it, then its signals; a client gone
/// before its process ended gets it killed.
fn serve(conn: UnixStream, m: &'static super::Machine) {
    crate::sys::signals::block_forwarded();
    let refuse = |why: &str| answer(&conn, serde_json::json!({ "error": why }));
    let mut byte = [0u8; 1];
    let fds = match crate::sys::oci::recv_fds(&conn, &mut byte, 3) {
        Ok((1, fds)) => <[_; 3]>::try_from(fds).ok(),
        _ => None,
    };
    let Some(fds) = fds else { return refuse("three standard streams are needed") };
    let streams = fds.map(|fd| Arc::new(File::from(fd)));
    let Ok(reader) = conn.try_clone() else { return };
    let mut lines = BufReader::new(reader.take(4 * MAX_MESSAGE as u64 + 1024)).lines();
    let request: Request = match lines.next().map(|l| l.map(|l| serde_json::from_str(&l))) {
        Some(Ok(Ok(r))) => r,
        _ => return refuse("a malformed request"),
    };
    let strings = |v: Vec<String>| v.into_iter().map(String::into_bytes).collect::<Vec<_>>();
    let mut spawn = Spawn {
        slot: 0,
        stdio: 0,
        cwd: request.cwd.unwrap_or_else(|| "/".into()).into_bytes(),
        argv: strings(request.args),
        envp: strings(request.env),
    };
    if spawn.argv.is_empty() || spawn.argv[0].is_empty() {
        return refuse("no program to run (args is empty)");
    }
    if spawn.argv.iter().chain(&spawn.envp).chain([&spawn.cwd]).any(|s| s.contains(&0)) {
        return refuse("an argument, variable or directory holds a NUL byte");
    }
    spawn.stdio = (0..3).fold(0, |w, fd| {
        use std::os::fd::AsRawFd;
        w | crate::sys::stdio::kind(streams[fd].as_raw_fd()) << (8 * fd)
    });
    if Message::Spawn(spawn.clone()).encode().len() > MAX_MESSAGE {
        return refuse("the arguments and environment are too long (at most 64 KiB together)");
    }
    let Ok(client) = conn.try_clone() else { return };
    let execs = &m.stdio.execs;
    let Some((slot, id)) = execs.claim(streams, client) else {
        return refuse("too many processes started by onering exec are running in this VM");
    };
    spawn.slot = slot;
    if !execs.queue(Message::Spawn(spawn)) {
        execs.done(slot, exec::FAILED, 11, &m.mem, &m.events);
        return;
    }
    m.post_exec();
    // Its signals, until it ends or the client goes.
    loop {
        let signal = match lines.next() {
            Some(Ok(l)) => match serde_json::from_str::<Later>(&l) {
                Ok(l) if (1..=64).contains(&l.signal) => l.signal,
                _ => continue,
            },
            _ => libc::SIGKILL as u64,
        };
        if !execs.holds(slot, id) {
            return;
        }
        if execs.queue(Message::Signal { slot, signal }) {
            m.post_exec();
        }
        if signal == libc::SIGKILL as u64 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(vm_memory::GuestAddress(0), 4 << 20)]).unwrap()
    }

    fn streams() -> [Arc<File>; 3] {
        let f = || Arc::new(File::open("/dev/null").unwrap());
        [f(), f(), f()]
    }

    #[test]
    fn the_guest_reaches_only_held_slots_and_says_each_thing_once() {
        let e = Execs::default();
        let (mem, events) = (memory(), LazyEventLoop::default());
        assert_eq!(e.done(0, exec::ENDED, 0, &mem, &events), -EINVAL);
        assert_eq!(e.done(u64::MAX, exec::ENDED, 0, &mem, &events), -EINVAL);
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (slot, id) = e.claim(streams(), theirs).unwrap();
        assert!(e.holds(slot, id) && !e.holds(slot, id + 1));
        assert!(e.stream(exec::stream(slot, 1), false).is_some());
        assert!(e.stream(exec::stream(slot, 0), false).is_none(), "stdin is never written");
        assert!(e.stream(exec::stream(slot, 0), true).is_some());
        assert!(e.stream(exec::stream(slot + 1, 1), false).is_none());
        assert_eq!(e.done(slot, 7, 0, &mem, &events), -EINVAL);
        assert_eq!(e.done(slot, exec::STARTED, 42, &mem, &events), 0);
        assert_eq!(e.done(slot, exec::STARTED, 42, &mem, &events), -EINVAL);
        assert_eq!(e.done(slot, exec::ENDED, 3 << 8, &mem, &events), 0);
        assert_eq!(e.done(slot, exec::ENDED, 0, &mem, &events), -EINVAL);
        assert!(!e.holds(slot, id) && e.stream(exec::stream(slot, 1), false).is_none());
        let mut got = String::new();
        (&ours).read_to_string(&mut got).unwrap();
        assert_eq!(got, "{\"started\":42}\n{\"status\":768}\n");
    }

    #[test]
    fn slots_and_the_queue_are_bounded() {
        let e = Execs::default();
        let held: Vec<_> = (0..MAX_EXECS).map(|_| e.claim(streams(), UnixStream::pair().unwrap().0).unwrap()).collect();
        assert!(e.claim(streams(), UnixStream::pair().unwrap().0).is_none());
        assert_eq!(held.len() as u64, MAX_EXECS);
        for _ in 0..MAX_QUEUED {
            assert!(e.queue(Message::Signal { slot: 0, signal: 15 }));
        }
        assert!(!e.queue(Message::Signal { slot: 0, signal: 15 }));
    }

    #[test]
    fn a_slots_stdin_is_read_for_its_process_only_and_ends_with_it() {
        use onering_abi::{events, layout};
        use std::io::Write;
        use vm_memory::{Bytes, GuestAddress};
        let mem: &'static GuestMemoryMmap =
            Box::leak(Box::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap()));
        crate::arch::PageTables::new(mem).map_2m(0x40_0000, 0x40_0000, 0).unwrap();
        let e: &'static Execs = Box::leak(Box::default());
        let events: &'static LazyEventLoop = Box::leak(Box::default());
        let woken = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let wake = || {
            let w = woken.clone();
            move || {
                w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        };
        assert_eq!(e.stdin_request(mem, events, 0, (0x40_0000, 16), wake()), -EBADF, "no process holds it");
        let (mut input, theirs) = UnixStream::pair().unwrap();
        let mut s = streams();
        s[0] = Arc::new(File::from(std::os::fd::OwnedFd::from(theirs)));
        let (slot, _) = e.claim(s, UnixStream::pair().unwrap().0).unwrap();
        let input_no = 1 + slot as usize;
        assert_eq!(e.stdin_request(mem, events, slot, (0x40_0000, 16), wake()), 0);
        assert_eq!(e.stdin_request(mem, events, slot, (0x40_0000, 16), wake()), -16, "one at a time");
        assert_eq!(e.stdin_request(mem, events, slot, (0x40_0000, 1 << 20), wake()), -EINVAL, "bounded");
        let word = |off| mem.read_obj::<u64>(GuestAddress(layout::EVENTS_PHYS + off)).unwrap();
        assert_eq!(word(events::PENDING), 0, "nothing until the client has input");
        input.write_all(b"typed\n").unwrap();
        let start = std::time::Instant::now();
        while word(events::PENDING) & events::done_bit(input_no) == 0 {
            assert!(start.elapsed() < std::time::Duration::from_secs(10), "the input was not posted");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(word(events::result_word(input_no)), 6);
        let mut got = [0u8; 6];
        mem.read_slice(&mut got, GuestAddress(0x40_0000)).unwrap();
        assert_eq!(&got, b"typed\n");
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The process ends with a request outstanding: end of file at once,
        // and input that comes after is nobody's.
        mem.write_obj(0u64, GuestAddress(layout::EVENTS_PHYS + events::PENDING)).unwrap();
        assert_eq!(e.stdin_request(mem, events, slot, (0x40_0000, 16), wake()), 0);
        mem.write_obj(u64::MAX, GuestAddress(layout::EVENTS_PHYS + events::result_word(input_no))).unwrap();
        assert_eq!(e.done(slot, exec::ENDED, 0, mem, events), 0);
        assert_eq!(word(events::result_word(input_no)), 0);
        assert_eq!(word(events::PENDING), events::done_bit(input_no));
        let _ = input.write_all(b"late\n"); // (EPIPE: the slot let go of its end)
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(word(events::result_word(input_no)), 0, "not read for a process gone");
        assert_eq!(e.stdin_request(mem, events, slot, (0x40_0000, 16), wake()), -EBADF);
    }
}
