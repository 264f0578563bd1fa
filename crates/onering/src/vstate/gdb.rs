//! The gdb stub (`--gdb ADDR`): gdb attaches over TCP before the program's first
//! instruction and sees the program's threads, registers and memory; the protocol
//! is the `gdbstub` crate's, this file is the target it drives.
//!
//! Stops. A breakpoint is an `int3` written into the program's memory; KVM's own
//! debugging (KVM_SET_GUEST_DEBUG) does not reach ring 3 under PVM (design.md), so
//! the guest kernel's exception hook forwards the program's #BP and #DB to the VMM
//! (`Hostcall::Debug`, with the thread's registers and a list of every live
//! thread). The vCPU that brings one stops every other vCPU (all-stop: `paused`,
//! then the profiler's signal until none is in KVM_RUN; each parks at the top of
//! its run loop with its registers saved), tells the gdb thread, and waits until gdb
//! resumes; its answer (continue or step, a signal, changed registers) goes back to
//! the kernel, which returns to the program with `iretq` and the trap flag for a
//! step. All vCPUs stop and go on together.
//!
//! Threads are the guest kernel's, not vCPUs: the stopped one's registers come from
//! the hostcall; a thread running the program on another vCPU has them in that
//! vCPU (as it parked); any other thread is in the kernel, and its way in (a system
//! call, an exception or an interrupt) left the program's registers at the top of
//! its kernel stack, which the VMM reads (`frame_regs`).
//!
//! Memory goes through the stopped vCPU's page tables (`arch::paging`, every entry
//! checked). Before the program runs, thread 1 is the program at its entry point,
//! and memory is read through the boot tables, where the VMM mapped the program.
//!
//! A single step into a rewritten system-call site enters the trampoline and, at
//! its last jump, the kernel: the kernel reports that (#DB at a kernel address), the
//! VMM plants a hidden breakpoint where the call returns (`rcx`), and the step ends
//! there, after the call. Nothing the guest hands over is trusted: addresses are
//! translated and checked, counts capped, and a failed read is an error to gdb.

use super::machine::Machine;
use crate::arch::paging;
use crate::exit::Outcome;
use crate::sys::signals;
use gdbstub::common::{Signal, Tid};
use gdbstub::conn::ConnectionExt;
use gdbstub::stub::{run_blocking, DisconnectReason, GdbStub, MultiThreadStopReason};
use gdbstub::target::ext::base::multithread::{
    MultiThreadBase, MultiThreadResume, MultiThreadSchedulerLocking, MultiThreadSingleStep,
};
use gdbstub::target::ext::base::BaseOps;
use gdbstub::target::ext::breakpoints::{Breakpoints, SwBreakpoint};
use gdbstub::target::{Target, TargetError, TargetResult};
use gdbstub_arch::x86::reg::X86_64CoreRegs;
use kvm_ioctls::VcpuFd;
use onering_abi::debug::{self, Regs, Thread};
use onering_abi::layout::{BOOT_PT_PHYS, KERNEL_VBASE};
use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;
use vm_memory::GuestMemoryMmap;

/// The program's half ends here; kernel stacks and code lie above.
const USER_END: u64 = 1 << 47;
const ENODEV: i64 = -19;
const EFAULT: i64 = -14;
const EINVAL: i64 = -22;
const TRAP_FLAG: u64 = 0x100;
const NONE: u64 = u64::MAX;

/// What the gdb thread hears from the vCPUs.
enum Event {
    Stopped(MultiThreadStopReason<u64>),
    Ended(MultiThreadStopReason<u64>),
}

/// A vCPU parked at the top of its run loop while the VM is stopped.
#[derive(Clone, Copy)]
struct Parked {
    regs: kvm_bindings::kvm_regs,
    fs_base: u64,
    /// gdb changed `regs` (or asked for a step): set them before running.
    changed: bool,
}

/// The stop being looked at: the thread that brought it, as the hostcall said.
struct Stop {
    cpu: u64,
    tid: u64,
    regs: Regs,
}

/// A step into a system call (through a rewritten site) ends at `at`, where
/// the call returns: an `int3` there (over `byte`) for thread `tid`.
#[derive(Clone, Copy)]
struct StepReturn {
    at: u64,
    byte: u8,
    tid: u64,
}

/// What gdb asked of one thread for the next resume.
#[derive(Clone, Copy)]
struct Action {
    step: bool,
    signal: u64,
}

#[derive(Default)]
struct State {
    /// Bumped by every resume; the stopped vCPU waits for it.
    resumes: u64,
    /// gdb asked that only the threads it named run (scheduler locking).
    locked: bool,
    parked: Vec<Option<Parked>>,
    stop: Option<Stop>,
    /// The stopped thread's answer, once gdb resumed: its registers and the
    /// hostcall's result.
    answer: Option<(Regs, u64)>,
    actions: BTreeMap<u64, Action>,
    /// Every live thread, as of the last stop the guest reported.
    threads: Vec<Thread>,
    /// The page tables memory goes through: the stopped vCPU's.
    root: u64,
    /// Before the program's first instruction: its entry state (thread 1).
    initial: Option<Regs>,
    /// gdb's breakpoints: address and the byte the `int3` replaced.
    breakpoints: BTreeMap<u64, u8>,
    /// The hidden breakpoint where a stepped system call returns.
    step_return: Option<StepReturn>,
    /// A thread that hit `step_return` while another one is stepping: it runs the
    /// instruction under it with the trap flag, then the breakpoint goes back.
    passing: Option<u64>,
}

#[derive(Default)]
struct Slot {
    /// The vCPU thread's handle (0: not running yet).
    thread: AtomicU64,
    in_guest: AtomicBool,
}

pub struct Debugger {
    mem: GuestMemoryMmap,
    cpus: Vec<Slot>,
    /// Every vCPU is to stay out of the guest...
    paused: AtomicBool,
    /// ...but this one ([`NONE`]: none): gdb steps one thread with the others
    /// held (scheduler locking, as gdb asks when it steps over a breakpoint).
    runner: AtomicU64,
    /// gdb left: traps are the program's again.
    detached: AtomicBool,
    st: Mutex<State>,
    cv: Condvar,
    /// One stop at a time (a second vCPU's waits, then stops the VM again).
    stopper: Mutex<()>,
    events: Sender<Event>,
    /// Set by the gdb thread once it told gdb how the program ended.
    told_end: Mutex<bool>,
    told_cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Listens on `addr` for gdb (before the VM is built, so a bad address is an
/// error before anything runs).
pub fn listen(addr: &str) -> Result<TcpListener, String> {
    TcpListener::bind(addr).map_err(|e| format!("--gdb {addr}: cannot listen: {e}"))
}

impl Debugger {
    /// Waits for gdb on `listener`, then serves it on a thread of its own. The VM
    /// starts stopped: vCPU 0 parks before the kernel's first instruction until gdb
    /// continues; the program is thread 1 at `entry` with stack `sp`.
    pub fn attach(
        machine: &'static Machine,
        listener: &TcpListener,
        ncpus: u64,
        entry: u64,
        sp: u64,
    ) -> Result<&'static Debugger, String> {
        let (tx, rx) = mpsc::channel();
        let d: &'static Debugger = Box::leak(Box::new(Debugger {
            mem: machine.mem.clone(),
            cpus: (0..ncpus).map(|_| Slot::default()).collect(),
            paused: AtomicBool::new(true),
            runner: AtomicU64::new(NONE),
            detached: AtomicBool::new(false),
            st: Mutex::new(State {
                parked: vec![None; ncpus as usize],
                root: BOOT_PT_PHYS,
                initial: Some(Regs { rip: entry, rsp: sp, rflags: 0x202, ..Regs::default() }),
                ..State::default()
            }),
            cv: Condvar::new(),
            stopper: Mutex::new(()),
            events: tx,
            told_end: Mutex::new(false),
            told_cv: Condvar::new(),
        }));
        signals::install_sample_signal();
        let shown = listener.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
        eprintln!("onering: waiting for gdb on {shown} (gdb PROGRAM -ex 'target remote {shown}')");
        let (conn, _) = listener.accept().map_err(|e| format!("--gdb: cannot accept a connection: {e}"))?;
        let _ = conn.set_nodelay(true);
        std::thread::Builder::new()
            .name("gdb".into())
            .spawn(move || {
                signals::block_forwarded();
                d.serve(machine, conn, rx)
            })
            .map_err(|e| format!("--gdb: cannot start its thread: {e}"))?;
        Ok(d)
    }

    /// The gdb thread: the protocol until gdb leaves or the program ends.
    fn serve(&'static self, machine: &'static Machine, conn: TcpStream, rx: Receiver<Event>) {
        let mut target = GdbTarget { d: self, rx };
        let ended = match GdbStub::new(conn).run_blocking::<EventLoop>(&mut target) {
            Ok(DisconnectReason::Kill) => {
                machine.end_from_debugger(Outcome::Killed { signal: 9, rip: 0, addr: 0 });
            }
            Ok(DisconnectReason::TargetExited(_) | DisconnectReason::TargetTerminated(_)) => true,
            Ok(DisconnectReason::Disconnect) => false,
            Err(e) => {
                eprintln!("onering: gdb: {e}");
                false
            }
        };
        if ended {
            *lock(&self.told_end) = true;
            self.told_cv.notify_all();
            return;
        }
        // gdb left: its breakpoints go, traps are the program's own again, and the
        // VM runs on.
        self.detached.store(true, SeqCst);
        let mut st = lock(&self.st);
        let bps: Vec<(u64, u8)> = std::mem::take(&mut st.breakpoints).into_iter().collect();
        let hidden = st.step_return.take().map(|r| (r.at, r.byte));
        for (at, byte) in bps.into_iter().chain(hidden) {
            let _ = paging::write_guest_in(&self.mem, st.root, at, &[byte]);
        }
        st.actions.clear();
        if let Some(s) = &st.stop {
            // The stopped thread goes on where gdb left it.
            st.answer = Some((s.regs, debug::resume::CONTINUE));
        }
        drop(st);
        self.resume(None);
    }

    /// vCPU `cpu` is about to enter the guest: parks first while the VM is
    /// stopped. Called at the top of its run loop, on its thread.
    pub fn enter(&self, cpu: u64, vcpu: &mut VcpuFd) {
        let Some(slot) = self.cpus.get(cpu as usize) else { return };
        if slot.thread.load(SeqCst) == 0 {
            slot.thread.store(signals::this_thread(), SeqCst);
        }
        loop {
            if self.must_wait(cpu) {
                self.park(cpu, vcpu);
            }
            slot.in_guest.store(true, SeqCst);
            if !self.must_wait(cpu) {
                return;
            }
            slot.in_guest.store(false, SeqCst);
        }
    }

    /// Whether vCPU `cpu` must stay out of the guest now.
    fn must_wait(&self, cpu: u64) -> bool {
        self.paused.load(SeqCst) && self.runner.load(SeqCst) != cpu
    }

    /// vCPU `cpu` left the guest.
    pub fn leave(&self, cpu: u64) {
        if let Some(slot) = self.cpus.get(cpu as usize) {
            slot.in_guest.store(false, SeqCst);
        }
    }

    /// Waits out a stop with the vCPU's registers on show; sets them again if gdb
    /// changed them (or asked this vCPU's thread to step).
    fn park(&self, cpu: u64, vcpu: &mut VcpuFd) {
        let regs = vcpu.get_regs().unwrap_or_default();
        let fs_base = vcpu.get_sregs().map_or(0, |s| s.fs.base);
        let mut st = lock(&self.st);
        let at = cpu as usize;
        if let Some(p) = st.parked.get_mut(at) {
            *p = Some(Parked { regs, fs_base, changed: false });
        }
        while self.must_wait(cpu) {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(Some(p)) = st.parked.get_mut(at).map(Option::take) {
            if p.changed {
                let _ = vcpu.set_regs(&p.regs);
            }
        }
    }

    /// Keeps every vCPU out of the guest: returns once none is in KVM_RUN.
    fn stop_all(&self) {
        self.paused.store(true, SeqCst);
        self.runner.store(NONE, SeqCst);
        loop {
            let mut running = false;
            for slot in &self.cpus {
                if slot.in_guest.load(SeqCst) {
                    running = true;
                    let t = slot.thread.load(SeqCst);
                    if t != 0 {
                        signals::interrupt_thread(t);
                    }
                }
            }
            if !running {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Lets every vCPU run again (gdb's resume, or its leaving), or only `only`
    /// (the stopped thread's, when gdb locked the others).
    fn resume(&self, only: Option<u64>) {
        let mut st = lock(&self.st);
        st.resumes += 1;
        st.initial = None;
        match only {
            Some(cpu) => self.runner.store(cpu, SeqCst),
            None => self.paused.store(false, SeqCst),
        }
        drop(st);
        self.cv.notify_all();
    }

    /// The `Debug` hostcall on vCPU `cpu` (page tables at `root`): reports the
    /// stop to gdb, waits for its answer, writes the registers back. The result
    /// for the guest, or -errno.
    pub fn stop(&self, cpu: u64, root: u64, args: [u64; 6]) -> i64 {
        if self.detached.load(SeqCst) {
            return ENODEV;
        }
        let [vector, regs_at, threads_at, count, tid, _] = args;
        if vector != debug::VECTOR_DEBUG && vector != debug::VECTOR_BREAKPOINT {
            return EINVAL;
        }
        let Some(mut regs) = read_regs(&self.mem, root, regs_at) else { return EFAULT };
        // A finished step's trap flag is the debugger's, not the program's.
        regs.rflags &= !TRAP_FLAG;
        let _one = lock(&self.stopper);
        if let Some(quiet) = self.step_return(root, vector, tid, &mut regs) {
            return match write_regs(&self.mem, root, regs_at, &regs) {
                Some(()) => quiet as i64,
                None => EFAULT,
            };
        }
        let Some(threads) = read_threads(&self.mem, root, threads_at, count) else { return EFAULT };
        let reason = {
            let st = lock(&self.st);
            let at = regs.rip.wrapping_sub(1);
            if vector == debug::VECTOR_BREAKPOINT && st.breakpoints.contains_key(&at) {
                regs.rip = at;
                MultiThreadStopReason::SwBreak(tid_of(tid))
            } else {
                // A finished step, or the program's own int3 (SIGTRAP, as Linux).
                MultiThreadStopReason::SignalWithThread { tid: tid_of(tid), signal: Signal::SIGTRAP }
            }
        };
        self.stop_all();
        let seen = {
            let mut st = lock(&self.st);
            st.stop = Some(Stop { cpu, tid, regs });
            st.threads = threads;
            st.root = root;
            st.answer = None;
            st.resumes
        };
        if self.events.send(Event::Stopped(reason)).is_err() {
            self.resume(None);
            return ENODEV;
        }
        let mut st = lock(&self.st);
        while st.resumes == seen {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.stop = None;
        let Some((regs, ret)) = st.answer.take() else { return ENODEV };
        drop(st);
        if write_regs(&self.mem, root, regs_at, &regs).is_none() {
            return EFAULT;
        }
        ret as i64
    }

    /// The hidden breakpoint of a step into a system call: what the thread does
    /// next without stopping the VM (`Some`), or `None` for a stop gdb hears of
    /// (with `regs` moved back onto the breakpoint if it was that one).
    fn step_return(&self, root: u64, vector: u64, tid: u64, regs: &mut Regs) -> Option<u64> {
        let mut st = lock(&self.st);
        let mem = &self.mem;
        if vector == debug::VECTOR_DEBUG && regs.rip >= KERNEL_VBASE {
            // A step ran into the kernel through a rewritten site: it ends where
            // the call returns (a system call's: rcx, as the trampoline left it; a
            // `cpuid`'s: the return address its `call` pushed on the kernel stack).
            if let Some(r) = st.step_return.take() {
                let _ = paging::write_guest_in(mem, root, r.at, &[r.byte]);
            }
            let at = if regs.rip == crate::embedded::cpuid_entry() {
                paging::read_guest_in(mem, root, regs.rsp, 8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(u64::MAX, u64::from_le_bytes)
            } else {
                regs.rcx
            };
            st.step_return =
                (at < USER_END).then(|| plant(mem, root, at)).flatten().map(|byte| StepReturn { at, byte, tid });
            return Some(debug::resume::CONTINUE);
        }
        if vector == debug::VECTOR_DEBUG && st.passing == Some(tid) {
            // Past the hidden breakpoint: it goes back for the stepping thread.
            st.passing = None;
            if let Some(r) = st.step_return {
                let _ = paging::write_guest_in(mem, root, r.at, &[0xcc]);
            }
            return Some(debug::resume::CONTINUE);
        }
        let r = st.step_return.filter(|r| vector == debug::VECTOR_BREAKPOINT && r.at == regs.rip.wrapping_sub(1))?;
        let _ = paging::write_guest_in(mem, root, r.at, &[r.byte]);
        regs.rip = r.at;
        if r.tid == tid {
            st.step_return = None;
            return None;
        }
        st.passing = Some(tid);
        Some(debug::resume::STEP)
    }

    /// The VM ends with `outcome`: gdb hears how (waits a little for the gdb thread
    /// to say so; a gdb that does not read cannot keep the VMM alive).
    pub fn ended(&self, outcome: &Outcome) {
        if self.detached.load(SeqCst) {
            return;
        }
        let reason = match outcome {
            Outcome::Exited(code) => MultiThreadStopReason::Exited(*code),
            Outcome::Killed { signal, .. } | Outcome::Stopped(signal) => {
                MultiThreadStopReason::Terminated(gdb_signal(*signal))
            }
            _ => MultiThreadStopReason::Terminated(Signal::SIGKILL),
        };
        if self.events.send(Event::Ended(reason)).is_err() {
            return;
        }
        let mut told = lock(&self.told_end);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !*told {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            told = self.told_cv.wait_timeout(told, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Thread `tid`'s registers, wherever they are (see the module note).
    fn thread_regs(&self, st: &State, tid: u64) -> Option<Regs> {
        if let Some(r) = st.initial {
            return (tid == 1).then_some(r);
        }
        if let Some(s) = st.stop.as_ref().filter(|s| s.tid == tid) {
            return Some(s.regs);
        }
        if st.threads.is_empty() {
            // Ctrl-C before the guest ever reported a stop: thread 1 is the first
            // vCPU found running the program.
            let p = st.parked.iter().flatten().find(|p| p.regs.rip < USER_END && p.regs.rsp < USER_END);
            return p.filter(|_| tid == 1).map(|p| from_kvm(&p.regs, p.fs_base));
        }
        let t = st.threads.iter().find(|t| t.tid == tid)?;
        if let Some(p) = parked_in_program(st, t) {
            return Some(from_kvm(&p.regs, p.fs_base));
        }
        let words = read_words(&self.mem, BOOT_PT_PHYS, t.kstack_top.checked_sub(FAULT_WORDS as u64 * 8)?)?;
        Some(frame_regs(&words))
    }

    /// The threads gdb lists.
    fn tids(&self) -> Vec<u64> {
        let st = lock(&self.st);
        if st.initial.is_some() || st.threads.is_empty() {
            return vec![1];
        }
        st.threads.iter().map(|t| t.tid).collect()
    }
}

/// The parked vCPU running thread `t`'s program code, if one does.
fn parked_in_program<'a>(st: &'a State, t: &Thread) -> Option<&'a Parked> {
    let p = st.parked.get(usize::try_from(t.cpu).ok()?)?.as_ref()?;
    (p.regs.rip < USER_END && p.regs.rsp < USER_END).then_some(p)
}

fn parked_in_program_mut(st: &mut State, tid: u64) -> Option<&mut Parked> {
    let cpu = st.threads.iter().find(|t| t.tid == tid)?.cpu;
    let p = st.parked.get_mut(usize::try_from(cpu).ok()?)?.as_mut()?;
    (p.regs.rip < USER_END && p.regs.rsp < USER_END).then_some(p)
}

fn tid_of(tid: u64) -> Tid {
    Tid::new(tid as usize).unwrap_or(Tid::MIN)
}

/// Writes an `int3` at `at`: the byte it replaced.
fn plant(mem: &GuestMemoryMmap, root: u64, at: u64) -> Option<u8> {
    let old = *paging::read_guest_in(mem, root, at, 1)?.first()?;
    paging::write_guest_in(mem, root, at, &[0xcc])?;
    Some(old)
}

/// Words of the frame at the top of a kernel stack (a `FaultFrame`'s 22; a
/// system-call frame is the top 16 of them).
const FAULT_WORDS: usize = 22;
const SYSCALL_WORDS: usize = 16;

fn read_words(mem: &GuestMemoryMmap, root: u64, at: u64) -> Option<[u64; FAULT_WORDS]> {
    let bytes = paging::read_guest_in(mem, root, at, FAULT_WORDS as u64 * 8)?;
    let mut w = [0u64; FAULT_WORDS];
    for (o, c) in w.iter_mut().zip(bytes.chunks_exact(8)) {
        *o = u64::from_le_bytes(c.try_into().ok()?);
    }
    Some(w)
}

/// The program's registers from the words at the top of a thread's kernel stack.
/// An exception or interrupt left a `FaultFrame` there (ss in the last word, a
/// small selector); a system call left a `SyscallFrame` (the user stack pointer in
/// the last word, never below 64 KiB), whose rcx and r11 are rip and rflags, as
/// `syscall` leaves them. Garbage in, garbage registers out: nothing else.
fn frame_regs(w: &[u64; FAULT_WORDS]) -> Regs {
    if w[FAULT_WORDS - 1] < 0x10000 {
        // r15 r14 r13 r12 r11 r10 r9 r8 rbp rdi rsi rdx rcx rbx rax vector error
        // rip cs rflags rsp ss
        return Regs {
            r15: w[0],
            r14: w[1],
            r13: w[2],
            r12: w[3],
            r11: w[4],
            r10: w[5],
            r9: w[6],
            r8: w[7],
            rbp: w[8],
            rdi: w[9],
            rsi: w[10],
            rdx: w[11],
            rcx: w[12],
            rbx: w[13],
            rax: w[14],
            rip: w[17],
            rflags: w[19],
            rsp: w[20],
            fs_base: 0,
        };
    }
    // r15 r14 r13 r12 rbp rbx r9 r8 r10 rdx rsi rdi rax rip rflags rsp
    let s = &w[FAULT_WORDS - SYSCALL_WORDS..];
    Regs {
        r15: s[0],
        r14: s[1],
        r13: s[2],
        r12: s[3],
        rbp: s[4],
        rbx: s[5],
        r9: s[6],
        r8: s[7],
        r10: s[8],
        rdx: s[9],
        rsi: s[10],
        rdi: s[11],
        rax: s[12],
        rip: s[13],
        rcx: s[13],
        rflags: s[14],
        r11: s[14],
        rsp: s[15],
        fs_base: 0,
    }
}

const REGS_WORDS: usize = std::mem::size_of::<Regs>() / 8;

fn read_regs(mem: &GuestMemoryMmap, root: u64, at: u64) -> Option<Regs> {
    let b = paging::read_guest_in(mem, root, at, REGS_WORDS as u64 * 8)?;
    let w: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
    let w: [u64; REGS_WORDS] = w.try_into().ok()?;
    let [r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags, fs_base] = w;
    Some(Regs { r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, rflags, fs_base })
}

fn write_regs(mem: &GuestMemoryMmap, root: u64, at: u64, r: &Regs) -> Option<()> {
    let w = [
        r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, r.rdx, r.rax, r.rcx, r.rsp,
        r.rip, r.rflags, r.fs_base,
    ];
    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
    paging::write_guest_in(mem, root, at, &bytes)
}

fn read_threads(mem: &GuestMemoryMmap, root: u64, at: u64, count: u64) -> Option<Vec<Thread>> {
    let n = count.min(debug::MAX_THREADS as u64);
    let b = paging::read_guest_in(mem, root, at, n * std::mem::size_of::<Thread>() as u64)?;
    let w: Vec<u64> = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
    Some(
        w.chunks_exact(5)
            .map(|t| Thread { tid: t[0], pid: t[1], cpu: t[2], kstack_top: t[3], state: t[4] })
            .filter(|t| t.tid != 0)
            .collect(),
    )
}

fn from_kvm(k: &kvm_bindings::kvm_regs, fs_base: u64) -> Regs {
    Regs {
        r8: k.r8,
        r9: k.r9,
        r10: k.r10,
        r11: k.r11,
        r12: k.r12,
        r13: k.r13,
        r14: k.r14,
        r15: k.r15,
        rdi: k.rdi,
        rsi: k.rsi,
        rbp: k.rbp,
        rbx: k.rbx,
        rdx: k.rdx,
        rax: k.rax,
        rcx: k.rcx,
        rsp: k.rsp,
        rip: k.rip,
        rflags: k.rflags,
        fs_base,
    }
}

fn to_kvm(r: &Regs, k: &mut kvm_bindings::kvm_regs) {
    (k.r8, k.r9, k.r10, k.r11, k.r12, k.r13, k.r14, k.r15) = (r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15);
    (k.rdi, k.rsi, k.rbp, k.rbx, k.rdx, k.rax, k.rcx, k.rsp) = (r.rdi, r.rsi, r.rbp, r.rbx, r.rdx, r.rax, r.rcx, r.rsp);
    (k.rip, k.rflags) = (r.rip, r.rflags);
}

fn to_gdb(r: &Regs, g: &mut X86_64CoreRegs) {
    g.regs =
        [r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15];
    g.rip = r.rip;
    g.eflags = r.rflags as u32;
    g.segments.cs = u32::from(onering_abi::layout::USER_CS);
    g.segments.ss = u32::from(onering_abi::layout::USER_CS - 8);
}

/// gdb's registers over `r`; the flags gdb may not change (IF, IOPL, VM...) keep
/// their values: only the arithmetic flags, TF, DF and AC come from gdb.
fn from_gdb(g: &X86_64CoreRegs, r: &mut Regs) {
    let [rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp, r8, r9, r10, r11, r12, r13, r14, r15] = g.regs;
    (r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp) = (rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp);
    (r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15) = (r8, r9, r10, r11, r12, r13, r14, r15);
    r.rip = g.rip;
    const MAY_CHANGE: u64 = 0x4_0dd5;
    r.rflags = (r.rflags & !MAY_CHANGE) | (u64::from(g.eflags) & MAY_CHANGE);
}

/// Linux's number of gdb's signal (the common ones; 0 for the rest).
fn linux_signal(s: Signal) -> u64 {
    match s.0 {
        n @ (1..=6 | 8 | 9 | 11 | 13..=15) => u64::from(n),
        10 => 7,  // SIGBUS
        30 => 10, // SIGUSR1
        31 => 12, // SIGUSR2
        _ => 0,
    }
}

/// gdb's number of a Linux signal.
fn gdb_signal(s: u64) -> Signal {
    Signal(match s {
        n @ (1..=6 | 8 | 9 | 11 | 13..=15) => n as u8,
        7 => 10,
        10 => 30,
        12 => 31,
        _ => 143, // GDB_SIGNAL_UNKNOWN
    })
}

/// What gdbstub drives.
struct GdbTarget {
    d: &'static Debugger,
    rx: Receiver<Event>,
}

fn nonfatal<T>(v: Option<T>) -> TargetResult<T, GdbTarget> {
    v.ok_or(TargetError::NonFatal)
}

impl Target for GdbTarget {
    type Arch = gdbstub_arch::x86::X86_64_SSE;
    type Error = String;

    fn base_ops(&mut self) -> BaseOps<'_, Self::Arch, Self::Error> {
        BaseOps::MultiThread(self)
    }

    fn support_breakpoints(&mut self) -> Option<gdbstub::target::ext::breakpoints::BreakpointsOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadBase for GdbTarget {
    fn read_registers(&mut self, regs: &mut X86_64CoreRegs, tid: Tid) -> TargetResult<(), Self> {
        let st = lock(&self.d.st);
        let r = nonfatal(self.d.thread_regs(&st, tid.get() as u64))?;
        to_gdb(&r, regs);
        Ok(())
    }

    /// Registers change for the stopped thread and for threads running the
    /// program on a vCPU; a thread inside the kernel keeps its own.
    fn write_registers(&mut self, regs: &X86_64CoreRegs, tid: Tid) -> TargetResult<(), Self> {
        let tid = tid.get() as u64;
        let mut st = lock(&self.d.st);
        if let Some(s) = st.stop.as_mut().filter(|s| s.tid == tid) {
            from_gdb(regs, &mut s.regs);
            return Ok(());
        }
        let p = nonfatal(parked_in_program_mut(&mut st, tid))?;
        let mut r = from_kvm(&p.regs, p.fs_base);
        from_gdb(regs, &mut r);
        to_kvm(&r, &mut p.regs);
        p.changed = true;
        Ok(())
    }

    fn read_addrs(&mut self, start: u64, data: &mut [u8], _tid: Tid) -> TargetResult<usize, Self> {
        let root = lock(&self.d.st).root;
        // Page by page: as much as translates.
        let mut done = 0;
        while done < data.len() {
            let at = start.wrapping_add(done as u64);
            let Some((_, left)) = paging::translate(&self.d.mem, root, at) else { break };
            let n = (left as usize).min(data.len() - done);
            let Some(b) = paging::read_guest_in(&self.d.mem, root, at, n as u64) else { break };
            data[done..done + n].copy_from_slice(&b);
            done += n;
        }
        if done == 0 && !data.is_empty() {
            return Err(TargetError::NonFatal);
        }
        Ok(done)
    }

    fn write_addrs(&mut self, start: u64, data: &[u8], _tid: Tid) -> TargetResult<(), Self> {
        let root = lock(&self.d.st).root;
        nonfatal(paging::write_guest_in(&self.d.mem, root, start, data))
    }

    fn list_active_threads(&mut self, f: &mut dyn FnMut(Tid)) -> Result<(), Self::Error> {
        for t in self.d.tids() {
            if let Some(t) = Tid::new(t as usize) {
                f(t);
            }
        }
        Ok(())
    }

    fn support_resume(&mut self) -> Option<gdbstub::target::ext::base::multithread::MultiThreadResumeOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadResume for GdbTarget {
    fn resume(&mut self) -> Result<(), Self::Error> {
        let d = self.d;
        let mut st = lock(&d.st);
        let actions = std::mem::take(&mut st.actions);
        // Threads running the program on a parked vCPU step with the trap flag.
        for &tid in actions.iter().filter(|(_, a)| a.step).map(|(t, _)| t) {
            if st.stop.as_ref().is_some_and(|s| s.tid == tid) {
                continue;
            }
            if let Some(p) = parked_in_program_mut(&mut st, tid) {
                p.regs.rflags |= TRAP_FLAG;
                p.changed = true;
            }
        }
        // A step into a system call that gdb no longer waits for (it resumes that
        // thread without stepping) is dropped, as Linux drops the trap flag.
        if let Some(r) = st.step_return.filter(|r| !actions.get(&r.tid).is_some_and(|a| a.step)) {
            let _ = paging::write_guest_in(&d.mem, st.root, r.at, &[r.byte]);
            st.step_return = None;
        }
        let mut only = None;
        let locked = std::mem::take(&mut st.locked);
        if let Some((cpu, tid, regs)) = st.stop.as_ref().map(|s| (s.cpu, s.tid, s.regs)) {
            let a = actions.get(&tid).copied().unwrap_or(Action { step: false, signal: 0 });
            let how = if a.step { debug::resume::STEP } else { debug::resume::CONTINUE };
            st.answer = Some((regs, how | a.signal << 8));
            if locked && actions.keys().all(|&t| t == tid) {
                only = Some(cpu);
            }
        }
        drop(st);
        d.resume(only);
        Ok(())
    }

    fn clear_resume_actions(&mut self) -> Result<(), Self::Error> {
        let mut st = lock(&self.d.st);
        st.actions.clear();
        st.locked = false;
        Ok(())
    }

    fn set_resume_action_continue(&mut self, tid: Tid, signal: Option<Signal>) -> Result<(), Self::Error> {
        let signal = signal.map_or(0, linux_signal);
        lock(&self.d.st).actions.insert(tid.get() as u64, Action { step: false, signal });
        Ok(())
    }

    fn support_single_step(
        &mut self,
    ) -> Option<gdbstub::target::ext::base::multithread::MultiThreadSingleStepOps<'_, Self>> {
        Some(self)
    }

    fn support_scheduler_locking(
        &mut self,
    ) -> Option<gdbstub::target::ext::base::multithread::MultiThreadSchedulerLockingOps<'_, Self>> {
        Some(self)
    }
}

impl MultiThreadSchedulerLocking for GdbTarget {
    /// Only the named threads run: the VMM runs the stopped thread's vCPU alone
    /// (a step over a breakpoint); other vCPUs stay parked.
    fn set_resume_action_scheduler_lock(&mut self) -> Result<(), Self::Error> {
        lock(&self.d.st).locked = true;
        Ok(())
    }
}

impl MultiThreadSingleStep for GdbTarget {
    fn set_resume_action_step(&mut self, tid: Tid, signal: Option<Signal>) -> Result<(), Self::Error> {
        let signal = signal.map_or(0, linux_signal);
        lock(&self.d.st).actions.insert(tid.get() as u64, Action { step: true, signal });
        Ok(())
    }
}

impl Breakpoints for GdbTarget {
    fn support_sw_breakpoint(&mut self) -> Option<gdbstub::target::ext::breakpoints::SwBreakpointOps<'_, Self>> {
        Some(self)
    }
}

impl SwBreakpoint for GdbTarget {
    fn add_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        let mut st = lock(&self.d.st);
        if st.breakpoints.contains_key(&addr) {
            return Ok(true);
        }
        let Some(old) = plant(&self.d.mem, st.root, addr) else { return Ok(false) };
        st.breakpoints.insert(addr, old);
        Ok(true)
    }

    fn remove_sw_breakpoint(&mut self, addr: u64, _kind: usize) -> TargetResult<bool, Self> {
        let mut st = lock(&self.d.st);
        let Some(old) = st.breakpoints.remove(&addr) else { return Ok(false) };
        Ok(paging::write_guest_in(&self.d.mem, st.root, addr, &[old]).is_some())
    }
}

/// gdbstub's loop while the VM runs: a stop or the end from a vCPU, or a byte
/// from gdb (Ctrl-C), whichever comes first.
enum EventLoop {}

impl run_blocking::BlockingEventLoop for EventLoop {
    type Target = GdbTarget;
    type Connection = TcpStream;
    type StopReason = MultiThreadStopReason<u64>;

    fn wait_for_stop_reason(
        target: &mut GdbTarget,
        conn: &mut TcpStream,
    ) -> Result<run_blocking::Event<Self::StopReason>, run_blocking::WaitForStopReasonError<String, std::io::Error>>
    {
        use run_blocking::{Event as E, WaitForStopReasonError as W};
        loop {
            match target.rx.recv_timeout(Duration::from_millis(5)) {
                Ok(Event::Stopped(r) | Event::Ended(r)) => return Ok(E::TargetStopped(r)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(W::Target("the VM is gone".into())),
            }
            if conn.peek().map_err(W::Connection)?.is_some() {
                return Ok(E::IncomingData(conn.read().map_err(W::Connection)?));
            }
        }
    }

    /// Ctrl-C in gdb: every vCPU stops where it is. The threads gdb sees are those
    /// of the last stop the guest reported (the kernel is not asked).
    fn on_interrupt(target: &mut GdbTarget) -> Result<Option<Self::StopReason>, String> {
        target.d.stop_all();
        let tid = target.d.tids().first().copied().unwrap_or(1);
        Ok(Some(MultiThreadStopReason::SignalWithThread { tid: tid_of(tid), signal: Signal::SIGINT }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_system_call_frame_gives_the_program_registers() {
        let mut w = [0u64; FAULT_WORDS];
        // The 16 words of a SyscallFrame at the top: ..., rax, rip, rflags, rsp.
        let s = FAULT_WORDS - SYSCALL_WORDS;
        w[s + 4] = 0x1111; // rbp
        w[s + 12] = 1; // rax: the number
        w[s + 13] = 0x40_1234;
        w[s + 14] = 0x246;
        w[s + 15] = 0x7fff_f000;
        let r = frame_regs(&w);
        assert_eq!(
            (r.rip, r.rcx, r.rflags, r.r11, r.rsp, r.rbp, r.rax),
            (0x40_1234, 0x40_1234, 0x246, 0x246, 0x7fff_f000, 0x1111, 1)
        );
    }

    #[test]
    fn an_exception_frame_is_told_by_its_selector() {
        let mut w = [0u64; FAULT_WORDS];
        w[8] = 0x2222; // rbp
        w[14] = 7; // rax
        w[17] = 0x40_5678; // rip
        w[18] = 0x2b; // cs
        w[19] = 0x202; // rflags
        w[20] = 0x7ffe_0000; // rsp
        w[21] = 0x23; // ss
        let r = frame_regs(&w);
        assert_eq!((r.rip, r.rflags, r.rsp, r.rbp, r.rax), (0x40_5678, 0x202, 0x7ffe_0000, 0x2222, 7));
    }

    #[test]
    fn gdb_may_not_change_the_interrupt_flag() {
        let mut r = Regs { rflags: 0x202, ..Regs::default() };
        let mut g = X86_64CoreRegs::default();
        to_gdb(&r, &mut g);
        g.eflags = 0x3001; // IOPL 3, IF clear, CF
        g.rip = 0x40_1000;
        from_gdb(&g, &mut r);
        assert_eq!((r.rflags, r.rip), (0x203, 0x40_1000));
    }

    #[test]
    fn signals_map_both_ways() {
        for s in [2u64, 5, 7, 9, 10, 11, 12, 15] {
            assert_eq!(linux_signal(gdb_signal(s)), s);
        }
    }
}
