//! Signal sending and delivery. Dispositions belong to the process, the mask,
//! pending set and alternate stack to each thread (`task::thread`). The frame's
//! layout is `crate::sigframe`; the system calls are `syscall::signal`.
//!
//! A signal is delivered when its thread goes back to the program: after a system
//! call, after an exception, or after an interrupt (a signal for a thread running
//! on another vCPU sends that vCPU a reschedule IPI, so it is delivered within
//! microseconds, not at its next system call). The kernel writes an `rt_sigframe`
//! on the thread's stack or alternate stack and returns into the handler with
//! every other register intact; `rt_sigreturn` reads the frame back.
//!
//! A blocking call interrupted by a signal (read or write of a pipe or eventfd,
//! wait4, a futex wait without timeout) runs again after the handler if the handler
//! has SA_RESTART, as on Linux: its frame is marked, and `rt_sigreturn` of a marked
//! frame makes the call again. Otherwise, and for calls Linux never restarts
//! (sleeps, poll, epoll, timed waits), the program gets EINTR.
//!
//! Job control is `task::job`: sending SIGCONT continues the process, and a stop
//! signal at its default action stops it (when sent, or when a thread takes one
//! that was blocked); a stopped thread parks on its way back to the program.

use super::kernel::{kernel, Kernel};
use super::sched;
use super::thread::{current, Thread, STOP_MARK};
use crate::errno::Errno;
use crate::mm::user::UserMem;
use crate::sigframe::{
    self as sigs, bit, sa, sig, Info, Regs, SIG_DFL, SIG_IGN, SS_DISABLE, SS_ONSTACK, STOP_SIGNALS, UNBLOCKABLE,
};
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

/// Whether a signal with disposition `act` is dropped when sent.
pub fn ignored(act: &[u64; 4], s: u64) -> bool {
    act[0] == SIG_IGN || act[0] == SIG_DFL && sigs::default_action(s) == sigs::Default::Ignore
}

/// Whether `sp` lies on the alternate stack `alt`.
pub fn on_altstack(alt: (u64, u32, u64), sp: u64) -> bool {
    alt.1 & SS_DISABLE == 0 && sp > alt.0 && sp <= alt.0.wrapping_add(alt.2)
}

/// Makes signal `s` pending for thread `tid`, found as `t` (dropped if ignored,
/// or if `t` has meanwhile ended and become another thread) and interrupts a
/// blocking call of it. SIGKILL ends the process at once. False if `t` is no
/// longer thread `tid`.
pub fn send(t: &'static Thread, tid: u64, s: u64, info: Info) -> bool {
    let p = t.process();
    if t.tid() != tid {
        return false;
    }
    if p.ended() {
        return true;
    }
    let act = p.actions.lock()[s as usize - 1];
    if s == sig::SIGKILL {
        let mine = super::thread::try_current().is_some_and(|c| c.pid() == t.pid());
        super::exit::end_process(kernel(), t, s);
        if mine {
            sched::exit_current();
        }
        return true;
    }
    let blocked = t.sigmask.load(Relaxed) & bit(s) != 0;
    // Job control, whatever the disposition: SIGCONT continues the process, a
    // stop signal at its default action stops it now (unless blocked: then when
    // a thread takes it, in `deliver`).
    if s == sig::SIGCONT {
        super::job::cont(p);
    } else if bit(s) & STOP_SIGNALS != 0 {
        super::job::stop_sent(p);
        if act[0] == SIG_DFL && !blocked {
            super::job::stop(p, s);
            return true;
        }
    }
    // As on Linux, a blocked signal is kept even if ignored (its disposition may
    // change before it is unblocked, and `rt_sigtimedwait` takes blocked ones).
    if ignored(&act, s) && !blocked {
        return true;
    }
    {
        let mut si = t.siginfo.lock();
        if t.tid() != tid {
            return false;
        }
        si[s as usize - 1] = info;
        t.pending.fetch_or(bit(s), Relaxed);
    }
    if t.wakes_for() & bit(s) != 0 {
        sched::interrupt(t);
    }
    true
}

/// A process-directed signal goes to a thread that does not block it or waits for
/// it in `rt_sigtimedwait` (the main thread first), else stays pending on the main
/// thread. Also from the idle loop (a signal from the host).
pub fn send_to_process(pid: u64, s: u64, info: Info) -> Result<(), Errno> {
    loop {
        // (Threads found here may end meanwhile: then look again.)
        let threads: Vec<(u64, &'static Thread)> =
            sched::threads_of(pid).into_iter().map(|t| (t.tid(), t)).filter(|(_, t)| t.pid() == pid).collect();
        let Some(&first) = threads.first() else { return Err(Errno::ESRCH) };
        if s == 0 {
            return Ok(());
        }
        // As Linux: the main thread if it can take it, else another that can.
        let takes = |t: &Thread| t.sigmask.load(Relaxed) & bit(s) == 0 || t.sigwait.load(Relaxed) & bit(s) != 0;
        let leader = threads.iter().copied().find(|(tid, _)| *tid == pid).unwrap_or(first);
        let (tid, pick) =
            if takes(leader.1) { leader } else { threads.iter().copied().find(|(_, t)| takes(t)).unwrap_or(leader) };
        if s != sig::SIGKILL {
            pick.shared.fetch_or(bit(s), Relaxed);
        }
        if send(pick, tid, s, info) {
            return Ok(());
        }
    }
}

/// Takes a pending signal of `set` for the running thread, without running its
/// handler (`rt_sigtimedwait`): its own first, then one sent to its process that
/// waits on another thread.
pub fn take_waited(set: u64) -> Option<Info> {
    let me = current();
    let take = |t: &Thread, from: u64| {
        let ready = t.pending.load(Relaxed) & from;
        if ready == 0 {
            return None;
        }
        let s = u64::from(ready.trailing_zeros()) + 1;
        // (Only the thread that clears the bit takes the signal.)
        if t.pending.fetch_and(!bit(s), Relaxed) & bit(s) == 0 {
            return None;
        }
        t.shared.fetch_and(!bit(s), Relaxed);
        Some(t.siginfo.lock()[s as usize - 1])
    };
    if let Some(i) = take(me, set) {
        return Some(i);
    }
    sched::threads_of(me.pid()).into_iter().find_map(|t| take(t, set & t.shared.load(Relaxed)))
}

/// SIGPIPE after a write got EPIPE: raised for the writing thread (by default it
/// ends the program, silently: `prog | head -1`).
pub fn sigpipe() {
    let me = current();
    let _ = send(me, me.tid(), sig::SIGPIPE, Info { signo: sig::SIGPIPE, ..Default::default() });
}

/// Ends the program as killed by `s` (its default action), or its child process.
pub fn terminate(k: &Kernel, t: &'static Thread, s: u64, rip: u64, addr: u64) -> ! {
    if s == sig::SIGKILL && k.oom.swap(false, Relaxed) {
        k.report_oom();
    }
    if t.pid() == 1 {
        k.killed(s, rip, addr);
    }
    super::exit::end_process(k, t, s);
    sched::exit_current()
}

/// Delivers the running thread's deliverable signals to `regs` (the state it is
/// about to return to): the registers to return with instead (a handler's entry),
/// or `regs` unchanged when every signal was ignored. A default action that ends
/// the program does not return.
pub fn deliver(k: &Kernel, user: &dyn UserMem, regs: Regs) -> Regs {
    let t = current();
    loop {
        // A stopped process's threads go no further until SIGCONT.
        if t.stop_marked() {
            super::job::park(t);
        }
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
        t.shared.fetch_and(!bit(s), Relaxed);
        let info = t.siginfo.lock()[s as usize - 1];
        let act = {
            let mut actions = t.process().actions.lock();
            let a = actions[s as usize - 1];
            if a[0] > SIG_IGN && a[1] & sa::RESETHAND != 0 {
                actions[s as usize - 1] = [SIG_DFL, 0, 0, 0];
            }
            a
        };
        match act[0] {
            SIG_IGN => continue,
            SIG_DFL => match sigs::default_action(s) {
                sigs::Default::Ignore => continue,
                // (A stop signal that was blocked when sent: the process stops now.)
                sigs::Default::Stop => {
                    super::job::stop(t.process(), s);
                    continue;
                }
                // SIGPIPE ends the program silently, like a shell pipeline's writer.
                sigs::Default::Terminate => terminate(k, t, s, regs.rip, info.addr),
            },
            handler => {
                // An interrupted call runs again after this handler if it has
                // SA_RESTART: its frame saves the call's number and is marked.
                let restart = t.restart_nr.swap(0, Relaxed);
                let restarts = restart != 0 && act[1] & sa::RESTART != 0;
                let saved = if restarts { Regs { rax: restart - 1, ..regs } } else { regs };
                match frame(user, t, &saved, s, &info, &act, restarts) {
                    Ok(mut r) => {
                        r.rip = handler;
                        return r;
                    }
                    // No room for the frame: as Linux, the program dies of SIGSEGV.
                    Err(_) => terminate(k, t, sig::SIGSEGV, regs.rip, 0),
                }
            }
        }
    }
}

/// Most frames remembered for SA_RESTART at once (nesting depth, plus any a
/// program abandoned by jumping out of its handlers).
const MAX_RESTART_FRAMES: usize = 64;

/// Writes the signal frame for `s` and returns the handler's registers (rip to be
/// set by the caller).
fn frame(
    user: &dyn UserMem,
    t: &'static Thread,
    regs: &Regs,
    s: u64,
    info: &Info,
    act: &[u64; 4],
    restart: bool,
) -> Result<Regs, Errno> {
    let alt = *t.altstack.lock();
    let use_alt = act[1] & sa::ONSTACK != 0 && alt.1 & SS_DISABLE == 0 && !on_altstack(alt, regs.rsp);
    let fp_size = onering_arch::task::xsave_size();
    let (frame, fp) = sigs::place(regs.rsp, use_alt.then_some((alt.0, alt.2)), fp_size);
    // The mask the handler's return restores: a temporary one (ppoll) gives way.
    let old_mask = if t.mask_saved.swap(false, Relaxed) { t.saved_mask.load(Relaxed) } else { t.sigmask.load(Relaxed) };
    let during = t.sigmask.load(Relaxed);
    let uc_stack = if on_altstack(alt, regs.rsp) { (alt.0, SS_ONSTACK, alt.2) } else { alt };
    user.check(fp, fp_size + 4, true)?;
    t.task.save_fpu_to_user(fp, fp_size).map_err(|_| Errno::EFAULT)?;
    user.write(fp + sigs::SW_BYTES_OFFSET as u64, &sigs::sw_bytes(fp_size as u32, onering_arch::task::xfeatures()))?;
    user.write(fp + fp_size, &sigs::end_marker())?;
    let bytes = sigs::encode(&sigs::Frame { regs, info, restorer: act[2], old_mask, altstack: uc_stack, fp });
    user.write(frame, &bytes)?;
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

/// A call returned ERESTARTSYS (a signal interrupted it): the value for rax, EINTR,
/// unless the handler `deliver` runs next has SA_RESTART; then its frame saves the
/// call's number and is marked, so that `rt_sigreturn` makes the call again.
pub fn restart_or_eintr(nr: u64) -> u64 {
    current().restart_nr.store(nr + 1, Relaxed);
    Errno::EINTR.to_ret()
}

/// What the running thread goes back to the program with (after a system call or
/// an interrupt): it ends here if its process ended; pending signals enter their
/// handlers (the handler's registers are returned); otherwise `regs` unchanged.
pub fn on_return(k: &Kernel, user: &dyn UserMem, regs: Regs) -> Regs {
    let t = current();
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
    deliver(k, user, regs)
}

/// An exception in the program: delivered to its handler if it has one and does
/// not block the signal; otherwise the program (or child process) dies of it.
/// Returns the registers to resume with.
pub fn fault(k: &Kernel, user: &dyn UserMem, regs: Regs, s: u64, info: Info) -> Regs {
    let t = current();
    let act = t.process().actions.lock()[s as usize - 1];
    let blocked = t.sigmask.load(Relaxed) & bit(s) != 0;
    if act[0] <= SIG_IGN || blocked {
        terminate(k, t, s, regs.rip, info.addr);
    }
    t.siginfo.lock()[s as usize - 1] = info;
    // Deliver this one first (after a stop), then anything else pending.
    let bits = t.pending.fetch_and(STOP_MARK, Relaxed);
    t.pending.fetch_or(bit(s), Relaxed);
    let n = deliver(k, user, regs);
    t.pending.fetch_or(bits & !bit(s) & !STOP_MARK, Relaxed);
    n
}
