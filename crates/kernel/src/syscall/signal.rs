//! Signal system calls: dispositions, masks, the alternate stack, sending
//! (kill, tkill, tgkill, pidfd_send_signal), waiting (pause, rt_sigsuspend, rt_sigtimedwait) and
//! `rt_sigreturn`. Sending and delivery themselves are
//! `task::signal`; the frame's layout is `crate::sigframe`.

use super::SyscallFrame;
use crate::errno::{Errno, SysResult};
use crate::mm::user::UserMemExt;
use crate::sigframe::{self as sigs, bit, code, sig, Info, Regs, SS_DISABLE, SS_ONSTACK, UNBLOCKABLE};
use crate::task::sched::Wake;
use crate::task::signal::{
    deliver, ignored, on_altstack, restart_or_eintr, send, send_to_process, take_waited, terminate,
};
use crate::task::{sched, Ctx};
use core::sync::atomic::Ordering::Relaxed;

const SIG_BLOCK: u64 = 0;
const SIG_UNBLOCK: u64 = 1;
const SIG_SETMASK: u64 = 2;
const MINSIGSTKSZ: u64 = 2048;

fn valid(s: u64) -> Result<(), Errno> {
    if s == 0 || s > 64 {
        Err(Errno::EINVAL)
    } else {
        Ok(())
    }
}

pub fn rt_sigaction(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [s, act, oact, size, ..] = f.args();
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    valid(s)?;
    let new = if act != 0 {
        if s == sig::SIGKILL || s == sig::SIGSTOP {
            return Err(Errno::EINVAL);
        }
        let b = ctx.user.read_array::<32>(act)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        Some([w(0), w(1), w(2), w(3) & !UNBLOCKABLE])
    } else {
        None
    };
    if oact != 0 {
        ctx.user.check(oact, 32, true)?;
    }
    let old = {
        let mut actions = ctx.proc().actions.lock();
        let old = actions[s as usize - 1];
        if let Some(n) = new {
            actions[s as usize - 1] = n;
        }
        old
    };
    if oact != 0 {
        let mut b = [0u8; 32];
        for (i, w) in old.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        ctx.user.write(oact, &b)?;
    }
    if let Some(n) = new {
        // Setting a signal to be ignored discards it where it is pending.
        if ignored(&n, s) {
            for t in sched::threads_of(ctx.thread.pid()) {
                t.pending.fetch_and(!bit(s), Relaxed);
            }
        }
    }
    Ok(0)
}

pub fn rt_sigprocmask(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [how, set, oset, size, ..] = f.args();
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    let t = ctx.thread;
    let new = if set != 0 { Some(ctx.user.read_u64(set)?) } else { None };
    let old = t.sigmask.load(Relaxed);
    if let Some(s) = new {
        let m = match how {
            SIG_BLOCK => old | s,
            SIG_UNBLOCK => old & !s,
            SIG_SETMASK => s,
            _ => return Err(Errno::EINVAL),
        } & !UNBLOCKABLE;
        t.sigmask.store(m, Relaxed);
    }
    if oset != 0 {
        ctx.user.write_u64(oset, old)?;
    }
    Ok(0)
}

pub fn rt_sigpending(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    if f.rsi != 8 {
        return Err(Errno::EINVAL);
    }
    let t = ctx.thread;
    let p = t.pending.load(Relaxed) & t.sigmask.load(Relaxed);
    ctx.user.write_u64(f.rdi, p)?;
    Ok(0)
}

pub fn sigaltstack(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [ss, old, ..] = f.args();
    let t = ctx.thread;
    let cur = *t.altstack.lock();
    let onstack = on_altstack(cur, f.rsp);
    if ss != 0 {
        let b = ctx.user.read_array::<24>(ss)?;
        let sp = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let flags = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
        let size = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
        if flags & !(SS_DISABLE | SS_ONSTACK | (1 << 31)) != 0
            || flags & (SS_DISABLE | SS_ONSTACK) == SS_DISABLE | SS_ONSTACK
        {
            return Err(Errno::EINVAL);
        }
        if onstack {
            return Err(Errno::EPERM);
        }
        let new = if flags & SS_DISABLE != 0 {
            (0, SS_DISABLE, 0)
        } else {
            if size < MINSIGSTKSZ {
                return Err(Errno::ENOMEM);
            }
            (sp, 0, size)
        };
        *t.altstack.lock() = new;
    }
    if old != 0 {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&cur.0.to_le_bytes());
        let flags = if onstack { SS_ONSTACK } else { cur.1 };
        b[8..12].copy_from_slice(&flags.to_le_bytes());
        b[16..24].copy_from_slice(&cur.2.to_le_bytes());
        ctx.user.write(old, &b)?;
    }
    Ok(0)
}

fn sender_info(ctx: &Ctx, s: u64, code: i32) -> Info {
    Info { signo: s, code, pid: ctx.thread.pid() as u32, uid: ctx.k.cfg.uid as u32, ..Info::default() }
}

const PIDFD_SIGNAL_THREAD: u64 = 1;
const PIDFD_SIGNAL_THREAD_GROUP: u64 = 2;
const PIDFD_SIGNAL_PROCESS_GROUP: u64 = 4;

/// `pidfd_send_signal(pidfd, sig, info, flags)`: `kill` of the pidfd's process, or
/// (one flag at most) `tgkill` of its first thread, or `kill` of the process group
/// the pid leads. With `info`, its signo must be `sig`, and a code a program may
/// not forge (>= 0, or SI_TKILL) is EPERM but for the caller's own process. A
/// zombie takes the signal and does nothing with it; a reaped process is ESRCH.
pub fn pidfd_send_signal(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [fd, s, info, flags, ..] = f.args();
    let scope = PIDFD_SIGNAL_THREAD | PIDFD_SIGNAL_THREAD_GROUP | PIDFD_SIGNAL_PROCESS_GROUP;
    if flags & !scope != 0 || flags.count_ones() > 1 {
        return Err(Errno::EINVAL);
    }
    let (pid, _) = super::proc::pidfd_target(ctx, fd)?;
    let s = s as u32 as u64;
    let si = if info != 0 {
        let b = ctx.user.read_array::<128>(info)?;
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if u64::from(word(0)) != s {
            return Err(Errno::EINVAL);
        }
        let code = word(8) as i32;
        let own = pid == ctx.thread.pid() && flags != PIDFD_SIGNAL_PROCESS_GROUP;
        if !own && (code >= 0 || code == code::SI_TKILL) {
            return Err(Errno::EPERM);
        }
        Info { signo: s, code, pid: word(16), uid: word(20), ..Info::default() }
    } else if flags == PIDFD_SIGNAL_THREAD {
        sender_info(ctx, s, code::SI_TKILL)
    } else {
        sender_info(ctx, s, code::SI_USER)
    };
    use crate::task::process::Life;
    match crate::task::process::life(pid) {
        _ if flags == PIDFD_SIGNAL_PROCESS_GROUP => send_to_many(ctx, Some(pid), s, si),
        Life::Gone => Err(Errno::ESRCH),
        _ if s > 64 => Err(Errno::EINVAL),
        Life::Zombie { .. } => Ok(0),
        Life::Live { .. } => {
            let sent = if flags == PIDFD_SIGNAL_THREAD {
                match sched::thread(pid) {
                    Some(t) if s != 0 => send(t, pid, s, si).then_some(()).ok_or(Errno::ESRCH),
                    Some(_) => Ok(()),
                    None => Err(Errno::ESRCH),
                }
            } else {
                send_to_process(pid, s, si)
            };
            // (It ended meanwhile: a zombie now.)
            sent.map_or_else(|e| if e == Errno::ESRCH { Ok(0) } else { Err(e) }, |()| Ok(0))
        }
    }
}

pub fn kill(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [pid, s, ..] = f.args();
    if s > 64 {
        return Err(Errno::EINVAL);
    }
    let pid = pid as i32 as i64;
    if pid > 0 {
        send_to_process(pid as u64, s, sender_info(ctx, s, code::SI_USER))?;
        return Ok(0);
    }
    // A process group (0: the caller's), or -1: every process but pid 1 and the
    // caller, as Linux.
    let group = match pid {
        0 => Some(ctx.proc().pgid.load(Relaxed)),
        -1 => None,
        p => Some(p.unsigned_abs()),
    };
    if pid == i32::MIN as i64 {
        return Err(Errno::ESRCH);
    }
    send_to_many(ctx, group, s, sender_info(ctx, s, code::SI_USER))
}

/// Sends `s` to every process of group `group`, or (None) to every process but
/// pid 1 and the caller; ESRCH if none took it, EINVAL for a bad signal.
fn send_to_many(ctx: &Ctx, group: Option<u64>, s: u64, info: Info) -> SysResult {
    let me = ctx.thread.pid();
    let targets: alloc::vec::Vec<u64> = crate::task::process::all()
        .into_iter()
        .filter(|p| match group {
            Some(g) => p.pgid.load(Relaxed) == g,
            None => p.pid() > 1 && p.pid() != me,
        })
        .map(|p| p.pid())
        .collect();
    if s > 64 && !targets.is_empty() {
        return Err(Errno::EINVAL);
    }
    let mut sent = false;
    for t in targets {
        sent |= send_to_process(t, s, info).is_ok();
    }
    if sent {
        Ok(0)
    } else {
        Err(Errno::ESRCH)
    }
}

fn thread_kill(ctx: &Ctx, tgid: Option<u64>, tid: u64, s: u64) -> SysResult {
    if s > 64 || tid as i32 <= 0 || tgid.is_some_and(|g| g as i32 <= 0) {
        return Err(Errno::EINVAL);
    }
    let tid = tid as u32 as u64;
    let t = sched::thread(tid).ok_or(Errno::ESRCH)?;
    if tgid.is_some_and(|g| g as u32 as u64 != t.pid()) {
        return Err(Errno::ESRCH);
    }
    if s != 0 && !send(t, tid, s, sender_info(ctx, s, code::SI_TKILL)) {
        return Err(Errno::ESRCH);
    }
    Ok(0)
}

pub fn tgkill(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    thread_kill(ctx, Some(f.rdi), f.rsi, f.rdx)
}

pub fn tkill(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    thread_kill(ctx, None, f.rdi, f.rsi)
}

/// Sleeps until a signal is delivered (a handler runs, or the program ends).
fn until_signal() -> Errno {
    loop {
        if sched::block(None) == Wake::Interrupted {
            return Errno::EINTR;
        }
    }
}

pub fn pause(_: &Ctx, _: &mut SyscallFrame) -> SysResult {
    Err(until_signal())
}

/// `rt_sigsuspend`: waits for a signal with a temporary mask, which stays until
/// the signal's handler has been entered (its frame restores the old one).
pub fn rt_sigsuspend(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    if f.rsi != 8 {
        return Err(Errno::EINVAL);
    }
    let t = ctx.thread;
    let mask = ctx.user.read_u64(f.rdi)? & !UNBLOCKABLE;
    t.saved_mask.store(t.sigmask.load(Relaxed), Relaxed);
    t.mask_saved.store(true, Relaxed);
    t.sigmask.store(mask, Relaxed);
    Err(until_signal())
}

/// `rt_sigtimedwait`: takes a pending signal of the set (usually blocked) without
/// running its handler; EAGAIN at the timeout, EINTR for another signal.
pub fn rt_sigtimedwait(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let [set, info, timeout, size, ..] = f.args();
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    let set = ctx.user.read_u64(set)? & !UNBLOCKABLE;
    let deadline = super::poll::ts_deadline(ctx.user, timeout)?;
    if info != 0 {
        ctx.user.check(info, sigs::INFO_SIZE as u64, true)?;
    }
    let t = ctx.thread;
    loop {
        // Registered first: a signal sent from here on wakes the wait below.
        t.sigwait.store(set, Relaxed);
        if let Some(i) = take_waited(set) {
            t.sigwait.store(0, Relaxed);
            if info != 0 {
                ctx.user.write(info, &i.encode())?;
            }
            return Ok(i.signo);
        }
        let w = match deadline {
            Some(d) if d <= crate::time::mono_now() => Wake::TimedOut,
            d => sched::block(d),
        };
        t.sigwait.store(0, Relaxed);
        match w {
            Wake::Woken => {}
            Wake::TimedOut | Wake::Interrupted => {
                if let Some(i) = take_waited(set) {
                    if info != 0 {
                        ctx.user.write(info, &i.encode())?;
                    }
                    return Ok(i.signo);
                }
                return Err(if w == Wake::TimedOut { Errno::EAGAIN } else { Errno::EINTR });
            }
        }
    }
}

/// Makes call `regs.rax` again with the argument registers of `regs` (after an
/// SA_RESTART handler returned): the registers to return to the program with.
fn call_again(ctx: &Ctx, regs: Regs) -> Regs {
    let nr = regs.rax;
    let mut f = SyscallFrame::from_regs(&regs);
    let mut ret = super::dispatch(ctx, &mut f);
    if ret == Errno::ERESTARTSYS.to_ret() {
        ret = restart_or_eintr(nr);
    }
    // As the syscall instruction would: rcx and r11 hold rip and rflags.
    Regs { rax: ret, rcx: regs.rip, r11: regs.rflags, ..regs }
}

/// `rt_sigreturn`: returns to the interrupted code with every register restored
/// from the frame (never through the normal system-call return).
pub fn rt_sigreturn(ctx: &Ctx, f: &mut SyscallFrame) -> SysResult {
    let t = ctx.thread;
    // The handler returned into the restorer: rsp points at the ucontext.
    let Ok(uc) = ctx.user.read_array::<{ sigs::UCONTEXT_SIZE }>(f.rsp) else {
        terminate(ctx.k, t, sig::SIGSEGV, f.rip, 0);
    };
    let r = sigs::decode(&uc);
    t.sigmask.store(r.mask, Relaxed);
    if r.fp != 0 {
        let size = onering_arch::task::xsave_size();
        let ok = ctx.user.check(r.fp, size, false).is_ok() && t.task.restore_fpu_from_user(r.fp, size).is_ok();
        if !ok {
            terminate(ctx.k, t, sig::SIGSEGV, f.rip, 0);
        }
    }
    // The saved alternate stack comes back too (unless we are on it).
    {
        let mut alt = t.altstack.lock();
        if !on_altstack(*alt, r.regs.rsp) && (r.altstack.1 & SS_DISABLE != 0 || r.altstack.2 >= MINSIGSTKSZ) {
            *alt = (r.altstack.0, r.altstack.1 & SS_DISABLE, r.altstack.2);
        }
    }
    let mut regs = r.regs;
    if regs.rsp >= onering_abi::layout::USER_END || regs.rip >= onering_abi::layout::USER_END {
        terminate(ctx.k, t, sig::SIGSEGV, f.rip, 0);
    }
    regs.rflags = (regs.rflags & 0xcd5) | 0x202;
    // A handler with SA_RESTART returns: the interrupted call runs again.
    let restart = {
        let mut marked = t.restarts.lock();
        match marked.iter().position(|&a| a == f.rsp) {
            Some(i) => {
                marked.truncate(i); // newer ones were abandoned
                true
            }
            None => false,
        }
    };
    if restart {
        regs = call_again(ctx, regs);
    }
    let regs = deliver(ctx.k, ctx.user, regs);
    full_return(&regs)
}

/// Returns to the program with exactly `regs` (the guest's return path; host tests
/// never get here).
#[cfg(target_os = "none")]
fn full_return(regs: &Regs) -> ! {
    onering_arch::entry::full_return(regs)
}

#[cfg(not(target_os = "none"))]
fn full_return(regs: &Regs) -> ! {
    panic!("no return to a program on the host: {regs:?}")
}
