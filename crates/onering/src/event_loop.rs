//! The event loop: one host thread waiting in `epoll_wait` on file descriptors that
//! device back ends register, each with a callback run on that thread when the
//! descriptor is ready. vCPU threads never block on a device's host side: a virtio
//! device's queues over a tap or a file, or a console on stdin, register here and
//! the vCPUs only exit for the device's registers.
//!
//! Started lazily ([`LazyEventLoop`]): the thread and its epoll and eventfd
//! descriptors exist only once a device registers something, so a plain program's
//! start-up pays nothing (nothing registers today). Stopping it (explicitly or by
//! dropping it) wakes the thread through an eventfd and joins it.
//!
//! Telling the guest: a callback that has work for the guest wakes a vCPU with
//! `vstate::Machine::kick(cpu)`, the same path a `Kick` hostcall takes: a halted vCPU
//! returns from its `Halt` hostcall at once (a kick that comes first makes the next
//! halt return at once, so none is lost), and the guest kernel then looks at the
//! device. Once the guest takes device interrupts, the back end will signal an irqfd
//! registered with KVM (`KVM_IRQFD`) instead, which injects the interrupt without
//! any VMM thread in between; the kick stays for vCPUs halted in the VMM.
//!
//! Callbacks run one at a time on the loop's thread, without any lock held, so a
//! callback may register or remove descriptors itself.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use thiserror::Error;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// Why the event loop could not start or take a registration.
#[derive(Debug, Error)]
pub enum EventLoopError {
    #[error("cannot start the event loop: {0}")]
    Start(std::io::Error),
    #[error("cannot watch file descriptor {fd}: {error}")]
    Register { fd: RawFd, error: std::io::Error },
    #[error("the event loop has stopped")]
    Stopped,
}

/// What a callback wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Keep watching the descriptor.
    Keep,
    /// Stop watching it (and drop its source).
    Remove,
}

/// A registration, for [`EventLoop::remove`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u64);

/// The token of the loop's own stop eventfd.
const STOP: u64 = 0;

/// A registered source and its callback.
trait Handler: Send {
    fn fd(&self) -> RawFd;
    fn ready(&mut self, events: EventSet) -> Next;
}

struct Registered<S, F> {
    source: S,
    callback: F,
}

impl<S: AsRawFd + Send, F: FnMut(&mut S, EventSet) -> Next + Send> Handler for Registered<S, F> {
    fn fd(&self) -> RawFd {
        self.source.as_raw_fd()
    }
    fn ready(&mut self, events: EventSet) -> Next {
        (self.callback)(&mut self.source, events)
    }
}

#[derive(Default)]
struct Handlers {
    by_token: HashMap<u64, Box<dyn Handler>>,
    /// Removed while their callback ran: not to be put back.
    removed: HashSet<u64>,
    /// The token whose callback is running, if any.
    running: Option<u64>,
}

struct Shared {
    epoll: Epoll,
    stop: EventFd,
    stopped: AtomicBool,
    handlers: Mutex<Handlers>,
    next_token: AtomicU64,
}

/// A running event loop: its thread waits until a registered descriptor is ready.
pub struct EventLoop {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EventLoop {
    /// Creates the epoll set and the stop eventfd and starts the thread.
    pub fn start() -> Result<EventLoop, EventLoopError> {
        let epoll = Epoll::new().map_err(EventLoopError::Start)?;
        let stop = EventFd::new(EFD_NONBLOCK).map_err(EventLoopError::Start)?;
        epoll
            .ctl(ControlOperation::Add, stop.as_raw_fd(), EpollEvent::new(EventSet::IN, STOP))
            .map_err(EventLoopError::Start)?;
        let shared = Arc::new(Shared {
            epoll,
            stop,
            stopped: AtomicBool::new(false),
            handlers: Mutex::default(),
            next_token: AtomicU64::new(STOP + 1),
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("event-loop".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                // Host signals for the program are handled on vCPU threads.
                crate::sys::signals::block_forwarded();
                run(&for_thread)
            })
            .map_err(EventLoopError::Start)?;
        Ok(EventLoop { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Watches `source` for `events` (level-triggered unless `EventSet::EDGE_TRIGGERED`
    /// is in them); `callback` runs on the loop's thread each time it is ready, with
    /// the source and what happened. The loop owns the source until the registration
    /// ends ([`Next::Remove`] or [`EventLoop::remove`]), so its descriptor stays open
    /// while watched.
    pub fn register<S, F>(&self, source: S, events: EventSet, callback: F) -> Result<Token, EventLoopError>
    where
        S: AsRawFd + Send + 'static,
        F: FnMut(&mut S, EventSet) -> Next + Send + 'static,
    {
        if self.shared.stopped.load(Ordering::Acquire) {
            return Err(EventLoopError::Stopped);
        }
        let token = self.shared.next_token.fetch_add(1, Ordering::Relaxed);
        let fd = source.as_raw_fd();
        // In the table before epoll can report it.
        lock(&self.shared.handlers).by_token.insert(token, Box::new(Registered { source, callback }));
        if let Err(error) = self.shared.epoll.ctl(ControlOperation::Add, fd, EpollEvent::new(events, token)) {
            lock(&self.shared.handlers).by_token.remove(&token);
            return Err(EventLoopError::Register { fd, error });
        }
        Ok(Token(token))
    }

    /// Stops watching a registration and drops its source (after its callback, if it
    /// is running now). Unknown or ended tokens are ignored.
    pub fn remove(&self, token: Token) {
        let mut h = lock(&self.shared.handlers);
        if let Some(handler) = h.by_token.remove(&token.0) {
            let _ = self.shared.epoll.ctl(ControlOperation::Delete, handler.fd(), EpollEvent::default());
        } else if h.running == Some(token.0) {
            h.removed.insert(token.0);
        }
    }

    /// Stops the thread (after the callback it is running, if any) and waits for it.
    /// Registrations are dropped with the loop.
    pub fn stop(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        let _ = self.shared.stop.write(1);
        if let Some(t) = lock(&self.thread).take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// Whether the thread still runs.
    pub fn is_running(&self) -> bool {
        lock(&self.thread).as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for EventLoop {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The loop's thread.
fn run(shared: &Shared) {
    let mut events = vec![EpollEvent::default(); 32];
    loop {
        let n = match shared.epoll.wait(-1, &mut events) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // EBADF/EINVAL cannot happen with our own epoll; do not spin if they do.
            Err(_) => return,
        };
        for ev in events.iter().take(n) {
            let token = ev.data();
            if token == STOP {
                return;
            }
            // Taken out of the table while it runs, so no lock is held in the callback.
            let handler = {
                let mut h = lock(&shared.handlers);
                let handler = h.by_token.remove(&token);
                h.running = handler.as_ref().map(|_| token);
                handler
            };
            let Some(mut handler) = handler else {
                continue; // removed after epoll_wait reported it
            };
            let next = handler.ready(ev.event_set());
            let mut h = lock(&shared.handlers);
            h.running = None;
            if next == Next::Keep && !h.removed.remove(&token) {
                h.by_token.insert(token, handler);
            } else {
                let _ = shared.epoll.ctl(ControlOperation::Delete, handler.fd(), EpollEvent::default());
            }
        }
        if shared.stopped.load(Ordering::Acquire) {
            return;
        }
    }
}

/// An event loop that starts the first time it is asked for: the machine holds one,
/// and a plain program never starts it.
#[derive(Default)]
pub struct LazyEventLoop(OnceLock<EventLoop>);

impl LazyEventLoop {
    pub const fn new() -> Self {
        LazyEventLoop(OnceLock::new())
    }

    /// The loop, started now if it was not.
    pub fn get(&self) -> Result<&EventLoop, EventLoopError> {
        if let Some(l) = self.0.get() {
            return Ok(l);
        }
        let started = EventLoop::start()?;
        // If another thread started one meanwhile, ours is dropped (and stopped) here.
        Ok(self.0.get_or_init(move || started))
    }

    /// Whether the loop was started.
    pub fn is_started(&self) -> bool {
        self.0.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const WAIT: Duration = Duration::from_secs(5);

    fn eventfd() -> EventFd {
        EventFd::new(EFD_NONBLOCK).unwrap()
    }

    #[test]
    fn a_ready_eventfd_runs_its_callback() {
        let l = EventLoop::start().unwrap();
        let (tx, rx) = mpsc::channel();
        let efd = eventfd();
        let writer = efd.try_clone().unwrap();
        l.register(efd, EventSet::IN, move |fd, events| {
            assert!(events.contains(EventSet::IN));
            tx.send(fd.read().unwrap()).unwrap();
            Next::Keep
        })
        .unwrap();
        writer.write(3).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), 3);
        writer.write(4).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), 4, "kept: runs again");
        l.stop();
        assert!(!l.is_running());
    }

    #[test]
    fn removed_registrations_run_no_more() {
        let l = EventLoop::start().unwrap();
        let (tx, rx) = mpsc::channel();
        // One that removes itself after its first event.
        let a = eventfd();
        let a_writer = a.try_clone().unwrap();
        let tx_a = tx.clone();
        l.register(a, EventSet::IN, move |fd, _| {
            let _ = fd.read();
            tx_a.send("a").unwrap();
            Next::Remove
        })
        .unwrap();
        // And one removed from outside.
        let b = eventfd();
        let b_writer = b.try_clone().unwrap();
        let token = l
            .register(b, EventSet::IN, move |fd, _| {
                let _ = fd.read();
                tx.send("b").unwrap();
                Next::Keep
            })
            .unwrap();
        a_writer.write(1).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), "a");
        a_writer.write(1).unwrap();
        l.remove(token);
        b_writer.write(1).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "neither runs again");
    }

    #[test]
    fn callbacks_may_register_more() {
        let l = Arc::new(EventLoop::start().unwrap());
        let (tx, rx) = mpsc::channel();
        let first = eventfd();
        let first_writer = first.try_clone().unwrap();
        let second = eventfd();
        let second_writer = second.try_clone().unwrap();
        let inner = Arc::downgrade(&l);
        let mut second = Some(second);
        l.register(first, EventSet::IN, move |fd, _| {
            let _ = fd.read();
            if let (Some(l), Some(s)) = (inner.upgrade(), second.take()) {
                let tx = tx.clone();
                l.register(s, EventSet::IN, move |fd, _| {
                    tx.send(fd.read().unwrap()).unwrap();
                    Next::Remove
                })
                .unwrap();
            }
            Next::Remove
        })
        .unwrap();
        first_writer.write(1).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        second_writer.write(7).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), 7);
    }

    #[test]
    fn stopping_is_clean_and_final() {
        let l = EventLoop::start().unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        struct Source(EventFd, Arc<AtomicBool>);
        impl AsRawFd for Source {
            fn as_raw_fd(&self) -> RawFd {
                self.0.as_raw_fd()
            }
        }
        impl Drop for Source {
            fn drop(&mut self) {
                self.1.store(true, Ordering::SeqCst);
            }
        }
        l.register(Source(eventfd(), dropped.clone()), EventSet::IN, |_, _| Next::Keep).unwrap();
        assert!(l.is_running());
        l.stop();
        assert!(!l.is_running());
        assert!(matches!(l.register(eventfd(), EventSet::IN, |_, _| Next::Keep), Err(EventLoopError::Stopped)));
        l.stop(); // twice is fine
        drop(l);
        assert!(dropped.load(Ordering::SeqCst), "sources go with the loop");
    }

    #[test]
    fn a_bad_descriptor_is_refused() {
        let l = EventLoop::start().unwrap();
        struct Bad;
        impl AsRawFd for Bad {
            fn as_raw_fd(&self) -> RawFd {
                -1
            }
        }
        assert!(matches!(l.register(Bad, EventSet::IN, |_, _| Next::Keep), Err(EventLoopError::Register { .. })));
    }

    #[test]
    fn the_lazy_loop_starts_on_first_use_only() {
        let lazy = LazyEventLoop::new();
        assert!(!lazy.is_started(), "nothing runs until asked");
        let a = lazy.get().unwrap() as *const EventLoop;
        let b = lazy.get().unwrap() as *const EventLoop;
        assert!(lazy.is_started());
        assert_eq!(a, b);
        assert!(lazy.get().unwrap().is_running());
    }
}
