//! The running VM's vCPUs. Each vCPU is a host thread running KVM_RUN in a loop;
//! vCPU 0 runs on the main thread, the others start when the guest first kicks
//! them (a program that never has two runnable threads pays nothing for `--smp`).
//!
//! Halting: the guest cannot `hlt` here (docs/platform.md), so an idle vCPU makes the
//! `Halt` hostcall and its thread sleeps on a futex (its kick word) until its
//! deadline or a `Kick` from another vCPU. A kick is sticky: one that arrives before
//! the halt makes that halt return at once, so the guest's "check, then halt" cannot
//! lose a wake-up.
//!
//! Host signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2 and SIGWINCH sent to
//! onering go to the program, those the host's terminal made (Ctrl-C, Ctrl-\,
//! Ctrl-Z with `-i` on a terminal, a window change) to the VM terminal's
//! foreground group (`forward_host_signal`, run in the signal handler: it
//! only posts the signal in the events page, wakes halted vCPUs through their
//! futexes and interrupts vCPU 0, all async-signal-safe). If the program has not
//! ended `GRACE` after a SIGINT or SIGTERM, the next one stops the VM at once
//! (`Outcome::Stopped`), except SIGINT when the program reads a terminal (`-i`):
//! a shell or a REPL takes every Ctrl-C.
//!
//! Device back ends on the event loop (`crate::event_loop`, held here and started
//! only when a device registers with it) tell the guest about work with
//! [`Machine::kick`], the same wake-up a `Kick` hostcall gives; the network
//! device's I/O thread uses [`Machine::wake_halted`] (sticky kicks, no interrupt).
//!
//! Ending: the first vCPU whose exit stops the VM (the program exited, was killed,
//! the guest broke) reports the outcome and ends the whole process, whatever the
//! other vCPUs are doing, so no guest can keep the VMM alive after that.

use crate::devices::MmioBus;
use crate::event_loop::LazyEventLoop;
use crate::exit::{self, Action, Env, Outcome, VmExit};
use kvm_bindings::CpuId;
use kvm_ioctls::{VcpuFd, VmFd};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use vm_memory::GuestMemoryMmap;

/// What happens once the VM ended: reports the outcome, returns the exit status.
pub type Finish = Box<dyn Fn(&GuestMemoryMmap, Outcome) -> u8 + Send + Sync>;

struct Cpu {
    started: AtomicBool,
    /// 1: kicked since its last halt (a futex word).
    kicked: AtomicU32,
}

/// How long the program has to end after a SIGINT or SIGTERM before another one
/// stops the VM at once.
pub const GRACE: Duration = Duration::from_secs(3);

/// The machine, for the signal handler.
static MACHINE: OnceLock<&'static Machine> = OnceLock::new();

fn on_host_signal(sig: i32, from_tty: bool) {
    if let Some(m) = MACHINE.get() {
        m.forward_host_signal(sig, from_tty);
    }
}

pub struct Machine {
    pub mem: GuestMemoryMmap,
    /// The MMIO devices; fixed before the first vCPU runs.
    pub bus: MmioBus,
    /// Where device back ends wait for host file descriptors; not started until one
    /// registers.
    pub events: LazyEventLoop,
    /// The host's stdin (`-i`), as a request-and-wait device.
    pub stdin: super::stdin::Stdin,
    /// The standard streams as the program may use them.
    pub stdio: &'static super::stdio::Stdio,
    vm: VmFd,
    cpuid: CpuId,
    cpus: Vec<Cpu>,
    /// Serializes starting vCPUs.
    starting: Mutex<()>,
    /// Held by the vCPU that ends the VM, until the process is gone.
    ending: Mutex<()>,
    finish: Finish,
    /// When the first SIGINT or SIGTERM came (monotonic ns; 0: none), and the signal
    /// that stops the VM at once (0: none).
    first_stop: AtomicU64,
    forced: AtomicU64,
    /// The profiler's sampler (`--profile`), if on (set before the VM runs).
    sampler: OnceLock<&'static super::sampler::Sampler>,
    /// The host file server (`-v`, `--rootfs DIR`), if the VM has mounts (set
    /// before the VM runs).
    hostfs: OnceLock<crate::hostfs::HostFs>,
    /// The gdb stub (`--gdb`), if on (set before the VM runs).
    gdb: OnceLock<&'static super::gdb::Debugger>,
    /// Serves host-file calls without exits while they keep coming.
    pub(super) poller: super::poller::Poller,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Machine {
    /// A machine of `ncpus` vCPUs (vCPU 0 already created by the caller). It lives
    /// until the process exits.
    pub fn new(
        mem: GuestMemoryMmap,
        bus: MmioBus,
        vm: VmFd,
        cpuid: CpuId,
        ncpus: u64,
        stdio: &'static super::stdio::Stdio,
        finish: Finish,
    ) -> &'static Machine {
        let cpus = (0..ncpus).map(|i| Cpu { started: AtomicBool::new(i == 0), kicked: AtomicU32::new(0) }).collect();
        let m: &'static Machine = Box::leak(Box::new(Machine {
            mem,
            bus,
            events: LazyEventLoop::new(),
            stdin: super::stdin::Stdin::new(0, stdio.interactive()),
            stdio,
            vm,
            cpuid,
            cpus,
            starting: Mutex::new(()),
            ending: Mutex::new(()),
            finish,
            first_stop: AtomicU64::new(0),
            forced: AtomicU64::new(0),
            sampler: OnceLock::new(),
            hostfs: OnceLock::new(),
            gdb: OnceLock::new(),
            poller: super::poller::Poller::default(),
        }));
        if MACHINE.set(m).is_ok() {
            crate::sys::signals::forward_signals(on_host_signal, m.reads_terminal());
        }
        m
    }

    /// A host signal for the program (in the signal handler: async-signal-safe
    /// only). Posts it in the events page and tells the guest, or, past the grace
    /// period, marks the VM to stop.
    fn forward_host_signal(&self, sig: i32, from_tty: bool) {
        if (sig == libc::SIGINT && !self.reads_terminal()) || sig == libc::SIGTERM {
            let now = crate::sys::signals::monotonic_ns().max(1);
            match self.first_stop.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {}
                Err(first) if now.saturating_sub(first) >= GRACE.as_nanos() as u64 => {
                    self.forced.store(sig as u64, Ordering::Release);
                    self.wake_all();
                    return;
                }
                Err(_) => {}
            }
        }
        super::stdin::post_signal(&self.mem, sig as u64, from_tty);
        self.wake_all();
        self.interrupt_cpu0();
    }

    /// `-i` with a terminal on stdin.
    fn reads_terminal(&self) -> bool {
        self.stdio.interactive() && onering_abi::stdio::kind(self.stdio.word, 0) == onering_abi::stdio::TTY
    }

    /// Kicks every started vCPU (async-signal-safe: atomics and futex wakes).
    fn wake_all(&self) {
        for c in self.cpus.iter().filter(|c| c.started.load(Ordering::Acquire)) {
            c.kicked.store(1, Ordering::Release);
            crate::sys::signals::futex_wake(&c.kicked);
        }
    }

    /// Interrupts vCPU 0 with the reschedule vector (an MSI through KVM's in-kernel
    /// APIC): the guest looks at the events page even if every vCPU runs the program.
    fn interrupt_cpu0(&self) {
        let msi = kvm_bindings::kvm_msi {
            address_lo: onering_abi::layout::LAPIC_PHYS as u32, // destination APIC 0
            data: u32::from(onering_abi::vectors::RESCHEDULE),
            ..Default::default()
        };
        let _ = self.vm.signal_msi(msi);
    }

    /// Has the vCPUs sampled by `sampler` (`--profile`) and starts it; before the
    /// VM runs.
    pub fn profile_with(&'static self, sampler: &'static super::sampler::Sampler) {
        if self.sampler.set(sampler).is_ok() {
            let sync = self.vm.check_extension_int(kvm_ioctls::Cap::SyncRegs);
            sampler.start(sync & kvm_bindings::KVM_SYNC_X86_REGS as i32 != 0);
        }
    }

    /// Waits for gdb on `listener` and has it debug the program, which starts at
    /// `entry` with stack `sp` once gdb continues (before the VM runs).
    pub fn debug_with(&'static self, listener: &std::net::TcpListener, entry: u64, sp: u64) -> Result<(), String> {
        let d = super::gdb::Debugger::attach(self, listener, self.cpus.len() as u64, entry, sp)?;
        let _ = self.gdb.set(d);
        Ok(())
    }

    /// gdb killed the program: the VM ends with `outcome`.
    pub(super) fn end_from_debugger(&self, outcome: Outcome) -> ! {
        self.end(outcome)
    }

    /// Serves host files from `fs` (before the VM runs).
    pub fn serve_files(&self, fs: crate::hostfs::HostFs) {
        let _ = self.hostfs.set(fs);
    }

    /// The number of vCPUs.
    pub fn ncpus(&self) -> u64 {
        self.cpus.len() as u64
    }

    /// An `Fs` hostcall of vCPU `cpu` (its exit's or its poll slot's arguments):
    /// the operations it carries, then its own; its result (-ENOSYS: no mounts).
    pub(super) fn serve_fs(&self, cpu: u64, args: [u64; 6]) -> i64 {
        let fs = self.hostfs.get();
        crate::exit::hostcall::fs_call(&self.mem, cpu, args, &mut |op, later| match fs {
            None => -38,
            Some(fs) if later => {
                fs.serve_later(op, &self.mem);
                0
            }
            Some(fs) => fs.serve(op, &self.mem),
        })
    }

    /// Runs vCPU 0 on the calling thread; ends the process when the VM ends.
    pub fn run_boot_cpu(&'static self, mut vcpu: VcpuFd, first_exit: &dyn Fn()) -> ! {
        crate::sys::precise_timers();
        let outcome = self.run(&mut vcpu, 0, first_exit);
        self.end(outcome)
    }

    fn run(&'static self, vcpu: &mut VcpuFd, cpu: u64, first_exit: &dyn Fn()) -> Outcome {
        crate::observe::perf_open(cpu);
        let mut first = true;
        loop {
            let forced = self.forced.load(Ordering::Acquire);
            if forced != 0 {
                return Outcome::Stopped(forced);
            }
            let gdb = self.gdb.get();
            if let Some(g) = gdb {
                g.enter(cpu, vcpu);
            }
            let sampler = self.sampler.get();
            if let Some(s) = sampler {
                s.enter(cpu, vcpu);
            }
            let timer = crate::observe::start_timer(cpu, false);
            let run = vcpu.run().map(VmExit::from_kvm);
            crate::observe::stop_timer(timer, cpu, false);
            if let Some(g) = gdb {
                g.leave(cpu);
            }
            if let Some(s) = sampler {
                s.leave(cpu, run.as_ref().is_err_and(|e| e.errno() == libc::EINTR), vcpu, &self.mem);
            }
            crate::observe::count_exit(match &run {
                Ok(e) => e.reason(),
                Err(_) => crate::observe::ExitReason::Interrupted,
            });
            let exit = match run {
                Ok(e) => {
                    if first {
                        first = false;
                        first_exit();
                    }
                    e
                }
                Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => continue,
                Err(e) => return Outcome::GuestError(format!("KVM_RUN failed on vCPU {cpu}: {e}")),
            };
            let mut env = VcpuEnv { m: self, cpu };
            match exit::handle(exit, &mut env) {
                Action::Resume => {}
                Action::CompleteRead { addr, len, value } => super::vcpu::complete_mmio_read(vcpu, addr, len, value),
                Action::Stop(o) => return o,
            }
        }
    }

    /// Reports `outcome` and ends the process (the first caller does; any other
    /// waits here for the end).
    fn end(&self, outcome: Outcome) -> ! {
        let _only_one = lock(&self.ending);
        if let Some(g) = self.gdb.get() {
            g.ended(&outcome);
        }
        self.stdio.restore();
        let _ = std::io::stdout().flush();
        let code = (self.finish)(&self.mem, outcome);
        let _ = std::io::stdout().flush();
        crate::sys::exit_leaving_teardown(code)
    }

    fn halt(&self, cpu: u64, d: Duration) {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return;
        };
        if c.kicked.swap(0, Ordering::AcqRel) == 0 {
            let timer = crate::observe::start_timer(cpu, true);
            crate::sys::signals::futex_wait(&c.kicked, 0, d);
            crate::observe::stop_timer(timer, cpu, true);
            c.kicked.store(0, Ordering::Release);
        }
    }

    /// Wakes vCPU `cpu` out of its halt, or starts it if it never ran. Sticky: a
    /// kick that comes before the halt makes that halt return at once. For the `Kick`
    /// hostcall, and for device back ends (on the event loop's thread) that have
    /// work for the guest: they kick the vCPU that should look, and it returns from
    /// its `Halt` hostcall to the guest kernel, which checks the device. Errors: no
    /// such vCPU, or starting it failed.
    pub fn kick(&'static self, cpu: u64) -> Result<(), String> {
        let Some(c) = self.cpus.get(cpu as usize) else {
            return Err(format!("no vCPU {cpu}"));
        };
        if !c.started.load(Ordering::Acquire) {
            return self.start(cpu);
        }
        c.kicked.store(1, Ordering::Release);
        crate::sys::signals::futex_wake(&c.kicked);
        Ok(())
    }

    /// Tells the guest that a device posted something in the events page: every
    /// started vCPU is kicked (a halted one wakes; one about to halt will not), and
    /// vCPU 0 is interrupted with the reschedule vector (an MSI through KVM's
    /// in-kernel APIC), in case all of them are running the program.
    pub fn notify_guest(&'static self) {
        self.wake_all();
        self.interrupt_cpu0();
    }

    /// Listens for `onering exec` on the unix socket `path` (before the VM runs;
    /// see `exec`).
    pub fn serve_exec(&'static self, path: &std::path::Path) -> std::io::Result<()> {
        super::exec::listen(path, self)
    }

    /// Tells the guest that `onering exec` queued something for it.
    pub(super) fn post_exec(&'static self) {
        super::stdin::post_pending(&self.mem, onering_abi::events::EXEC);
        self.notify_guest();
    }

    /// Tells the guest that a device has work for it without interrupting anyone:
    /// every started vCPU gets a sticky kick (a halted one wakes, one about to halt
    /// will not). For the network device, whose used rings the guest kernel polls
    /// while it runs, so that only an idle guest needs waking.
    pub fn wake_halted(&self) {
        self.wake_all();
    }

    /// The `StdinRequest` hostcall for host stream `stream` (the program's stdin,
    /// or an exec'd process's): takes the request and has that stdin watched
    /// (see `stdin`). 0 or -errno.
    fn stdin_request(&'static self, virt: u64, len: u64, stream: u64) -> i64 {
        let wake = move || self.notify_guest();
        match onering_abi::exec::input_of(stream) {
            Some(0) => match self.stdin.request(&self.mem, virt, len) {
                Ok(seq) => {
                    super::stdin::watch(&self.stdin, &std::io::stdin(), &self.mem, &self.events, seq, wake);
                    0
                }
                Err(e) => e,
            },
            Some(input) => self.stdio.execs.stdin_request(&self.mem, &self.events, input as u64 - 1, (virt, len), wake),
            None => -9, // EBADF
        }
    }

    /// Creates vCPU `cpu` and its thread, which enters the kernel's entry.
    fn start(&'static self, cpu: u64) -> Result<(), String> {
        let _g = lock(&self.starting);
        let Some(c) = self.cpus.get(cpu as usize) else {
            return Err(format!("no vCPU {cpu}"));
        };
        if c.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let (entry, stack, arg) = crate::layout::cpu_start(cpu);
        let vcpu = super::vcpu::create_vcpu(
            &self.vm,
            &self.cpuid,
            cpu,
            entry,
            stack,
            arg,
            crate::embedded::syscall_trap_entry(),
        )
        .map_err(|e| format!("cannot start vCPU {cpu}: {e}"))?;
        std::thread::Builder::new()
            .name(format!("vcpu{cpu}"))
            .stack_size(256 * 1024)
            .spawn(move || {
                let mut vcpu = vcpu;
                crate::sys::precise_timers();
                let outcome = self.run(&mut vcpu, cpu, &|| {});
                self.end(outcome)
            })
            .map_err(|e| format!("cannot start vCPU {cpu}: {e}"))?;
        c.started.store(true, Ordering::Release);
        Ok(())
    }
}

struct VcpuEnv {
    m: &'static Machine,
    cpu: u64,
}

impl Env for VcpuEnv {
    fn mem(&self) -> &GuestMemoryMmap {
        &self.m.mem
    }
    fn bus(&self) -> &MmioBus {
        &self.m.bus
    }
    fn cpu(&self) -> u64 {
        self.cpu
    }
    fn stdin_request(&mut self, virt: u64, len: u64, stream: u64) -> i64 {
        self.m.stdin_request(virt, len, stream)
    }
    fn halt(&mut self, d: Duration) {
        self.m.halt(self.cpu, d)
    }
    fn ncpus(&self) -> u64 {
        self.m.cpus.len() as u64
    }
    fn kick(&mut self, cpu: u64) -> Result<(), String> {
        self.m.kick(cpu)
    }
    fn stdio_stat(&mut self, fd: u64) -> Result<onering_abi::HostStat, i64> {
        self.m.stdio.stat(fd)
    }
    fn stdio_seek(&mut self, fd: u64, offset: u64, whence: u64) -> i64 {
        self.m.stdio.seek(fd, offset, whence)
    }
    fn stdio_ioctl(&mut self, fd: u64, request: u64, arg: &mut [u8]) -> i64 {
        self.m.stdio.ioctl(fd, request, arg)
    }
    fn debug_stop(&mut self, args: [u64; 6]) -> i64 {
        match self.m.gdb.get() {
            Some(g) => g.stop(self.cpu, crate::arch::paging::current_root(), args),
            None => -19,
        }
    }
    fn host_file(&mut self, args: [u64; 6]) -> i64 {
        let r = self.m.serve_fs(self.cpu, args);
        // More are likely to follow: serve them without exits.
        if self.m.hostfs.get().is_some() {
            self.m.poller.wake(self.m);
        }
        r
    }
    fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()> {
        self.m.stdio.output(fd, data)
    }
    fn exec_take(&mut self, virt: u64, len: u64) -> i64 {
        self.m.stdio.execs.take(&self.m.mem, virt, len)
    }
    fn exec_done(&mut self, slot: u64, how: u64, value: u64) -> i64 {
        self.m.stdio.execs.done(slot, how, value, &self.m.mem, &self.m.events)
    }
}
