//! The host-file poller: one VMM thread that serves `Fs` hostcalls the vCPUs post
//! in their poll slots (`onering_abi::hostcall::PollSlot`), with no exit, while
//! such calls keep coming. An exit costs ~30 µs on this platform and a host file
//! call a few, so a metadata loop, a database commit or a dynamic loader opening
//! its libraries was mostly exits.
//!
//! Started by the first two `Fs` exits that come within 500 µs of each other (a
//! VM without mounts never has one; a program opening a file now and then does
//! not need it). Such a pair of exits wakes it; it then opens every slot and
//! scans them, serving what is posted,
//! until nothing came for [`IDLE`]; then it closes the slots, serves what was
//! posted meanwhile, and sleeps on a futex until the next burst of `Fs` exits. A vCPU that
//! posts while the poller is descheduled or closing takes its call back and exits
//! as before (the slot's compare-and-swap decides who serves it), so a call not
//! taken is delayed by at most the guest's wait. A call taken is the poller's
//! until it is done: its vCPU spins meanwhile (where, by exit, its thread would
//! block in the host call), however long the host call takes.
//!
//! Trust: the slot is guest memory. The call is served exactly as its exit would
//! be (`exit::hostcall::deferred_ops` and `HostFs::serve` check everything); the
//! root is checked to be a page of guest RAM and every translation through it is
//! checked. A guest that scribbles on its slot only gets its own calls wrong.

use super::Machine;
use crate::sys::signals::{futex_wait, futex_wake};
use onering_abi::hostcall::{poll_offsets as off, POLL_DONE, POLL_POSTED, POLL_TAKEN};
use onering_abi::Hostcall;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Two `Fs` exits closer than this start the poller: calls are coming in a burst.
const BURST: Duration = Duration::from_micros(500);
/// How long the poller keeps polling after the last call it served.
const IDLE: Duration = Duration::from_micros(200);
/// After this long without a call, the poller yields between scans, so a vCPU
/// thread waiting for this host CPU gets it.
const YIELD_AFTER: Duration = Duration::from_micros(20);

/// `Fs` calls served through the slots, without an exit (for `--stats`).
pub static POLLED: AtomicU64 = AtomicU64::new(0);

const ENOSYS: i64 = 38;
const EFAULT: i64 = 14;

#[derive(Default)]
pub struct Poller {
    /// 1 when an exit asked for polling (the thread's futex word).
    wanted: AtomicU32,
    /// Whether the thread is polling now (an exit need not wake it).
    polling: AtomicBool,
    /// When the last `Fs` exit asked (monotonic ns).
    last_exit: AtomicU64,
    /// Set once the thread started.
    start: OnceLock<()>,
}

impl Poller {
    /// After an `Fs` exit: poll for the next calls (starting the thread the first
    /// time) if this exit came within [`BURST`] of the last one, so a lone call
    /// (a program opening one file now and then) does not set a thread spinning
    /// for nothing. Cheap when it polls already.
    pub fn wake(&self, m: &'static Machine) {
        if self.polling.load(Ordering::Relaxed) {
            return;
        }
        let now = crate::sys::signals::monotonic_ns();
        let last = self.last_exit.swap(now, Ordering::Relaxed);
        if now.saturating_sub(last) > BURST.as_nanos() as u64 {
            return;
        }
        self.wanted.store(1, Ordering::Release);
        self.start.get_or_init(|| {
            let spawned = std::thread::Builder::new().name("onering-fs-poll".into()).spawn(move || run(m));
            if let Err(e) = spawned {
                // Without the thread every call keeps taking its exit: slower, not wrong.
                eprintln!("onering: warning: cannot start the host-file poller: {e}");
            }
        });
        futex_wake(&self.wanted);
    }
}

/// The thread: sleep until wanted, poll until idle, again.
fn run(m: &'static Machine) -> ! {
    let p = &m.poller;
    // (Spawned from a vCPU thread: the host's SIGINT and SIGTERM must still land
    // on a vCPU thread, whose KVM_RUN they interrupt, never here.)
    crate::sys::signals::block_forwarded();
    crate::sys::precise_timers();
    loop {
        // No periodic wake-up: `wake` sets the word before it wakes the futex.
        while p.wanted.swap(0, Ordering::AcqRel) == 0 {
            futex_wait(&p.wanted, 0, Duration::from_nanos(onering_abi::hostcall::MAX_HALT_NS));
        }
        p.polling.store(true, Ordering::Release);
        set_open(m, 1);
        let mut last = Instant::now();
        loop {
            if serve_posted(m) {
                last = Instant::now();
                continue;
            }
            let idle = last.elapsed();
            if idle > IDLE {
                break;
            }
            if idle > YIELD_AFTER {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        set_open(m, 0);
        // A vCPU that saw the slots open may have posted since the last scan.
        std::sync::atomic::fence(Ordering::SeqCst);
        serve_posted(m);
        p.polling.store(false, Ordering::Release);
    }
}

/// Every vCPU slot's `open` word.
fn set_open(m: &Machine, open: u64) {
    for cpu in 0..m.ncpus() {
        if let Some(w) = word(m, cpu, off::OPEN) {
            w.store(open, Ordering::Release);
        }
    }
}

fn word(m: &Machine, cpu: u64, offset: u64) -> Option<&AtomicU64> {
    crate::sys::guest_atomic(&m.mem, crate::layout::poll_slot(cpu) + offset)
}

/// Serves every posted call once; whether there was any.
fn serve_posted(m: &Machine) -> bool {
    let mut any = false;
    for cpu in 0..m.ncpus() {
        let Some(state) = word(m, cpu, off::STATE) else { continue };
        if state.load(Ordering::Acquire) != POLL_POSTED
            || state.compare_exchange(POLL_POSTED, POLL_TAKEN, Ordering::AcqRel, Ordering::Acquire).is_err()
        {
            continue;
        }
        let ret = serve(m, cpu);
        if let Some(r) = word(m, cpu, off::RET) {
            r.store(ret as u64, Ordering::Relaxed);
        }
        state.store(POLL_DONE, Ordering::Release);
        POLLED.fetch_add(1, Ordering::Relaxed);
        any = true;
    }
    any
}

/// One taken call of vCPU `cpu`: its result.
fn serve(m: &Machine, cpu: u64) -> i64 {
    let get = |o: u64| word(m, cpu, o).map_or(0, |w| w.load(Ordering::Relaxed));
    let args: [u64; 6] = std::array::from_fn(|i| get(off::ARGS + 8 * i as u64));
    let root = get(off::ROOT);
    if get(off::NR) != Hostcall::Fs as u64 {
        return -ENOSYS;
    }
    if !crate::arch::paging::valid_root(&m.mem, root) {
        return -EFAULT;
    }
    crate::arch::paging::set_current_root(root);
    m.serve_fs(cpu, args)
}
