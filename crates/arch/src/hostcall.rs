//! The hostcall doorbell: how the guest asks the VMM for a service (see
//! `onering_abi::hostcall`). The arguments go to this vCPU's block in its per-CPU
//! header, the number to the doorbell page; that MMIO store exits to the VMM, which
//! leaves the result in the block before it resumes the vCPU.
//!
//! The kernel gets typed calls, each sound whatever its arguments: the VMM only
//! reads the kernel's memory (output) or writes memory this module holds (a stdin
//! buffer, one per input, lent to the VMM and given back only once the VMM said it is done; a
//! stat or ioctl buffer of atomics, during the call). The raw doorbell stays inside
//! this crate.
//!
//! Host-file closes, unlocks and small writes wait in a small queue for the next
//! `Fs` call, which carries them (`fs`: no exit of their own); the queue goes
//! before the vCPU idles and before the VM ends.
//!
//! On the host (unit tests) a hostcall returns 0, or what a handler installed with
//! `set_host_handler` says.

use alloc::boxed::Box;
use onering_abi::exec::INPUTS;
use onering_abi::Hostcall;
use spin::Mutex;

/// Writes `data` (the kernel's memory: the console buffer, a message) to the host's
/// `fd` (1 or 2): the VMM's result (the count, or -errno).
pub fn write(fd: u32, data: &[u8]) -> i64 {
    hostcall(Hostcall::Write, &[u64::from(fd), data.as_ptr() as u64, data.len() as u64]) as i64
}

/// Writes `len` bytes of the program's memory at `addr` to the host's `fd`: the VMM
/// reads them through the page tables (a large write goes straight from the
/// program). The count, or -errno (-EFAULT if the range is not mapped).
pub fn write_user(fd: u32, addr: u64, len: u64) -> i64 {
    hostcall(Hostcall::Write, &[u64::from(fd), addr, len]) as i64
}

/// Sends `--trace` lines or the `--stats` table (`onering_abi::trace` says which
/// `kind`) to the VMM: 0 or -errno.
pub fn trace(kind: u64, data: &[u8]) -> i64 {
    hostcall(Hostcall::Trace, &[kind, data.as_ptr() as u64, data.len() as u64]) as i64
}

/// `--gdb`: the program stopped (vector 1 or 3) with `regs`; `threads` lists every
/// live thread, `tid` is the stopped one's. Every vCPU waits while gdb looks; the
/// VMM may change `regs` (lent for the call). Returns what the thread does next
/// (`onering_abi::debug::resume`), or -ENODEV when no debugger listens.
pub fn debug_stop(vector: u64, regs: &mut crate::UserRegs, threads: &[onering_abi::debug::Thread], tid: u64) -> i64 {
    // The words of `onering_abi::debug::Regs`: UserRegs' order, then the FS base.
    let words = regs.to_words().into_iter().chain([crate::cpu::fs_base()]);
    let buf = Shared::<19>::new(&[]);
    for (slot, w) in buf.0.iter().zip(words) {
        slot.store(w, core::sync::atomic::Ordering::Relaxed);
    }
    let args = [vector, buf.addr(), threads.as_ptr() as u64, threads.len() as u64, tid];
    let ret = hostcall(Hostcall::Debug, &args) as i64;
    *regs = crate::UserRegs::from_words(core::array::from_fn(|i| buf.0[i].load(core::sync::atomic::Ordering::Relaxed)));
    ret
}

/// Ends the VM with the program's exit status (the host-file operations still
/// waiting go first: what the program wrote is on the host).
pub fn exit(status: u64) -> ! {
    fs::flush();
    hostcall(Hostcall::Exit, &[status & 0xff]);
    crate::panic::halt_forever()
}

/// Ends the VM as a fatal signal would (what waits for the host goes first).
pub fn killed(signal: u64, rip: u64, addr: u64) -> ! {
    fs::flush();
    hostcall(Hostcall::Killed, &[signal, rip, addr]);
    crate::panic::halt_forever()
}

/// Asks the VMM to back the chunk at guest-physical `phys` with one host huge
/// page (`Hostcall::HugePages`); 0 or a negative errno (the chunk is then only
/// slower to touch).
pub fn huge_pages(phys: u64) -> i64 {
    hostcall(Hostcall::HugePages, &[phys]) as i64
}

/// Why the VMM did not take a stdin request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StdinRefused {
    /// No `-i`: the program's stdin is empty.
    NotForwarded,
    /// A request is outstanding already.
    Busy,
    /// Anything else the VMM said (-errno).
    Other(i64),
}

/// The buffers lent to the VMM for the outstanding stdin requests, one per
/// input (`onering_abi::exec::input_of`: 0 the program's stdin, 1 + slot an
/// exec'd process's).
static LENT: [Mutex<Option<Box<[u8]>>>; INPUTS] = [const { Mutex::new(None) }; INPUTS];

/// What the VMM said to a stdin request or watch of `input`.
fn stdin_call(input: usize, addr: u64, len: u64) -> Result<(), StdinRefused> {
    match hostcall(Hostcall::StdinRequest, &[addr, len, onering_abi::exec::input_stream(input)]) as i64 {
        0 => Ok(()),
        -9 => Err(StdinRefused::NotForwarded),
        -16 => Err(StdinRefused::Busy),
        r => Err(StdinRefused::Other(r)),
    }
}

/// Asks the VMM to read input `input`'s host stdin into `buf` (when the host has
/// input); the buffer is the VMM's until [`stdin_done`] gives it back. Refused
/// (or no such input): the buffer comes back at once.
pub fn stdin_request(input: usize, buf: Box<[u8]>) -> Result<(), (StdinRefused, Box<[u8]>)> {
    let Some(slot) = LENT.get(input) else { return Err((StdinRefused::NotForwarded, buf)) };
    let mut lent = slot.lock();
    if lent.is_some() {
        return Err((StdinRefused::Busy, buf));
    }
    // The VMM writes at most `len` bytes at `addr`, and only until it posts the
    // result; the buffer is kept here (not reachable by the kernel) until then.
    match stdin_call(input, buf.as_ptr() as u64, buf.len() as u64) {
        Ok(()) => {
            *lent = Some(buf);
            Ok(())
        }
        Err(why) => Err((why, buf)),
    }
}

/// Asks the VMM to post input `input`'s ready bit once its host stdin is
/// readable, reading nothing (a poll of stdin with nothing buffered).
pub fn stdin_watch(input: usize) -> Result<(), StdinRefused> {
    if input >= INPUTS {
        return Err(StdinRefused::NotForwarded);
    }
    stdin_call(input, 0, 0)
}

/// Input `input`'s request buffer and result (bytes read, 0 at end of file,
/// -errno), once the VMM has posted it (see `events`); None while it is
/// outstanding (or when none was made).
pub fn stdin_done(input: usize) -> Option<(Box<[u8]>, i64)> {
    if !crate::events::stdin_posted(input) {
        return None;
    }
    let buf = LENT.get(input)?.lock().take()?;
    Some((buf, crate::events::stdin_result(input)))
}

/// A buffer the VMM fills (or reads) during one hostcall: atomics, so that what
/// the VMM wrote behind the compiler's back is read as it is.
struct Shared<const W: usize>([core::sync::atomic::AtomicU64; W]);

impl<const W: usize> Shared<W> {
    fn new(init: &[u8]) -> Self {
        let s = Shared([const { core::sync::atomic::AtomicU64::new(0) }; W]);
        for (i, c) in init.chunks(8).take(W).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            s.0[i].store(u64::from_le_bytes(w), core::sync::atomic::Ordering::Relaxed);
        }
        s
    }

    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }

    fn read(&self, out: &mut [u8]) {
        for (i, c) in out.chunks_mut(8).take(W).enumerate() {
            let w = self.0[i].load(core::sync::atomic::Ordering::Relaxed).to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
    }
}

/// `fstat` of the host's standard stream `fd`: its stat, or -errno (-EBADF: not
/// the host's). The VMM writes the buffer this function holds, during the call.
pub fn stdio_stat(fd: u32) -> Result<onering_abi::HostStat, i64> {
    const W: usize = onering_abi::HOST_STAT_SIZE / 8;
    let buf = Shared::<W>::new(&[]);
    let r = hostcall(Hostcall::StdioStat, &[u64::from(fd), buf.addr()]) as i64;
    if r < 0 {
        return Err(r);
    }
    let mut b = [0u8; onering_abi::HOST_STAT_SIZE];
    buf.read(&mut b);
    Ok(onering_abi::HostStat::from_bytes(&b))
}

/// `lseek` on the host's standard stream `fd`: the new offset or -errno.
pub fn stdio_seek(fd: u32, offset: i64, whence: u32) -> i64 {
    hostcall(Hostcall::StdioSeek, &[u64::from(fd), offset as u64, u64::from(whence)]) as i64
}

/// A terminal ioctl (`onering_abi::stdio::IOCTLS`) on the host's standard stream
/// `fd`, its argument in `arg` (in, or out, as the request says; at most 40 bytes):
/// the result or -errno. The VMM reads or writes the buffer this function holds.
pub fn stdio_ioctl(fd: u32, request: u64, arg: &mut [u8]) -> i64 {
    if arg.len() > 40 {
        return -22;
    }
    let buf = Shared::<5>::new(arg);
    let r = hostcall(Hostcall::StdioIoctl, &[u64::from(fd), request, buf.addr()]) as i64;
    buf.read(arg);
    r
}

/// Asks the VMM to plan the rewriting of the `syscall` instructions of the ELF
/// file that is `pieces` one after the other, as if loaded at `bias`, trampolines
/// at `base`: the length of the plan (`onering_abi::rewrite`) it wrote into `out`,
/// or -errno (-ENOSPC: `out` is too small). The VMM reads and writes the buffers
/// this function holds.
pub fn rewrite_plan(pieces: &[&[u8]], base: u64, bias: u64, out: &mut [u8]) -> i64 {
    use onering_abi::hostcall::RewritePiece;
    let list: alloc::vec::Vec<RewritePiece> =
        pieces.iter().map(|p| RewritePiece { addr: p.as_ptr() as u64, len: p.len() as u64 }).collect();
    let (l, o) = (list.as_ptr() as u64, out.as_mut_ptr() as u64);
    hostcall(Hostcall::Rewrite, &[l, list.len() as u64, base, o, out.len() as u64, bias]) as i64
}

/// Takes the host's next message for the processes it starts in the VM
/// (`onering_abi::exec`) into `out`: its length, 0 when none is left, or -errno
/// (-ENOSPC: `out` is too small; the message stays queued). The VMM writes the
/// buffer this function holds.
pub fn exec_take(out: &mut [u8]) -> i64 {
    hostcall(Hostcall::ExecTake, &[out.as_mut_ptr() as u64, out.len() as u64]) as i64
}

/// Tells the VMM how the process the host started in slot `slot` ended: `how`
/// (`onering_abi::exec::ENDED` or `FAILED`) and its wait status or errno.
pub fn exec_done(slot: u64, how: u64, value: u64) -> i64 {
    hostcall(Hostcall::ExecDone, &[slot, how, value]) as i64
}

#[cfg(target_os = "none")]
pub(crate) fn hostcall(nr: Hostcall, args: &[u64]) -> u64 {
    use core::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};
    use onering_abi::layout::{self, direct};
    let pc = crate::cpu::page().cast::<onering_abi::PerCpuHeader>();
    // SAFETY: the block lies in this CPU's header (the GS base, mapped for the
    // kernel's life; only this vCPU uses its block, and never from an interrupt);
    // the doorbell is the MMIO page the VMM mapped uncached in the direct map and
    // nothing is behind it. Volatile accesses keep the order the VMM sees: the
    // arguments before the doorbell, the result after it.
    unsafe {
        let blk = addr_of_mut!((*pc).hostcall);
        for (i, a) in args.iter().take(6).enumerate() {
            write_volatile(addr_of_mut!((*blk).args[i]), *a);
        }
        write_volatile(direct(layout::HOSTCALL_DOORBELL_PHYS) as *mut u64, nr as u64);
        read_volatile(addr_of!((*blk).ret))
    }
}

/// How long a posted call may wait to be taken before the vCPU rings the doorbell
/// instead (TSC cycles, about 10 µs at 2.5 GHz: a polling VMM thread takes a call
/// within a microsecond; one that does not run, because the host gave its CPU to
/// someone else, would not take it for a host time slice).
#[cfg(target_os = "none")]
const POLL_WAIT_CYCLES: u64 = 25_000;

/// Per vCPU: calls still to make by doorbell after a call was taken back (the
/// poller is not getting a host CPU: on a busy host, waiting for it first would
/// only add to each exit), and how many take-backs came in a row (the backoff
/// doubles with each, up to 64 calls). Only the vCPU itself touches its entries.
#[cfg(target_os = "none")]
static POLL_SKIP: [core::sync::atomic::AtomicU32; onering_abi::MAX_CPUS] =
    [const { core::sync::atomic::AtomicU32::new(0) }; onering_abi::MAX_CPUS];
#[cfg(target_os = "none")]
static POLL_MISSES: [core::sync::atomic::AtomicU32; onering_abi::MAX_CPUS] =
    [const { core::sync::atomic::AtomicU32::new(0) }; onering_abi::MAX_CPUS];

/// This vCPU's word at `offset` of its poll slot (`onering_abi::hostcall::PollSlot`).
#[cfg(target_os = "none")]
fn poll_word(offset: u64) -> &'static core::sync::atomic::AtomicU64 {
    use onering_abi::hostcall::POLL_OFFSET;
    let at = crate::cpu::page().wrapping_add((POLL_OFFSET + offset) as usize);
    // The slot lies in this CPU's page (mapped for the kernel's life; the offsets
    // are checked at compile time against the page's size), 8-byte aligned; the
    // VMM's poller reads and writes it concurrently, hence atomics.
    // SAFETY: an aligned u64 of memory that stays mapped, accessed only atomically.
    unsafe { core::sync::atomic::AtomicU64::from_ptr(at.cast()) }
}

/// Hostcall `nr` through this vCPU's poll slot while the VMM polls (no exit), or
/// through the doorbell when it does not or does not take the call in time
/// (protocol: `onering_abi::hostcall::PollSlot`). Only on the kernel's own path,
/// which is never preempted, so nothing else on this vCPU uses the slot meanwhile.
#[cfg(target_os = "none")]
pub(crate) fn polled(nr: Hostcall, args: &[u64; 6]) -> u64 {
    use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
    use onering_abi::hostcall::{poll_offsets as off, POLL_DONE, POLL_IDLE, POLL_POSTED};
    if poll_word(off::OPEN).load(Acquire) == 0 {
        return hostcall(nr, args);
    }
    let cpu = crate::cpu::cpu_id();
    let skip = POLL_SKIP[cpu].load(Relaxed);
    if skip > 0 {
        POLL_SKIP[cpu].store(skip - 1, Relaxed);
        return hostcall(nr, args);
    }
    for (i, a) in args.iter().enumerate() {
        poll_word(off::ARGS + 8 * i as u64).store(*a, Relaxed);
    }
    poll_word(off::NR).store(nr as u64, Relaxed);
    let state = poll_word(off::STATE);
    state.store(POLL_POSTED, Release);
    let start = crate::cpu::rdtsc();
    loop {
        match state.load(Acquire) {
            POLL_DONE => {
                let r = poll_word(off::RET).load(Relaxed);
                state.store(POLL_IDLE, Relaxed);
                POLL_MISSES[cpu].store(0, Relaxed);
                return r;
            }
            POLL_POSTED if crate::cpu::rdtsc().wrapping_sub(start) > POLL_WAIT_CYCLES => {
                if state.compare_exchange(POLL_POSTED, POLL_IDLE, AcqRel, Acquire).is_ok() {
                    let misses = (POLL_MISSES[cpu].load(Relaxed) + 1).min(6);
                    POLL_MISSES[cpu].store(misses, Relaxed);
                    POLL_SKIP[cpu].store(1 << misses, Relaxed);
                    return hostcall(nr, args);
                }
            }
            _ => core::hint::spin_loop(),
        }
    }
}

/// Records the page-table root this vCPU runs on, for the VMM's poller.
#[cfg(target_os = "none")]
pub(crate) fn poll_root(root: u64) {
    poll_word(onering_abi::hostcall::poll_offsets::ROOT).store(root, core::sync::atomic::Ordering::Release);
}

#[cfg(not(target_os = "none"))]
pub(crate) fn polled(nr: Hostcall, args: &[u64; 6]) -> u64 {
    hostcall(nr, args)
}

/// A host test's answer to hostcalls.
#[cfg(not(target_os = "none"))]
pub type HostHandler = fn(Hostcall, &[u64]) -> u64;

#[cfg(not(target_os = "none"))]
static HOST_HANDLER: std::sync::Mutex<Option<HostHandler>> = std::sync::Mutex::new(None);

/// Host tests: what hostcalls do (None: return 0).
#[cfg(not(target_os = "none"))]
pub fn set_host_handler(h: Option<HostHandler>) {
    *HOST_HANDLER.lock().unwrap_or_else(|e| e.into_inner()) = h;
}

#[cfg(not(target_os = "none"))]
pub(crate) fn hostcall(nr: Hostcall, args: &[u64]) -> u64 {
    let h = *HOST_HANDLER.lock().unwrap_or_else(|e| e.into_inner());
    h.map_or(0, |h| h(nr, args))
}

/// Host tests: what the VMM does for a stdin request of `input` (`data` into the
/// lent buffer, or end of file when empty, the result posted in the events page).
#[cfg(not(target_os = "none"))]
pub fn host_complete_stdin(input: usize, data: &[u8]) {
    if let Some(buf) = LENT[input].lock().as_mut() {
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        crate::events::host_post(input, n as i64);
    }
}

/// The host file protocol (`onering_abi::hostfs`), one typed call per operation.
/// Names go to the VMM NUL-terminated from a buffer on this stack; what the VMM
/// writes back goes either into a [`Shared`] buffer (a stat) or into a byte
/// buffer the caller lends exclusively for the call (`&mut [u8]`, which the VMM
/// writes only within its length, as a `read(2)` into it would; the fence after
/// the doorbell keeps the compiler from reading it before the call returned).
pub mod fs {
    use super::{polled, Shared};
    use alloc::boxed::Box;
    use alloc::vec::Vec;
    use onering_abi::hostfs as proto;
    use onering_abi::{HostStat, Hostcall, HOST_STAT_SIZE};

    const W: usize = HOST_STAT_SIZE / 8;
    const EINVAL: i64 = -22;

    /// `name` NUL-terminated (at most a path component or a link target).
    struct CName([u8; proto::TARGET_MAX + 1]);

    impl CName {
        fn new(name: &[u8]) -> Result<CName, i64> {
            if name.len() > proto::TARGET_MAX || name.contains(&0) {
                return Err(EINVAL);
            }
            let mut b = [0u8; proto::TARGET_MAX + 1];
            b[..name.len()].copy_from_slice(name);
            Ok(CName(b))
        }
        fn addr(&self) -> u64 {
            self.0.as_ptr() as u64
        }
    }

    /// Closes, unlocks and small writes waiting for the next call: they ride on
    /// it, in order, before its own operation, so they take no exit of their own
    /// (`onering_abi::hostfs`, "Deferred operations"). The queue stays locked
    /// across a call that carries them, so no other vCPU's call reaches the VMM
    /// between them and what was asked after them; a write's bytes stay in the
    /// queue until the call that carried them returned.
    struct Deferred {
        ops: [[u64; proto::DEFERRED_WORDS]; proto::MAX_DEFERRED],
        bufs: [Option<Vec<u8>>; proto::MAX_DEFERRED],
        len: usize,
        /// Bytes of the writes queued.
        bytes: usize,
        /// The last host lock granted by a call, (handle, start, len), if no
        /// other lock or unlock began since; and where its exact unlock waits in
        /// the queue, if it does (not carried yet, nothing unlocked since): a
        /// read lock on that range asked then is that queued unlock turned into
        /// a read lock, no exit (see [`lock`]).
        granted: Option<(u64, u64, u64)>,
        held: Option<usize>,
        /// Counts lock and unlock requests (a grant is only remembered if none
        /// began while its call was out).
        locks: u64,
    }

    /// Most bytes of writes queued at once.
    const MAX_DEFERRED_BYTES: usize = 256 << 10;

    static DEFERRED: spin::Mutex<Deferred> = spin::Mutex::new(Deferred {
        ops: [[0; proto::DEFERRED_WORDS]; proto::MAX_DEFERRED],
        bufs: [const { None }; proto::MAX_DEFERRED],
        len: 0,
        bytes: 0,
        granted: None,
        held: None,
        locks: 0,
    });

    fn call(op: u64, args: &[u64]) -> i64 {
        send(DEFERRED.lock(), op, args, false)
    }

    /// Makes call `op` with what waits in `q` carried first. The queue stays
    /// locked across it when something is carried or `hold` is set (`flush`: its
    /// own operation came off the queue, so no other vCPU's call may reach the
    /// host before it); with nothing carried, other vCPUs' calls run alongside.
    fn send(mut q: spin::MutexGuard<'_, Deferred>, op: u64, args: &[u64], hold: bool) -> i64 {
        let mut a = [op, 0, 0, 0, 0, 0];
        a[1..1 + args.len().min(5)].copy_from_slice(&args[..args.len().min(5)]);
        // (What waits is carried, or the queue is empty: no unlock waits in it.)
        q.held = None;
        let r = if q.len == 0 && !hold {
            drop(q);
            polled(Hostcall::Fs, &a) as i64
        } else {
            a[0] |= (q.len as u64) << 32;
            put_deferred(&q.ops[..q.len]);
            let r = polled(Hostcall::Fs, &a) as i64;
            let n = q.len;
            q.bufs[..n].iter_mut().for_each(|b| *b = None);
            (q.len, q.bytes) = (0, 0);
            r
        };
        core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
        r
    }

    /// Writes `ops` where the VMM reads this vCPU's deferred operations (its
    /// per-CPU page; only this vCPU writes there, under the queue's lock, right
    /// before its doorbell). On the host (unit tests) they are dropped.
    fn put_deferred(ops: &[[u64; proto::DEFERRED_WORDS]]) {
        #[cfg(target_os = "none")]
        {
            let area = crate::cpu::page().wrapping_add(proto::DEFERRED_OFFSET as usize).cast::<u64>();
            for (i, w) in ops.iter().flatten().enumerate() {
                // The area lies in this vCPU's per-CPU page (mapped for the kernel's
                // life), below the steal-time record and past the kernel's words
                // (both checked at compile time); at most MAX_DEFERRED items of
                // DEFERRED_WORDS words are written; volatile so the stores precede
                // the doorbell.
                // SAFETY: within a page mapped for the kernel's life; only this vCPU writes it (queue lock).
                unsafe { core::ptr::write_volatile(area.add(i), *w) };
            }
        }
        #[cfg(not(target_os = "none"))]
        let _ = ops;
    }

    /// Lets `item` (with a write's bytes `buf`) wait for the next call: None. When
    /// the queue is full it is made now, carrying the others first: its result.
    fn defer(item: [u64; proto::DEFERRED_WORDS], buf: Option<Vec<u8>>) -> Option<i64> {
        let size = buf.as_ref().map_or(0, Vec::len);
        {
            let mut q = DEFERRED.lock();
            if q.len < proto::MAX_DEFERRED && q.bytes + size <= MAX_DEFERRED_BYTES {
                let n = q.len;
                q.ops[n] = item;
                q.bufs[n] = buf;
                q.len += 1;
                q.bytes += size;
                return None;
            }
        }
        let r = call(item[0], &item[1..]);
        drop(buf);
        Some(r)
    }

    /// Sends what waits in the queue now (before the vCPU idles and the VM ends:
    /// nothing waits longer than the next exit of any kind). The last operation
    /// waiting is the call's own, the others ride on it; the queue stays locked
    /// until the call returned. (What waits may be another vCPU's: a write its
    /// program was told is done. Were the lock let go once it came off the queue,
    /// a call another vCPU makes next, a read of that file by a process that
    /// waited for the writer's end, could reach the host first and see the file
    /// without it.)
    pub fn flush() {
        let mut q = DEFERRED.lock();
        if q.len == 0 {
            return;
        }
        q.len -= 1;
        let n = q.len;
        q.bytes -= q.bufs[n].as_ref().map_or(0, Vec::len);
        let (last, buf) = (q.ops[n], q.bufs[n].take());
        let _ = send(q, last[0], &last[1..], true);
        drop(buf);
    }

    /// The operations waiting (host tests).
    #[cfg(test)]
    pub(super) fn queued() -> Vec<[u64; proto::DEFERRED_WORDS]> {
        let q = DEFERRED.lock();
        q.ops[..q.len].to_vec()
    }

    /// [`flush`] if a write waits (a file closed, a mapping written back: its
    /// bytes are on the host when the call returns).
    pub fn flush_writes() {
        let waiting = {
            let q = DEFERRED.lock();
            q.ops[..q.len].iter().any(|o| o[0] == proto::WRITE)
        };
        if waiting {
            flush();
        }
    }

    fn ok(r: i64) -> Result<u64, i64> {
        if r < 0 {
            Err(r)
        } else {
            Ok(r as u64)
        }
    }

    /// A call that makes a handle and reports the entry's stat.
    fn make(op: u64, args: &[u64]) -> Result<(u64, HostStat), i64> {
        let st = Shared::<W>::new(&[]);
        let mut a = [0u64; 5];
        a[..args.len()].copy_from_slice(args);
        a[args.len()] = st.addr();
        let h = ok(call(op, &a[..=args.len()]))?;
        let mut b = [0u8; HOST_STAT_SIZE];
        st.read(&mut b);
        Ok((h, HostStat::from_bytes(&b)))
    }

    /// The mount list into `buf`: its length.
    pub fn mounts(buf: &mut [u8]) -> Result<usize, i64> {
        ok(call(proto::MOUNTS, &[buf.as_mut_ptr() as u64, buf.len() as u64])).map(|n| n as usize)
    }

    pub fn lookup(dir: u64, name: &[u8]) -> Result<(u64, HostStat), i64> {
        let n = CName::new(name)?;
        make(proto::LOOKUP, &[dir, n.addr()])
    }

    pub fn open(dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat), i64> {
        let n = CName::new(name)?;
        make(proto::OPEN, &[dir, n.addr(), flags, u64::from(mode)])
    }

    pub fn mkdir(dir: u64, name: &[u8], mode: u32) -> Result<(u64, HostStat), i64> {
        let n = CName::new(name)?;
        make(proto::MKDIR, &[dir, n.addr(), u64::from(mode)])
    }

    pub fn symlink(dir: u64, name: &[u8], target: &[u8]) -> Result<(u64, HostStat), i64> {
        let (n, t) = (CName::new(name)?, CName::new(target)?);
        make(proto::SYMLINK, &[dir, n.addr(), t.addr()])
    }

    /// The stat of entry `name` of directory `dir` (a link not followed).
    pub fn stat_at(dir: u64, name: &[u8]) -> Result<HostStat, i64> {
        let n = CName::new(name)?;
        let st = Shared::<W>::new(&[]);
        ok(call(proto::STATAT, &[dir, n.addr(), st.addr()]))?;
        let mut b = [0u8; HOST_STAT_SIZE];
        st.read(&mut b);
        Ok(HostStat::from_bytes(&b))
    }

    pub fn stat(h: u64) -> Result<HostStat, i64> {
        let st = Shared::<W>::new(&[]);
        ok(call(proto::STAT, &[h, st.addr()]))?;
        let mut b = [0u8; HOST_STAT_SIZE];
        st.read(&mut b);
        Ok(HostStat::from_bytes(&b))
    }

    /// `pread` into the kernel buffers `bufs`, in order, from `offset`: bytes read.
    pub fn readv(h: u64, bufs: &mut [&mut [u8]], offset: u64) -> Result<usize, i64> {
        readv_at(h, bufs.iter_mut().map(|b| (b.as_mut_ptr() as u64, b.len() as u64)), offset)
    }

    /// `READV` into the kernel buffers at `pieces` (address, length), the first
    /// `MAX_IOV` of them: bytes read.
    fn readv_at(h: u64, pieces: impl Iterator<Item = (u64, u64)>, offset: u64) -> Result<usize, i64> {
        let mut iov = [0u64; 2 * proto::MAX_IOV as usize];
        let mut n = 0;
        for (i, (addr, len)) in pieces.take(proto::MAX_IOV as usize).enumerate() {
            iov[2 * i] = addr;
            iov[2 * i + 1] = len;
            n = i + 1;
        }
        ok(call(proto::READV, &[h, iov.as_ptr() as u64, n as u64, offset])).map(|n| n as usize)
    }

    /// `pread` from `offset` into up to `count` new kernel buffers of `len` bytes
    /// each, in order, that are not zeroed first: the host writes them, and only
    /// what it did not write (past the file's end) is zeroed here. On PVM the first
    /// touch of each fresh page of guest memory costs 4-20 µs, so a buffer the host
    /// fills is left for the kernel's later reads to touch, page by page, as they
    /// need it (a readahead fills pages that may never be read). Fewer buffers if
    /// the heap runs out (none: an empty list); Err: the host's -errno.
    pub fn read_chunks(h: u64, offset: u64, count: usize, len: usize) -> Result<Vec<Box<[u8]>>, i64> {
        let mut bufs: Vec<Vec<u8>> = Vec::new();
        let n = count.min(proto::MAX_IOV as usize);
        if bufs.try_reserve_exact(n).is_err() {
            return Ok(Vec::new());
        }
        while bufs.len() < n {
            let mut v = Vec::new();
            if v.try_reserve_exact(len).is_err() {
                break;
            }
            bufs.push(v);
        }
        if bufs.is_empty() {
            return Ok(Vec::new());
        }
        let pieces = bufs.iter_mut().map(|b| (b.spare_capacity_mut().as_mut_ptr() as u64, len as u64));
        let got = readv_at(h, pieces, offset)?;
        let mut out = Vec::new();
        if out.try_reserve_exact(bufs.len()).is_err() {
            return Ok(Vec::new());
        }
        for (i, mut b) in bufs.into_iter().enumerate() {
            let filled = got.saturating_sub(i * len).min(len);
            for byte in &mut b.spare_capacity_mut()[filled..len] {
                byte.write(0);
            }
            // The host wrote the first `filled` bytes (READV fills the buffers in
            // order and reported `got` bytes in all) and the rest were zeroed just
            // above, so all `len` bytes of the reserved capacity are initialized.
            // SAFETY: `len` <= capacity (reserved exactly), and every byte below it is initialized.
            unsafe { b.set_len(len) };
            out.push(b.into_boxed_slice());
        }
        Ok(out)
    }

    /// `pread`/`pwrite` between the file and the program's memory at `addr` (the
    /// VMM goes through the page tables): bytes moved, -EFAULT if none could be.
    pub fn read_user(h: u64, addr: u64, len: u64, offset: u64) -> Result<u64, i64> {
        ok(call(proto::READ, &[h, addr, len, offset]))
    }

    pub fn write_user(h: u64, addr: u64, len: u64, offset: u64) -> Result<u64, i64> {
        ok(call(proto::WRITE, &[h, addr, len, offset]))
    }

    /// `pwrite` of kernel bytes.
    pub fn write(h: u64, data: &[u8], offset: u64) -> Result<u64, i64> {
        ok(call(proto::WRITE, &[h, data.as_ptr() as u64, data.len() as u64, offset]))
    }

    /// Directory entries from number `index` into `buf`: bytes filled.
    pub fn readdir(dir: u64, index: u64, buf: &mut [u8]) -> Result<usize, i64> {
        ok(call(proto::READDIR, &[dir, index, buf.as_mut_ptr() as u64, buf.len() as u64])).map(|n| n as usize)
    }

    /// A link's target into `buf`: its length.
    pub fn readlink(h: u64, buf: &mut [u8]) -> Result<usize, i64> {
        ok(call(proto::READLINK, &[h, buf.as_mut_ptr() as u64, buf.len() as u64])).map(|n| n as usize)
    }

    pub fn statfs(h: u64) -> Result<[u64; 9], i64> {
        let b = Shared::<9>::new(&[]);
        ok(call(proto::STATFS, &[h, b.addr()]))?;
        let mut raw = [0u8; 72];
        b.read(&mut raw);
        let mut out = [0u64; 9];
        for (o, c) in out.iter_mut().zip(raw.chunks_exact(8)) {
            *o = u64::from_le_bytes(c.try_into().unwrap_or_default());
        }
        Ok(out)
    }

    /// CLOSE, deferred to the next call (a host descriptor's close is seen by
    /// nobody but the host's lease and `inotify` holders).
    pub fn close(h: u64) {
        defer([proto::CLOSE, h, 0, 0, 0], None);
    }

    pub fn unlink(dir: u64, name: &[u8], rmdir: bool) -> Result<(), i64> {
        let n = CName::new(name)?;
        ok(call(proto::UNLINK, &[dir, n.addr(), u64::from(rmdir)])).map(|_| ())
    }

    /// RENAME (`link` false) or LINK.
    pub fn rename(link: bool, dir: u64, name: &[u8], dir2: u64, name2: &[u8]) -> Result<(), i64> {
        let (n, n2) = (CName::new(name)?, CName::new(name2)?);
        let op = if link { proto::LINK } else { proto::RENAME };
        ok(call(op, &[dir, n.addr(), dir2, n2.addr()])).map(|_| ())
    }

    /// LOCK of `kind` over `len` bytes from `start` on handle `h`: once granted,
    /// the file's stat (read in the same exit). Or, for a read lock on the range
    /// whose lock was just granted and whose unlock still waits in the queue
    /// (SQLite takes a WAL read mark that way: a write lock, an unlock, a read
    /// lock), None at once: the queued unlock becomes a read lock, which the host
    /// grants whatever others hold, as this handle holds that range until then.
    pub fn lock(h: u64, kind: u64, start: u64, len: u64) -> Result<Option<HostStat>, i64> {
        let mine = (h, start, len);
        let began = {
            let mut q = DEFERRED.lock();
            let unlock = [proto::LOCK, h, proto::LOCK_UNLOCK, start, len];
            if let Some(i) = q.held.filter(|i| kind == proto::LOCK_READ && *i < q.len && q.ops[*i] == unlock) {
                q.ops[i][2] = proto::LOCK_READ;
                q.held = None;
                q.granted = Some(mine);
                q.locks += 1;
                return Ok(None);
            }
            q.granted = None;
            q.locks += 1;
            q.locks
        };
        let st = Shared::<W>::new(&[]);
        ok(call(proto::LOCK, &[h, kind, start, len, st.addr()]))?;
        let mut q = DEFERRED.lock();
        if q.locks == began {
            q.granted = Some(mine);
        }
        drop(q);
        let mut b = [0u8; HOST_STAT_SIZE];
        st.read(&mut b);
        Ok(Some(HostStat::from_bytes(&b)))
    }

    /// LOCK_UNLOCK of `len` bytes from `start` on handle `h`, deferred to the
    /// next call: the host lock is held until then (whatever the guest asks next
    /// comes after it); the guest's own lock table released it already.
    pub fn unlock(h: u64, start: u64, len: u64) {
        let item = [proto::LOCK, h, proto::LOCK_UNLOCK, start, len];
        {
            let mut q = DEFERRED.lock();
            let exact = q.granted == Some((h, start, len));
            (q.granted, q.held) = (None, None);
            q.locks += 1;
            if q.len < proto::MAX_DEFERRED {
                let n = q.len;
                q.ops[n] = item;
                q.len += 1;
                q.held = exact.then_some(n);
                return;
            }
        }
        let _ = call(item[0], &item[1..]);
    }

    /// `pwrite` of `data` (at most `MAX_DEFERRED_WRITE` bytes) at `offset`,
    /// deferred to the next call: all of it, as far as the program can tell now
    /// (a failure is what the next FSYNC of `h` returns), or made at once when
    /// the queue is full: what that moved.
    pub fn write_later(h: u64, data: Vec<u8>, offset: u64) -> Result<u64, i64> {
        let n = data.len() as u64;
        if n > proto::MAX_DEFERRED_WRITE {
            return Err(EINVAL);
        }
        match defer([proto::WRITE, h, data.as_ptr() as u64, n, offset], Some(data)) {
            None => Ok(n),
            Some(r) => ok(r),
        }
    }

    /// TRUNCATE, FSYNC, CHMOD, UTIMES, CHOWN, LOCK: integers only.
    pub fn simple(op: u64, args: &[u64]) -> Result<u64, i64> {
        ok(call(op, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use onering_abi::hostfs as proto;

    static FS_CALLS: AtomicUsize = AtomicUsize::new(0);
    /// The tests share the handler and the queue: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn count(nr: Hostcall, _: &[u64]) -> u64 {
        if nr == Hostcall::Fs {
            FS_CALLS.fetch_add(1, Ordering::SeqCst);
        }
        0
    }

    #[test]
    fn a_read_lock_on_a_range_just_unlocked_is_the_queued_unlock_made_a_read_lock() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        set_host_handler(Some(count));
        let calls = || FS_CALLS.load(Ordering::SeqCst);
        // SQLite's read mark: a write lock, its unlock, a read lock: one exit.
        let before = calls();
        assert!(fs::lock(5, proto::LOCK_WRITE, 124, 1).unwrap().is_some());
        fs::unlock(5, 124, 1);
        assert_eq!(fs::lock(5, proto::LOCK_READ, 124, 1), Ok(None), "no exit");
        assert_eq!(calls() - before, 1);
        {
            let q = fs::queued();
            assert_eq!(q.last(), Some(&[proto::LOCK, 5, proto::LOCK_READ, 124, 1]));
        }
        fs::flush();
        // Anything else between the grant and the read lock: a call as always
        // (another unlock may have let the range go on the host).
        let before = calls();
        fs::lock(5, proto::LOCK_WRITE, 124, 1).unwrap();
        fs::unlock(5, 120, 1);
        fs::unlock(5, 124, 1);
        assert!(fs::lock(5, proto::LOCK_READ, 124, 1).unwrap().is_some());
        // The unlock carried by a call first: the same.
        fs::lock(5, proto::LOCK_WRITE, 124, 1).unwrap();
        fs::unlock(5, 124, 1);
        fs::flush();
        assert!(fs::lock(5, proto::LOCK_READ, 124, 1).unwrap().is_some());
        // Another range, or a write lock: a call.
        fs::unlock(5, 124, 1);
        assert!(fs::lock(5, proto::LOCK_READ, 120, 1).unwrap().is_some());
        fs::unlock(5, 120, 1);
        assert!(fs::lock(5, proto::LOCK_WRITE, 120, 1).unwrap().is_some());
        assert_eq!(calls() - before, 7, "the flush one of them");
        fs::flush();
        set_host_handler(None);
    }

    static WRITING: AtomicBool = AtomicBool::new(false);
    static ENTERED: AtomicBool = AtomicBool::new(false);
    static OVERTAKEN: AtomicBool = AtomicBool::new(false);

    /// A host whose writes take a while: a call that comes during one is noted.
    fn slow_writes(nr: Hostcall, args: &[u64]) -> u64 {
        if nr != Hostcall::Fs {
            return 0;
        }
        if proto::split_op(args[0]).0 == proto::WRITE {
            WRITING.store(true, Ordering::SeqCst);
            ENTERED.store(true, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(100));
            WRITING.store(false, Ordering::SeqCst);
        } else if WRITING.load(Ordering::SeqCst) {
            OVERTAKEN.store(true, Ordering::SeqCst);
        }
        0
    }

    #[test]
    fn a_flush_keeps_the_queue_locked_until_its_call_returned() {
        let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        set_host_handler(Some(slow_writes));
        // One vCPU's write waits; another vCPU sends it (it idles, or a file of
        // its closes); a third call, made once that is under way, comes after it.
        fs::write_later(7, alloc::vec![1u8; 10], 0).unwrap();
        let flusher = std::thread::spawn(fs::flush);
        while !ENTERED.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let _ = fs::stat(7);
        flusher.join().unwrap();
        set_host_handler(None);
        assert!(!OVERTAKEN.load(Ordering::SeqCst), "a call reached the host before the write sent earlier");
    }
}
