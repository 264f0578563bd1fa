//! The profiler's sampling half (`--profile`, `--profile-top`): every vCPU thread
//! arms a timer of its own on its CPU-time clock (`sys::signals::ThreadTimer`, a
//! period of 1/`hz` s). The host checks it at its scheduler tick, which interrupts
//! the running guest anyway; the signal then makes the vCPU's KVM_RUN return EINTR,
//! and the vCPU thread takes the guest's registers from the `kvm_run` page (KVM
//! synchronizes them at each exit, KVM_CAP_SYNC_REGS: no KVM_GET_REGS ioctl),
//! follows the frame-pointer chain through guest memory (the VMM knows the guest's
//! one page table, which the guest cannot switch), records the stack and goes back
//! in. So a sample costs one exit to the VMM and nothing more: no interrupt of its
//! own (on this platform an interrupt of the guest costs as much as the exit), no
//! sampling thread to wake, no signal sent across CPUs. A stack stands for the
//! periods its signal covered (one, plus the timer's overrun: with `hz` above the
//! host's tick rate, each tick's stack counts for the periods since the last), so
//! counts stay in periods of CPU time whatever the host's tick. A halted vCPU uses
//! no CPU time and is not sampled. Nothing runs in the guest, so the kernel needs no
//! profiler of its own and the guest cannot tell it is watched except by the time
//! the exits cost.
//!
//! The stack is whatever the guest's memory says: a walk stops at a frame pointer
//! that is zero, misaligned, untranslatable or repeats, and after
//! `profile::MAX_FRAMES` frames, so a hostile guest only gets itself a wrong profile.

use crate::profile::{Samples, MAX_FRAMES};
use crate::sys::signals::{self, ThreadTimer};
use kvm_ioctls::{SyncReg, VcpuFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub struct Sampler {
    pub hz: u32,
    /// Each vCPU thread's timer, made as it first enters the guest (None: the host
    /// refused one, and that vCPU is not sampled).
    timers: Vec<OnceLock<Option<ThreadTimer>>>,
    samples: Mutex<Samples>,
    started: Mutex<Option<Instant>>,
    /// KVM puts the registers in the `kvm_run` page at each exit (KVM_CAP_SYNC_REGS).
    sync_regs: AtomicBool,
}

impl Sampler {
    /// A sampler for `ncpus` vCPUs at `hz` samples a second of each one's running
    /// time; it lives until the process exits.
    pub fn new(hz: u32, ncpus: u64) -> &'static Sampler {
        Box::leak(Box::new(Sampler {
            hz: hz.clamp(1, 10_000),
            timers: (0..ncpus).map(|_| OnceLock::new()).collect(),
            samples: Mutex::new(Samples::default()),
            started: Mutex::new(None),
            sync_regs: AtomicBool::new(false),
        }))
    }

    /// Starts sampling (before the VM runs): each vCPU thread arms its timer as it
    /// first enters the guest. `sync_regs`: the host's KVM can put the registers in
    /// the `kvm_run` page at each exit.
    pub fn start(&self, sync_regs: bool) {
        self.sync_regs.store(sync_regs, Ordering::Relaxed);
        signals::install_sample_signal();
        *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    }

    /// vCPU `cpu`'s thread is about to enter the guest. The first time, it asks KVM
    /// for the registers at every exit and arms its timer; each time, it forgets a
    /// timer signal taken outside the guest (while the VMM ran for it).
    pub fn enter(&self, cpu: u64, vcpu: &mut VcpuFd) {
        let Some(timer) = self.timers.get(cpu as usize) else {
            return;
        };
        timer.get_or_init(|| {
            if self.sync_regs.load(Ordering::Relaxed) {
                vcpu.set_sync_valid_reg(SyncReg::Register);
            }
            ThreadTimer::for_this_thread(Duration::from_nanos(1_000_000_000 / u64::from(self.hz)))
        });
        signals::take_timer_fired();
    }

    /// vCPU `cpu`'s thread is out of the guest (`interrupted`: KVM_RUN returned
    /// EINTR; the vCPU's registers are the guest's as it left); if its timer's
    /// signal did that, this is a sample.
    pub fn leave(&self, cpu: u64, interrupted: bool, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        if !interrupted || !signals::take_timer_fired() {
            return;
        }
        let Some(Some(timer)) = self.timers.get(cpu as usize).and_then(OnceLock::get) else {
            return;
        };
        let regs = if self.sync_regs.load(Ordering::Relaxed) {
            vcpu.sync_regs().regs
        } else {
            let Ok(regs) = vcpu.get_regs() else {
                return;
            };
            regs
        };
        // (The root the vCPU's kernel last loaded: the address space it ran, a
        // forked child's too.)
        let stack = walk(mem, crate::arch::paging::guest_root(mem, cpu), regs.rip, regs.rbp);
        let periods = 1 + timer.overrun();
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).add(cpu, stack, periods);
    }

    /// The samples so far and the time since sampling started.
    pub fn take(&self) -> (Samples, Duration) {
        let since = self.started.lock().unwrap_or_else(|e| e.into_inner()).map_or(Duration::ZERO, |t| t.elapsed());
        (std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner())), since)
    }
}

/// The sampled instruction and the return addresses of the frame-pointer chain
/// from `rbp`, read through the page tables at `root` (the sampled vCPU's).
fn walk(mem: &GuestMemoryMmap, root: u64, rip: u64, rbp: u64) -> Vec<u64> {
    let read = |virt: u64| -> Option<u64> {
        let (phys, left) = crate::arch::paging::translate(mem, root, virt)?;
        if left < 8 {
            return None;
        }
        mem.read_obj::<u64>(GuestAddress(phys)).ok()
    };
    let mut stack = vec![rip];
    let mut fp = rbp;
    while stack.len() < MAX_FRAMES && fp != 0 && fp & 7 == 0 {
        let (Some(next), Some(ret)) = (read(fp), fp.checked_add(8).and_then(read)) else {
            break;
        };
        if ret == 0 {
            break;
        }
        stack.push(ret);
        if next == fp {
            break;
        }
        fp = next;
    }
    stack
}
