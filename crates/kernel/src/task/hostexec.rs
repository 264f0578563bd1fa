//! Processes the host starts in the running VM (`onering exec`, the OCI
//! runtime's `exec`; `onering_abi::exec`). The VMM queues a request and sets the
//! events page's EXEC bit; the scheduler's poll (`service_events`) takes the
//! queued messages (`ExecTake`). A spawn makes a new process outside the
//! program's tree, as `runc exec` puts one in a container: parent 0, a session
//! and group of its own, a fresh address space, the working directory asked for,
//! and descriptors 0-2 the host streams the request brought (output through the
//! console, as the program's own; its stdin is /dev/null). Its first thread
//! starts at arch's spawn landing, a `syscall` of `exec::START_SYSCALL`, whose
//! handler ([`start`]) loads the program as `execve` would (a bare name found
//! in the request's `PATH`). When it ends, or cannot start, the VMM is told
//! (`ExecDone`) with its wait status or the errno, after its output. A signal
//! message goes to the slot's process, as `kill` would send it.

use super::kernel::Kernel;
use super::process::{FsCtx, Process, Start};
use super::sched;
use crate::errno::Errno;
use crate::file::FdTable;
use crate::task::Ctx;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::exec::{Message, Spawn, ENDED, FAILED, MAX_MESSAGE, STARTED, START_SYSCALL};
use onering_arch::frame::SyscallFrame;
use onering_arch::sync::Mutex;

/// Slot -> pid of the host's processes that have not ended.
static RUNNING: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// What a new process loads: its slot, arguments and environment.
struct Pending {
    slot: u64,
    argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
}

/// Thread id -> what it loads at its first system call.
static STARTS: Mutex<BTreeMap<u64, Pending>> = Mutex::new(BTreeMap::new());

#[cfg(target_os = "none")]
fn landing() -> u64 {
    onering_arch::entry::spawn_landing()
}

#[cfg(not(target_os = "none"))]
fn landing() -> u64 {
    0
}

/// Takes every message the host queued (the EXEC bit was set).
pub fn service(k: &'static Kernel) {
    let mut buf = alloc::vec![0u8; MAX_MESSAGE];
    loop {
        let n = onering_arch::hostcall::exec_take(&mut buf);
        if n <= 0 {
            return;
        }
        match Message::decode(&buf[..(n as usize).min(buf.len())]) {
            Some(Message::Spawn(s)) => {
                let slot = s.slot;
                if let Err(e) = spawn(k, s) {
                    onering_arch::hostcall::exec_done(slot, FAILED, e as u64);
                }
            }
            Some(Message::Signal { slot, signal }) if (1..=64).contains(&signal) => {
                let Some(pid) = RUNNING.lock().get(&slot).copied() else { continue };
                let info =
                    crate::sigframe::Info { signo: signal, code: crate::sigframe::code::SI_USER, ..Default::default() };
                let _ = super::signal::send_to_process(pid, signal, info);
            }
            _ => {} // (nothing the VMM should send)
        }
    }
}

/// Makes the process of request `s`, its thread runnable at the landing.
fn spawn(k: &'static Kernel, s: Spawn) -> Result<(), Errno> {
    if RUNNING.lock().contains_key(&s.slot) || s.argv.is_empty() {
        return Err(Errno::EBUSY);
    }
    let (fds, fs) = {
        let mut v = k.vfs.lock();
        let cwd = v.lookup(crate::vfs::ROOT, if s.cwd.is_empty() { b"/" } else { &s.cwd }, true)?;
        let mut fds = FdTable::new();
        for fd in 0..3u32 {
            let kind = onering_abi::stdio::kind(s.stdio, fd);
            if let Some(f) = crate::fs::open_host_stream(k, &mut v, s.slot, fd, kind) {
                let _ = fds.install(u64::from(fd), f, false);
            }
        }
        let hold = Some(v.hold(cwd));
        (fds, FsCtx { cwd, cwd_hold: hold, umask: 0o022 })
    };
    let space = crate::mm::spaces::fresh(&k.chunks)?;
    let tid = sched::alloc_tid();
    let start = Start {
        space,
        pid: tid,
        ppid: 0,
        fds,
        fs,
        actions: [[0; 4]; 64],
        rlimits: BTreeMap::new(),
        image: None,
        pgid: tid,
        sid: tid,
        ctty: false,
    };
    let proc = Process::create(start).inspect_err(|_| space.release())?;
    proc.threads.store(1, Relaxed);
    RUNNING.lock().insert(s.slot, tid);
    STARTS.lock().insert(tid, Pending { slot: s.slot, argv: s.argv, envp: s.envp });
    let frame = SyscallFrame { rip: landing(), rax: START_SYSCALL, rflags: 0x202, ..SyscallFrame::default() };
    let spawn = sched::Spawn { tid, proc, ppid: 0, frame, fs_base: 0, sigmask: 0, affinity: u64::MAX };
    if let Err(e) = sched::spawn(spawn, true, || k.chunk()) {
        RUNNING.lock().remove(&s.slot);
        STARTS.lock().remove(&tid);
        proc.threads.store(0, Relaxed);
        drop(proc.end());
        super::process::reaped(tid);
        return Err(e);
    }
    Ok(())
}

/// `exec::START_SYSCALL`: a process the host started loads its program (and
/// never returns); failing that, the VMM hears why and the process ends with
/// 127 (not found) or 126, as a shell's. ENOSYS for any other caller.
pub fn start(ctx: &Ctx, _: &mut SyscallFrame) -> Result<u64, Errno> {
    let Some(p) = STARTS.lock().remove(&ctx.thread.tid()) else { return Err(Errno::ENOSYS) };
    let path = p.argv.first().cloned().unwrap_or_default();
    let (slot, pid) = (p.slot, ctx.proc().pid());
    let started = || {
        onering_arch::hostcall::exec_done(slot, STARTED, pid);
    };
    let e = crate::syscall::exec::exec_for_host(ctx, &path, p.argv, p.envp, &started);
    RUNNING.lock().remove(&p.slot);
    onering_arch::hostcall::exec_done(p.slot, FAILED, e as u64);
    let code = if e == Errno::ENOENT { 127 } else { 126 };
    super::exit::exit_thread(ctx.k, ctx.user, code, true)
}

/// Process `pid` (without a parent in the VM) ended with wait status `status`:
/// if the host started it, the VMM hears it once its output has gone.
pub fn ended(k: &Kernel, pid: u64, status: u64) {
    let slot = {
        let mut r = RUNNING.lock();
        let Some(slot) = r.iter().find(|(_, p)| **p == pid).map(|(s, _)| *s) else { return };
        r.remove(&slot);
        slot
    };
    k.console.flush();
    onering_arch::hostcall::exec_done(slot, ENDED, status);
}

/// Whether system call `nr` is the host's processes' start.
pub fn is_start(nr: u64) -> bool {
    nr == START_SYSCALL
}
