//! The profiler's sampling half (`--profile`, `--profile-top`): a host thread wakes
//! `hz` times a second and interrupts every vCPU that is running guest code with a
//! signal; its KVM_RUN returns EINTR, the vCPU thread reads its registers
//! (KVM_GET_REGS), follows the frame-pointer chain through guest memory (the VMM
//! knows the guest's one page table, which the guest cannot switch), records the
//! stack and goes back in. A halted vCPU is not interrupted: idle time is not in the
//! profile. Nothing runs in the guest, so the kernel needs no profiler of its own
//! and the guest cannot tell it is watched except by the time the exits cost.
//!
//! The stack is whatever the guest's memory says: a walk stops at a frame pointer
//! that is zero, misaligned, untranslatable or repeats, and after
//! `profile::MAX_FRAMES` frames, so a hostile guest only gets itself a wrong profile.

use crate::profile::{Samples, MAX_FRAMES};
use crate::sys::signals;
use kvm_ioctls::VcpuFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

#[derive(Default)]
struct Slot {
    /// The vCPU thread's handle (0: not running yet).
    thread: AtomicU64,
    /// In KVM_RUN (or about to be).
    in_guest: AtomicBool,
    /// A sample was asked for.
    wanted: AtomicBool,
}

pub struct Sampler {
    pub hz: u32,
    slots: Vec<Slot>,
    samples: Mutex<Samples>,
    started: Mutex<Option<Instant>>,
}

impl Sampler {
    /// A sampler for `ncpus` vCPUs at `hz` samples a second each; it lives until the
    /// process exits.
    pub fn new(hz: u32, ncpus: u64) -> &'static Sampler {
        Box::leak(Box::new(Sampler {
            hz: hz.clamp(1, 10_000),
            slots: (0..ncpus).map(|_| Slot::default()).collect(),
            samples: Mutex::new(Samples::default()),
            started: Mutex::new(None),
        }))
    }

    /// Starts the sampling thread (once the signal's handler is in place).
    pub fn start(&'static self) -> std::io::Result<()> {
        signals::install_sample_signal();
        *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        std::thread::Builder::new().name("sampler".into()).stack_size(64 * 1024).spawn(move || {
            signals::block_forwarded();
            crate::sys::precise_timers();
            let period = Duration::from_nanos(1_000_000_000 / u64::from(self.hz));
            let mut next = Instant::now() + period;
            loop {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += period;
                for slot in &self.slots {
                    let thread = slot.thread.load(Ordering::Acquire);
                    if thread != 0 && slot.in_guest.load(Ordering::Acquire) {
                        slot.wanted.store(true, Ordering::Release);
                        signals::interrupt_thread(thread);
                    }
                }
            }
        })?;
        Ok(())
    }

    /// vCPU `cpu`'s thread is about to enter the guest.
    pub fn enter(&self, cpu: u64) {
        if let Some(slot) = self.slots.get(cpu as usize) {
            if slot.thread.load(Ordering::Relaxed) == 0 {
                slot.thread.store(signals::this_thread(), Ordering::Release);
            }
            slot.in_guest.store(true, Ordering::Release);
        }
    }

    /// vCPU `cpu`'s thread is out of the guest (the vCPU's registers are the guest's
    /// as it left); takes the sample asked for, if any.
    pub fn leave(&self, cpu: u64, vcpu: &VcpuFd, mem: &GuestMemoryMmap) {
        let Some(slot) = self.slots.get(cpu as usize) else {
            return;
        };
        slot.in_guest.store(false, Ordering::Release);
        if !slot.wanted.swap(false, Ordering::AcqRel) {
            return;
        }
        let Ok(regs) = vcpu.get_regs() else {
            return;
        };
        // (On the vCPU's own thread: the root it translates through is the
        // address space it ran, a forked child's too.)
        let stack = walk(mem, crate::arch::paging::current_root(), regs.rip, regs.rbp);
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).add(cpu, stack);
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
