//! Process and thread system calls. The program is pid 1 of its VM, as in a
//! container; its threads share everything (clone with CLONE_THREAD); vfork (or clone
//! with CLONE_VM | CLONE_VFORK) makes a child process that shares the memory but has
//! its own descriptors until it exits, while the parent waits; fork (or clone
//! without CLONE_VM) makes a child process with a copy of the address space
//! (`AddressSpace::fork`: MAP_SHARED memory stays shared) and of the descriptors.
//! execve is `exec.rs`. pidfds (`pidfd_open`, `CLONE_PIDFD`, `waitid(P_PIDFD)`)
//! name a process by pid (`crate::fs::pidfd`); pids are never reused.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::fs::pidfd::PidFd;
use crate::fs::procfmt as fmt;
use crate::futex::robust;
use crate::mm::spaces::{self, Space};
use crate::mm::user::UserMemExt;
use crate::task::exit::{exit_thread, wait_key};
use crate::task::process::{Life, Process};
use crate::task::sched::{self, Spawn, Wake};
use crate::task::Ctx;
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::layout::{PAGE_SIZE, USER_END};
use onering_arch::cpu;

const ARCH_SET_GS: u64 = 0x1001;
const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;
const ARCH_GET_GS: u64 = 0x1004;

/// clone flags.
const CSIGNAL: u64 = 0xff;
const CLONE_VM: u64 = 0x100;
const CLONE_FS: u64 = 0x200;
const CLONE_FILES: u64 = 0x400;
const CLONE_SIGHAND: u64 = 0x800;
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_PTRACE: u64 = 0x2000;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_PARENT: u64 = 0x8000;
const CLONE_THREAD: u64 = 0x10000;
const CLONE_SYSVSEM: u64 = 0x40000;
const CLONE_SETTLS: u64 = 0x80000;
const CLONE_PARENT_SETTID: u64 = 0x100000;
const CLONE_CHILD_CLEARTID: u64 = 0x200000;
const CLONE_DETACHED: u64 = 0x400000;
const CLONE_UNTRACED: u64 = 0x800000;
const CLONE_CHILD_SETTID: u64 = 0x1000000;
const CLONE_IO: u64 = 0x8000_0000;
/// The flags this kernel honours (namespaces and friends are refused).
const CLONE_KNOWN: u64 = CSIGNAL
    | CLONE_VM
    | CLONE_FS
    | CLONE_FILES
    | CLONE_SIGHAND
    | CLONE_PTRACE
    | CLONE_VFORK
    | CLONE_PARENT
    | CLONE_THREAD
    | CLONE_SYSVSEM
    | CLONE_SETTLS
    | CLONE_PARENT_SETTID
    | CLONE_CHILD_CLEARTID
    | CLONE_DETACHED
    | CLONE_UNTRACED
    | CLONE_CHILD_SETTID
    | CLONE_IO;

const WNOHANG: u64 = 1;

pub fn getpid(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(ctx.thread.pid())
}

pub fn gettid(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(ctx.thread.tid())
}

pub fn getppid(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(ctx.thread.ppid.load(Relaxed))
}

pub fn set_tid_address(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    ctx.thread.clear_child_tid.store(f.rdi, Relaxed);
    Ok(ctx.thread.tid())
}

pub fn arch_prctl(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [code, addr, ..] = f.args();
    match code {
        ARCH_SET_FS => {
            if addr >= USER_END {
                return Err(Errno::EPERM);
            }
            cpu::set_fs_base(addr);
            Ok(0)
        }
        ARCH_GET_FS => {
            ctx.user.write_u64(addr, cpu::fs_base())?;
            Ok(0)
        }
        // The GS base belongs to the kernel (per-CPU data): programs cannot have it.
        ARCH_SET_GS | ARCH_GET_GS => Err(Errno::EPERM),
        _ => Err(Errno::EINVAL),
    }
}

/// The frame a new thread or child returns to the program with: the caller's,
/// with 0 in rax and, if given, the new stack.
fn child_frame(f: &SyscallFrame, stack: u64) -> SyscallFrame {
    let mut c = *f;
    c.rax = 0;
    if stack != 0 {
        c.rsp = stack;
    }
    c
}

pub fn clone(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [flags, stack, ptid, ctid, tls, ..] = f.args();
    // clone's pidfd goes where the parent's tid would: not both.
    if flags & CLONE_PIDFD != 0 && flags & CLONE_PARENT_SETTID != 0 {
        return Err(Errno::EINVAL);
    }
    clone_with_pidfd(ctx, f, flags, stack, ptid, ctid, tls, ptid)
}

/// `CLONE_PIDFD`: the child is made as without it, then a pidfd for it
/// (close-on-exec, as Linux; the child does not have it) is stored as an int at
/// `pidfd_at`, checked writable first. Not with CLONE_THREAD or CLONE_DETACHED.
#[allow(clippy::too_many_arguments)]
fn clone_with_pidfd(
    ctx: &Ctx,
    f: &SyscallFrame,
    flags: u64,
    stack: u64,
    ptid: u64,
    ctid: u64,
    tls: u64,
    pidfd_at: u64,
) -> SysResult {
    if flags & CLONE_PIDFD == 0 {
        return do_clone(ctx, f, flags, stack, ptid, ctid, tls);
    }
    if flags & (CLONE_THREAD | CLONE_DETACHED) != 0 {
        return Err(Errno::EINVAL);
    }
    ctx.user.check(pidfd_at, 4, true)?;
    let tid = do_clone(ctx, f, flags & !CLONE_PIDFD, stack, ptid, ctid, tls)?;
    // (Like the tid stores, best effort once the child exists.)
    if let Ok(fd) = install_pidfd(ctx, tid, 0) {
        let _ = ctx.user.write_u32(pidfd_at, fd as u32);
    }
    Ok(tid)
}

/// A new pidfd for process `pid` (close-on-exec, O_RDWR and `status`).
fn install_pidfd(ctx: &Ctx, pid: u64, status: u32) -> SysResult {
    let of = crate::file::OpenFile::new(PidFd { pid }, crate::file::oflag::O_RDWR | status);
    ctx.proc().fds.lock().insert(of, true)
}

/// The pid a pidfd names and whether it is non-blocking (EBADF for another file).
pub(super) fn pidfd_target(ctx: &Ctx, fd: u64) -> Result<(u64, bool), Errno> {
    ctx.with_file(fd, |of| of.downcast::<PidFd>().map(|p| (p.pid, of.nonblocking())))?.ok_or(Errno::EBADF)
}

/// `pidfd_open(pid, flags)`: a pidfd for process `pid`, running or a zombie.
/// PIDFD_NONBLOCK (O_NONBLOCK) is the one flag (PIDFD_THREAD: EINVAL); a thread
/// that is not its process's first is ENOENT, as Linux without PIDFD_THREAD.
pub fn pidfd_open(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, flags, ..] = f.args();
    let nonblock = u64::from(crate::file::oflag::O_NONBLOCK);
    if flags & !nonblock != 0 || pid as i32 <= 0 {
        return Err(Errno::EINVAL);
    }
    let pid = pid as u32 as u64;
    if crate::task::process::life(pid) == Life::Gone {
        // Another process's thread is ENOENT; a reaped process whose first thread
        // is still on its way out is gone (ESRCH), as on Linux, where a process is
        // reaped only after its threads ended.
        let thread = sched::thread(pid).is_some_and(|t| t.pid() != pid);
        return Err(if thread { Errno::ENOENT } else { Errno::ESRCH });
    }
    install_pidfd(ctx, pid, flags as u32)
}

/// clone3: the argument block is checked and converted by [`super::clone3`].
pub fn clone3(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [args, size, ..] = f.args();
    let size = size as usize;
    if size > super::clone3::SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    let mut bytes = [0u8; super::clone3::SIZE_MAX];
    let block = bytes.get_mut(..size).ok_or(Errno::EINVAL)?;
    ctx.user.read(args, block)?;
    let c = super::clone3::parse(block)?;
    clone_with_pidfd(ctx, f, c.flags, c.sp, c.parent_tid, c.child_tid, c.tls, c.pidfd)
}

pub fn vfork(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    do_clone(ctx, f, CLONE_VM | CLONE_VFORK | 17, 0, 0, 0, 0)
}

pub fn fork(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    do_clone(ctx, f, crate::sigframe::sig::SIGCHLD, 0, 0, 0, 0)
}

/// A copy of the caller's address space for a fork child `tid` (with `tid`
/// stored at `ctid` in the child's memory, for CLONE_CHILD_SETTID: best effort,
/// as on Linux).
/// The pages around the child's stack pointer and thread pointer (`hot`) are
/// copied at once, and the page at the caller's own stack pointer (`sp`): each
/// process writes them as soon as it runs on (the return from the call, libc's
/// bookkeeping of its new thread), and a copy made here costs far less than the
/// write fault it saves (an exception and a hostcall for its address, here).
/// Shared file mappings are filled first (a block filled after the fork would be
/// the parent's or the child's alone, where the mapping is one memory).
fn copy_space(ctx: &Ctx, settid: Option<u64>, tid: u64, hot: &[u64], sp: u64) -> Result<&'static Space, Errno> {
    let shared = ctx.proc().space().mm.lock().file_pieces(0, onering_abi::layout::USER_END, true);
    if !shared.is_empty() {
        super::mm::populate(ctx, &shared)?;
    }
    drop(shared);
    let mut mm = ctx.proc().space().mm.lock();
    let mut child = mm.fork()?;
    mm.unshare(sp);
    drop(mm);
    ctx.proc().space().note_sharing();
    for a in hot {
        child.unshare(*a);
    }
    if let Some(ctid) = settid {
        let _ = child.poke(ctid, &(tid as u32).to_le_bytes());
    }
    spaces::install(child)
}

/// RLIMIT_NPROC, as Linux checks it at clone: the caller's user (every thread
/// of the VM is the same user's) may have another thread unless it has as many
/// as the soft limit; root, and a caller with CAP_SYS_ADMIN or
/// CAP_SYS_RESOURCE, always may.
fn nproc_allows(ctx: &Ctx) -> bool {
    let nproc = onering_abi::rlimit::NPROC as u32;
    let Some((soft, _)) = ctx.proc().rlimits.lock().get(&nproc).copied() else { return true };
    under_nproc(ctx.k.cfg.uid, ctx.k.cfg.caps[onering_abi::caps::EFFECTIVE], sched::live_count() as u64, soft)
}

/// [`nproc_allows`]' rule: user `uid` with effective capabilities `caps` and
/// `threads` threads may have another under a soft RLIMIT_NPROC of `soft`.
fn under_nproc(uid: u64, caps: u64, threads: u64, soft: u64) -> bool {
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_SYS_RESOURCE: u64 = 24;
    uid == 0 || caps & (1 << CAP_SYS_ADMIN | 1 << CAP_SYS_RESOURCE) != 0 || threads < soft
}

fn do_clone(ctx: &Ctx, f: &SyscallFrame, flags: u64, stack: u64, ptid: u64, ctid: u64, tls: u64) -> SysResult {
    // Namespaces, pidfds and the rest are refused.
    if flags & !CLONE_KNOWN != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & CLONE_THREAD != 0 && flags & CLONE_SIGHAND == 0 || flags & CLONE_SIGHAND != 0 && flags & CLONE_VM == 0 {
        return Err(Errno::EINVAL);
    }
    if flags & CLONE_SETTLS != 0 && tls >= USER_END {
        return Err(Errno::EPERM);
    }
    if !nproc_allows(ctx) {
        return Err(Errno::EAGAIN);
    }
    let me = ctx.thread;
    let thread = flags & CLONE_THREAD != 0;
    let shares_memory = flags & CLONE_VM != 0;
    let tid = sched::alloc_tid();
    // A new process: its pid is its first thread's tid; its memory is the
    // caller's (CLONE_VM) or a copy.
    let proc = if thread {
        ctx.proc()
    } else {
        let space = if shares_memory {
            let s = ctx.proc().space();
            s.hold();
            s
        } else {
            let tp = if flags & CLONE_SETTLS != 0 { tls } else { cpu::fs_base() };
            let sp = if stack != 0 { stack } else { f.rsp };
            let hot = [sp, sp.wrapping_sub(PAGE_SIZE), tp, tp.wrapping_sub(PAGE_SIZE)];
            copy_space(ctx, (flags & CLONE_CHILD_SETTID != 0).then_some(ctid), tid, &hot, f.rsp)?
        };
        match Process::create(ctx.proc().child_start(tid, space)) {
            Ok(p) => p,
            Err(e) => {
                space.release();
                return Err(e);
            }
        }
    };
    let spawn = Spawn {
        tid,
        proc,
        ppid: if thread { me.ppid.load(Relaxed) } else { ctx.proc().pid() },
        frame: child_frame(f, stack),
        fs_base: if flags & CLONE_SETTLS != 0 { tls } else { cpu::fs_base() },
        sigmask: me.sigmask.load(Relaxed),
        affinity: me.affinity(),
    };
    proc.threads.fetch_add(1, Relaxed);
    let child = match sched::spawn(spawn, false, || ctx.k.chunk()) {
        Ok(t) => t,
        Err(e) => {
            proc.threads.fetch_sub(1, Relaxed);
            if !thread {
                drop(proc.end());
                crate::task::process::reaped(tid); // (never a zombie anyone waits for)
            }
            return Err(e);
        }
    };
    if flags & CLONE_VFORK != 0 {
        // Thread or process: the parent resumes when this thread ends.
        *child.vfork_parent.lock() = Some((me, me.tid()));
    }
    if !thread {
        ctx.proc().family.lock().children += 1;
        proc.creator.store(me.tid(), Relaxed);
        me.made_children.store(true, Relaxed);
    }
    // The tid stores are best effort, as on Linux: a bad pointer is ignored.
    if flags & CLONE_PARENT_SETTID != 0 {
        let _ = ctx.user.write_u32(ptid, tid as u32);
    }
    if flags & CLONE_CHILD_SETTID != 0 && shares_memory {
        let _ = ctx.user.write_u32(ctid, tid as u32);
    }
    if flags & CLONE_CHILD_CLEARTID != 0 {
        child.clear_child_tid.store(ctid, Relaxed);
    }
    if flags & CLONE_VFORK != 0 {
        // Reset before the child can run (and, on another vCPU, exit).
        me.vfork_done.store(false, Relaxed);
    }
    if thread {
        crate::task::job::joined(proc, child);
    }
    sched::start(child);
    if flags & CLONE_VFORK != 0 {
        vfork_wait(me);
    }
    Ok(tid)
}

/// Suspends a vfork parent until its child thread ends (there is no execve here).
/// As on Linux the wait is killable: a signal that would end the process ends it
/// (the thread dies on its way out); signals it handles wait for the child, so
/// they are held back by the mask meanwhile.
fn vfork_wait(me: &'static crate::task::thread::Thread) {
    let mask = me.sigmask.load(Relaxed);
    let actions = me.process().actions.lock().map(|a| a[0]);
    let mut held = 0u64;
    for s in 1..=64u64 {
        let kills = actions[s as usize - 1] == crate::sigframe::SIG_DFL
            && crate::sigframe::default_action(s) == crate::sigframe::Default::Terminate;
        if !kills {
            held |= crate::sigframe::bit(s);
        }
    }
    me.sigmask.store(mask | (held & !crate::sigframe::UNBLOCKABLE), Relaxed);
    while !me.vfork_done.load(core::sync::atomic::Ordering::Acquire) {
        // Interrupted: the process was killed or a fatal signal is pending (the
        // mask holds back the rest); the way out delivers it.
        if sched::block(None) == Wake::Interrupted && (me.doomed.load(Relaxed) || me.wakes_for() != 0) {
            break;
        }
    }
    me.sigmask.store(mask, Relaxed);
}

/// Ends the running thread; the last thread's exit ends its process with `status`.
pub fn exit(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    exit_thread(ctx.k, ctx.user, f.rdi & 0xff, false)
}

pub fn exit_group(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    exit_thread(ctx.k, ctx.user, f.rdi & 0xff, true)
}

pub fn wait4(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, status, options, rusage, ..] = f.args();
    if options & !(WNOHANG | WSTOPPED | WCONTINUED | WAIT_THREADS) != 0 {
        return Err(Errno::EINVAL);
    }
    // (A pid_t: glibc leaves the register's upper half zero for -1.)
    let want = i64::from(pid as i32);
    if status != 0 {
        ctx.user.check(status, 4, true)?;
    }
    if rusage != 0 {
        ctx.user.check(rusage, 144, true)?;
    }
    if want > 0 {
        child_of(ctx, want as u64)?;
    }
    let what = Events { exited: true, stopped: options & WSTOPPED != 0, continued: options & WCONTINUED != 0 };
    match reap(ctx, |z| want == -1 || want == 0 || z as i64 == want, what, options & WNOHANG != 0, false)? {
        Some((z, st)) => {
            if status != 0 {
                ctx.user.write_u32(status, st as u32)?;
            }
            if rusage != 0 {
                ctx.user.write(rusage, &[0u8; 144])?;
            }
            Ok(z)
        }
        None => Ok(0),
    }
}

/// What a wait reports: children that ended (WEXITED), stopped (WSTOPPED,
/// WUNTRACED) or were continued (WCONTINUED).
#[derive(Clone, Copy)]
struct Events {
    exited: bool,
    stopped: bool,
    continued: bool,
}

/// Waits for a child that `wanted` accepts and that ended (a zombie, reaped
/// unless `keep`: WNOWAIT), or stopped or continued, as `what` asks (that report
/// taken unless `keep`): (pid, wait status); None at once with `nohang`. ECHILD
/// when the caller has no such children.
fn reap(
    ctx: &Ctx,
    wanted: impl Fn(u64) -> bool,
    what: Events,
    nohang: bool,
    keep: bool,
) -> Result<Option<(u64, u64)>, Errno> {
    let me = ctx.proc().pid();
    let key = wait_key(me);
    // A signal ends the wait after one more look, as on Linux (the SIGCHLD of a
    // child's change may come before the wake-up).
    let mut interrupted = false;
    loop {
        sched::prepare_wait(key);
        let found = {
            let mut fam = ctx.proc().family.lock();
            match fam.zombies.iter().position(|&(z, _)| wanted(z)) {
                Some(_) if !what.exited => None,
                Some(i) if keep => Some(fam.zombies[i]),
                Some(i) => {
                    let z = fam.zombies.remove(i);
                    crate::task::process::reaped(z.0);
                    sched::wake_all(crate::task::exit::pidfd_key(z.0));
                    Some(z)
                }
                None if fam.children == 0 => {
                    drop(fam);
                    sched::finish_wait(key);
                    return Err(Errno::ECHILD);
                }
                None => None,
            }
        };
        let found = found.or_else(|| {
            (what.stopped || what.continued)
                .then(|| crate::task::job::report(me, &wanted, what.stopped, what.continued, keep))
                .flatten()
        });
        if found.is_some() || nohang {
            sched::finish_wait(key);
            return Ok(found);
        }
        if interrupted {
            sched::finish_wait(key);
            return Err(Errno::ERESTARTSYS);
        }
        interrupted = sched::block(None) == Wake::Interrupted;
        sched::finish_wait(key);
    }
}

/// ECHILD unless process `pid` is the caller's child (running or a zombie).
fn child_of(ctx: &Ctx, pid: u64) -> Result<(), Errno> {
    match crate::task::process::life(pid) {
        Life::Live { ppid } | Life::Zombie { ppid } if ppid == ctx.proc().pid() => Ok(()),
        _ => Err(Errno::ECHILD),
    }
}

const P_ALL: u64 = 0;
const P_PID: u64 = 1;
const P_PGID: u64 = 2;
const P_PIDFD: u64 = 3;
const WEXITED: u64 = 4;
const WSTOPPED: u64 = 2;
const WCONTINUED: u64 = 8;
const WNOWAIT: u64 = 0x0100_0000;
/// `__WNOTHREAD`, `__WALL`, `__WCLONE`: accepted, meaningless here.
const WAIT_THREADS: u64 = 0x2000_0000 | 0x4000_0000 | 0x8000_0000;

/// `waitid(idtype, id, infop, options, rusage)`: as `wait4`, reporting through a
/// `siginfo_t` (SIGCHLD, CLD_EXITED, CLD_KILLED, CLD_STOPPED or CLD_CONTINUED,
/// the pid, uid and status); WNOWAIT leaves the zombie to be reaped again, or the
/// stop or continuation to be reported again.
pub fn waitid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [idtype, id, infop, options, rusage, ..] = f.args();
    if options & !(WNOHANG | WEXITED | WSTOPPED | WCONTINUED | WNOWAIT | WAIT_THREADS) != 0
        || options & (WEXITED | WSTOPPED | WCONTINUED) == 0
    {
        return Err(Errno::EINVAL);
    }
    if !matches!(idtype, P_ALL | P_PID | P_PGID | P_PIDFD) {
        return Err(Errno::EINVAL);
    }
    // P_PIDFD is P_PID of the pidfd's process; a non-blocking pidfd makes the
    // wait WNOHANG, and finding nothing then EAGAIN (unless WNOHANG was asked).
    let (idtype, id, nonblock) = match idtype {
        P_PID if (id as i32) <= 0 => return Err(Errno::EINVAL),
        P_PGID | P_PIDFD if (id as i32) < 0 => return Err(Errno::EINVAL),
        P_PIDFD => {
            let (pid, nonblock) = pidfd_target(ctx, id as u32 as u64)?;
            (P_PID, pid, nonblock)
        }
        _ => (idtype, id as u32 as u64, false),
    };
    if idtype == P_PID {
        child_of(ctx, id)?;
    }
    let wanted = |z: u64| match idtype {
        P_PID => z == id,
        P_PGID => crate::task::process::find(z).is_none_or(|p| id == 0 || p.pgid.load(Relaxed) == id),
        _ => true,
    };
    if infop != 0 {
        ctx.user.check(infop, 128, true)?;
    }
    let what = Events {
        exited: options & WEXITED != 0,
        stopped: options & WSTOPPED != 0,
        continued: options & WCONTINUED != 0,
    };
    let found = reap(ctx, wanted, what, options & WNOHANG != 0 || nonblock, options & WNOWAIT != 0)?;
    if found.is_none() && nonblock && options & WNOHANG == 0 {
        return Err(Errno::EAGAIN);
    }
    if infop != 0 {
        let mut si = [0u8; 128];
        if let Some((pid, st)) = found {
            let (code, value) = crate::task::exit::wait_info(st);
            si[..4].copy_from_slice(&(crate::sigframe::sig::SIGCHLD as u32).to_le_bytes());
            si[8..12].copy_from_slice(&code.to_le_bytes());
            si[16..20].copy_from_slice(&(pid as u32).to_le_bytes());
            si[20..24].copy_from_slice(&(ctx.k.cfg.uid as u32).to_le_bytes());
            si[24..28].copy_from_slice(&(value as u32).to_le_bytes());
        }
        ctx.user.write(infop, &si)?;
    }
    if rusage != 0 {
        ctx.user.write(rusage, &[0u8; 144])?;
    }
    Ok(0)
}

pub fn getuid(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(ctx.k.cfg.uid)
}

pub fn getgid(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(ctx.k.cfg.gid)
}

/// The set*id calls: the VM's user and group never change (they are the host
/// user's), so setting an id to the one it has (or leaving it, -1) succeeds and
/// any other is EPERM, root's included (Linux would let root change it).
fn keep_ids(ids: &[u64], cur: u64) -> SysResult {
    if ids.iter().all(|&i| i as u32 == u32::MAX || u64::from(i as u32) == cur) {
        Ok(0)
    } else {
        Err(Errno::EPERM)
    }
}

/// `setuid`/`setgid(id)`: -1 is EINVAL, as Linux.
fn set_one_id(id: u64, cur: u64) -> SysResult {
    if id as u32 == u32::MAX {
        return Err(Errno::EINVAL);
    }
    keep_ids(&[id], cur)
}

pub fn setuid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    set_one_id(f.rdi, ctx.k.cfg.uid)
}

pub fn setgid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    set_one_id(f.rdi, ctx.k.cfg.gid)
}

pub fn setreuid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    keep_ids(&[f.rdi, f.rsi], ctx.k.cfg.uid)
}

pub fn setregid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    keep_ids(&[f.rdi, f.rsi], ctx.k.cfg.gid)
}

pub fn setresuid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    keep_ids(&[f.rdi, f.rsi, f.rdx], ctx.k.cfg.uid)
}

pub fn setresgid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    keep_ids(&[f.rdi, f.rsi, f.rdx], ctx.k.cfg.gid)
}

/// `getresuid`/`getresgid`: the one id, three times.
fn get_three(ctx: &Ctx, f: &SyscallFrame, id: u64) -> SysResult {
    for at in [f.rdi, f.rsi, f.rdx] {
        ctx.user.write_u32(at, id as u32)?;
    }
    Ok(0)
}

pub fn getresuid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    get_three(ctx, f, ctx.k.cfg.uid)
}

pub fn getresgid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    get_three(ctx, f, ctx.k.cfg.gid)
}

/// The capability header's versions: 1 (one 32-bit set each), 2 and 3 (two).
const CAP_V1: u32 = 0x1998_0330;
const CAP_V2: u32 = 0x2007_1026;
const CAP_V3: u32 = 0x2008_0522;
/// The capability header at `hdr`: how many 32-bit words each set has, and
/// the pid. An unknown version is EINVAL, the kernel's written back (Linux's
/// `cap_validate_magic`, how libcap asks which version to use).
fn cap_header(ctx: &Ctx, hdr: u64) -> Result<(usize, i32), Errno> {
    let words = match ctx.user.read_u32(hdr)? {
        CAP_V1 => 1,
        CAP_V2 | CAP_V3 => 2,
        _ => {
            ctx.user.write_u32(hdr, CAP_V3)?;
            return Err(Errno::EINVAL);
        }
    };
    Ok((words, ctx.user.read_u32(hdr + 4)? as i32))
}

/// Word `i` (0 low, 1 high) of capability set `set` (`onering_abi::caps`): the
/// sets the VMM gave (all of them for root, none for another user; an OCI
/// bundle's own), the same for every process.
fn cap_word(ctx: &Ctx, set: usize, i: usize) -> u32 {
    (ctx.k.cfg.caps[set] >> (32 * i)) as u32
}

/// `capget(hdr, data)`: effective, permitted and inheritable sets, word by
/// word; a null `data` only checks the version (0 even for an unknown one).
pub fn capget(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [hdr, data, ..] = f.args();
    let (words, pid) = match cap_header(ctx, hdr) {
        Err(Errno::EINVAL) if data == 0 => return Ok(0),
        r => r?,
    };
    if data == 0 {
        return Ok(0);
    }
    if pid < 0 {
        return Err(Errno::EINVAL);
    }
    if pid != 0 && !matches!(crate::task::process::life(pid as u64), crate::task::process::Life::Live { .. }) {
        return Err(Errno::ESRCH);
    }
    use onering_abi::caps::{EFFECTIVE, INHERITABLE, PERMITTED};
    for i in 0..words {
        let at = data + 12 * i as u64;
        for (off, set) in [(0, EFFECTIVE), (4, PERMITTED), (8, INHERITABLE)] {
            ctx.user.write_u32(at + off, cap_word(ctx, set, i))?;
        }
    }
    Ok(0)
}

/// `capset(hdr, data)`: the caller's own sets only (another pid is EPERM); a
/// permitted or inheritable set that adds a capability not permitted (or, for
/// inheritable, not bounding either), or an effective set beyond the new
/// permitted one, is EPERM. Sets are not kept: a later `capget` shows the
/// VM's sets again (deviation).
pub fn capset(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [hdr, data, ..] = f.args();
    let (words, pid) = cap_header(ctx, hdr)?;
    if pid != 0 && pid as u64 != ctx.thread.pid() {
        return Err(Errno::EPERM);
    }
    use onering_abi::caps::{BOUNDING, INHERITABLE, PERMITTED};
    for i in 0..words {
        let at = data + 12 * i as u64;
        let (eff, perm, inh) = (ctx.user.read_u32(at)?, ctx.user.read_u32(at + 4)?, ctx.user.read_u32(at + 8)?);
        let have = cap_word(ctx, PERMITTED, i);
        let inheritable = cap_word(ctx, INHERITABLE, i) | (have & cap_word(ctx, BOUNDING, i));
        if perm & !have != 0 || eff & !perm != 0 || inh & !inheritable != 0 {
            return Err(Errno::EPERM);
        }
    }
    Ok(0)
}

/// `getrusage(who, usage)`: RUSAGE_SELF, RUSAGE_CHILDREN or RUSAGE_THREAD; the
/// usage is not counted, so it is all zeros (as wait4's), as for a process that
/// has not run yet. gcc asks for it.
pub fn getrusage(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [who, usage, ..] = f.args();
    if !(-1..=1).contains(&(who as i32)) {
        return Err(Errno::EINVAL);
    }
    ctx.user.write(usage, &[0u8; 144])?;
    Ok(0)
}

pub fn sched_yield(_: &Ctx, _: &mut SyscallFrame) -> SysResult {
    sched::yield_now();
    Ok(0)
}

/// The thread `sched_[gs]etaffinity` name: the caller for 0.
fn affinity_target(ctx: &Ctx, pid: u64) -> Result<&'static crate::task::Thread, Errno> {
    match pid as i32 {
        0 => Ok(ctx.thread),
        p if p > 0 => sched::thread(p as u64).ok_or(Errno::ESRCH),
        _ => Err(Errno::EINVAL),
    }
}

pub fn sched_getaffinity(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, len, mask, ..] = f.args();
    let t = affinity_target(ctx, pid)?;
    if len < 8 || len % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    ctx.user.write_u64(mask, t.affinity())?;
    Ok(8)
}

pub fn sched_setaffinity(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, len, mask, ..] = f.args();
    let t = affinity_target(ctx, pid)?;
    // As Linux: a shorter mask is zero-extended, bits beyond the CPUs ignored.
    let mut b = [0u8; 8];
    let n = len.min(8) as usize;
    ctx.user.read(mask, &mut b[..n])?;
    let want = u64::from_le_bytes(b) & sched::online();
    if want == 0 {
        return Err(Errno::EINVAL);
    }
    sched::set_affinity(t, want);
    Ok(0)
}

fn rlimit(ctx: &Ctx, resource: u64, new: u64, old: u64) -> SysResult {
    let resource = u32::try_from(resource).map_err(|_| Errno::EINVAL)?;
    let cur = match ctx.proc().rlimits.lock().get(&resource) {
        Some(l) => *l,
        None => crate::task::process::default_rlimit(resource).ok_or(Errno::EINVAL)?,
    };
    let set = if new != 0 {
        let b = ctx.user.read_array::<16>(new)?;
        let soft = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let hard = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        if soft > hard || hard > cur.1 {
            return Err(if soft > hard { Errno::EINVAL } else { Errno::EPERM });
        }
        if resource == crate::task::process::RLIMIT_NOFILE && hard > crate::file::NR_OPEN {
            return Err(Errno::EPERM);
        }
        Some((soft, hard))
    } else {
        None
    };
    if old != 0 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&cur.0.to_le_bytes());
        b[8..].copy_from_slice(&cur.1.to_le_bytes());
        ctx.user.write(old, &b)?;
    }
    if let Some(l) = set {
        ctx.proc().rlimits.lock().insert(resource, l);
        if resource == crate::task::process::RLIMIT_NOFILE {
            ctx.proc().fds.lock().set_limit(l.0);
        }
    }
    Ok(0)
}

pub fn getrlimit(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    rlimit(ctx, f.rdi, 0, f.rsi)
}

pub fn prlimit64(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, resource, new, old, ..] = f.args();
    if pid != 0 && pid != ctx.thread.pid() {
        return Err(Errno::ESRCH);
    }
    rlimit(ctx, resource, new, old)
}

pub fn uname(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let mut b = [0u8; 65 * 6];
    let host = ctx.k.hostname.lock().clone();
    for (i, field) in
        [fmt::OSTYPE.as_bytes(), &host, fmt::RELEASE.as_bytes(), fmt::VERSION.as_bytes(), b"x86_64", b"(none)"]
            .iter()
            .enumerate()
    {
        b[i * 65..i * 65 + field.len()].copy_from_slice(field);
    }
    ctx.user.write(f.rdi, &b)?;
    Ok(0)
}

/// sethostname(2): root only (the VM's uid 0, which holds every capability);
/// EINVAL past 64 bytes.
pub fn sethostname(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [name, len, ..] = f.args();
    if len > onering_abi::MAX_HOSTNAME as u64 {
        return Err(Errno::EINVAL);
    }
    if ctx.k.cfg.uid != 0 {
        return Err(Errno::EPERM);
    }
    let mut b = alloc::vec![0u8; len as usize];
    ctx.user.read(name, &mut b)?;
    *ctx.k.hostname.lock() = b;
    Ok(0)
}

pub fn sysinfo(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let mut b = [0u8; 112];
    let put = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, crate::time::mono_now() / crate::time::NS_PER_SEC);
    let (total, free) = {
        let m = ctx.proc().space().mm.lock();
        (m.total_bytes(), m.free_bytes())
    };
    put(&mut b, 32, total);
    put(&mut b, 40, free);
    b[80..82].copy_from_slice(&1u16.to_le_bytes()); // procs
    b[104..108].copy_from_slice(&1u32.to_le_bytes()); // mem_unit
    ctx.user.write(f.rdi, &b)?;
    Ok(0)
}

pub fn getrandom(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [buf, len, flags, ..] = f.args();
    if flags & !7 != 0 {
        return Err(Errno::EINVAL);
    }
    let len = len.min(0x7fff_f000);
    ctx.user.check(buf, len, true)?;
    let mut chunk = [0u8; 256];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(256) as usize;
        ctx.k.rng.lock().fill(&mut chunk[..n]);
        if let Err(e) = ctx.user.write(buf + done, &chunk[..n]) {
            return if done > 0 { Ok(done) } else { Err(e) };
        }
        done += n as u64;
    }
    Ok(len)
}

pub fn set_robust_list(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    if f.rsi != robust::HEAD_SIZE {
        return Err(Errno::EINVAL);
    }
    ctx.thread.robust_list.store(f.rdi, Relaxed);
    Ok(0)
}

pub fn get_robust_list(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [tid, head_ptr, len_ptr, ..] = f.args();
    let t = if tid as u32 == 0 { ctx.thread } else { sched::thread(tid as u32 as u64).ok_or(Errno::ESRCH)? };
    ctx.user.write_u64(head_ptr, t.robust_list.load(Relaxed))?;
    ctx.user.write_u64(len_ptr, robust::HEAD_SIZE)?;
    Ok(0)
}

/// Restartable sequences are not offered; C libraries expect ENOSYS and carry on,
/// so this one is not reported as unsupported.
pub fn rseq(_: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Err(Errno::ENOSYS)
}

const PR_SET_PDEATHSIG: u64 = 1;
const PR_GET_PDEATHSIG: u64 = 2;
const PR_SET_NAME: u64 = 15;
const PR_GET_NAME: u64 = 16;
const PR_GET_DUMPABLE: u64 = 3;
const PR_SET_DUMPABLE: u64 = 4;
const PR_GET_KEEPCAPS: u64 = 7;
const PR_SET_KEEPCAPS: u64 = 8;
const PR_CAPBSET_READ: u64 = 23;
const PR_CAPBSET_DROP: u64 = 24;
const PR_SET_NO_NEW_PRIVS: u64 = 38;
const PR_CAP_AMBIENT: u64 = 47;
const PR_CAP_AMBIENT_IS_SET: u64 = 1;
const PR_GET_NO_NEW_PRIVS: u64 = 39;

pub fn prctl(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [option, arg2, ..] = f.args();
    match option {
        // The calling thread's: sent to its process when the thread that created
        // the process ends (`task::exit::creator_ended`).
        PR_SET_PDEATHSIG if arg2 <= 64 => {
            ctx.thread.pdeathsig.store(arg2, Relaxed);
            Ok(0)
        }
        PR_GET_PDEATHSIG => {
            ctx.user.write_u32(arg2, ctx.thread.pdeathsig.load(Relaxed) as u32)?;
            Ok(0)
        }
        PR_SET_NAME => {
            let mut name = [0u8; 16];
            let s = ctx.user.read_cstr(arg2, 4095)?;
            let n = s.len().min(15);
            name[..n].copy_from_slice(&s[..n]);
            *ctx.k.comm.lock() = name;
            Ok(0)
        }
        PR_GET_NAME => {
            let name = *ctx.k.comm.lock();
            ctx.user.write(arg2, &name)?;
            Ok(0)
        }
        PR_GET_DUMPABLE => Ok(1),
        PR_SET_DUMPABLE if arg2 <= 1 => Ok(0),
        // Capabilities do not change with the user id here: the flag is kept for
        // the asking only.
        PR_GET_KEEPCAPS => Ok(ctx.k.keepcaps.load(core::sync::atomic::Ordering::Relaxed) as u64),
        PR_SET_KEEPCAPS if arg2 <= 1 => {
            ctx.k.keepcaps.store(arg2 == 1, core::sync::atomic::Ordering::Relaxed);
            Ok(0)
        }
        // The VM's capability sets (`capget`): read, never changed.
        PR_CAPBSET_READ if arg2 <= u64::from(onering_abi::caps::LAST) => {
            Ok(ctx.k.cfg.caps[onering_abi::caps::BOUNDING] >> arg2 & 1)
        }
        PR_CAPBSET_DROP if arg2 <= u64::from(onering_abi::caps::LAST) => Err(Errno::EPERM),
        PR_CAP_AMBIENT if arg2 == PR_CAP_AMBIENT_IS_SET && f.rdx <= u64::from(onering_abi::caps::LAST) => {
            Ok(ctx.k.cfg.caps[onering_abi::caps::AMBIENT] >> f.rdx & 1)
        }
        PR_SET_NO_NEW_PRIVS if arg2 == 1 => {
            ctx.k.no_new_privs.store(true, Relaxed);
            Ok(0)
        }
        PR_GET_NO_NEW_PRIVS => Ok(u64::from(ctx.k.no_new_privs.load(Relaxed))),
        // Everything else, PR_SET_VMA included (Go copes with EINVAL there).
        _ => Err(Errno::EINVAL),
    }
}

/// The process `pid` names for the group and session calls (0: the caller).
fn group_target(ctx: &Ctx, pid: u64) -> Result<&'static crate::task::process::Process, Errno> {
    match pid as i32 {
        0 => Ok(ctx.proc()),
        p if p < 0 => Err(Errno::EINVAL),
        p => crate::task::process::find(p as u64).ok_or(Errno::ESRCH),
    }
}

/// `setpgid(pid, pgid)`: the caller or one of its children joins group `pgid`
/// (0: its own pid) of its session; a session leader cannot move (EPERM).
pub fn setpgid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, pgid, ..] = f.args();
    if (pgid as i32) < 0 {
        return Err(Errno::EINVAL);
    }
    let me = ctx.proc();
    let p = group_target(ctx, pid)?;
    if !core::ptr::eq(p, me) && p.ppid.load(Relaxed) != me.pid() {
        return Err(Errno::ESRCH);
    }
    let sid = me.sid.load(Relaxed);
    if p.sid.load(Relaxed) != sid || p.sid.load(Relaxed) == p.pid() {
        return Err(Errno::EPERM);
    }
    let pgid = if pgid as i32 == 0 { p.pid() } else { pgid as u32 as u64 };
    let exists = pgid == p.pid()
        || crate::task::process::all().iter().any(|q| q.pgid.load(Relaxed) == pgid && q.sid.load(Relaxed) == sid);
    if !exists {
        return Err(Errno::EPERM);
    }
    p.pgid.store(pgid, Relaxed);
    Ok(0)
}

pub fn getpgid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    Ok(group_target(ctx, f.rdi)?.pgid.load(Relaxed))
}

pub fn getpgrp(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Ok(ctx.proc().pgid.load(Relaxed))
}

pub fn getsid(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    Ok(group_target(ctx, f.rdi)?.sid.load(Relaxed))
}

/// `setsid`: a new session and group led by the caller (EPERM for a group leader).
pub fn setsid(ctx: &Ctx, _: &mut SyscallFrame) -> SysResult {
    let me = ctx.proc();
    let pid = me.pid();
    if crate::task::process::all().iter().any(|q| q.pgid.load(Relaxed) == pid) {
        return Err(Errno::EPERM);
    }
    me.sid.store(pid, Relaxed);
    me.pgid.store(pid, Relaxed);
    me.ctty.store(false, Relaxed); // (a new session has no terminal)
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::under_nproc;

    #[test]
    fn rlimit_nproc_as_linux_checks_it() {
        assert!(under_nproc(1000, 0, 2, 3));
        assert!(!under_nproc(1000, 0, 3, 3), "at the limit: EAGAIN");
        assert!(!under_nproc(1000, 0, 1, 0));
        assert!(under_nproc(0, 0, 50, 3), "root is not limited");
        assert!(under_nproc(1000, 1 << 24, 50, 3), "nor CAP_SYS_RESOURCE");
        assert!(under_nproc(1000, 1 << 21, 50, 3), "nor CAP_SYS_ADMIN");
        assert!(!under_nproc(1000, 1 << 12, 50, 3));
    }
}
