//! The network device: the VM's virtio-net device (virtio-mmio, at
//! `layout::VIRTIO_NET_PHYS`), driven by the `virtio-drivers` crate's raw net
//! driver, behind a safe [`Nic`] that sends and receives whole Ethernet frames.
//!
//! `virtio-drivers` (rcore-os, maintained, used by several Rust kernels) does the
//! virtqueue work: descriptor tables, available and used rings, and notification
//! suppression with VIRTIO_F_EVENT_IDX, so a notify (an MMIO write, a VM exit) only
//! happens when the device asked for one. What it needs from us is the `Hal`:
//! memory the device can reach (the kernel heap, which the direct map shows at a
//! fixed offset from its guest-physical address, so an address translation is a
//! subtraction) and the register page (mapped uncached in the direct map with the
//! local APIC's page).
//!
//! Buffers: `Nic` owns a receive buffer per posted receive descriptor and a pool of
//! transmit buffers; a frame is copied into a free transmit buffer (the device reads
//! it later), and a received frame is handed to the caller in place, then its buffer
//! is posted again. Buffers stay where they are while the device holds them (boxed
//! slices, never touched until the device gives them back), which is the contract
//! of `transmit_begin` and `receive_begin`. Nothing here waits: the device's back
//! end on the host polls the transmit ring, and the kernel looks at the receive ring
//! when its network stack runs and when a vCPU goes idle.

use alloc::boxed::Box;
use alloc::vec::Vec;

/// The virtio-net header in front of every frame.
const HEADER: usize = 12;
/// Queue size (entries of each virtqueue the driver uses).
const QUEUE: usize = 256;
/// VIRTIO_NET_F_CSUM and VIRTIO_NET_F_GUEST_CSUM: the device completes checksums
/// the driver asks it to, and may hand the driver frames marked so.
#[cfg(target_os = "none")]
const OFFLOADS: u64 = 0b11;
/// Whether the device took both (set when it is opened).
#[cfg(target_os = "none")]
static CSUM_OFFLOAD: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
/// VIRTIO_NET_HDR_F_NEEDS_CSUM.
#[cfg(target_os = "none")]
const NEEDS_CSUM: u8 = 1;

#[cfg(target_os = "none")]
mod hal {
    use core::ptr::NonNull;
    use onering_abi::layout::{DIRECT_MAP_BASE, KERNEL_VBASE, PAGE_SIZE};
    use virtio_drivers::{BufferDirection, Hal, PhysAddr};

    /// Guest-physical address of a direct-map address.
    fn phys(virt: usize) -> PhysAddr {
        let v = virt as u64;
        assert!((DIRECT_MAP_BASE..KERNEL_VBASE).contains(&v), "virtio: a buffer outside the direct map");
        (v - DIRECT_MAP_BASE) as PhysAddr
    }

    pub struct DirectHal;

    // SAFETY: `dma_alloc` hands out zeroed, page-aligned, physically contiguous
    // memory (a heap block: the heap's regions are contiguous guest-physical ranges
    // seen through the direct map) that nothing else uses until `dma_dealloc` gives
    // it back with the same size; `share` returns the guest-physical address of
    // the buffer itself (no bounce buffers are needed: the device reads and writes
    // guest memory directly), valid as long as the buffer, which the driver's
    // callers keep alive and untouched until the device returns it.
    unsafe impl Hal for DirectHal {
        fn dma_alloc(pages: usize, _: BufferDirection) -> (PhysAddr, NonNull<u8>) {
            let size = pages * PAGE_SIZE as usize;
            let layout =
                core::alloc::Layout::from_size_align(size.max(1), PAGE_SIZE as usize).expect("virtio: a DMA layout");
            // SAFETY: a non-zero-size layout.
            let p = unsafe { alloc::alloc::alloc_zeroed(layout) };
            let p = NonNull::new(p).expect("virtio: no memory for the queues");
            (phys(p.as_ptr() as usize), p)
        }

        // SAFETY: the caller (the driver) passes what `dma_alloc` returned and was
        // asked for, once the device no longer uses it; see the block below.
        unsafe fn dma_dealloc(_: PhysAddr, vaddr: NonNull<u8>, pages: usize) -> i32 {
            let size = pages * PAGE_SIZE as usize;
            if let Ok(layout) = core::alloc::Layout::from_size_align(size.max(1), PAGE_SIZE as usize) {
                // SAFETY: `vaddr` came from `dma_alloc` with this many pages (the
                // trait's contract), so from `alloc_zeroed` with this layout.
                unsafe { alloc::alloc::dealloc(vaddr.as_ptr(), layout) };
            }
            0
        }

        // SAFETY: no unsafe operation: the direct map maps guest RAM and the MMIO
        // page that holds the device's registers (uncached).
        unsafe fn mmio_phys_to_virt(paddr: PhysAddr, _: usize) -> NonNull<u8> {
            NonNull::new(onering_abi::layout::direct(paddr) as *mut u8).expect("virtio: MMIO at 0")
        }

        // SAFETY: no unsafe operation: the address of a direct-map buffer is its
        // guest-physical address plus a constant (`phys` refuses any other buffer).
        unsafe fn share(buffer: NonNull<[u8]>, _: BufferDirection) -> PhysAddr {
            phys(buffer.as_ptr() as *mut u8 as usize)
        }

        // SAFETY: nothing to undo: `share` made no copy and no mapping.
        unsafe fn unshare(_: PhysAddr, _: NonNull<[u8]>, _: BufferDirection) {}
    }
}

/// The MMIO transport with notifications as VIRTIO_F_EVENT_IDX means them.
/// `virtio-drivers` (0.13) decides to notify with `avail_idx >= avail_event + 1`,
/// true for every buffer added after the one the device asked about, so while the
/// device's back end polls the ring awake, each frame sent would still ring the
/// doorbell (an exit). This wrapper lets a notify through only when the buffer
/// just added is the one the device named (`avail_idx == avail_event + 1`): the
/// spec's `vring_need_event` for one buffer added per check, which is how the
/// driver adds them. It learns where the rings are from `queue_set`.
#[cfg(target_os = "none")]
mod suppress {
    use core::fmt::Debug;
    use core::ops::BitAnd;
    use virtio_drivers::transport::mmio::MmioTransport;
    use virtio_drivers::transport::{DeviceStatus, DeviceType, InterruptStatus, Transport};
    use virtio_drivers::{PhysAddr, Result};
    use zerocopy::{FromBytes, Immutable, IntoBytes};

    pub struct Suppressed {
        pub inner: MmioTransport<'static>,
        /// Per queue: the available ring, the used ring, the queue size.
        rings: [(u64, u64, u32); 2],
    }

    impl Suppressed {
        pub fn new(inner: MmioTransport<'static>) -> Self {
            Suppressed { inner, rings: [(0, 0, 0); 2] }
        }

        /// The u16 at guest-physical `phys` (a ring's index or event field).
        fn read16(phys: u64) -> u16 {
            // SAFETY: `phys` lies in a ring `queue_set` was given, which the driver
            // allocated with `DirectHal::dma_alloc` (kernel heap, mapped in the
            // direct map) and keeps until the device is reset; the fields are
            // 2-byte aligned (rings are), and the device may write them at any
            // time, hence the volatile read.
            unsafe { core::ptr::read_volatile(onering_abi::layout::direct(phys) as *const u16) }
        }
    }

    impl Transport for Suppressed {
        fn device_type(&self) -> DeviceType {
            self.inner.device_type()
        }
        fn read_device_features(&mut self) -> u64 {
            self.inner.read_device_features()
        }
        fn write_driver_features(&mut self, f: u64) {
            self.inner.write_driver_features(f)
        }
        fn max_queue_size(&mut self, q: u16) -> u32 {
            self.inner.max_queue_size(q)
        }
        fn notify(&mut self, q: u16) {
            let Some(&(avail, used, size)) = self.rings.get(q as usize) else {
                return self.inner.notify(q);
            };
            if avail == 0 || used == 0 {
                return self.inner.notify(q);
            }
            // avail ring: flags, idx, ring[size], used_event; used ring: flags,
            // idx, ring[size] of 8 bytes, avail_event.
            let idx = Self::read16(avail + 2);
            let event = Self::read16(used + 4 + 8 * u64::from(size));
            if idx == event.wrapping_add(1) {
                self.inner.notify(q);
            }
        }
        fn get_status(&self) -> DeviceStatus {
            self.inner.get_status()
        }
        fn set_status(&mut self, s: DeviceStatus) {
            self.inner.set_status(s)
        }
        fn set_guest_page_size(&mut self, size: u32) {
            self.inner.set_guest_page_size(size)
        }
        fn requires_legacy_layout(&self) -> bool {
            self.inner.requires_legacy_layout()
        }
        fn queue_set(&mut self, q: u16, size: u32, descriptors: PhysAddr, driver: PhysAddr, device: PhysAddr) {
            if let Some(r) = self.rings.get_mut(q as usize) {
                *r = (driver, device, size);
            }
            self.inner.queue_set(q, size, descriptors, driver, device)
        }
        fn queue_unset(&mut self, q: u16) {
            if let Some(r) = self.rings.get_mut(q as usize) {
                *r = (0, 0, 0);
            }
            self.inner.queue_unset(q)
        }
        fn queue_used(&mut self, q: u16) -> bool {
            self.inner.queue_used(q)
        }
        fn ack_interrupt(&mut self) -> InterruptStatus {
            self.inner.ack_interrupt()
        }
        fn begin_init<F: bitflags::Flags<Bits = u64> + BitAnd<Output = F> + Debug>(&mut self, supported: F) -> F {
            // Checksum offload too, when the device offers it (the driver crate
            // does not ask for it; `Nic` fills the header's request itself).
            let f = self.inner.begin_init(F::from_bits_retain(supported.bits() | super::OFFLOADS));
            super::CSUM_OFFLOAD
                .store(f.bits() & super::OFFLOADS == super::OFFLOADS, core::sync::atomic::Ordering::Relaxed);
            F::from_bits_retain(f.bits() & !super::OFFLOADS)
        }
        fn finish_init(&mut self) {
            self.inner.finish_init()
        }
        fn read_config_generation(&self) -> u32 {
            self.inner.read_config_generation()
        }
        fn read_config_space<T: FromBytes + IntoBytes>(&self, offset: usize) -> Result<T> {
            self.inner.read_config_space(offset)
        }
        fn write_config_space<T: IntoBytes + Immutable>(&mut self, offset: usize, value: T) -> Result<()> {
            self.inner.write_config_space(offset, value)
        }
    }
}

#[cfg(target_os = "none")]
type Raw = virtio_drivers::device::net::VirtIONetRaw<hal::DirectHal, suppress::Suppressed, QUEUE>;

/// The VM's network device.
pub struct Nic {
    #[cfg(target_os = "none")]
    raw: Raw,
    /// Receive buffers by token (descriptor index), while the device holds them.
    rx: Vec<Option<Box<[u8]>>>,
    /// Transmit buffers by token while the device holds them, and free ones.
    tx: Vec<Option<Box<[u8]>>>,
    tx_free: Vec<Box<[u8]>>,
    /// Largest frame (without the virtio header).
    frame_max: usize,
    mac: [u8; 6],
}

#[cfg(target_os = "none")]
// SAFETY: the transport's register pointer and the queues' memory are reached only
// through `&mut Nic`, which the kernel keeps behind its network stack's lock; the
// device page and the queue memory stay valid for the kernel's whole life.
unsafe impl Send for Nic {}

impl Nic {
    /// Opens the device if the VMM gave the VM one (`BootInfo::net`): resets and
    /// negotiates it, sets up both queues and posts `rx_buffers` receive buffers for
    /// frames up to `mtu` bytes of payload. None if there is none, or it is not a
    /// virtio-net device the driver accepts.
    #[cfg(target_os = "none")]
    pub fn open(mtu: usize, rx_buffers: usize) -> Option<Nic> {
        use virtio_drivers::transport::mmio::{MmioTransport, VirtIOHeader};
        let header = core::ptr::NonNull::new(
            onering_abi::layout::direct(onering_abi::layout::VIRTIO_NET_PHYS) as *mut VirtIOHeader
        )?;
        // SAFETY: the VMM put a virtio-mmio register page at VIRTIO_NET_PHYS (it
        // said so in BootInfo::net), which the direct map maps uncached for the
        // kernel's life; this is its only user (the caller opens it once).
        let transport = unsafe { MmioTransport::new(header, onering_abi::layout::PAGE_SIZE as usize) }.ok()?;
        let raw = Raw::new(suppress::Suppressed::new(transport)).ok()?;
        let mac = raw.mac_address();
        // (The driver takes no receive buffer under 1526 bytes: 1500 at least.)
        let frame_max = mtu.clamp(1500, 65_521) + 14;
        let mut nic = Nic {
            raw,
            rx: (0..QUEUE).map(|_| None).collect(),
            tx: (0..QUEUE).map(|_| None).collect(),
            tx_free: Vec::new(),
            frame_max,
            mac,
        };
        // At most 2 MiB of receive buffers (a 64 KiB MTU gets 32 of them).
        let count = ((2 << 20) / (HEADER + frame_max)).clamp(16, rx_buffers.clamp(1, QUEUE));
        let _ = crate::heap::ensure(count * (HEADER + frame_max));
        for _ in 0..count {
            let buf = alloc::vec![0u8; HEADER + frame_max].into_boxed_slice();
            if !nic.post_rx(buf) {
                break;
            }
        }
        Some(nic)
    }

    #[cfg(not(target_os = "none"))]
    pub fn open(_: usize, _: usize) -> Option<Nic> {
        None
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The largest frame `send` takes (the MTU and the Ethernet header).
    pub fn frame_max(&self) -> usize {
        self.frame_max
    }

    /// Gives receive buffer `buf` to the device; false if the queue is full (the
    /// buffer is dropped).
    #[cfg(target_os = "none")]
    fn post_rx(&mut self, mut buf: Box<[u8]>) -> bool {
        // SAFETY: `buf` is kept in `self.rx` under its token and not touched until
        // `receive_complete` returns it.
        match unsafe { self.raw.receive_begin(&mut buf) } {
            Ok(token) => match self.rx.get_mut(token as usize) {
                Some(slot) => {
                    *slot = Some(buf);
                    true
                }
                None => {
                    // (A token beyond the queue: the buffer must stay alive anyway.)
                    core::mem::forget(buf);
                    false
                }
            },
            Err(_) => false,
        }
    }

    /// Takes back the transmit buffers the device is done with.
    #[cfg(target_os = "none")]
    fn reclaim_tx(&mut self) {
        while let Some(token) = self.raw.poll_transmit() {
            let Some(buf) = self.tx.get_mut(token as usize).and_then(Option::take) else { break };
            // SAFETY: `buf` is the buffer `transmit_begin` gave the device under
            // this token.
            if unsafe { self.raw.transmit_complete(token, &buf) }.is_err() {
                // (The device broke its ring: keep the buffer out of use.)
                core::mem::forget(buf);
                break;
            }
            self.tx_free.push(buf);
        }
    }

    /// Whether the device completes checksums (`send` with a request): else the
    /// caller sends complete frames.
    #[cfg(target_os = "none")]
    pub fn csum_offload(&self) -> bool {
        CSUM_OFFLOAD.load(core::sync::atomic::Ordering::Relaxed)
    }

    #[cfg(not(target_os = "none"))]
    pub fn csum_offload(&self) -> bool {
        false
    }

    /// Sends Ethernet frame `frame` (copied); false if it is too long or the
    /// transmit queue is full (the frame is dropped, as a NIC drops it). With
    /// `csum` = (start, offset), and `csum_offload`, the device completes the
    /// checksum of `frame[start..]` at `start + offset` (which holds the
    /// pseudo-header's sum).
    #[cfg(target_os = "none")]
    pub fn send(&mut self, frame: &[u8], csum: Option<(u16, u16)>) -> bool {
        if frame.len() > self.frame_max {
            return false;
        }
        self.reclaim_tx();
        if !self.raw.can_send() {
            return false;
        }
        let mut buf =
            self.tx_free.pop().unwrap_or_else(|| alloc::vec![0u8; HEADER + self.frame_max].into_boxed_slice());
        let Ok(h) = self.raw.fill_buffer_header(&mut buf) else { return false };
        if let Some((start, offset)) = csum.filter(|_| self.csum_offload() && h >= 10) {
            buf[0] = NEEDS_CSUM;
            buf[6..8].copy_from_slice(&start.to_le_bytes());
            buf[8..10].copy_from_slice(&offset.to_le_bytes());
        }
        buf[h..h + frame.len()].copy_from_slice(frame);
        let len = h + frame.len();
        // SAFETY: the first `len` bytes of `buf` go to the device, which reads them
        // until `transmit_complete`; `buf` is kept under its token until then and
        // not touched (the slice handed over is the same one given back).
        match unsafe { self.raw.transmit_begin(&buf[..len]) } {
            Ok(token) => match self.tx.get_mut(token as usize) {
                Some(slot) => {
                    *slot = Some(buf);
                    true
                }
                None => {
                    core::mem::forget(buf);
                    false
                }
            },
            Err(_) => {
                self.tx_free.push(buf);
                false
            }
        }
    }

    /// Frames given to the device that it has not taken yet.
    #[cfg(target_os = "none")]
    pub fn tx_pending(&mut self) -> usize {
        self.reclaim_tx();
        self.tx.iter().filter(|b| b.is_some()).count()
    }

    #[cfg(not(target_os = "none"))]
    pub fn tx_pending(&mut self) -> usize {
        0
    }

    /// Whether received frames wait.
    #[cfg(target_os = "none")]
    pub fn has_rx(&self) -> bool {
        self.raw.poll_receive().is_some()
    }

    /// Hands every received frame (without the virtio header) to `f`, at most
    /// `max`, and posts their buffers again; how many.
    #[cfg(target_os = "none")]
    pub fn recv(&mut self, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < max {
            let Some(token) = self.raw.poll_receive() else { break };
            let Some(mut buf) = self.rx.get_mut(token as usize).and_then(Option::take) else { break };
            // SAFETY: `buf` is the buffer `receive_begin` gave the device under this
            // token.
            match unsafe { self.raw.receive_complete(token, &mut buf) } {
                Ok((hdr, len)) => {
                    if let Some(frame) = buf.get(hdr..hdr + len) {
                        f(frame);
                    }
                }
                Err(_) => {
                    core::mem::forget(buf);
                    break;
                }
            }
            n += 1;
            self.post_rx(buf);
        }
        n
    }

    #[cfg(not(target_os = "none"))]
    pub fn send(&mut self, _: &[u8], _: Option<(u16, u16)>) -> bool {
        false
    }

    #[cfg(not(target_os = "none"))]
    pub fn has_rx(&self) -> bool {
        false
    }

    #[cfg(not(target_os = "none"))]
    pub fn recv(&mut self, _: usize, _: impl FnMut(&[u8])) -> usize {
        0
    }
}
