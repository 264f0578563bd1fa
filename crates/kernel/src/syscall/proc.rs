//! Process and thread system calls. The program is pid 1 of its VM, as in a
//! container; its threads share everything (clone with CLONE_THREAD); vfork (or clone
//! with CLONE_VFORK) makes a child process that shares the memory but has its own
//! descriptors until it exits, while the parent waits. There is no fork (the address
//! space is never copied) and no execve (one program per VM).

use super::SyscallFrame;
use crate::arch;
use crate::errno::{Errno, SysResult};
use crate::futex::robust;
use crate::kernel::{kernel, Process};
use crate::sched::{self, Spawn, Thread, Wake};
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::layout::USER_END;

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

pub fn getpid(_: &mut SyscallFrame) -> SysResult {
    Ok(sched::current().pid())
}

pub fn gettid(_: &mut SyscallFrame) -> SysResult {
    Ok(sched::current().tid())
}

pub fn getppid(_: &mut SyscallFrame) -> SysResult {
    Ok(sched::current().ppid.load(Relaxed))
}

pub fn set_tid_address(f: &mut SyscallFrame) -> SysResult {
    let t = sched::current();
    t.clear_child_tid.store(f.rdi, Relaxed);
    Ok(t.tid())
}

pub fn arch_prctl(f: &mut SyscallFrame) -> SysResult {
    let [code, addr, ..] = f.args();
    match code {
        ARCH_SET_FS => {
            if addr >= USER_END {
                return Err(Errno::EPERM);
            }
            arch::set_fs_base(addr);
            Ok(0)
        }
        ARCH_GET_FS => {
            let k = kernel();
            arch::copy_to_user(&k.space, addr, &arch::fs_base().to_le_bytes())?;
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

pub fn clone(f: &mut SyscallFrame) -> SysResult {
    let [flags, stack, ptid, ctid, tls, ..] = f.args();
    do_clone(f, flags, stack, ptid, ctid, tls)
}

/// clone3: the argument block is checked and converted by [`super::clone3`].
pub fn clone3(f: &mut SyscallFrame) -> SysResult {
    let [args, size, ..] = f.args();
    let size = size as usize;
    if size > super::clone3::SIZE_MAX {
        return Err(Errno::E2BIG);
    }
    let mut bytes = [0u8; super::clone3::SIZE_MAX];
    let block = bytes.get_mut(..size).ok_or(Errno::EINVAL)?;
    arch::copy_from_user(&kernel().space, args, block)?;
    let c = super::clone3::parse(block)?;
    do_clone(f, c.flags, c.sp, c.parent_tid, c.child_tid, c.tls)
}

pub fn vfork(f: &mut SyscallFrame) -> SysResult {
    do_clone(f, CLONE_VM | CLONE_VFORK | 17, 0, 0, 0, 0)
}

pub fn fork(_: &mut SyscallFrame) -> SysResult {
    // Copying the address space is not offered: threads and vfork are.
    crate::kernel::report_unsupported(57);
    Err(Errno::ENOSYS)
}

fn do_clone(f: &SyscallFrame, flags: u64, stack: u64, ptid: u64, ctid: u64, tls: u64) -> SysResult {
    // Namespaces, pidfds and the rest are refused.
    if flags & !CLONE_KNOWN != 0 {
        return Err(Errno::EINVAL);
    }
    if flags & CLONE_THREAD != 0 && flags & CLONE_SIGHAND == 0 || flags & CLONE_SIGHAND != 0 && flags & CLONE_VM == 0 {
        return Err(Errno::EINVAL);
    }
    if flags & CLONE_VM == 0 {
        crate::kernel::report_unsupported(57);
        return Err(Errno::ENOSYS);
    }
    if flags & CLONE_SETTLS != 0 && tls >= USER_END {
        return Err(Errno::EPERM);
    }
    let me = sched::current();
    let thread = flags & CLONE_THREAD != 0;
    let child = {
        let k = &mut *kernel();
        let parent_pid = me.pid();
        let proc_slot = if thread {
            k.cur().threads += 1;
            me.proc_slot.load(Relaxed)
        } else {
            // A new process: its slot now, its pid (= its first thread's tid) below.
            match k.procs.iter().position(Option::is_none) {
                Some(s) => s,
                None => {
                    k.procs.push(None);
                    k.procs.len() - 1
                }
            }
        };
        let spawn = Spawn {
            pid: parent_pid,
            ppid: if thread { me.ppid.load(Relaxed) } else { parent_pid },
            proc_slot,
            frame: child_frame(f, stack),
            fs_base: if flags & CLONE_SETTLS != 0 { tls } else { arch::fs_base() },
            sigmask: me.sigmask.load(Relaxed),
            leader: !thread,
            affinity: me.affinity(),
        };
        let t = match sched::spawn(spawn, k.space.chunks(), false) {
            Ok(t) => t,
            Err(e) => {
                if thread {
                    k.cur().threads -= 1;
                }
                return Err(e);
            }
        };
        let tid = t.tid();
        if !thread {
            let mut p: Process = k.proc().child(tid);
            if flags & CLONE_VFORK != 0 {
                p.vfork_parent = Some(me);
            }
            k.cur().children += 1;
            k.procs[proc_slot] = Some(p);
        }
        // The tid stores are best effort, as on Linux: a bad pointer is ignored.
        if flags & CLONE_PARENT_SETTID != 0 {
            let _ = arch::copy_to_user(&k.space, ptid, &(tid as u32).to_le_bytes());
        }
        if flags & CLONE_CHILD_SETTID != 0 {
            let _ = arch::copy_to_user(&k.space, ctid, &(tid as u32).to_le_bytes());
        }
        if flags & CLONE_CHILD_CLEARTID != 0 {
            t.clear_child_tid.store(ctid, Relaxed);
        }
        t
    };
    let tid = child.tid();
    if flags & CLONE_VFORK != 0 {
        // Reset before the child can run (and, on another vCPU, exit).
        me.vfork_done.store(false, Relaxed);
    }
    sched::start(child);
    if flags & CLONE_VFORK != 0 {
        // Suspended until the child exits (no execve here: it cannot exec).
        while !me.vfork_done.load(Relaxed) {
            let _ = sched::block(None);
        }
    }
    Ok(tid)
}

/// execve: one program per VM. The path is checked as Linux would (so a missing
/// program is ENOENT, as a shell expects); running another program is not offered.
pub fn execve(f: &mut SyscallFrame) -> SysResult {
    {
        let k = &mut *kernel();
        let path = arch::user_cstr(&k.space, f.rdi, crate::fs::vfs::PATH_MAX - 1)?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let cwd = k.proc().cwd;
        let ino = k.vfs.lookup(cwd, path, true)?;
        if k.vfs.node(ino).is_dir() {
            return Err(Errno::EACCES);
        }
    }
    crate::kernel::report_message_once("onering: execve is not supported (one program per VM)\n");
    Err(Errno::ENOSYS)
}

/// Ends the running thread; the last thread's exit ends its process with `status`.
pub fn exit(f: &mut SyscallFrame) -> SysResult {
    exit_thread(f.rdi & 0xff, false)
}

pub fn exit_group(f: &mut SyscallFrame) -> SysResult {
    exit_thread(f.rdi & 0xff, true)
}

/// Wait status of a normal exit with `code`.
fn exited(code: u64) -> u64 {
    (code & 0xff) << 8
}

fn exit_thread(code: u64, group: bool) -> ! {
    let me = sched::current();
    release_robust_list(me);
    let ctid = me.clear_child_tid.swap(0, Relaxed);
    if ctid != 0 {
        // CHILD_CLEARTID: zero the word and wake one waiter (pthread_join).
        let ok = arch::copy_to_user(&kernel().space, ctid, &0u32.to_le_bytes()).is_ok();
        if ok {
            super::futex::wake(ctid, 1, u32::MAX);
        }
    }
    let last = {
        let k = &mut *kernel();
        let p = k.cur();
        p.threads = p.threads.saturating_sub(1);
        p.threads == 0 || group
    };
    if last {
        end_process(me, exited(code));
    }
    sched::exit_current()
}

/// Ends the process of thread `t` with wait status `status`: for the program itself
/// the VM's exit; a child becomes a zombie for its parent, whose vfork (if any)
/// returns. Its threads other than the caller end; the caller, if it belongs to the
/// process, must end itself.
pub fn end_process(t: &Thread, status: u64) {
    let pid = t.pid();
    let k = &mut *kernel();
    if pid == 1 {
        if status & 0x7f != 0 {
            k.killed(status & 0x7f, 0, 0);
        }
        k.exit(status >> 8);
    }
    let slot = t.proc_slot.load(Relaxed);
    let Some(p) = k.procs.get_mut(slot).and_then(Option::take) else {
        return;
    };
    let ppid = p.ppid;
    if let Some(parent) = k.procs.iter_mut().flatten().find(|q| q.pid == ppid) {
        parent.zombies.push((pid, status));
        parent.children = parent.children.saturating_sub(1);
    }
    // Other threads of the process end with it (they never run again).
    for other in sched::threads_of(pid) {
        if !core::ptr::eq(other, sched::current()) {
            sched::kill_thread(other);
        }
    }
    if let Some(v) = p.vfork_parent {
        v.vfork_done.store(true, Relaxed);
        sched::wake(v);
    }
    sched::wake_all(wait_key(ppid));
    drop(p);
}

/// The wait-queue key of process `pid`'s wait4 callers.
fn wait_key(pid: u64) -> u64 {
    0x7761_6974_0000_0000 | pid
}

pub fn wait4(f: &mut SyscallFrame) -> SysResult {
    let [pid, status, options, rusage, ..] = f.args();
    if options & !(WNOHANG | 0x2 | 0x8 | 0x4000_0000 | 0x8000_0000 | 0x2000_0000) != 0 {
        return Err(Errno::EINVAL);
    }
    let want = pid as i64;
    let me = sched::current();
    loop {
        {
            let k = &mut *kernel();
            let p = k.cur();
            let found = p.zombies.iter().position(|&(z, _)| want == -1 || want == 0 || z as i64 == want);
            if let Some(i) = found {
                let (z, st) = p.zombies[i];
                if status != 0 {
                    arch::copy_to_user(&k.space, status, &(st as u32).to_le_bytes())?;
                }
                if rusage != 0 {
                    arch::copy_to_user(&k.space, rusage, &[0u8; 144])?;
                }
                k.cur().zombies.remove(i);
                return Ok(z);
            }
            if p.children == 0 {
                return Err(Errno::ECHILD);
            }
            if options & WNOHANG != 0 {
                return Ok(0);
            }
            sched::prepare_wait(wait_key(me.pid()));
        }
        let w = sched::block(None);
        sched::finish_wait(wait_key(me.pid()));
        if w == Wake::Interrupted {
            return Err(Errno::ERESTARTSYS);
        }
    }
}

pub fn getuid(_: &mut SyscallFrame) -> SysResult {
    Ok(kernel().uid)
}

pub fn getgid(_: &mut SyscallFrame) -> SysResult {
    Ok(kernel().gid)
}

pub fn sched_yield(_: &mut SyscallFrame) -> SysResult {
    sched::yield_now();
    Ok(0)
}

/// The thread `sched_[gs]etaffinity` name: the caller for 0.
fn affinity_target(pid: u64) -> Result<&'static sched::Thread, Errno> {
    match pid as i32 {
        0 => Ok(sched::current()),
        p if p > 0 => sched::thread(p as u64).ok_or(Errno::ESRCH),
        _ => Err(Errno::EINVAL),
    }
}

pub fn sched_getaffinity(f: &mut SyscallFrame) -> SysResult {
    let [pid, len, mask, ..] = f.args();
    let t = affinity_target(pid)?;
    if len < 8 || len % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    arch::copy_to_user(&kernel().space, mask, &t.affinity().to_le_bytes())?;
    Ok(8)
}

pub fn sched_setaffinity(f: &mut SyscallFrame) -> SysResult {
    let [pid, len, mask, ..] = f.args();
    let t = affinity_target(pid)?;
    // As Linux: a shorter mask is zero-extended, bits beyond the CPUs ignored.
    let mut b = [0u8; 8];
    let n = len.min(8) as usize;
    arch::copy_from_user(&kernel().space, mask, &mut b[..n])?;
    let want = u64::from_le_bytes(b) & sched::online();
    if want == 0 {
        return Err(Errno::EINVAL);
    }
    sched::set_affinity(t, want);
    Ok(0)
}

/// Resource limits: (soft, hard); RLIM_INFINITY is u64::MAX.
fn default_rlimit(resource: u32) -> Option<(u64, u64)> {
    const INF: u64 = u64::MAX;
    Some(match resource {
        3 => (onering_abi::layout::STACK_SIZE, INF), // STACK
        7 => (crate::fs::file::MAX_FDS as u64, crate::fs::file::MAX_FDS as u64), // NOFILE
        0 | 1 | 2 | 4 | 5 | 6 | 8 | 9 | 10 | 11 | 12 | 13 | 14 | 15 => (INF, INF), // the rest
        _ => return None,
    })
}

fn rlimit(resource: u64, new: u64, old: u64) -> SysResult {
    let resource = u32::try_from(resource).map_err(|_| Errno::EINVAL)?;
    let k = &mut *kernel();
    let cur = match k.proc().rlimits.get(&resource) {
        Some(l) => *l,
        None => default_rlimit(resource).ok_or(Errno::EINVAL)?,
    };
    let set = if new != 0 {
        let mut b = [0u8; 16];
        arch::copy_from_user(&k.space, new, &mut b)?;
        let soft = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let hard = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        if soft > hard || hard > cur.1 {
            return Err(if soft > hard { Errno::EINVAL } else { Errno::EPERM });
        }
        Some((soft, hard))
    } else {
        None
    };
    if old != 0 {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&cur.0.to_le_bytes());
        b[8..].copy_from_slice(&cur.1.to_le_bytes());
        arch::copy_to_user(&k.space, old, &b)?;
    }
    if let Some(l) = set {
        k.cur().rlimits.insert(resource, l);
    }
    Ok(0)
}

pub fn getrlimit(f: &mut SyscallFrame) -> SysResult {
    rlimit(f.rdi, 0, f.rsi)
}

pub fn prlimit64(f: &mut SyscallFrame) -> SysResult {
    let [pid, resource, new, old, ..] = f.args();
    if pid != 0 && pid != sched::current().pid() {
        return Err(Errno::ESRCH);
    }
    rlimit(resource, new, old)
}

pub fn uname(f: &mut SyscallFrame) -> SysResult {
    let mut b = [0u8; 65 * 6];
    for (i, field) in
        [&b"Linux"[..], b"onering", b"6.1.0-onering", b"#1 SMP onering", b"x86_64", b"(none)"].iter().enumerate()
    {
        b[i * 65..i * 65 + field.len()].copy_from_slice(field);
    }
    arch::copy_to_user(&kernel().space, f.rdi, &b)?;
    Ok(0)
}

pub fn sysinfo(f: &mut SyscallFrame) -> SysResult {
    let k = kernel();
    let mut b = [0u8; 112];
    let put = |b: &mut [u8], at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut b, 0, k.now_mono() / crate::time::NS_PER_SEC);
    let total = k.space.total_bytes();
    put(&mut b, 32, total);
    put(&mut b, 40, k.space.free_bytes());
    b[80..82].copy_from_slice(&1u16.to_le_bytes()); // procs
    b[104..108].copy_from_slice(&1u32.to_le_bytes()); // mem_unit
    arch::copy_to_user(&k.space, f.rdi, &b)?;
    Ok(0)
}

pub fn getrandom(f: &mut SyscallFrame) -> SysResult {
    let [buf, len, flags, ..] = f.args();
    if flags & !7 != 0 {
        return Err(Errno::EINVAL);
    }
    let k = &mut *kernel();
    let len = len.min(0x7fff_f000);
    let crate::kernel::Kernel { space, rng, .. } = k;
    rng.fill(arch::user_slice_mut(space, buf, len)?);
    Ok(len)
}

pub fn set_robust_list(f: &mut SyscallFrame) -> SysResult {
    if f.rsi != robust::HEAD_SIZE {
        return Err(Errno::EINVAL);
    }
    sched::current().robust_list.store(f.rdi, Relaxed);
    Ok(0)
}

pub fn get_robust_list(f: &mut SyscallFrame) -> SysResult {
    let [tid, head_ptr, len_ptr, ..] = f.args();
    let t = if tid as u32 == 0 { sched::current() } else { sched::thread(tid as u32 as u64).ok_or(Errno::ESRCH)? };
    let k = kernel();
    arch::copy_to_user(&k.space, head_ptr, &t.robust_list.load(Relaxed).to_le_bytes())?;
    arch::copy_to_user(&k.space, len_ptr, &robust::HEAD_SIZE.to_le_bytes())?;
    Ok(0)
}

/// A thread ends: each robust mutex it still holds becomes OWNER_DIED and one
/// waiter is woken (see [`crate::futex::robust`]). Bad pointers end the walk.
fn release_robust_list(me: &Thread) {
    let head = me.robust_list.swap(0, Relaxed);
    if head == 0 {
        return;
    }
    let tid = me.tid() as u32;
    let words = {
        let k = kernel();
        robust::words(head, |a| arch::read_user_u64(&k.space, a).ok())
    };
    for w in words {
        let old = arch::thread::user_update_u32(&kernel().space, w, |old| robust::owner_died(old, tid).unwrap_or(old));
        if let Ok(old) = old {
            if robust::owner_died(old, tid).is_some() && old & robust::FUTEX_WAITERS != 0 {
                super::futex::wake(w, 1, u32::MAX);
            }
        }
    }
}

/// Restartable sequences are not offered; C libraries expect ENOSYS and carry on,
/// so this one is not reported as unsupported.
pub fn rseq(_: &mut SyscallFrame) -> SysResult {
    Err(Errno::ENOSYS)
}

const PR_SET_NAME: u64 = 15;
const PR_GET_NAME: u64 = 16;
const PR_GET_DUMPABLE: u64 = 3;
const PR_SET_DUMPABLE: u64 = 4;
const PR_SET_NO_NEW_PRIVS: u64 = 38;
const PR_GET_NO_NEW_PRIVS: u64 = 39;

pub fn prctl(f: &mut SyscallFrame) -> SysResult {
    let [option, arg2, ..] = f.args();
    let k = &mut *kernel();
    match option {
        PR_SET_NAME => {
            let mut name = [0u8; 16];
            let s = arch::user_cstr(&k.space, arg2, 4095)?;
            let n = s.len().min(15);
            name[..n].copy_from_slice(&s[..n]);
            k.comm = name;
            Ok(0)
        }
        PR_GET_NAME => {
            let name = k.comm;
            arch::copy_to_user(&k.space, arg2, &name)?;
            Ok(0)
        }
        PR_GET_DUMPABLE => Ok(1),
        PR_SET_DUMPABLE if arg2 <= 1 => Ok(0),
        PR_SET_NO_NEW_PRIVS if arg2 == 1 => Ok(0),
        PR_GET_NO_NEW_PRIVS => Ok(1),
        // Everything else, PR_SET_VMA included (Go copes with EINVAL there).
        _ => Err(Errno::EINVAL),
    }
}
