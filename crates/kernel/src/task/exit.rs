//! How threads and processes end: a thread's exit (its robust mutexes released,
//! CLONE_CHILD_CLEARTID honoured), and the end of a process (the program's end is
//! the VM's; a child becomes a zombie for its parent, its other threads end). A
//! vfork parent resumes when its child thread ends, however it ends
//! (`sched::exit_current`), and the processes a thread created get their
//! parent-death signals when it ends. A process's POSIX file locks go when it ends.

use super::kernel::Kernel;
use super::process;
use super::sched;
use super::thread::{current, Thread};
use crate::futex::robust;
use crate::mm::user::{UserMem, UserMemExt};
use crate::sigframe::code::{CLD_CONTINUED, CLD_EXITED, CLD_KILLED, CLD_STOPPED};
use crate::sigframe::sig;
use core::sync::atomic::Ordering::Relaxed;

/// Wait status of a normal exit with `code`.
pub fn exited(code: u64) -> u64 {
    (code & 0xff) << 8
}

/// Wait status of a stop by signal `s` (WIFSTOPPED, WSTOPSIG).
pub fn stopped(s: u64) -> u64 {
    (s & 0xff) << 8 | 0x7f
}

/// Wait status of a continuation (WIFCONTINUED).
pub const CONTINUED: u64 = 0xffff;

/// What `waitid`'s `siginfo_t` says of wait status `st`: (si_code, si_status).
pub fn wait_info(st: u64) -> (i32, u64) {
    match st {
        CONTINUED => (CLD_CONTINUED, sig::SIGCONT),
        _ if st & 0xff == 0x7f => (CLD_STOPPED, (st >> 8) & 0xff),
        _ if st & 0x7f == 0 => (CLD_EXITED, (st >> 8) & 0xff),
        _ => (CLD_KILLED, st & 0x7f),
    }
}

/// The wait-queue key of process `pid`'s wait4 callers.
pub fn wait_key(pid: u64) -> u64 {
    0x7761_6974_0000_0000 | pid
}

/// The wait key of pidfds of process `pid`: woken when it ends and when it is reaped.
pub fn pidfd_key(pid: u64) -> u64 {
    0x7069_6466_0000_0000 | pid
}

/// Ends the running thread; the last thread's exit (or `group`) ends its process
/// with exit code `code`.
pub fn exit_thread(k: &Kernel, user: &dyn UserMem, code: u64, group: bool) -> ! {
    let me = current();
    release_robust_list(k, user, me);
    let ctid = me.clear_child_tid.swap(0, Relaxed);
    if ctid != 0 {
        // CHILD_CLEARTID: zero the word and wake one waiter (pthread_join).
        if user.write_u32(ctid, 0).is_ok() {
            super::futex::wake(k, ctid, false, 1, u32::MAX);
        }
    }
    let p = me.process();
    let left = p.threads.fetch_sub(1, Relaxed).saturating_sub(1);
    if left == 0 || group {
        end_process(k, me, exited(code));
    } else if me.stop_marked() {
        // Its process is stopping: a thread that leaves takes part in the stop.
        super::job::acknowledge(me);
    }
    sched::exit_current()
}

/// Ends the process of thread `t` with wait status `status`: for the program itself
/// the VM's exit; a child becomes a zombie for its parent, whose vfork (if any)
/// returns. Its threads other than the caller end; the caller, if it belongs to the
/// process, must end itself.
pub fn end_process(k: &Kernel, t: &Thread, status: u64) {
    let p = t.process();
    let pid = p.pid();
    if pid == 1 {
        if status & 0x7f != 0 {
            k.killed(status & 0x7f, 0, 0);
        }
        // What its connections beyond the VM still send gets a second to leave.
        crate::net::inet::linger(1_000_000_000);
        k.exit(status >> 8);
    }
    let Some(files) = p.end() else {
        return; // another thread ended it already
    };
    let ppid = p.ppid.load(Relaxed);
    if let Some(parent) = process::find(ppid) {
        let mut f = parent.family.lock();
        f.zombies.push((pid, status));
        f.children = f.children.saturating_sub(1);
    } else {
        process::reaped(pid);
        super::hostexec::ended(k, pid, status);
    }
    adopt_orphans(p);
    super::tty::process_ended(p);
    // SIGCHLD for the parent (dropped unless it handles it, its default being
    // to ignore).
    let (code, value) = wait_info(status);
    let uid = k.cfg.uid as u32;
    let info = crate::sigframe::Info {
        signo: sig::SIGCHLD,
        code,
        pid: pid as u32,
        uid,
        status: value as i32,
        ..Default::default()
    };
    let _ = super::signal::send_to_process(ppid, sig::SIGCHLD, info);
    // Other threads of the process end with it (they never run again).
    let threads = sched::threads_of(pid);
    for other in &threads {
        if !core::ptr::eq(*other, current()) {
            sched::kill_thread(other);
        }
    }
    // Its POSIX locks go (the OFD and flock locks of its files go with the files).
    let tids: alloc::vec::Vec<u64> = threads.iter().map(|t| t.tid()).collect();
    super::filelock::process_ended(pid, &tids);
    sched::wake_all(wait_key(ppid));
    sched::wake_all(pidfd_key(pid));
    // Its descriptors close last, outside every lock (closing a pipe end wakes
    // the other end's threads).
    drop(files);
}

/// Thread `me` ends: the processes it created send their threads' parent-death
/// signals (`prctl(PR_SET_PDEATHSIG)`; Linux's `forget_original_parent`), and
/// another live thread of its process becomes their creator, or pid 1's first
/// thread when none is left (then the process ended and gave them to pid 1).
/// Only threads that created a process look.
pub fn creator_ended(me: &Thread) {
    if !me.made_children.swap(false, Relaxed) {
        return;
    }
    let tid = me.tid();
    let heir = sched::threads_of(me.pid())
        .into_iter()
        .find(|t| t.tid() != tid && !t.doomed.load(Relaxed) && !t.process().ended())
        .map_or(1, |t| {
            t.made_children.store(true, Relaxed);
            t.tid()
        });
    for child in process::all() {
        if child.creator.load(Relaxed) != tid {
            continue;
        }
        child.creator.store(heir, Relaxed);
        for t in sched::threads_of(child.pid()) {
            let s = t.pdeathsig.load(Relaxed);
            if s != 0 {
                let uid = super::kernel::kernel().cfg.uid as u32;
                let info = crate::sigframe::Info { signo: s, pid: me.pid() as u32, uid, ..Default::default() };
                let _ = super::signal::send_to_process(child.pid(), s, info);
            }
        }
    }
}

/// The children of ended process `p` (still running, or zombies no one reaped)
/// become the program's (pid 1), as Linux gives orphans to init.
fn adopt_orphans(p: &process::Process) {
    let (zombies, running) = {
        let mut f = p.family.lock();
        (core::mem::take(&mut f.zombies), core::mem::take(&mut f.children))
    };
    if running > 0 {
        for c in process::all() {
            if c.ppid.load(Relaxed) == p.pid() {
                c.ppid.store(1, Relaxed);
                for t in sched::threads_of(c.pid()) {
                    t.ppid.store(1, Relaxed);
                }
            }
        }
    }
    if zombies.is_empty() && running == 0 {
        return;
    }
    process::zombies_adopted(zombies.iter().map(|z| z.0));
    if let Some(init) = process::find(1) {
        let mut f = init.family.lock();
        f.zombies.extend(zombies);
        f.children += running;
    }
    sched::wake_all(wait_key(1));
}

/// A thread ends: each robust mutex it still holds becomes OWNER_DIED and one
/// waiter is woken (see [`crate::futex::robust`]). Bad pointers end the walk.
fn release_robust_list(k: &Kernel, user: &dyn UserMem, me: &Thread) {
    let head = me.robust_list.swap(0, Relaxed);
    if head == 0 {
        return;
    }
    let tid = me.tid() as u32;
    for w in robust::words(head, |a| user.read_u64(a).ok()) {
        // Compare-and-swap until the word is ours no longer or was marked.
        let mut old = match user.load_u32(w) {
            Ok(v) => v,
            Err(_) => continue,
        };
        while let Some(new) = robust::owner_died(old, tid) {
            match user.cmpxchg_u32(w, old, new) {
                Ok(found) if found == old => {
                    if old & robust::FUTEX_WAITERS != 0 {
                        super::futex::wake(k, w, false, 1, u32::MAX);
                    }
                    break;
                }
                Ok(found) => old = found,
                Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_decode_as_waitid_reports_them() {
        assert_eq!(wait_info(exited(3)), (CLD_EXITED, 3));
        assert_eq!(wait_info(sig::SIGKILL), (CLD_KILLED, 9));
        assert_eq!(stopped(sig::SIGSTOP), 0x137f);
        assert_eq!(wait_info(stopped(sig::SIGTTIN)), (CLD_STOPPED, 21));
        assert_eq!(wait_info(CONTINUED), (CLD_CONTINUED, 18));
    }
}
