//! Job control on the VM's terminal. There is at most one: the host's terminal
//! behind the standard streams (whichever of descriptors 0-2 is one,
//! `BootInfo::stdio`), reached through those streams and through /dev/tty. As on
//! Linux it belongs to at most one session (pid 1's at boot) and has a
//! foreground process group; it is the controlling terminal of the processes of
//! that session that have not let it go (`Process::ctty`: inherited by fork,
//! dropped by setsid and TIOCNOTTY, given by TIOCSCTTY).
//!
//! Implemented as Linux does: TIOCGPGRP/TIOCSPGRP (`tcgetpgrp`/`tcsetpgrp`),
//! TIOCGSID, TIOCSCTTY (stealing with arg 1 for root), TIOCNOTTY (a session
//! leader's sends SIGHUP and SIGCONT to the foreground group and frees the
//! terminal, as does the end of a session leader that had it), and the background
//! check (`check`) of terminal reads (SIGTTIN) and of mode and group changes
//! (SIGTTOU): allowed in the foreground; EIO for reads with SIGTTIN ignored or
//! blocked and for an orphaned group; changes allowed with SIGTTOU ignored or
//! blocked; a handled signal is sent to the caller's group and the call restarts
//! or fails with EINTR after the handler; at the signal's default action the
//! group stops (`task::job`) and the call starts over once it is continued.
//! A background write is checked as a change (SIGTTOU) when the terminal's
//! TOSTOP flag is set (`check_write`: the modes are the host terminal's, asked
//! for only then, one exit). The terminal's special characters (Ctrl-C, Ctrl-\,
//! Ctrl-Z) are the host's line discipline's, which signals onering; onering
//! passes those signals on and `signal_foreground` sends them to the foreground
//! group.
//!
//! The state is one small lock, a leaf: nothing else is taken while it is held.

use super::process::{self, Life, Process};
use super::thread::current;
use crate::errno::{Errno, SysResult};
use crate::mm::user::{UserMem, UserMemExt};
use crate::sigframe::{bit, code, sig, Info, SIG_DFL, SIG_IGN};
use core::sync::atomic::Ordering::Relaxed;
use onering_arch::sync::Mutex;

pub const TIOCSCTTY: u64 = 0x540e;
pub const TIOCGPGRP: u64 = 0x540f;
pub const TIOCSPGRP: u64 = 0x5410;
pub const TIOCNOTTY: u64 = 0x5422;
pub const TIOCGSID: u64 = 0x5429;
const SIGHUP: u64 = 1;

/// The terminal's session and foreground group (0: none).
struct Terminal {
    session: u64,
    fg: u64,
}

static TERMINAL: Mutex<Terminal> = Mutex::new(Terminal { session: 0, fg: 0 });

/// At boot, when a standard stream is a terminal: it is the program's (`p`,
/// pid 1, its session's leader).
pub fn attach_first(p: &Process) {
    let mut t = TERMINAL.lock();
    t.session = p.sid.load(Relaxed);
    t.fg = p.pgid.load(Relaxed);
    p.ctty.store(true, Relaxed);
}

/// Whether the terminal is `p`'s controlling terminal.
pub fn controls(p: &Process) -> bool {
    p.ctty.load(Relaxed) && {
        let t = TERMINAL.lock();
        t.session != 0 && t.session == p.sid.load(Relaxed)
    }
}

/// Sends `s` to every process of group `pgid` (from the kernel, SI_KERNEL).
fn signal_group(pgid: u64, s: u64) {
    let info = Info { signo: s, code: code::SI_KERNEL, ..Info::default() };
    for q in process::all().into_iter().filter(|q| q.pgid.load(Relaxed) == pgid) {
        let _ = super::signal::send_to_process(q.pid(), s, info);
    }
}

/// Sends signal `s` made by the host's terminal (Ctrl-C, Ctrl-\, Ctrl-Z, a window
/// change) to the terminal's foreground group; false if no live group holds it.
pub fn signal_foreground(s: u64) -> bool {
    let fg = TERMINAL.lock().fg;
    if fg == 0 || !process::all().iter().any(|q| q.pgid.load(Relaxed) == fg) {
        return false;
    }
    signal_group(fg, s);
    true
}

/// Whether group `pgid` of session `sid` is orphaned: no member has a parent in
/// another group of the same session (pid 1 counts as a parent, as a
/// container's init does on Linux).
pub(super) fn orphaned(pgid: u64, sid: u64) -> bool {
    let all = process::all();
    !all.iter().filter(|q| q.pgid.load(Relaxed) == pgid).any(|q| {
        let ppid = q.ppid.load(Relaxed);
        all.iter().any(|p| p.pid() == ppid && p.pgid.load(Relaxed) != pgid && p.sid.load(Relaxed) == sid)
    })
}

/// Linux's `__tty_check_change`: may the running thread read the terminal
/// (`s` SIGTTIN) or change it (SIGTTOU) from its process group?
pub fn check(s: u64) -> Result<(), Errno> {
    let me = current();
    let p = me.process();
    loop {
        if !controls(p) {
            return Ok(());
        }
        let fg = TERMINAL.lock().fg;
        let pgid = p.pgid.load(Relaxed);
        if fg == 0 || fg == pgid {
            return Ok(());
        }
        let handler = p.actions.lock()[s as usize - 1][0];
        if me.sigmask.load(Relaxed) & bit(s) != 0 || handler == SIG_IGN {
            return if s == sig::SIGTTIN { Err(Errno::EIO) } else { Ok(()) };
        }
        if orphaned(pgid, p.sid.load(Relaxed)) {
            return Err(Errno::EIO);
        }
        signal_group(pgid, s);
        if handler != SIG_DFL {
            return Err(Errno::ERESTARTSYS);
        }
        // The group stopped: this thread waits here for SIGCONT, then the call
        // starts over, as Linux restarts it. (The program, pid 1, does not stop:
        // EIO.)
        if !me.stop_marked() {
            return Err(Errno::EIO);
        }
        super::job::park(me);
    }
}

/// A write to the terminal: from a background process group, when `tostop()`
/// (the terminal's TOSTOP flag, asked for only then) says so, it is checked as a
/// change is (SIGTTOU: the group stops, or the handler runs; allowed with
/// SIGTTOU ignored or blocked; EIO for an orphaned group), as Linux does.
pub fn check_write(tostop: impl FnOnce() -> bool) -> Result<(), Errno> {
    let p = current().process();
    if !controls(p) {
        return Ok(());
    }
    let fg = TERMINAL.lock().fg;
    if fg == 0 || fg == p.pgid.load(Relaxed) || !tostop() {
        return Ok(());
    }
    check(sig::SIGTTOU)
}

/// The terminal leaves its session (its leader let it go or ended): every
/// process of the session loses it, and the foreground group gets SIGHUP (and
/// SIGCONT unless the leader ended).
fn hang_up(session: u64, cont: bool) {
    let fg = {
        let mut t = TERMINAL.lock();
        if t.session != session {
            return;
        }
        t.session = 0;
        core::mem::take(&mut t.fg)
    };
    for q in process::all().into_iter().filter(|q| q.sid.load(Relaxed) == session) {
        q.ctty.store(false, Relaxed);
    }
    if fg != 0 {
        signal_group(fg, SIGHUP);
        if cont {
            signal_group(fg, sig::SIGCONT);
        }
    }
}

/// Process `p` ended: if it led the terminal's session, the session loses it.
pub fn process_ended(p: &Process) {
    if p.ctty.load(Relaxed) && p.sid.load(Relaxed) == p.pid() {
        hang_up(p.pid(), false);
    }
}

/// The job-control ioctls of the terminal, for the running thread's process.
/// `readable`: the descriptor was opened for reading (TIOCSCTTY needs it, unless
/// root); `root`: the program runs as uid 0 (TIOCSCTTY may steal).
pub fn ioctl(user: &dyn UserMem, request: u64, arg: u64, readable: bool, root: bool) -> SysResult {
    let p = current().process();
    let (pid, sid, pgid) = (p.pid(), p.sid.load(Relaxed), p.pgid.load(Relaxed));
    match request {
        TIOCGPGRP | TIOCGSID => {
            let (session, fg) = {
                let t = TERMINAL.lock();
                (t.session, t.fg)
            };
            if !controls(p) || session == 0 {
                return Err(Errno::ENOTTY);
            }
            user.write_u32(arg, (if request == TIOCGPGRP { fg } else { session }) as u32)?;
            Ok(0)
        }
        TIOCSPGRP => {
            match check(sig::SIGTTOU) {
                Err(Errno::EIO) => return Err(Errno::ENOTTY),
                r => r?,
            }
            let n = user.read_u32(arg)? as i32;
            if n < 0 {
                return Err(Errno::EINVAL);
            }
            if !controls(p) {
                return Err(Errno::ENOTTY);
            }
            let n = n as u64;
            // The group's session: a member's, else process n's (Linux's
            // `session_of_pgrp`); a pid that names no such process is EPERM.
            let all = process::all();
            let of = all.iter().find(|q| q.pgid.load(Relaxed) == n).or_else(|| all.iter().find(|q| q.pid() == n));
            match of.map(|q| q.sid.load(Relaxed)) {
                Some(s) if s == sid => {}
                Some(_) => return Err(Errno::EPERM),
                None if process::life(n) != Life::Gone || super::sched::thread(n).is_some() => {
                    return Err(Errno::EPERM)
                }
                None => return Err(Errno::ESRCH),
            }
            TERMINAL.lock().fg = n;
            Ok(0)
        }
        TIOCSCTTY => {
            let leader = sid == pid;
            let session = TERMINAL.lock().session;
            if leader && session == sid {
                return Ok(0);
            }
            if !leader || p.ctty.load(Relaxed) {
                return Err(Errno::EPERM);
            }
            if session != 0 {
                if arg != 1 || !root {
                    return Err(Errno::EPERM);
                }
                for q in process::all().into_iter().filter(|q| q.sid.load(Relaxed) == session) {
                    q.ctty.store(false, Relaxed);
                }
            }
            if !readable && !root {
                return Err(Errno::EPERM);
            }
            let mut t = TERMINAL.lock();
            t.session = sid;
            t.fg = pgid;
            p.ctty.store(true, Relaxed);
            Ok(0)
        }
        TIOCNOTTY => {
            if !controls(p) {
                return Err(Errno::ENOTTY);
            }
            if sid == pid {
                hang_up(sid, true);
            } else {
                p.ctty.store(false, Relaxed);
            }
            Ok(0)
        }
        _ => Err(Errno::ENOTTY),
    }
}
