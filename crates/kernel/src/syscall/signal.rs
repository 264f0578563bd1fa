//! Signal system calls, sending and delivery.
//!
//! Dispositions belong to the process, the mask, pending set and alternate stack to
//! each thread. A signal is delivered when its thread returns from a system call or
//! raises an exception: the kernel writes an `rt_sigframe` (crate::signal) on the
//! thread's stack or alternate stack and returns into the handler with every other
//! register intact; `rt_sigreturn` reads the frame back and returns to the
//! interrupted code with every register restored (`arch::thread::full_return`).
//! A blocking call interrupted by a signal (read or write of a pipe or eventfd, wait4,
//! a futex wait without timeout) runs again after the handler if the handler has
//! SA_RESTART, as on Linux: its frame is marked, and `rt_sigreturn` of a marked frame
//! makes the call again with the restored registers. Otherwise, and for calls Linux
//! never restarts (sleeps, poll, epoll, timed waits), the program gets EINTR.
//! Signals for a thread running on another vCPU wait for its next system call.

use super::SyscallFrame;
use crate::arch::{self, copy_to_user};
use crate::errno::{Errno, SysResult};
use crate::kernel::kernel;
use crate::sched::{self, Thread};
use crate::signal::{
    self as sigs, bit, code, sa, sig, Info, Regs, SIG_DFL, SIG_IGN, SS_DISABLE, SS_ONSTACK, UNBLOCKABLE,
};
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

pub fn rt_sigaction(f: &mut SyscallFrame) -> SysResult {
    let [s, act, oact, size, ..] = f.args();
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    valid(s)?;
    let k = &mut *kernel();
    let new = if act != 0 {
        if s == sig::SIGKILL || s == sig::SIGSTOP {
            return Err(Errno::EINVAL);
        }
        let mut b = [0u8; 32];
        arch::copy_from_user(&k.space, act, &mut b)?;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        Some([w(0), w(1), w(2), w(3) & !UNBLOCKABLE])
    } else {
        None
    };
    let old = k.proc().actions[s as usize - 1];
    if oact != 0 {
        let mut b = [0u8; 32];
        for (i, w) in old.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        copy_to_user(&k.space, oact, &b)?;
    }
    if let Some(n) = new {
        k.cur().actions[s as usize - 1] = n;
        // Setting a signal to be ignored discards it where it is pending.
        if ignored(&n, s) {
            for t in sched::threads_of(sched::current().pid()) {
                t.pending.fetch_and(!bit(s), Relaxed);
            }
        }
    }
    Ok(0)
}

/// Whether a signal with disposition `act` is dropped when sent.
fn ignored(act: &[u64; 4], s: u64) -> bool {
    act[0] == SIG_IGN || act[0] == SIG_DFL && sigs::default_action(s) == sigs::Default::Ignore
}

pub fn rt_sigprocmask(f: &mut SyscallFrame) -> SysResult {
    let [how, set, oset, size, ..] = f.args();
    if size != 8 {
        return Err(Errno::EINVAL);
    }
    let t = sched::current();
    let new = if set != 0 { Some(arch::read_user_u64(&kernel().space, set)?) } else { None };
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
        copy_to_user(&kernel().space, oset, &old.to_le_bytes())?;
    }
    Ok(0)
}

pub fn rt_sigpending(f: &mut SyscallFrame) -> SysResult {
    if f.rsi != 8 {
        return Err(Errno::EINVAL);
    }
    let t = sched::current();
    let p = t.pending.load(Relaxed) & t.sigmask.load(Relaxed);
    copy_to_user(&kernel().space, f.rdi, &p.to_le_bytes())?;
    Ok(0)
}

/// Whether `sp` lies on the alternate stack `alt`.
fn on_altstack(alt: (u64, u32, u64), sp: u64) -> bool {
    alt.1 & SS_DISABLE == 0 && sp > alt.0 && sp <= alt.0.wrapping_add(alt.2)
}

pub fn sigaltstack(f: &mut SyscallFrame) -> SysResult {
    let [ss, old, ..] = f.args();
    let t = sched::current();
    let cur = *t.altstack.lock();
    let onstack = on_altstack(cur, f.rsp);
    if ss != 0 {
        let mut b = [0u8; 24];
        arch::copy_from_user(&kernel().space, ss, &mut b)?;
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
        copy_to_user(&kernel().space, old, &b)?;
    }
    Ok(0)
}

/// Makes signal `s` pending for thread `t` (dropped if ignored) and interrupts a
/// blocking call of `t`. SIGKILL ends the process at once.
pub fn send(t: &'static Thread, s: u64, info: Info) {
    let act = {
        let k = kernel();
        let slot = t.proc_slot.load(Relaxed);
        match k.procs.get(slot).and_then(Option::as_ref) {
            Some(p) => p.actions[s as usize - 1],
            None => return,
        }
    };
    if s == sig::SIGKILL {
        let mine = t.pid() == sched::current().pid();
        super::proc::end_process(t, s);
        if mine {
            sched::exit_current();
        }
        return;
    }
    if ignored(&act, s) {
        return;
    }
    t.siginfo.lock()[s as usize - 1] = info;
    t.pending.fetch_or(bit(s), Relaxed);
    if t.deliverable() & bit(s) != 0 {
        sched::interrupt(t);
    }
}

/// A process-directed signal goes to a thread that does not block it (the caller
/// if it can take it), else stays pending on the first thread.
fn send_to_process(pid: u64, s: u64, info: Info) -> Result<(), Errno> {
    let me = sched::current();
    let threads = sched::threads_of(pid);
    if threads.is_empty() {
        return Err(Errno::ESRCH);
    }
    if s == 0 {
        return Ok(());
    }
    let pick = if me.pid() == pid && me.sigmask.load(Relaxed) & bit(s) == 0 {
        me
    } else {
        threads.iter().copied().find(|t| t.sigmask.load(Relaxed) & bit(s) == 0).unwrap_or(threads[0])
    };
    send(pick, s, info);
    Ok(())
}

fn sender_info(s: u64, code: i32) -> Info {
    let k = kernel();
    Info { signo: s, code, pid: sched::current().pid() as u32, uid: k.uid as u32, ..Info::default() }
}

pub fn kill(f: &mut SyscallFrame) -> SysResult {
    let [pid, s, ..] = f.args();
    if s > 64 {
        return Err(Errno::EINVAL);
    }
    let pid = pid as i32 as i64;
    let me = sched::current().pid();
    let target = match pid {
        0 | -1 => me,
        p if p == -(me as i64) => me,
        p if p > 0 => p as u64,
        _ => return Err(Errno::ESRCH),
    };
    send_to_process(target, s, sender_info(s, code::SI_USER))?;
    Ok(0)
}

fn thread_kill(tgid: Option<u64>, tid: u64, s: u64) -> SysResult {
    if s > 64 || tid as i32 <= 0 || tgid.is_some_and(|g| g as i32 <= 0) {
        return Err(Errno::EINVAL);
    }
    let t = sched::thread(tid as u32 as u64).ok_or(Errno::ESRCH)?;
    if tgid.is_some_and(|g| g as u32 as u64 != t.pid()) {
        return Err(Errno::ESRCH);
    }
    if s != 0 {
        send(t, s, sender_info(s, code::SI_TKILL));
    }
    Ok(0)
}

pub fn tgkill(f: &mut SyscallFrame) -> SysResult {
    thread_kill(Some(f.rdi), f.rsi, f.rdx)
}

pub fn tkill(f: &mut SyscallFrame) -> SysResult {
    thread_kill(None, f.rdi, f.rsi)
}

/// Registers of a system-call frame about to return `rax`, as the hardware
/// `syscall`/`sysret` pair leaves them (rcx = rip, r11 = rflags).
pub fn regs_of(f: &SyscallFrame) -> Regs {
    Regs {
        r8: f.r8,
        r9: f.r9,
        r10: f.r10,
        r11: f.rflags,
        r12: f.r12,
        r13: f.r13,
        r14: f.r14,
        r15: f.r15,
        rdi: f.rdi,
        rsi: f.rsi,
        rbp: f.rbp,
        rbx: f.rbx,
        rdx: f.rdx,
        rax: f.rax,
        rcx: f.rip,
        rsp: f.rsp,
        rip: f.rip,
        rflags: f.rflags,
    }
}

/// Ends the program as killed by `s` (its default action), or its child process.
fn terminate(t: &'static Thread, s: u64, rip: u64, addr: u64) -> ! {
    if t.pid() == 1 {
        kernel().killed(s, rip, addr);
    }
    super::proc::end_process(t, s);
    sched::exit_current()
}

/// Delivers the running thread's deliverable signals to `regs` (the state it is
/// about to return to): the registers to return with instead (a handler's entry),
/// or `regs` unchanged when every signal was ignored. A default action that ends
/// the program does not return.
pub fn deliver(regs: Regs) -> Regs {
    let t = sched::current();
    loop {
        let ready = t.deliverable();
        if ready == 0 {
            // No handler ran: the interrupted call stays EINTR, a temporary mask
            // goes.
            t.restart_nr.store(0, Relaxed);
            if t.mask_saved.swap(false, Relaxed) {
                t.sigmask.store(t.saved_mask.load(Relaxed), Relaxed);
            }
            return regs;
        }
        let s = u64::from(ready.trailing_zeros()) + 1;
        t.pending.fetch_and(!bit(s), Relaxed);
        let info = t.siginfo.lock()[s as usize - 1];
        let act = {
            let k = &mut *kernel();
            let p = k.cur();
            let a = p.actions[s as usize - 1];
            if a[0] > SIG_IGN && a[1] & sa::RESETHAND != 0 {
                p.actions[s as usize - 1] = [SIG_DFL, 0, 0, 0];
            }
            a
        };
        match act[0] {
            SIG_IGN => continue,
            SIG_DFL => match sigs::default_action(s) {
                sigs::Default::Ignore => continue,
                // SIGPIPE ends the program silently, like a shell pipeline's writer.
                sigs::Default::Terminate => terminate(t, s, regs.rip, info.addr),
            },
            handler => {
                // An interrupted call runs again after this handler if it has
                // SA_RESTART: its frame saves the call's number and is marked.
                let restart = t.restart_nr.swap(0, Relaxed);
                let restarts = restart != 0 && act[1] & sa::RESTART != 0;
                let saved = if restarts { Regs { rax: restart - 1, ..regs } } else { regs };
                match frame(t, &saved, s, &info, &act, restarts) {
                    Ok(mut r) => {
                        r.rip = handler;
                        return r;
                    }
                    // No room for the frame: as Linux, the program dies of SIGSEGV.
                    Err(_) => terminate(t, sig::SIGSEGV, regs.rip, 0),
                }
            }
        }
    }
}

/// Writes the signal frame for `s` and returns the handler's registers (rip to be
/// set by the caller).
fn frame(t: &'static Thread, regs: &Regs, s: u64, info: &Info, act: &[u64; 4], restart: bool) -> Result<Regs, Errno> {
    let alt = *t.altstack.lock();
    let use_alt = act[1] & sa::ONSTACK != 0 && alt.1 & SS_DISABLE == 0 && !on_altstack(alt, regs.rsp);
    let fp_size = sched::xsave_size();
    let (frame, fp) = sigs::place(regs.rsp, use_alt.then_some((alt.0, alt.2)), fp_size);
    // The mask the handler's return restores: a temporary one (ppoll) gives way.
    let old_mask = if t.mask_saved.swap(false, Relaxed) { t.saved_mask.load(Relaxed) } else { t.sigmask.load(Relaxed) };
    let during = t.sigmask.load(Relaxed);
    let uc_stack = if on_altstack(alt, regs.rsp) { (alt.0, SS_ONSTACK, alt.2) } else { alt };
    {
        let k = kernel();
        arch::thread::xsave_user(&k.space, fp, fp_size)?;
        copy_to_user(&k.space, fp + sigs::SW_BYTES_OFFSET as u64, &sigs::sw_bytes(fp_size as u32, sched::xfeatures()))?;
        copy_to_user(&k.space, fp + fp_size, &sigs::end_marker())?;
        let bytes = sigs::encode(&sigs::Frame { regs, info, restorer: act[2], old_mask, altstack: uc_stack, fp });
        copy_to_user(&k.space, frame, &bytes)?;
    }
    let mut mask = during | act[3];
    if act[1] & sa::NODEFER == 0 {
        mask |= bit(s);
    }
    t.sigmask.store(mask & !UNBLOCKABLE, Relaxed);
    {
        // A mark left here by a frame that was abandoned (siglongjmp) is stale.
        let uc = frame + sigs::UC_OFFSET;
        let mut marked = t.restarts.lock();
        marked.retain(|&a| a != uc);
        if restart {
            if marked.len() >= MAX_RESTART_FRAMES {
                marked.remove(0); // frames abandoned by longjmp out of handlers
            }
            marked.push(uc);
        }
    }
    let mut r = *regs;
    r.rsp = frame;
    r.rdi = s;
    r.rsi = frame + sigs::INFO_OFFSET;
    r.rdx = frame + sigs::UC_OFFSET;
    r.rax = 0;
    // The handler starts with DF and TF clear, as on Linux.
    r.rflags &= !(1 << 10 | 1 << 8);
    Ok(r)
}

/// Most frames remembered for SA_RESTART at once (nesting depth, plus any a
/// program abandoned by jumping out of its handlers).
const MAX_RESTART_FRAMES: usize = 64;

/// A call returned ERESTARTSYS (a signal interrupted it): the value for rax, EINTR,
/// unless the handler `deliver` runs next has SA_RESTART; then its frame saves the
/// call's number and is marked, so that `rt_sigreturn` makes the call again.
pub fn restart_or_eintr(nr: u64) -> u64 {
    sched::current().restart_nr.store(nr + 1, Relaxed);
    Errno::EINTR.to_ret()
}

/// Makes call `regs.rax` again with the argument registers of `regs` (after an
/// SA_RESTART handler returned): the registers to return to the program with.
fn call_again(regs: Regs) -> Regs {
    let nr = regs.rax;
    let mut f = SyscallFrame {
        r15: regs.r15,
        r14: regs.r14,
        r13: regs.r13,
        r12: regs.r12,
        rbp: regs.rbp,
        rbx: regs.rbx,
        r9: regs.r9,
        r8: regs.r8,
        r10: regs.r10,
        rdx: regs.rdx,
        rsi: regs.rsi,
        rdi: regs.rdi,
        rax: nr,
        rip: regs.rip,
        rflags: regs.rflags,
        rsp: regs.rsp,
    };
    let mut ret = super::dispatch(&mut f);
    if ret == Errno::ERESTARTSYS.to_ret() {
        ret = restart_or_eintr(nr);
    }
    // As the syscall instruction would: rcx and r11 hold rip and rflags.
    Regs { rax: ret, rcx: regs.rip, r11: regs.rflags, ..regs }
}

/// After a system call: ends the thread if its process ended, or delivers pending
/// signals by returning straight into the handler (does not return then).
pub fn on_syscall_return(f: &SyscallFrame) {
    let r = regs_of(f);
    let n = on_return(r);
    if n != r {
        arch::thread::full_return(&n);
    }
}

/// What the running thread goes back to the program with (after a system call or
/// an interrupt): it ends here if its process ended; pending signals enter their
/// handlers (the handler's registers are returned); otherwise `regs` unchanged.
pub fn on_return(regs: Regs) -> Regs {
    let t = sched::current();
    if t.pending.load(Relaxed) == 0 {
        // (Nothing to deliver after all: no restart, and a temporary mask goes.)
        t.restart_nr.store(0, Relaxed);
        if t.mask_saved.swap(false, Relaxed) {
            t.sigmask.store(t.saved_mask.load(Relaxed), Relaxed);
        }
        return regs;
    }
    if t.doomed.load(Relaxed) {
        sched::exit_current();
    }
    deliver(regs)
}

pub fn rt_sigreturn(f: &mut SyscallFrame) -> SysResult {
    let t = sched::current();
    // The handler returned into the restorer: rsp points at the ucontext.
    let restored = {
        let k = kernel();
        let mut uc = [0u8; sigs::UCONTEXT_SIZE];
        arch::copy_from_user(&k.space, f.rsp, &mut uc).map(|_| sigs::decode(&uc))
    };
    let Ok(r) = restored else {
        terminate(t, sig::SIGSEGV, f.rip, 0);
    };
    t.sigmask.store(r.mask, Relaxed);
    if r.fp != 0 {
        let ok = arch::thread::xrstor_user(&kernel().space, r.fp, sched::xsave_size(), sched::xfeatures()).is_ok();
        if !ok {
            terminate(t, sig::SIGSEGV, f.rip, 0);
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
        terminate(t, sig::SIGSEGV, f.rip, 0);
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
        regs = call_again(regs);
    }
    let regs = deliver(regs);
    arch::thread::full_return(&regs)
}

/// An exception in the program: delivered to its handler if it has one and does
/// not block the signal; otherwise the program (or child process) dies of it.
pub fn fault(regs: Regs, s: u64, info: Info) -> ! {
    let t = sched::current();
    let act = kernel().proc().actions[s as usize - 1];
    let blocked = t.sigmask.load(Relaxed) & bit(s) != 0;
    if act[0] <= SIG_IGN || blocked {
        terminate(t, s, regs.rip, info.addr);
    }
    t.siginfo.lock()[s as usize - 1] = info;
    // Deliver this one first, then anything else pending.
    let bits = t.pending.swap(bit(s), Relaxed);
    let n = deliver(regs);
    t.pending.fetch_or(bits & !bit(s), Relaxed);
    arch::thread::clear_in_fault();
    arch::thread::full_return(&n)
}
