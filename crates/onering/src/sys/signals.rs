//! Host signals and the futex behind halting: the two pieces of the VMM that run
//! where almost nothing is allowed.
//!
//! `forward_signals` installs one handler for the signals onering passes to the
//! program (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, and
//! SIGTSTP when the program reads the terminal). The
//! handler only calls the hook it was given, which must be async-signal-safe
//! (atomics, and system calls such as `futex` and KVM's `KVM_SIGNAL_MSI`); it runs
//! without SA_RESTART, so a vCPU thread waiting in KVM_RUN or in a halt wakes with
//! EINTR and looks at what the hook left. Other threads of the VMM block these
//! signals (`block_forwarded`), so the handler always runs on a vCPU thread.
//!
//! A vCPU halts in `futex_wait` on its kick word and is woken by `futex_wake`: both
//! plain system calls, usable from the handler.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

/// The signals forwarded to the program.
pub const FORWARDED: [i32; 7] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH];

/// The hook, as a plain function address (0: none).
static HOOK: AtomicUsize = AtomicUsize::new(0);

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let h = HOOK.load(Ordering::Acquire);
    if h != 0 {
        // HOOK only ever holds 0 or the address of a `fn(i32, bool)` stored by
        // `forward_signals`.
        // SAFETY: a non-zero HOOK is such a function's address.
        let f = unsafe { std::mem::transmute::<usize, fn(i32, bool)>(h) };
        // A terminal's signals (its special characters, a window change) come
        // with SI_KERNEL; kill(2) gives SI_USER, sigqueue SI_QUEUE.
        // SAFETY: the kernel hands an SA_SIGINFO handler a valid siginfo (or null).
        let from_tty = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
        // errno is the interrupted code's: keep it.
        // SAFETY: __errno_location gives this thread's errno, valid while it runs.
        let saved = unsafe { *libc::__errno_location() };
        f(sig, from_tty);
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = saved };
    }
}

/// Has `hook` called for each forwarded signal (instead of their default action),
/// with whether the host's terminal made it; with `stop` SIGTSTP too (the VM owns
/// the terminal: Ctrl-Z is for the program's jobs, not for onering). `hook` must
/// be async-signal-safe.
pub fn forward_signals(hook: fn(i32, bool), stop: bool) {
    HOOK.store(hook as usize, Ordering::Release);
    let tstp = stop.then_some(libc::SIGTSTP);
    for sig in FORWARDED.into_iter().chain(tstp) {
        install(sig, handler as *const () as usize, libc::SA_SIGINFO);
    }
}

/// Installs `f` (async-signal-safe) as the handler of `sig`, with an empty mask
/// and `flags` (never SA_RESTART, so a wait in the VMM that the signal interrupts
/// ends with EINTR).
fn install(sig: i32, f: usize, flags: libc::c_int) {
    // SAFETY: a zeroed sigaction is valid plain data; the handler set only makes
    // async-signal-safe calls (the callers' contract: `handler`, `on_sample_signal`)
    // and has the shape `flags` says; sigaction reads our struct and writes
    // nothing (a null old action).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Blocks the forwarded signals in the calling thread (a VMM thread that is not a
/// vCPU: the handler then runs on a vCPU thread).
pub fn block_forwarded() {
    // SAFETY: builds a signal set on the stack and changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED.into_iter().chain([libc::SIGTSTP]) {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout`; returns on a wake, a
/// signal, the timeout, or at once if the word differs.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: FUTEX_WAIT reads the aligned u32 behind `word` (which outlives the
    // call) and the timespec on our stack; it writes nothing.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes one thread sleeping in `futex_wait` on `word`. Async-signal-safe.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address of `word` as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
    }
}

/// CLOCK_MONOTONIC in nanoseconds (async-signal-safe).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into ours.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The signal that interrupts a vCPU thread's KVM_RUN so the profiler can read its
/// registers (a real-time signal nothing else in onering uses).
pub fn sample_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

thread_local! {
    /// This thread's `ThreadTimer` fired since `take_timer_fired` last looked.
    static TIMER_FIRED: AtomicBool = const { AtomicBool::new(false) };
}

extern "C" fn on_sample_signal(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: for an SA_SIGINFO handler the kernel passes a valid siginfo.
    if unsafe { (*info).si_code } == libc::SI_TIMER {
        // (A const-initialized thread-local without a destructor: a plain access to
        // this thread's static TLS block, safe in a handler.)
        TIMER_FIRED.with(|f| f.store(true, Ordering::Relaxed));
    }
}

/// Whether this thread's `ThreadTimer` sent it `sample_signal` since the last call
/// (rather than gdb's stop or nothing); clears the mark.
pub fn take_timer_fired() -> bool {
    TIMER_FIRED.with(|f| f.swap(false, Ordering::Relaxed))
}

/// Installs the handler of `sample_signal`: its only effect is that the thread's
/// KVM_RUN (or futex wait) returns with EINTR (no SA_RESTART), and, when the
/// thread's own timer sent it, the mark `take_timer_fired` reads.
pub fn install_sample_signal() {
    install(sample_signal(), on_sample_signal as *const () as usize, libc::SA_SIGINFO);
}

/// A POSIX timer on the calling thread's own CPU-time clock
/// (CLOCK_THREAD_CPUTIME_ID, SIGEV_THREAD_ID): it sends `sample_signal` to that
/// thread after each `period` of CPU time the thread used. The host checks such
/// timers at its scheduler tick, so the signal comes with a timer interrupt the
/// thread's CPU takes anyway: it adds the signal's exit from KVM_RUN and nothing
/// else (no interrupt of its own, no other thread woken, no signal across CPUs),
/// and a thread that sleeps (a halted vCPU) uses no CPU time and is not signalled.
/// A period shorter than the host's tick fires once a tick, with the periods it
/// covered in `overrun`. The timer lives until the process exits.
pub struct ThreadTimer(usize);

impl ThreadTimer {
    /// A timer armed to fire every `period` of the calling thread's CPU time; None
    /// if the host refuses one.
    pub fn for_this_thread(period: std::time::Duration) -> Option<ThreadTimer> {
        let ts = libc::timespec {
            tv_sec: period.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(period.subsec_nanos() as i32),
        };
        let every = libc::itimerspec { it_interval: ts, it_value: ts };
        // A zeroed sigevent is valid plain data; timer_create reads it and writes
        // the new timer's id into `id`, timer_settime reads `every`; gettid has no
        // preconditions. The timer is never deleted.
        // SAFETY: every pointer passed is to a live value on our stack.
        unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = sample_signal();
            ev.sigev_notify_thread_id = libc::gettid();
            let mut id: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut ev, &mut id) != 0
                || libc::timer_settime(id, 0, &every, std::ptr::null_mut()) != 0
            {
                return None;
            }
            Some(ThreadTimer(id as usize))
        }
    }

    /// The periods that passed beyond the one signalled, when the last signal was
    /// taken (0 when each period was signalled on its own).
    pub fn overrun(&self) -> u64 {
        // SAFETY: the id came from timer_create and the timer is never deleted.
        u64::try_from(unsafe { libc::timer_getoverrun(self.0 as libc::timer_t) }).unwrap_or(0)
    }
}

/// The calling thread's handle, for `interrupt_thread`.
pub fn this_thread() -> u64 {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as u64 }
}

/// Sends `sample_signal` to `thread` (from `this_thread` of a thread that lives until
/// the process exits, as vCPU threads do).
pub fn interrupt_thread(thread: u64) {
    // SAFETY: vCPU threads never exit before the process does, so the handle stays
    // valid; the signal's handler is installed before any thread is sent one.
    unsafe {
        libc::pthread_kill(thread as libc::pthread_t, sample_signal());
    }
}
