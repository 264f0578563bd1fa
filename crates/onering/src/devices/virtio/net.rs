//! The virtio-net device (virtio 1.x, device id 1) at `layout::VIRTIO_NET_PHYS`:
//! queue 0 receives, queue 1 transmits, each up to 256 entries; every frame carries
//! the 12-byte `virtio_net_hdr_v1` in front. Features: VERSION_1, MAC, MTU, STATUS
//! (link always up), RING_EVENT_IDX, and checksum offload both ways (CSUM,
//! GUEST_CSUM) when the back end carries the header with its frames (a TAP device):
//! the guest's "complete this checksum" requests go to the host kernel as they
//! are, and frames whose checksum the host left to complete reach the guest so
//! marked (or completed here, for a driver that did not take GUEST_CSUM). passt
//! takes and gives complete frames only: the header is all zero then (num_buffers
//! 1 on receive), and the guest's stack checksums what it sends.
//!
//! One I/O thread per device ("net-io") moves frames between the rings and the back
//! end, so that the vCPUs never exit per packet (an exit costs ~20 µs here):
//!
//! - While traffic flows it polls: the transmit ring and the back end, in batches
//!   of at most `BATCH` frames each way, and keeps polling for `POLL_WINDOW` after
//!   the last frame. The guest is then never asked for a doorbell: with EVENT_IDX,
//!   `avail_event` stays where it was when the thread last slept, which the guest's
//!   `avail.idx` has passed, so the guest does not notify.
//! - Idle, it writes `avail_event` = the next entry it will take (EVENT_IDX: "tell
//!   me at the next buffer"), checks the ring once more, and sleeps in `epoll_wait`
//!   on the doorbell eventfd (a QueueNotify write: the vCPU only signals it), the
//!   back end's descriptor and a stop eventfd.
//! - Received frames go into the guest's receive buffers; the guest is told only if
//!   it asked (EVENT_IDX `used_event`, `Queue::needs_notification`), and then not by
//!   an interrupt but by a sticky kick of the halted vCPUs (`Machine::wake_halted`):
//!   the guest kernel looks at the used ring whenever its network stack runs and
//!   before a vCPU halts. With no receive buffers posted, the frame waits and the
//!   thread asks for a doorbell on the receive queue.
//!
//! The guest owns the rings and may scribble on them at any time: chains are walked
//! by `virtio-queue` and copied here, at most `MAX_CHAIN` descriptors of a chain
//! (an indirect table, which is not offered but which `virtio-queue` follows, could
//! otherwise make one chain 65535 descriptors), every buffer checked to lie in
//! guest memory, with no allocation; frames longer than `MAX_FRAME`, longer chains
//! or chains that do not map are dropped (the chain comes back used with length 0),
//! and an available index that jumps by more than the queue size or a ring that
//! stops mapping puts the device in DEVICE_NEEDS_RESET: the thread leaves it alone
//! until the driver resets it. The thread never spins on a state it cannot leave:
//! a back end that cannot take frames is waited for (its descriptor becoming
//! writable), one that is gone is taken out of the epoll set and frames sent to it
//! are dropped, as on a dead link; when the VM ends (`end`) the thread returns.

use super::mmio::{Effect, QueueSlot, Transport};
use super::VirtioError;
use crate::devices::{MmioAction, MmioDevice};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ids::VIRTIO_ID_NET;
use virtio_bindings::virtio_mmio::VIRTIO_MMIO_QUEUE_NOTIFY;
use virtio_bindings::virtio_net::{
    virtio_net_hdr_v1, VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_MAC, VIRTIO_NET_F_MTU,
    VIRTIO_NET_F_STATUS, VIRTIO_NET_HDR_F_DATA_VALID, VIRTIO_NET_HDR_F_NEEDS_CSUM, VIRTIO_NET_S_LINK_UP,
};
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use virtio_queue::{DescriptorChain, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

/// The receive and transmit queues.
pub const RX: usize = 0;
pub const TX: usize = 1;
/// Entries per queue, at most.
pub const QUEUE_SIZE: u16 = 256;
/// `virtio_net_hdr_v1`.
pub const HDR_LEN: usize = 12;
const _: () = assert!(std::mem::size_of::<virtio_net_hdr_v1>() == HDR_LEN);
/// The largest frame either way (without the header): a 64 KiB packet and its
/// Ethernet header. Longer ones are dropped.
pub const MAX_FRAME: usize = 65536 + 14;
/// Descriptors of one chain, at most: a queue's size (a driver's chain is never
/// longer, virtio 1.x 2.7.5.3.1). Longer ones, which only an indirect table can
/// make, are dropped after this many.
pub const MAX_CHAIN: usize = QUEUE_SIZE as usize;
/// Frames each way per pass before the thread looks at the other side.
pub const BATCH: usize = 64;
/// How long the thread keeps polling after the last frame before it sleeps.
pub const POLL_WINDOW: Duration = Duration::from_micros(80);

/// The features offered.
pub const FEATURES: u64 = 1 << VIRTIO_F_VERSION_1
    | 1 << VIRTIO_NET_F_MAC
    | 1 << VIRTIO_NET_F_MTU
    | 1 << VIRTIO_NET_F_STATUS
    | 1 << VIRTIO_RING_F_EVENT_IDX;

/// Offered too when the back end carries the header (`Backend::offloads`).
pub const OFFLOADS: u64 = 1 << VIRTIO_NET_F_CSUM | 1 << VIRTIO_NET_F_GUEST_CSUM;

/// The device's counters, for `--stats`.
#[derive(Debug, Default)]
pub struct NetStats {
    /// A device exists.
    pub present: AtomicBool,
    pub rx_frames: AtomicU64,
    pub rx_bytes: AtomicU64,
    pub tx_frames: AtomicU64,
    pub tx_bytes: AtomicU64,
    /// QueueNotify writes (each one an exit).
    pub doorbells: AtomicU64,
    /// Times the guest was told about used buffers (a kick of its halted vCPUs).
    pub kicks: AtomicU64,
    /// Frames dropped either way (bad chains, no room, back end full or gone).
    pub drops: AtomicU64,
    /// Frames sent with their checksum left to the host (checksum offload).
    pub csum_offloaded: AtomicU64,
}

/// The one network device's counters.
pub static STATS: NetStats = NetStats {
    present: AtomicBool::new(false),
    rx_frames: AtomicU64::new(0),
    rx_bytes: AtomicU64::new(0),
    tx_frames: AtomicU64::new(0),
    tx_bytes: AtomicU64::new(0),
    doorbells: AtomicU64::new(0),
    kicks: AtomicU64::new(0),
    drops: AtomicU64::new(0),
    csum_offloaded: AtomicU64::new(0),
};

/// Where frames go and come from: passt, a TAP device, or a test's fake.
pub trait Backend: Send {
    /// Sends one Ethernet frame (with the virtio header in front if `offloads`). A
    /// frame the back end cannot take now is dropped by it (`Ok(false)`), as a full
    /// link would.
    fn send(&mut self, frame: &[u8]) -> std::io::Result<bool>;
    /// Receives one frame into `buf` (at least `HDR_LEN + MAX_FRAME` long; with
    /// the virtio header in front if `offloads`): its length, or None when there
    /// is none now. An error means the back end is gone.
    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>>;
    /// Whether frames carry the virtio header both ways (then checksum offloads
    /// are offered to the guest).
    fn offloads(&self) -> bool {
        false
    }
    /// The descriptor that becomes readable when a frame arrives.
    fn fd(&self) -> RawFd;
    /// Whether frames can be sent now; false makes the transmit ring wait (and the
    /// thread wait for `fd` to become writable).
    fn can_send(&self) -> bool {
        true
    }
    /// Writes out whatever `send` queued.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    /// What the back end is, for messages.
    fn name(&self) -> String;
}

/// The device's configuration: its MAC address, MTU, and whether its back end
/// carries the virtio header (`Backend::offloads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConfig {
    pub mac: [u8; 6],
    pub mtu: u16,
    pub offloads: bool,
}

/// The configuration space: mac[6], status u16, max_virtqueue_pairs u16, mtu u16.
fn config_space(c: &NetConfig) -> Vec<u8> {
    let mut v = c.mac.to_vec();
    v.extend((VIRTIO_NET_S_LINK_UP as u16).to_le_bytes());
    v.extend(1u16.to_le_bytes());
    v.extend(c.mtu.to_le_bytes());
    v
}

/// The device: its registers (shared by the vCPUs and the I/O thread) and the
/// doorbell the I/O thread sleeps on.
pub struct NetDevice {
    transport: Mutex<Transport>,
    doorbell: EventFd,
    /// How the guest is told about used buffers (set once the machine exists).
    wake: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The VM is ending: the I/O thread returns (the back end going away is no news).
    ending: AtomicBool,
    /// Passes of the I/O thread over the queues (a thread that spun would make
    /// millions a second; the tests count them).
    passes: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NetDevice {
    pub fn new(mem: GuestMemoryMmap, config: &NetConfig) -> Result<Arc<NetDevice>, VirtioError> {
        let features = if config.offloads { FEATURES | OFFLOADS } else { FEATURES };
        let transport = Transport::new(mem, VIRTIO_ID_NET, features, &[QUEUE_SIZE, QUEUE_SIZE], config_space(config));
        let doorbell = EventFd::new(EFD_NONBLOCK).map_err(VirtioError::Start)?;
        STATS.present.store(true, Relaxed);
        Ok(Arc::new(NetDevice {
            transport: Mutex::new(transport),
            doorbell,
            wake: OnceLock::new(),
            ending: AtomicBool::new(false),
            passes: AtomicU64::new(0),
        }))
    }

    /// Sets how the guest is told about used buffers (`Machine::wake_halted`).
    pub fn set_wake(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.wake.set(wake);
    }

    /// The VM is ending (its back end is about to be stopped): the I/O thread
    /// returns, whatever state the guest left the queues in, and says nothing.
    pub fn end(&self) {
        self.ending.store(true, Relaxed);
        self.ring_doorbell();
    }

    fn ring_doorbell(&self) {
        let _ = self.doorbell.write(1);
    }

    fn tell_guest(&self, t: &mut Transport) {
        t.used_buffers();
        STATS.kicks.fetch_add(1, Relaxed);
        if let Some(w) = self.wake.get() {
            w();
        }
    }

    /// Starts the I/O thread between the rings and `backend`.
    pub fn start(self: &Arc<Self>, backend: Box<dyn Backend>) -> Result<IoThread, VirtioError> {
        let stop = EventFd::new(EFD_NONBLOCK).map_err(VirtioError::Start)?;
        let stop_for_thread = stop.try_clone().map_err(VirtioError::Start)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let stopping_for_thread = stopping.clone();
        let dev = self.clone();
        let thread = std::thread::Builder::new()
            .name("net-io".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                crate::sys::signals::block_forwarded();
                IoLoop::new(dev, backend, stop_for_thread, stopping_for_thread).and_then(|mut l| l.run())
            })
            .map_err(VirtioError::Start)?;
        Ok(IoThread { stop, stopping, thread: Some(thread) })
    }
}

impl MmioDevice for NetDevice {
    fn read(&self, offset: u64, len: usize) -> MmioAction {
        MmioAction::Value(lock(&self.transport).read(offset, len))
    }

    fn write(&self, offset: u64, data: u64, len: usize) -> MmioAction {
        if offset == u64::from(VIRTIO_MMIO_QUEUE_NOTIFY) {
            // The doorbell: the I/O thread does the work; no lock on the vCPU's path.
            STATS.doorbells.fetch_add(1, Relaxed);
            self.ring_doorbell();
            return MmioAction::Done;
        }
        let effect = lock(&self.transport).write(offset, data, len);
        if effect != Effect::None {
            self.ring_doorbell();
        }
        MmioAction::Done
    }
}

/// The running I/O thread; stopping it (or dropping this) joins it. The thread
/// looks at `stopping` on every turn of its loop, busy or not, and the eventfd
/// wakes it from its sleep.
pub struct IoThread {
    stop: EventFd,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl IoThread {
    pub fn stop(&mut self) {
        self.stopping.store(true, Relaxed);
        let _ = self.stop.write(1);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for IoThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A queue the guest broke: the device needs a reset.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken;

type Chain<'a> = DescriptorChain<&'a GuestMemoryMmap>;

/// The next available chain of queue `which`, None when there is none; Err when the
/// ring is broken (an index jump past the queue size, a ring that does not map).
fn next_chain<'m>(
    mem: &'m GuestMemoryMmap,
    queues: &mut [QueueSlot],
    which: usize,
) -> Result<Option<Chain<'m>>, Broken> {
    let Some(slot) = queues.get_mut(which) else { return Ok(None) };
    if !slot.queue.ready() {
        return Ok(None);
    }
    let mut it = slot.queue.iter(mem).map_err(|_| Broken)?;
    Ok(it.next())
}

fn add_used(mem: &GuestMemoryMmap, queues: &mut [QueueSlot], which: usize, head: u16, len: u32) -> Result<(), Broken> {
    let slot = queues.get_mut(which).ok_or(Broken)?;
    slot.queue.add_used(mem, head, len).map_err(|_| Broken)
}

/// Whether the driver asked to hear about the used entries just added.
fn guest_wants_to_know(t: &mut Transport, which: usize) -> Result<bool, Broken> {
    let Transport { mem, queues, .. } = t;
    let slot = queues.get_mut(which).ok_or(Broken)?;
    slot.queue.needs_notification(&*mem).map_err(|_| Broken)
}

/// The frame of a transmit chain, with its header, copied into `buf` (whose length
/// is the most taken); None if the chain is unusable (a buffer that does not map,
/// shorter than the header, longer than `buf`, more than `MAX_CHAIN` descriptors).
/// Device-writable descriptors are skipped.
fn read_tx(mem: &GuestMemoryMmap, chain: Chain<'_>, buf: &mut [u8]) -> Option<usize> {
    let mut n = 0usize;
    for (i, d) in chain.enumerate() {
        if i >= MAX_CHAIN {
            return None;
        }
        if d.is_write_only() {
            continue;
        }
        let end = n.checked_add(d.len() as usize).filter(|&e| e <= buf.len())?;
        mem.read_slice(&mut buf[n..end], d.addr()).ok()?;
        n = end;
    }
    (n >= HDR_LEN).then_some(n)
}

/// Sends what the guest posted on the transmit queue, at most `budget` frames.
/// Returns how many chains it took.
pub fn process_tx(
    t: &mut Transport,
    backend: &mut dyn Backend,
    buf: &mut [u8],
    budget: usize,
) -> Result<usize, Broken> {
    let mut done = 0;
    let offloads = backend.offloads();
    let csum = t.acked() & 1 << VIRTIO_NET_F_CSUM != 0;
    while done < budget && backend.can_send() {
        let Some(chain) = next_chain(&t.mem, &mut t.queues, TX)? else { break };
        let head = chain.head_index();
        let frame = read_tx(&t.mem, chain, buf).map(|n| {
            if offloads {
                tx_header(&mut buf[..HDR_LEN], csum);
                if buf[0] != 0 {
                    STATS.csum_offloaded.fetch_add(1, Relaxed);
                }
                &buf[..n]
            } else {
                &buf[HDR_LEN..n]
            }
        });
        match frame {
            Some(frame) => match backend.send(frame) {
                Ok(true) => {
                    STATS.tx_frames.fetch_add(1, Relaxed);
                    STATS.tx_bytes.fetch_add((frame.len() - if offloads { HDR_LEN } else { 0 }) as u64, Relaxed);
                }
                Ok(false) | Err(_) => {
                    STATS.drops.fetch_add(1, Relaxed);
                }
            },
            None => {
                STATS.drops.fetch_add(1, Relaxed);
            }
        }
        add_used(&t.mem, &mut t.queues, TX, head, 0)?;
        done += 1;
    }
    Ok(done)
}

/// A received frame waiting for a receive buffer.
#[derive(Debug, Default)]
pub struct Pending {
    len: Option<usize>,
    /// The back end failed (it is gone).
    pub backend_gone: Option<String>,
}

/// What the back end may ask of the host in a transmitted frame's header: the
/// guest's checksum request if it negotiated CSUM, nothing else (no segmentation,
/// which was not offered; num_buffers is the receiver's).
fn tx_header(hdr: &mut [u8], csum: bool) {
    hdr[0] &= if csum { VIRTIO_NET_HDR_F_NEEDS_CSUM as u8 } else { 0 };
    if hdr[0] == 0 {
        hdr[6..10].fill(0);
    }
    hdr[1..6].fill(0);
    hdr[10..12].fill(0);
}

/// The header a received frame goes to the guest with, from the back end's
/// `hdr` (all zero without offloads): its checksum marks if the driver took
/// GUEST_CSUM, else none, after completing a checksum left to complete in
/// `frame` here; num_buffers 1.
fn rx_header(hdr: &[u8], frame: &mut [u8], guest_csum: bool) -> [u8; HDR_LEN] {
    let mut h = [0u8; HDR_LEN];
    let flags = hdr[0] & (VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID) as u8;
    if guest_csum {
        h[0] = flags;
        if flags & VIRTIO_NET_HDR_F_NEEDS_CSUM as u8 != 0 {
            h[6..10].copy_from_slice(&hdr[6..10]);
        }
    } else if flags & VIRTIO_NET_HDR_F_NEEDS_CSUM as u8 != 0 {
        let start = u16::from_le_bytes([hdr[6], hdr[7]]) as usize;
        let offset = u16::from_le_bytes([hdr[8], hdr[9]]) as usize;
        complete_checksum(frame, start, offset);
    }
    h[10..12].copy_from_slice(&1u16.to_le_bytes()); // num_buffers
    h
}

/// Completes the Internet checksum of `frame[start..]` whose field at
/// `start + offset` holds the pseudo-header's sum (what a partial checksum is);
/// nothing if the field lies outside the frame.
fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) {
    let Some(at) = start.checked_add(offset).filter(|&a| a.checked_add(2).is_some_and(|e| e <= frame.len())) else {
        return;
    };
    let mut sum: u64 = 0;
    let mut words = frame[start..].chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    frame[at..at + 2].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// Writes the header and the frame into a receive chain; the bytes written, or
/// None if the chain cannot hold them, a device-writable buffer of it does not map
/// or it has more than `MAX_CHAIN` descriptors (then nothing is written).
/// Read-only descriptors are skipped.
fn write_rx(mem: &GuestMemoryMmap, chain: Chain<'_>, hdr: &[u8; HDR_LEN], frame: &[u8]) -> Option<usize> {
    let mut bufs = [(GuestAddress(0), 0usize); MAX_CHAIN];
    let (mut count, mut room) = (0, 0usize);
    for (i, d) in chain.enumerate() {
        if i >= MAX_CHAIN {
            return None;
        }
        let len = d.len() as usize;
        if !d.is_write_only() {
            continue;
        }
        if !GuestMemoryBackend::check_range(mem, d.addr(), len) {
            return None;
        }
        bufs[count] = (d.addr(), len);
        count += 1;
        room = room.saturating_add(len);
    }
    let need = HDR_LEN + frame.len();
    if room < need {
        return None;
    }
    let mut done = 0;
    for &(addr, len) in &bufs[..count] {
        let mut at = 0;
        while at < len && done < need {
            let (part, off) = if done < HDR_LEN { (&hdr[..], done) } else { (frame, done - HDR_LEN) };
            let k = (len - at).min(part.len() - off);
            mem.write_slice(&part[off..off + k], GuestAddress(addr.0.checked_add(at as u64)?)).ok()?;
            at += k;
            done += k;
        }
    }
    Some(need)
}

/// Moves frames from the back end into the guest's receive buffers, at most
/// `budget`. Returns how many chains it used, and whether a frame is left waiting
/// for a buffer.
pub fn process_rx(
    t: &mut Transport,
    backend: &mut dyn Backend,
    buf: &mut [u8],
    pending: &mut Pending,
    budget: usize,
) -> Result<(usize, bool), Broken> {
    let mut done = 0;
    let offloads = backend.offloads();
    let guest_csum = t.acked() & 1 << VIRTIO_NET_F_GUEST_CSUM != 0;
    while done < budget {
        let len = match pending.len {
            Some(l) => l,
            None if pending.backend_gone.is_some() => break,
            None => match backend.recv(buf) {
                Ok(Some(l)) if l <= buf.len() && (!offloads || l >= HDR_LEN) => l,
                Ok(Some(_)) => {
                    STATS.drops.fetch_add(1, Relaxed);
                    continue;
                }
                Ok(None) => break,
                Err(e) => {
                    pending.backend_gone = Some(e.to_string());
                    break;
                }
            },
        };
        pending.len = Some(len);
        let Some(chain) = next_chain(&t.mem, &mut t.queues, RX)? else {
            return Ok((done, true));
        };
        let head = chain.head_index();
        pending.len = None;
        let (hdr, frame) = if offloads {
            let (h, f) = buf[..len].split_at_mut(HDR_LEN);
            (rx_header(h, f, guest_csum), &f[..])
        } else {
            (rx_header(&[0; HDR_LEN], &mut [], false), &buf[..len])
        };
        let written = match write_rx(&t.mem, chain, &hdr, frame) {
            Some(n) => {
                STATS.rx_frames.fetch_add(1, Relaxed);
                STATS.rx_bytes.fetch_add(frame.len() as u64, Relaxed);
                n
            }
            None => {
                STATS.drops.fetch_add(1, Relaxed);
                0
            }
        };
        add_used(&t.mem, &mut t.queues, RX, head, written as u32)?;
        done += 1;
    }
    Ok((done, false))
}

/// What one pass over both queues did.
#[derive(Debug, Default, PartialEq, Eq)]
struct Pass {
    work: bool,
    rx_waiting: bool,
}

const DOORBELL: u64 = 1;
const BACKEND: u64 = 2;
const STOP: u64 = 3;

/// Where frames go once the back end is gone: nowhere (dropped, as on a dead link).
struct Gone;

impl Backend for Gone {
    fn send(&mut self, _frame: &[u8]) -> std::io::Result<bool> {
        Ok(false)
    }
    fn recv(&mut self, _buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        Ok(None)
    }
    fn fd(&self) -> RawFd {
        -1
    }
    fn name(&self) -> String {
        "none".into()
    }
}

/// The I/O thread's state.
struct IoLoop {
    dev: Arc<NetDevice>,
    backend: Box<dyn Backend>,
    stop: EventFd,
    stopping: Arc<AtomicBool>,
    epoll: Epoll,
    /// What the back end's descriptor is watched for now.
    watching: EventSet,
    buf: Vec<u8>,
    rx_buf: Vec<u8>,
    pending: Pending,
    reported_gone: bool,
}

impl IoLoop {
    fn new(
        dev: Arc<NetDevice>,
        backend: Box<dyn Backend>,
        stop: EventFd,
        stopping: Arc<AtomicBool>,
    ) -> std::io::Result<IoLoop> {
        let epoll = Epoll::new()?;
        epoll.ctl(ControlOperation::Add, dev.doorbell.as_raw_fd(), EpollEvent::new(EventSet::IN, DOORBELL))?;
        epoll.ctl(ControlOperation::Add, stop.as_raw_fd(), EpollEvent::new(EventSet::IN, STOP))?;
        epoll.ctl(ControlOperation::Add, backend.fd(), EpollEvent::new(EventSet::empty(), BACKEND))?;
        Ok(IoLoop {
            dev,
            backend,
            stop,
            stopping,
            epoll,
            watching: EventSet::empty(),
            buf: vec![0; HDR_LEN + MAX_FRAME],
            rx_buf: vec![0; MAX_FRAME],
            pending: Pending::default(),
            reported_gone: false,
        })
    }

    /// One pass: transmit, then receive, then tell the guest if it asked.
    fn pass(&mut self) -> Pass {
        let dev = self.dev.clone();
        dev.passes.fetch_add(1, Relaxed);
        let mut t = lock(&dev.transport);
        if !t.active() {
            self.pending.len = None;
            return Pass::default();
        }
        let mut nowhere = Gone;
        let backend: &mut dyn Backend =
            if self.pending.backend_gone.is_some() { &mut nowhere } else { &mut *self.backend };
        let r = (|| {
            let sent = process_tx(&mut t, backend, &mut self.buf, BATCH)?;
            if let Err(e) = backend.flush() {
                self.pending.backend_gone.get_or_insert(e.to_string());
            }
            let (received, rx_waiting) = process_rx(&mut t, backend, &mut self.rx_buf, &mut self.pending, BATCH)?;
            let tell =
                (sent > 0 && guest_wants_to_know(&mut t, TX)?) | (received > 0 && guest_wants_to_know(&mut t, RX)?);
            if tell {
                dev.tell_guest(&mut t);
            }
            Ok::<_, Broken>(Pass { work: sent + received > 0, rx_waiting })
        })();
        match r {
            Ok(p) => p,
            Err(Broken) => {
                t.needs_reset();
                self.pending.len = None;
                Pass::default()
            }
        }
    }

    /// Asks the guest for a doorbell on the next transmit (and, if a frame waits,
    /// receive) buffer. False if buffers came meanwhile: poll again instead. Buffers
    /// on the transmit queue while the back end cannot take them are not news: the
    /// thread waits for the back end instead (polling would spin until it drains).
    fn arm(&mut self, rx_waiting: bool) -> bool {
        let tx_blocked = self.pending.backend_gone.is_none() && !self.backend.can_send();
        let mut t = lock(&self.dev.transport);
        if !t.active() {
            return true;
        }
        let Transport { mem, queues, .. } = &mut *t;
        let mut quiet = true;
        for (i, slot) in queues.iter_mut().enumerate() {
            if !slot.queue.ready() || (i == RX && !rx_waiting) {
                continue;
            }
            match slot.queue.enable_notification(&*mem) {
                Ok(more) => quiet &= !more || (i == TX && tx_blocked),
                // The ring broke: the next pass finds it and flags the device (it
                // reads the same ring the same way), after which this is not reached.
                Err(_) => quiet = false,
            }
        }
        quiet
    }

    /// The back end is gone: its descriptor leaves the epoll set (a closed socket
    /// reports EPOLLHUP whatever it is watched for, which would wake the thread
    /// for ever).
    fn forget_backend(&mut self) {
        let _ = self.epoll.ctl(ControlOperation::Delete, self.backend.fd(), EpollEvent::default());
        self.watching = EventSet::empty();
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Relaxed) || self.dev.ending.load(Relaxed)
    }

    fn watch_backend(&mut self, want: EventSet) {
        if want != self.watching {
            let _ = self.epoll.ctl(ControlOperation::Modify, self.backend.fd(), EpollEvent::new(want, BACKEND));
            self.watching = want;
        }
    }

    fn run(&mut self) -> std::io::Result<()> {
        let mut events = vec![EpollEvent::default(); 4];
        let mut last_work = Instant::now();
        loop {
            if self.stopping() {
                return Ok(());
            }
            let p = self.pass();
            if let (Some(why), false) = (self.pending.backend_gone.clone(), self.reported_gone) {
                self.reported_gone = true;
                self.forget_backend();
                if self.stopping() {
                    return Ok(());
                }
                say!("onering: network back end {} stopped: {why}; the VM's network is down", self.backend.name());
            }
            if p.work {
                last_work = Instant::now();
                continue;
            }
            if last_work.elapsed() < POLL_WINDOW {
                std::hint::spin_loop();
                continue;
            }
            if !self.arm(p.rx_waiting) {
                continue;
            }
            if self.pending.backend_gone.is_none() {
                let active = lock(&self.dev.transport).active();
                let mut want = EventSet::empty();
                if active && !p.rx_waiting {
                    want |= EventSet::IN;
                }
                if !self.backend.can_send() {
                    want |= EventSet::OUT;
                }
                self.watch_backend(want);
            }
            let n = match self.epoll.wait(-1, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => return Err(e),
            };
            for ev in events.iter().take(n) {
                match ev.data() {
                    STOP => return Ok(()),
                    DOORBELL => {
                        let _ = self.dev.doorbell.read();
                    }
                    _ => {}
                }
            }
            if self.stop.read().is_ok() {
                return Ok(());
            }
            last_work = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::mmio::tests::{memory, negotiate, set_up_queue, RUNNING};
    use super::*;
    use std::collections::VecDeque;
    use std::io::{Read, Write};
    use virtio_bindings::virtio_config::VIRTIO_CONFIG_S_NEEDS_RESET;
    use virtio_bindings::virtio_mmio::VIRTIO_MMIO_STATUS;
    use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
    use virtio_queue::desc::split::Descriptor;
    use vm_memory::{Bytes, GuestAddress};

    /// Frames in and out, kept in memory.
    #[derive(Default)]
    struct Fake {
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
        incoming: VecDeque<Vec<u8>>,
        fd: Option<EventFd>,
    }

    impl Backend for Fake {
        fn send(&mut self, frame: &[u8]) -> std::io::Result<bool> {
            lock(&self.sent).push(frame.to_vec());
            Ok(true)
        }
        fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
            Ok(self.incoming.pop_front().map(|f| {
                buf[..f.len()].copy_from_slice(&f);
                f.len()
            }))
        }
        fn fd(&self) -> RawFd {
            self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
        }
        fn name(&self) -> String {
            "fake".into()
        }
    }

    const RXQ: u64 = 0x10000;
    const TXQ: u64 = 0x20000;

    /// A running device's transport, queues at RXQ and TXQ (descriptors, avail +0x1000,
    /// used +0x2000), EVENT_IDX on.
    fn running() -> Transport {
        let mut t = Transport::new(
            memory(),
            VIRTIO_ID_NET,
            FEATURES,
            &[QUEUE_SIZE, QUEUE_SIZE],
            config_space(&NetConfig { mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56], mtu: 1500, offloads: false }),
        );
        negotiate(&mut t, FEATURES);
        assert_eq!(set_up_queue(&mut t, RX as u32, 16, RXQ), Effect::None);
        assert_eq!(set_up_queue(&mut t, TX as u32, 16, TXQ), Effect::None);
        assert_eq!(t.write(u64::from(VIRTIO_MMIO_STATUS), u64::from(RUNNING), 4), Effect::Activated);
        t
    }

    fn desc(t: &Transport, q: u64, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let d = Descriptor::new(addr, len, flags, next);
        t.mem.write_obj(d, GuestAddress(q + 16 * u64::from(i))).unwrap();
    }

    /// Puts head `head` in the avail ring at position `idx` and publishes idx + 1.
    fn post(t: &Transport, q: u64, idx: u16, head: u16) {
        let size = 16;
        t.mem.write_obj(head, GuestAddress(q + 0x1000 + 4 + 2 * u64::from(idx % size))).unwrap();
        t.mem.write_obj(idx.wrapping_add(1), GuestAddress(q + 0x1000 + 2)).unwrap();
    }

    fn used(t: &Transport, q: u64, i: u16) -> (u16, u32, u32) {
        let idx: u16 = t.mem.read_obj(GuestAddress(q + 0x2000 + 2)).unwrap();
        let id: u32 = t.mem.read_obj(GuestAddress(q + 0x2000 + 4 + 8 * u64::from(i))).unwrap();
        let len: u32 = t.mem.read_obj(GuestAddress(q + 0x2000 + 8 + 8 * u64::from(i))).unwrap();
        (idx, id, len)
    }

    fn bufs() -> (Vec<u8>, Vec<u8>) {
        (vec![0; HDR_LEN + MAX_FRAME], vec![0; MAX_FRAME])
    }

    /// The one's complement sum of `b` (16-bit big-endian words), folded.
    fn ones_sum(b: &[u8]) -> u16 {
        let mut sum: u64 = b.chunks(2).map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn a_checksum_left_to_complete_is_completed_for_a_driver_without_guest_csum() {
        // An Ethernet frame with a "UDP" part from byte 34, its checksum field at
        // 34 + 6 holding a pseudo-header sum, an odd length.
        let mut frame: Vec<u8> = (0..101u32).map(|i| (i * 7 + 3) as u8).collect();
        frame[40..42].copy_from_slice(&0x1234u16.to_be_bytes());
        let pseudo = 0x1234u16;
        let mut hdr = [0u8; HDR_LEN];
        hdr[0] = VIRTIO_NET_HDR_F_NEEDS_CSUM as u8;
        hdr[6..8].copy_from_slice(&34u16.to_le_bytes());
        hdr[8..10].copy_from_slice(&6u16.to_le_bytes());
        hdr[10] = 9; // (the back end's num_buffers is not passed on)
        let mut marked = frame.clone();
        let h = rx_header(&hdr, &mut marked, true);
        assert_eq!((h[0], &h[6..10], &h[10..12]), (1, &hdr[6..10], &[1, 0][..]), "passed on as it came");
        assert_eq!(marked, frame, "a driver with GUEST_CSUM completes it itself");
        let h = rx_header(&hdr, &mut frame, false);
        assert_eq!(h, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0], "no marks for a driver without GUEST_CSUM");
        // Valid: with the pseudo-header's sum, the part's sum (its checksum
        // included) is all ones.
        let with = u32::from(ones_sum(&frame[34..])) + u32::from(pseudo);
        assert_eq!(((with & 0xffff) + (with >> 16)) as u16, 0xffff);
        let mut zeroed = frame.clone();
        zeroed[40..42].fill(0);
        let data = ones_sum(&zeroed[34..]);
        let total = u32::from(data) + u32::from(pseudo);
        let folded = ((total & 0xffff) + (total >> 16)) as u16;
        assert_eq!(u16::from_be_bytes([frame[40], frame[41]]), !folded);
        // A field outside the frame: left alone.
        let mut short = vec![1u8; 20];
        complete_checksum(&mut short, 18, 2);
        complete_checksum(&mut short, usize::MAX, 2);
        assert_eq!(short, vec![1u8; 20]);
    }

    #[test]
    fn a_guest_asks_the_host_only_what_it_negotiated() {
        let mut h = [0xffu8; HDR_LEN];
        tx_header(&mut h, true);
        assert_eq!(h, [1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0], "a checksum request, no segmentation");
        let mut h = [0xffu8; HDR_LEN];
        tx_header(&mut h, false);
        assert_eq!(h, [0; HDR_LEN], "without CSUM: nothing");
        let mut h = [0u8; HDR_LEN];
        h[0] = VIRTIO_NET_HDR_F_DATA_VALID as u8;
        h[6] = 5;
        tx_header(&mut h, true);
        assert_eq!(h, [0; HDR_LEN], "DATA_VALID means nothing on transmit");
    }

    #[test]
    fn a_transmitted_frame_reaches_the_back_end_without_its_header() {
        let mut t = running();
        // Header in one descriptor, the frame split over two more.
        t.mem.write_slice(&[0xee; HDR_LEN], GuestAddress(0x40000)).unwrap();
        t.mem.write_slice(b"hello, ", GuestAddress(0x41000)).unwrap();
        t.mem.write_slice(b"world", GuestAddress(0x42000)).unwrap();
        desc(&t, TXQ, 3, 0x40000, HDR_LEN as u32, VRING_DESC_F_NEXT as u16, 7);
        desc(&t, TXQ, 7, 0x41000, 7, VRING_DESC_F_NEXT as u16, 1);
        desc(&t, TXQ, 1, 0x42000, 5, 0, 0);
        post(&t, TXQ, 0, 3);
        let mut fake = Fake::default();
        let (mut buf, _) = bufs();
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Ok(1));
        assert_eq!(*lock(&fake.sent), vec![b"hello, world".to_vec()]);
        assert_eq!(used(&t, TXQ, 0), (1, 3, 0));
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Ok(0), "nothing more");
    }

    #[test]
    fn a_received_frame_lands_with_its_header_and_a_used_entry() {
        let mut t = running();
        desc(&t, RXQ, 0, 0x50000, 2048, VRING_DESC_F_WRITE as u16, 0);
        post(&t, RXQ, 0, 0);
        let mut fake = Fake { incoming: VecDeque::from([b"a frame".to_vec()]), ..Default::default() };
        let (_, mut rx) = bufs();
        let mut pending = Pending::default();
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((1, false)));
        let mut got = [0u8; HDR_LEN + 7];
        t.mem.read_slice(&mut got, GuestAddress(0x50000)).unwrap();
        assert_eq!(&got[..10], &[0; 10]);
        assert_eq!(u16::from_le_bytes([got[10], got[11]]), 1, "num_buffers");
        assert_eq!(&got[HDR_LEN..], b"a frame");
        assert_eq!(used(&t, RXQ, 0), (1, 0, (HDR_LEN + 7) as u32));
    }

    #[test]
    fn a_frame_waits_for_a_receive_buffer() {
        let mut t = running();
        let mut fake = Fake { incoming: VecDeque::from([vec![1; 60], vec![2; 60]]), ..Default::default() };
        let (_, mut rx) = bufs();
        let mut pending = Pending::default();
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((0, true)));
        desc(&t, RXQ, 5, 0x50000, 2048, VRING_DESC_F_WRITE as u16, 0);
        post(&t, RXQ, 0, 5);
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((1, true)));
        let first: u8 = t.mem.read_obj(GuestAddress(0x50000 + HDR_LEN as u64)).unwrap();
        assert_eq!(first, 1, "the first frame first");
        assert_eq!(fake.incoming.len(), 0, "the second one is held, not lost");
    }

    #[test]
    fn a_buffer_too_small_comes_back_empty_and_the_frame_is_dropped() {
        let mut t = running();
        desc(&t, RXQ, 0, 0x50000, 20, VRING_DESC_F_WRITE as u16, 0);
        post(&t, RXQ, 0, 0);
        let mut fake = Fake { incoming: VecDeque::from([vec![1; 60]]), ..Default::default() };
        let (_, mut rx) = bufs();
        let mut pending = Pending::default();
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((1, false)));
        assert_eq!(used(&t, RXQ, 0), (1, 0, 0));
    }

    /// Hostile transmit chains: each is dropped (returned used with length 0) or
    /// breaks the queue; nothing panics or hangs, and the back end gets nothing.
    #[test]
    fn hostile_transmit_chains_are_dropped() {
        type Setup = fn(&Transport);
        let cases: &[(&str, Setup)] = &[
            ("a loop", |t| {
                desc(t, TXQ, 0, 0x40000, 100, VRING_DESC_F_NEXT as u16, 1);
                desc(t, TXQ, 1, 0x40000, 100, VRING_DESC_F_NEXT as u16, 0);
            }),
            ("a self loop", |t| desc(t, TXQ, 0, 0x40000, 100, VRING_DESC_F_NEXT as u16, 0)),
            ("outside memory", |t| desc(t, TXQ, 0, 1 << 40, 100, 0, 0)),
            ("past the end of memory", |t| desc(t, TXQ, 0, (1 << 20) - 10, 100, 0, 0)),
            ("an absurd length", |t| desc(t, TXQ, 0, 0x40000, u32::MAX, 0, 0)),
            ("a frame too long", |t| desc(t, TXQ, 0, 0x0, (HDR_LEN + MAX_FRAME + 1) as u32, 0, 0)),
            ("shorter than the header", |t| desc(t, TXQ, 0, 0x40000, 4, 0, 0)),
            ("a next index past the table", |t| desc(t, TXQ, 0, 0x40000, 100, VRING_DESC_F_NEXT as u16, 999)),
            ("only writable buffers", |t| desc(t, TXQ, 0, 0x40000, 100, VRING_DESC_F_WRITE as u16, 0)),
            ("an indirect table outside memory", |t| desc(t, TXQ, 0, 1 << 40, 160, 4, 0)),
        ];
        for (what, setup) in cases {
            let mut t = running();
            setup(&t);
            post(&t, TXQ, 0, 0);
            let mut fake = Fake::default();
            let (mut buf, _) = bufs();
            let start = Instant::now();
            let r = process_tx(&mut t, &mut fake, &mut buf, BATCH);
            assert!(start.elapsed() < Duration::from_secs(1), "{what}: took too long");
            // A loop or a bad next index ends the chain where virtio-queue stops
            // walking it (after at most the queue size): what it read is sent, at most
            // 16 descriptors' worth; anything else sends nothing.
            let sent: usize = lock(&fake.sent).iter().map(Vec::len).sum();
            let bounded = ["a loop", "a self loop", "a next index past the table"].contains(what);
            assert!(sent == 0 || (bounded && sent <= 16 * 100), "{what}: sent {sent} bytes");
            assert_eq!(r, Ok(1), "{what}");
            assert_eq!(used(&t, TXQ, 0), (1, 0, 0), "{what}");
        }
    }

    /// An indirect table (not offered, but `virtio-queue` follows it) can make a
    /// chain of 65535 descriptors, here a loop of one: it is dropped after
    /// `MAX_CHAIN`, both ways, and nothing is sent or written.
    #[test]
    fn chains_longer_than_the_queue_are_dropped() {
        const INDIRECT: u16 = 4;
        let mut t = running();
        for (q, flags) in [(TXQ, 0), (RXQ, VRING_DESC_F_WRITE as u16)] {
            desc(&t, q, 0, 0x60000, 0xffff0, INDIRECT, 0);
            // The table's first entry points at itself.
            t.mem
                .write_obj(Descriptor::new(0x40000, 1, flags | VRING_DESC_F_NEXT as u16, 0), GuestAddress(0x60000))
                .unwrap();
            for i in 0..16 {
                post(&t, q, i, 0);
            }
        }
        let mut fake = Fake { incoming: (0..16).map(|_| vec![7; 60]).collect(), ..Default::default() };
        let (mut buf, mut rx) = bufs();
        let start = Instant::now();
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Ok(16));
        assert!(lock(&fake.sent).is_empty(), "a chain of 65535 one-byte buffers was sent");
        let mut pending = Pending::default();
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((16, false)));
        assert_eq!(used(&t, RXQ, 15), (16, 0, 0), "received into a chain of 65535 buffers");
        assert_eq!(t.mem.read_obj::<u8>(GuestAddress(0x40000)).unwrap(), 0);
        assert!(start.elapsed() < Duration::from_secs(1));
        // MAX_CHAIN descriptors are still a chain: a table of that many, in order.
        let mut t = running();
        for i in 0..MAX_CHAIN as u64 {
            let next = Descriptor::new(0x40000 + i, 1, VRING_DESC_F_NEXT as u16, (i + 1) as u16);
            let last = Descriptor::new(0x40000 + i, 1, 0, 0);
            let d = if i + 1 == MAX_CHAIN as u64 { last } else { next };
            t.mem.write_obj(d, GuestAddress(0x60000 + 16 * i)).unwrap();
        }
        desc(&t, TXQ, 0, 0x60000, 16 * MAX_CHAIN as u32, INDIRECT, 0);
        post(&t, TXQ, 0, 0);
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Ok(1));
        assert_eq!(lock(&fake.sent).iter().map(Vec::len).collect::<Vec<_>>(), [MAX_CHAIN - HDR_LEN]);
    }

    #[test]
    fn an_avail_index_jumping_past_the_queue_size_breaks_the_queue() {
        let mut t = running();
        t.mem.write_obj(1000u16, GuestAddress(TXQ + 0x1000 + 2)).unwrap();
        let mut fake = Fake::default();
        let (mut buf, _) = bufs();
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Err(Broken));
        // Within the size but every head out of range: dropped, and add_used refuses.
        let mut t = running();
        post(&t, TXQ, 0, 999);
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Err(Broken));
    }

    #[test]
    fn a_full_ring_of_garbage_is_bounded_by_the_budget() {
        let mut t = running();
        t.mem.write_slice(&[0xff; 0x3000], GuestAddress(TXQ)).unwrap();
        t.mem.write_obj(16u16, GuestAddress(TXQ + 0x1000 + 2)).unwrap();
        let mut fake = Fake::default();
        let (mut buf, _) = bufs();
        // Heads 0xffff are out of range: the queue breaks, no hang.
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, 4), Err(Broken));
    }

    #[test]
    fn queues_not_ready_do_nothing() {
        let mut t = Transport::new(memory(), VIRTIO_ID_NET, FEATURES, &[QUEUE_SIZE, QUEUE_SIZE], vec![]);
        let mut fake = Fake { incoming: VecDeque::from([vec![1; 60]]), ..Default::default() };
        let (mut buf, mut rx) = bufs();
        assert_eq!(process_tx(&mut t, &mut fake, &mut buf, BATCH), Ok(0));
        let mut pending = Pending::default();
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((0, true)));
    }

    #[test]
    fn event_idx_decides_whether_the_guest_is_told() {
        let mut t = running();
        let used_event =
            |t: &Transport, q: u64, v: u16| t.mem.write_obj(v, GuestAddress(q + 0x1000 + 4 + 2 * 16)).unwrap();
        for i in 0..4u16 {
            desc(&t, RXQ, i, 0x50000 + 0x1000 * u64::from(i), 2048, VRING_DESC_F_WRITE as u16, 0);
            post(&t, RXQ, i, i);
        }
        let (_, mut rx) = bufs();
        let mut pending = Pending::default();
        // The guest wants to hear at the first used entry (used_event 0).
        used_event(&t, RXQ, 0);
        let mut fake = Fake { incoming: VecDeque::from([vec![1; 60]]), ..Default::default() };
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((1, false)));
        assert_eq!(guest_wants_to_know(&mut t, RX), Ok(true));
        // It polls and does not move used_event: the next ones are not told.
        fake.incoming.extend([vec![2; 60], vec![3; 60]]);
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((2, false)));
        assert_eq!(guest_wants_to_know(&mut t, RX), Ok(false));
        // Before it halts it sets used_event to what it has seen (3): told at the 4th.
        used_event(&t, RXQ, 3);
        fake.incoming.push_back(vec![4; 60]);
        assert_eq!(process_rx(&mut t, &mut fake, &mut rx, &mut pending, BATCH), Ok((1, false)));
        assert_eq!(guest_wants_to_know(&mut t, RX), Ok(true));
    }

    /// A back end over one end of a socket pair that takes no frame (passt not
    /// reading: `can_send` false) or drops every one; it counts the frames it is
    /// offered.
    struct Stuck(std::os::unix::net::UnixStream, Arc<AtomicU64>, bool);

    impl Backend for Stuck {
        fn send(&mut self, _frame: &[u8]) -> std::io::Result<bool> {
            self.1.fetch_add(1, Relaxed);
            Ok(false)
        }
        fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
            match (&self.0).read(buf) {
                Ok(0) => Err(std::io::Error::other("closed")),
                Ok(n) => Ok(Some(n)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e),
            }
        }
        fn fd(&self) -> RawFd {
            self.0.as_raw_fd()
        }
        fn can_send(&self) -> bool {
            self.2
        }
        fn name(&self) -> String {
            "stuck".into()
        }
    }

    /// A running device on its thread, with `backend`.
    fn started(backend: Box<dyn Backend>) -> (Arc<NetDevice>, IoThread) {
        let dev = NetDevice::new(memory(), &NetConfig { mac: [2, 0, 0, 0, 0, 1], mtu: 1500, offloads: false }).unwrap();
        {
            let mut t = lock(&dev.transport);
            negotiate(&mut t, FEATURES);
            set_up_queue(&mut t, RX as u32, 16, RXQ);
            set_up_queue(&mut t, TX as u32, 16, TXQ);
        }
        dev.write(u64::from(VIRTIO_MMIO_STATUS), u64::from(RUNNING), 4);
        let io = dev.start(backend).unwrap();
        (dev, io)
    }

    /// The I/O thread's passes over `ms` milliseconds.
    fn passes_in(dev: &NetDevice, ms: u64) -> u64 {
        let before = dev.passes.load(Relaxed);
        std::thread::sleep(Duration::from_millis(ms));
        dev.passes.load(Relaxed) - before
    }

    /// Frames posted while the back end takes none: the thread waits for the back
    /// end's descriptor to become writable instead of polling the ring; once the
    /// back end is gone (its socket closed: EPOLLHUP for ever) it stops watching it,
    /// drops what the guest sends, and still sleeps.
    #[test]
    fn a_back_end_that_takes_nothing_or_is_gone_does_not_make_the_thread_spin() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        while (&ours).write(&[0; 4096]).is_ok() {} // full: not writable
        let offered = Arc::new(AtomicU64::new(0));
        let (dev, mut io) = started(Box::new(Stuck(ours, offered.clone(), false)));
        let t = || lock(&dev.transport);
        t().mem.write_slice(&[0; HDR_LEN + 4], GuestAddress(0x40000)).unwrap();
        desc(&t(), TXQ, 0, 0x40000, HDR_LEN as u32 + 4, 0, 0);
        post(&t(), TXQ, 0, 0);
        dev.write(u64::from(VIRTIO_MMIO_QUEUE_NOTIFY), 1, 4);
        std::thread::sleep(Duration::from_millis(50));
        let n = passes_in(&dev, 200);
        assert!(n < 100, "{n} passes in 200 ms while the back end took nothing");
        assert_eq!(used(&t(), TXQ, 0).0, 0, "the frame waits");
        // The back end goes: the frame is dropped, and the thread sleeps again.
        drop(theirs);
        let start = Instant::now();
        while used(&t(), TXQ, 0).0 != 1 {
            assert!(start.elapsed() < Duration::from_secs(5), "the frame is dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        let n = passes_in(&dev, 200);
        assert!(n < 100, "{n} passes in 200 ms with the back end gone");
        // More frames to the gone back end: dropped too.
        post(&t(), TXQ, 1, 0);
        dev.write(u64::from(VIRTIO_MMIO_QUEUE_NOTIFY), 1, 4);
        let start = Instant::now();
        while used(&t(), TXQ, 0).0 != 2 {
            assert!(start.elapsed() < Duration::from_secs(5), "the second frame is dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(offered.load(Relaxed), 0, "nothing offered to a back end that could not take it");
        io.stop();
    }

    /// A device the guest broke (needs reset) with frames still arriving from the
    /// back end: the thread sleeps; and it returns when the VM ends, whatever the
    /// queues' state.
    #[test]
    fn a_broken_device_leaves_the_thread_idle_and_the_end_of_the_vm_stops_it() {
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        while (&ours).write(&[0; 4096]).is_ok() {} // full, as passt's would be
        let (dev, mut io) = started(Box::new(Stuck(ours, Arc::new(AtomicU64::new(0)), true)));
        let t = || lock(&dev.transport);
        t().mem.write_obj(999u16, GuestAddress(TXQ + 0x1000 + 2)).unwrap();
        dev.write(u64::from(VIRTIO_MMIO_QUEUE_NOTIFY), 1, 4);
        let start = Instant::now();
        while t().status() & VIRTIO_CONFIG_S_NEEDS_RESET == 0 {
            assert!(start.elapsed() < Duration::from_secs(5), "the device is flagged");
            std::thread::sleep(Duration::from_millis(1));
        }
        theirs.write_all(&[0x55; 600]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let n = passes_in(&dev, 200);
        assert!(n < 100, "{n} passes in 200 ms on a broken device");
        dev.end();
        let start = Instant::now();
        while !io.thread.as_ref().is_some_and(|h| h.is_finished()) {
            assert!(start.elapsed() < Duration::from_secs(5), "the thread returns at the end of the VM");
            std::thread::sleep(Duration::from_millis(1));
        }
        io.stop();
    }

    /// The device end to end on its thread: a doorbell sends, a frame from the back
    /// end is received and the guest woken; a broken ring flags the device.
    #[test]
    fn the_io_thread_moves_frames_and_wakes_the_guest() {
        let mem = memory();
        let dev =
            NetDevice::new(mem.clone(), &NetConfig { mac: [2, 0, 0, 0, 0, 1], mtu: 1500, offloads: false }).unwrap();
        let woken = Arc::new(AtomicU64::new(0));
        let w = woken.clone();
        dev.set_wake(Box::new(move || {
            w.fetch_add(1, Relaxed);
        }));
        {
            let mut t = lock(&dev.transport);
            negotiate(&mut t, FEATURES);
            set_up_queue(&mut t, RX as u32, 16, RXQ);
            set_up_queue(&mut t, TX as u32, 16, TXQ);
        }
        dev.write(u64::from(VIRTIO_MMIO_STATUS), u64::from(RUNNING), 4);
        // A back end whose descriptor is an eventfd we make readable.
        let efd = EventFd::new(EFD_NONBLOCK).unwrap();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let incoming = Arc::new(Mutex::new(VecDeque::<Vec<u8>>::new()));
        struct Shared(Arc<Mutex<Vec<Vec<u8>>>>, Arc<Mutex<VecDeque<Vec<u8>>>>, EventFd);
        impl Backend for Shared {
            fn send(&mut self, f: &[u8]) -> std::io::Result<bool> {
                lock(&self.0).push(f.to_vec());
                Ok(true)
            }
            fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
                let _ = self.2.read();
                Ok(lock(&self.1).pop_front().map(|f| {
                    buf[..f.len()].copy_from_slice(&f);
                    f.len()
                }))
            }
            fn fd(&self) -> RawFd {
                self.2.as_raw_fd()
            }
            fn name(&self) -> String {
                "shared".into()
            }
        }
        let mut io = dev.start(Box::new(Shared(sent.clone(), incoming.clone(), efd.try_clone().unwrap()))).unwrap();
        let t = || lock(&dev.transport);
        let wait = |what: &str, f: &dyn Fn() -> bool| {
            let start = Instant::now();
            while !f() {
                assert!(start.elapsed() < Duration::from_secs(5), "{what}");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // Transmit: post, ring.
        std::thread::sleep(Duration::from_millis(5)); // let it go to sleep
        mem.write_slice(&[0; HDR_LEN], GuestAddress(0x40000)).unwrap();
        mem.write_slice(b"ping", GuestAddress(0x40000 + HDR_LEN as u64)).unwrap();
        desc(&t(), TXQ, 0, 0x40000, HDR_LEN as u32 + 4, 0, 0);
        post(&t(), TXQ, 0, 0);
        dev.write(u64::from(VIRTIO_MMIO_QUEUE_NOTIFY), 1, 4);
        wait("the frame is sent", &|| lock(&sent).len() == 1);
        assert_eq!(lock(&sent)[0], b"ping");
        // Receive: the guest asks to be told at the first entry.
        desc(&t(), RXQ, 0, 0x50000, 2048, VRING_DESC_F_WRITE as u16, 0);
        post(&t(), RXQ, 0, 0);
        std::thread::sleep(Duration::from_millis(5));
        lock(&incoming).push_back(b"pong".to_vec());
        efd.write(1).unwrap();
        wait("the frame is received", &|| used(&t(), RXQ, 0).0 == 1);
        wait("the guest is woken", &|| woken.load(Relaxed) >= 1);
        // A broken ring: the device needs a reset, and the thread survives it.
        mem.write_obj(999u16, GuestAddress(TXQ + 0x1000 + 2)).unwrap();
        dev.write(u64::from(VIRTIO_MMIO_QUEUE_NOTIFY), 1, 4);
        wait("the device is flagged", &|| t().status() & VIRTIO_CONFIG_S_NEEDS_RESET != 0);
        io.stop();
    }
}
