//! Processes the host starts in the running VM (`onering exec`;
//! `onering_abi::exec`; the queue and the reports are `task::hostexec`'s): the
//! spawner and the start system call. A spawn makes a new process outside the
//! program's tree, as `runc exec` puts one in a container: parent 0, a session
//! and group of its own, a fresh address space, the working directory asked
//! for, and descriptors 0-2 the host streams the request brought (output
//! through the console, as the program's own; its stdin through its slot's
//! stdin device, which the VMM feeds from the client's stdin). Its
//! first thread starts at arch's spawn landing, a `syscall` of
//! `exec::START_SYSCALL`, whose handler ([`start`]) loads the program as
//! `execve` would (a bare name found in the request's `PATH`), telling the VMM
//! once it is past the point of no return, or why it could not.

use crate::errno::Errno;
use crate::file::FdTable;
use crate::task::hostexec;
use crate::task::process::{FsCtx, Process, Start};
use crate::task::{sched, Ctx, Kernel};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::exec::{Spawn, FAILED, STARTED, START_SYSCALL};
use onering_arch::frame::SyscallFrame;
use onering_arch::sync::Mutex;

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

/// Makes the process of request `s`, its thread runnable at the landing
/// (`task::hostexec::Spawner`).
pub fn spawn(k: &'static Kernel, s: Spawn) -> Result<(), Errno> {
    if s.argv.is_empty() {
        return Err(Errno::EINVAL);
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
    let space = crate::mm::spaces::fresh(&k.chunks, 0)?;
    let tid = sched::alloc_tid();
    let proc = Process::create(Start::leader(k, space, tid, fds, fs)).inspect_err(|_| space.release())?;
    proc.threads.store(1, Relaxed);
    hostexec::running(s.slot, tid);
    STARTS.lock().insert(tid, Pending { slot: s.slot, argv: s.argv, envp: s.envp });
    let frame = SyscallFrame { rip: landing(), rax: START_SYSCALL, rflags: 0x202, ..SyscallFrame::default() };
    let spawn = sched::Spawn { tid, proc, ppid: 0, frame, fs_base: 0, sigmask: 0, affinity: u64::MAX };
    if let Err(e) = sched::spawn(spawn, true, || k.chunk()) {
        hostexec::forget(s.slot);
        STARTS.lock().remove(&tid);
        proc.threads.store(0, Relaxed);
        drop(proc.end());
        crate::task::process::reaped(tid);
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
    let e = super::exec::exec_for_host(ctx, &path, p.argv, p.envp, &started);
    hostexec::forget(slot);
    onering_arch::hostcall::exec_done(slot, FAILED, e as u64);
    let code = if e == Errno::ENOENT { 127 } else { 126 };
    crate::task::exit::exit_thread(ctx.k, ctx.user, code, true)
}

/// Whether system call `nr` is the host's processes' start.
pub fn is_start(nr: u64) -> bool {
    nr == START_SYSCALL
}
