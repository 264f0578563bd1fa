//! The virtio-mmio transport, version 2 (virtio 1.x, section 4.2): the register page
//! of one device as plain state. The device wrapping it (`net`) keeps it behind a
//! lock shared by the vCPU threads (register accesses) and its I/O thread (the
//! queues); this file does no I/O and never blocks, so it is tested register by
//! register without KVM.
//!
//! What the guest can do here, and what it gets: registers are 32-bit (other sizes
//! read 0 and are ignored), the configuration space from 0x100 takes any size
//! inside it. Features the driver acks are cut to those offered; FEATURES_OK sticks
//! only with VIRTIO_F_VERSION_1 (no legacy devices). A queue's size and addresses
//! are taken when it is made ready: a size that is not a power of two up to the
//! maximum, misaligned rings or rings outside guest memory put the device in
//! DEVICE_NEEDS_RESET instead (and the I/O thread then leaves it alone until the
//! driver writes 0 to Status, which resets everything). A QueueNotify write is not
//! handled here at all: the device turns it into a wake-up of its I/O thread without
//! taking the lock.

use virtio_bindings::virtio_config::{
    VIRTIO_CONFIG_S_DRIVER_OK, VIRTIO_CONFIG_S_FAILED, VIRTIO_CONFIG_S_FEATURES_OK, VIRTIO_CONFIG_S_NEEDS_RESET,
    VIRTIO_F_VERSION_1,
};
use virtio_bindings::virtio_mmio::*;
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddress, GuestMemoryMmap};

/// "virt", little-endian.
pub const MAGIC: u32 = 0x7472_6976;
/// The transport's register layout version (virtio 1.x).
pub const VERSION: u32 = 2;
/// onering's vendor id ("ORNG").
pub const VENDOR_ID: u32 = 0x474e_524f;

/// One queue: the library's state, and the driver's set-up until it is made ready.
pub struct QueueSlot {
    pub queue: Queue,
    size: u16,
    desc: u64,
    driver: u64,
    device: u64,
}

impl QueueSlot {
    fn new(max: u16) -> QueueSlot {
        // `max` is a power of two up to 256 (the device's own constant).
        let queue = Queue::new(max).unwrap_or_else(|_| Queue::new(256).expect("256 is a valid queue size"));
        QueueSlot { queue, size: max, desc: 0, driver: 0, device: 0 }
    }

    fn reset(&mut self) {
        self.queue.reset();
        self.size = self.queue.max_size();
        self.desc = 0;
        self.driver = 0;
        self.device = 0;
    }

    /// Applies the driver's set-up to the queue; false if the queue cannot be used.
    fn make_ready(&mut self, mem: &GuestMemoryMmap, event_idx: bool) -> bool {
        let q = &mut self.queue;
        let ok = q.try_set_size(self.size).is_ok()
            && q.try_set_desc_table_address(GuestAddress(self.desc)).is_ok()
            && q.try_set_avail_ring_address(GuestAddress(self.driver)).is_ok()
            && q.try_set_used_ring_address(GuestAddress(self.device)).is_ok();
        q.set_event_idx(event_idx);
        q.set_ready(ok);
        ok && q.is_valid(mem)
    }
}

/// What the device should do after a register write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    None,
    /// The driver set DRIVER_OK, or made a queue ready after it: queues are live.
    Activated,
    /// The driver reset the device (or it failed): stop using the queues.
    Reset,
}

/// A device's register page.
pub struct Transport {
    pub mem: GuestMemoryMmap,
    device_id: u32,
    offered: u64,
    acked: u64,
    device_features_sel: u32,
    driver_features_sel: u32,
    queue_sel: u32,
    pub queues: Vec<QueueSlot>,
    status: u32,
    interrupt_status: u32,
    config: Vec<u8>,
}

impl Transport {
    /// A device with `device_id`, the `offered` feature bits, one queue of at most
    /// `max` entries for each element of `queue_max`, and its configuration space.
    pub fn new(mem: GuestMemoryMmap, device_id: u32, offered: u64, queue_max: &[u16], config: Vec<u8>) -> Transport {
        Transport {
            mem,
            device_id,
            offered,
            acked: 0,
            device_features_sel: 0,
            driver_features_sel: 0,
            queue_sel: 0,
            queues: queue_max.iter().map(|&m| QueueSlot::new(m)).collect(),
            status: 0,
            interrupt_status: 0,
            config,
        }
    }

    /// The features the driver acked (a subset of those offered).
    pub fn acked(&self) -> u64 {
        self.acked
    }

    pub fn status(&self) -> u32 {
        self.status
    }

    /// Whether the driver set DRIVER_OK and the device has not failed since.
    pub fn active(&self) -> bool {
        self.status & VIRTIO_CONFIG_S_DRIVER_OK != 0
            && self.status & (VIRTIO_CONFIG_S_NEEDS_RESET | VIRTIO_CONFIG_S_FAILED) == 0
    }

    /// The guest broke a queue: the device stops until the driver resets it.
    pub fn needs_reset(&mut self) {
        self.status |= VIRTIO_CONFIG_S_NEEDS_RESET;
        self.interrupt_status |= VIRTIO_MMIO_INT_CONFIG;
    }

    /// Used buffers were added (InterruptStatus bit 0; no interrupt is injected).
    pub fn used_buffers(&mut self) {
        self.interrupt_status |= VIRTIO_MMIO_INT_VRING;
    }

    fn reset(&mut self) {
        self.acked = 0;
        self.device_features_sel = 0;
        self.driver_features_sel = 0;
        self.queue_sel = 0;
        self.status = 0;
        self.interrupt_status = 0;
        for q in &mut self.queues {
            q.reset();
        }
    }

    fn selected(&mut self) -> Option<&mut QueueSlot> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    /// A read of `len` bytes at `offset`.
    pub fn read(&self, offset: u64, len: usize) -> u64 {
        if offset >= u64::from(VIRTIO_MMIO_CONFIG) {
            return self.read_config(offset - u64::from(VIRTIO_MMIO_CONFIG), len);
        }
        if len != 4 {
            return 0;
        }
        let sel = self.queues.get(self.queue_sel as usize);
        let v: u32 = match offset as u32 {
            VIRTIO_MMIO_MAGIC_VALUE => MAGIC,
            VIRTIO_MMIO_VERSION => VERSION,
            VIRTIO_MMIO_DEVICE_ID => self.device_id,
            VIRTIO_MMIO_VENDOR_ID => VENDOR_ID,
            VIRTIO_MMIO_DEVICE_FEATURES => match self.device_features_sel {
                0 => self.offered as u32,
                1 => (self.offered >> 32) as u32,
                _ => 0,
            },
            VIRTIO_MMIO_QUEUE_NUM_MAX => sel.map_or(0, |q| u32::from(q.queue.max_size())),
            VIRTIO_MMIO_QUEUE_READY => sel.map_or(0, |q| u32::from(q.queue.ready())),
            VIRTIO_MMIO_INTERRUPT_STATUS => self.interrupt_status,
            VIRTIO_MMIO_STATUS => self.status,
            VIRTIO_MMIO_CONFIG_GENERATION => 0,
            // Shared memory regions: none (length -1 says "no such region").
            VIRTIO_MMIO_SHM_LEN_LOW | VIRTIO_MMIO_SHM_LEN_HIGH => u32::MAX,
            _ => 0,
        };
        u64::from(v)
    }

    fn read_config(&self, at: u64, len: usize) -> u64 {
        let Some(bytes) = usize::try_from(at)
            .ok()
            .and_then(|at| Some(at..at.checked_add(len)?))
            .and_then(|r| self.config.get(r))
            .filter(|b| b.len() <= 8)
        else {
            return 0;
        };
        let mut v = [0u8; 8];
        v[..bytes.len()].copy_from_slice(bytes);
        u64::from_le_bytes(v)
    }

    /// A write of the `len` low bytes of `data` at `offset` (QueueNotify is the
    /// device's, not handled here).
    pub fn write(&mut self, offset: u64, data: u64, len: usize) -> Effect {
        if offset >= u64::from(VIRTIO_MMIO_CONFIG) || len != 4 {
            return Effect::None; // the configuration space is read-only for a net device
        }
        let v = data as u32;
        let setting_up = self.status & VIRTIO_CONFIG_S_FEATURES_OK == 0;
        match offset as u32 {
            VIRTIO_MMIO_DEVICE_FEATURES_SEL => self.device_features_sel = v,
            VIRTIO_MMIO_DRIVER_FEATURES_SEL => self.driver_features_sel = v,
            VIRTIO_MMIO_DRIVER_FEATURES if setting_up => {
                let shift = match self.driver_features_sel {
                    0 => 0,
                    1 => 32,
                    _ => return Effect::None,
                };
                self.acked = (self.acked & !(0xffff_ffffu64 << shift)) | (u64::from(v) << shift);
                self.acked &= self.offered;
            }
            VIRTIO_MMIO_QUEUE_SEL => self.queue_sel = v,
            VIRTIO_MMIO_QUEUE_NUM => {
                if let Some(q) = self.selected().filter(|q| !q.queue.ready()) {
                    q.size = v.min(u32::from(u16::MAX)) as u16;
                }
            }
            VIRTIO_MMIO_QUEUE_READY => return self.queue_ready(v != 0),
            VIRTIO_MMIO_QUEUE_DESC_LOW
            | VIRTIO_MMIO_QUEUE_DESC_HIGH
            | VIRTIO_MMIO_QUEUE_AVAIL_LOW
            | VIRTIO_MMIO_QUEUE_AVAIL_HIGH
            | VIRTIO_MMIO_QUEUE_USED_LOW
            | VIRTIO_MMIO_QUEUE_USED_HIGH => {
                let reg = offset as u32;
                if let Some(q) = self.selected().filter(|q| !q.queue.ready()) {
                    let field = match reg & !4 {
                        VIRTIO_MMIO_QUEUE_DESC_LOW => &mut q.desc,
                        VIRTIO_MMIO_QUEUE_AVAIL_LOW => &mut q.driver,
                        _ => &mut q.device,
                    };
                    let shift = if reg & 4 != 0 { 32 } else { 0 };
                    *field = (*field & !(0xffff_ffffu64 << shift)) | (u64::from(v) << shift);
                }
            }
            VIRTIO_MMIO_INTERRUPT_ACK => self.interrupt_status &= !v,
            VIRTIO_MMIO_STATUS => return self.set_status(v),
            _ => {}
        }
        Effect::None
    }

    fn queue_ready(&mut self, ready: bool) -> Effect {
        let event_idx = self.acked & (1 << VIRTIO_RING_F_EVENT_IDX) != 0;
        let mem = self.mem.clone();
        let Some(q) = self.selected() else { return Effect::None };
        if !ready {
            q.queue.set_ready(false);
            return Effect::None;
        }
        if q.queue.ready() {
            return Effect::None;
        }
        if !q.make_ready(&mem, event_idx) {
            q.queue.set_ready(false);
            self.needs_reset();
            return Effect::Reset;
        }
        // A queue made ready on a running device is news for its I/O thread.
        if self.active() {
            Effect::Activated
        } else {
            Effect::None
        }
    }

    fn set_status(&mut self, v: u32) -> Effect {
        if v == 0 {
            self.reset();
            return Effect::Reset;
        }
        let mut v = v | (self.status & VIRTIO_CONFIG_S_NEEDS_RESET);
        // FEATURES_OK only for a modern driver, and once set, the features are fixed.
        if v & VIRTIO_CONFIG_S_FEATURES_OK != 0
            && self.status & VIRTIO_CONFIG_S_FEATURES_OK == 0
            && self.acked & (1u64 << VIRTIO_F_VERSION_1) == 0
        {
            v &= !VIRTIO_CONFIG_S_FEATURES_OK;
        }
        let was_active = self.active();
        self.status = v;
        if v & VIRTIO_CONFIG_S_DRIVER_OK != 0 && v & VIRTIO_CONFIG_S_FEATURES_OK == 0 {
            // DRIVER_OK without negotiated features: refuse to run.
            self.needs_reset();
        }
        match (was_active, self.active()) {
            (false, true) => Effect::Activated,
            (true, false) => Effect::Reset,
            _ => Effect::None,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use virtio_bindings::virtio_config::{VIRTIO_CONFIG_S_ACKNOWLEDGE, VIRTIO_CONFIG_S_DRIVER};

    pub fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
    }

    fn transport() -> Transport {
        let offered = 1 << VIRTIO_F_VERSION_1 | 1 << 5 | 1 << VIRTIO_RING_F_EVENT_IDX;
        Transport::new(memory(), 1, offered, &[256, 256], vec![1, 2, 3, 4, 5, 6, 1, 0, 1, 0, 0xdc, 5])
    }

    fn w(t: &mut Transport, reg: u32, v: u32) -> Effect {
        t.write(u64::from(reg), u64::from(v), 4)
    }
    fn r(t: &Transport, reg: u32) -> u32 {
        t.read(u64::from(reg), 4) as u32
    }

    /// Sets up queue `i` at `base` (descriptors, then avail, then used rings).
    pub fn set_up_queue(t: &mut Transport, i: u32, size: u32, base: u64) -> Effect {
        w(t, VIRTIO_MMIO_QUEUE_SEL, i);
        w(t, VIRTIO_MMIO_QUEUE_NUM, size);
        for (reg, at) in [
            (VIRTIO_MMIO_QUEUE_DESC_LOW, base),
            (VIRTIO_MMIO_QUEUE_AVAIL_LOW, base + 0x1000),
            (VIRTIO_MMIO_QUEUE_USED_LOW, base + 0x2000),
        ] {
            w(t, reg, at as u32);
            w(t, reg + 4, (at >> 32) as u32);
        }
        w(t, VIRTIO_MMIO_QUEUE_READY, 1)
    }

    /// The driver's side of initialization (virtio 1.x, 3.1.1), acking `features`.
    pub fn negotiate(t: &mut Transport, features: u64) -> u32 {
        w(t, VIRTIO_MMIO_STATUS, 0);
        w(t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE);
        w(t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
        w(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
        w(t, VIRTIO_MMIO_DRIVER_FEATURES, features as u32);
        w(t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
        w(t, VIRTIO_MMIO_DRIVER_FEATURES, (features >> 32) as u32);
        w(t, VIRTIO_MMIO_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_FEATURES_OK);
        r(t, VIRTIO_MMIO_STATUS)
    }

    pub const RUNNING: u32 =
        VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_DRIVER_OK;

    #[test]
    fn identity_registers() {
        let t = transport();
        assert_eq!(r(&t, VIRTIO_MMIO_MAGIC_VALUE), 0x7472_6976);
        assert_eq!(r(&t, VIRTIO_MMIO_VERSION), 2);
        assert_eq!(r(&t, VIRTIO_MMIO_DEVICE_ID), 1);
        assert_eq!(r(&t, VIRTIO_MMIO_VENDOR_ID), VENDOR_ID);
        assert_eq!(t.read(u64::from(VIRTIO_MMIO_MAGIC_VALUE), 2), 0, "registers are 32-bit");
        assert_eq!(r(&t, VIRTIO_MMIO_QUEUE_NUM_MAX), 256);
        assert_eq!(r(&t, 0x0ff0), 0, "unknown registers read 0");
    }

    #[test]
    fn configuration_space_reads_at_any_size_and_not_past_its_end() {
        let t = transport();
        assert_eq!(t.read(0x100, 1), 1);
        assert_eq!(t.read(0x100, 4), 0x0403_0201);
        assert_eq!(t.read(0x104, 2), 0x0605);
        assert_eq!(t.read(0x10a, 2), 0x5dc);
        assert_eq!(t.read(0x10b, 2), 0, "straddles the end");
        assert_eq!(t.read(0x200, 4), 0);
        assert_eq!(t.read(u64::MAX - 1, 2), 0);
    }

    #[test]
    fn features_are_negotiated_in_32_bit_halves() {
        let mut t = transport();
        w(&mut t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
        assert_eq!(r(&t, VIRTIO_MMIO_DEVICE_FEATURES), 1 << 5 | 1 << VIRTIO_RING_F_EVENT_IDX);
        w(&mut t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
        assert_eq!(r(&t, VIRTIO_MMIO_DEVICE_FEATURES), 1);
        w(&mut t, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 7);
        assert_eq!(r(&t, VIRTIO_MMIO_DEVICE_FEATURES), 0);
        // Acking more than offered keeps the offered part only.
        let s = negotiate(&mut t, u64::MAX);
        assert_ne!(s & VIRTIO_CONFIG_S_FEATURES_OK, 0);
        assert_eq!(t.acked(), 1 << VIRTIO_F_VERSION_1 | 1 << 5 | 1 << VIRTIO_RING_F_EVENT_IDX);
        // Fixed once FEATURES_OK is set.
        w(&mut t, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
        w(&mut t, VIRTIO_MMIO_DRIVER_FEATURES, 0);
        assert_eq!(t.acked() & 1 << 5, 1 << 5);
    }

    #[test]
    fn a_legacy_driver_does_not_get_features_ok() {
        let mut t = transport();
        let s = negotiate(&mut t, 1 << 5);
        assert_eq!(s & VIRTIO_CONFIG_S_FEATURES_OK, 0);
        assert_eq!(w(&mut t, VIRTIO_MMIO_STATUS, s | VIRTIO_CONFIG_S_DRIVER_OK), Effect::None);
        assert!(!t.active());
        assert_ne!(t.status() & VIRTIO_CONFIG_S_NEEDS_RESET, 0);
    }

    #[test]
    fn queues_are_set_up_and_the_device_runs_until_reset() {
        let mut t = transport();
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1 | 1 << VIRTIO_RING_F_EVENT_IDX);
        assert_eq!(set_up_queue(&mut t, 0, 64, 0x10000), Effect::None);
        assert_eq!(set_up_queue(&mut t, 1, 256, 0x20000), Effect::None);
        assert_eq!(r(&t, VIRTIO_MMIO_QUEUE_READY), 1);
        let q = &t.queues[1].queue;
        assert_eq!((q.size(), q.desc_table(), q.avail_ring(), q.used_ring()), (256, 0x20000, 0x21000, 0x22000));
        assert!(q.event_idx_enabled());
        assert_eq!(t.queues[0].queue.size(), 64);
        // Addresses of a ready queue do not change.
        w(&mut t, VIRTIO_MMIO_QUEUE_DESC_LOW, 0x30000);
        assert_eq!(t.queues[1].queue.desc_table(), 0x20000);
        assert_eq!(w(&mut t, VIRTIO_MMIO_STATUS, RUNNING), Effect::Activated);
        assert!(t.active());
        t.used_buffers();
        assert_eq!(r(&t, VIRTIO_MMIO_INTERRUPT_STATUS), 1);
        w(&mut t, VIRTIO_MMIO_INTERRUPT_ACK, 1);
        assert_eq!(r(&t, VIRTIO_MMIO_INTERRUPT_STATUS), 0);
        // Reset: everything back to the start.
        assert_eq!(w(&mut t, VIRTIO_MMIO_STATUS, 0), Effect::Reset);
        assert!(!t.active());
        assert_eq!(t.acked(), 0);
        assert_eq!(r(&t, VIRTIO_MMIO_STATUS), 0);
        w(&mut t, VIRTIO_MMIO_QUEUE_SEL, 1);
        assert_eq!(r(&t, VIRTIO_MMIO_QUEUE_READY), 0);
        assert_eq!(t.queues[1].queue.desc_table(), 0);
    }

    #[test]
    fn broken_queue_set_ups_need_a_reset() {
        for (size, base) in [(100, 0x10000), (512, 0x10000), (0, 0x10000), (64, 0x10001), (64, 1 << 40), (64, 0xff000)]
        {
            let mut t = transport();
            negotiate(&mut t, 1 << VIRTIO_F_VERSION_1);
            assert_eq!(set_up_queue(&mut t, 0, size, base), Effect::Reset, "size {size} at {base:#x}");
            assert_eq!(r(&t, VIRTIO_MMIO_QUEUE_READY), 0);
            w(&mut t, VIRTIO_MMIO_STATUS, RUNNING);
            assert!(!t.active(), "size {size} at {base:#x}");
            assert_ne!(r(&t, VIRTIO_MMIO_STATUS) & VIRTIO_CONFIG_S_NEEDS_RESET, 0);
            assert_ne!(r(&t, VIRTIO_MMIO_INTERRUPT_STATUS) & VIRTIO_MMIO_INT_CONFIG, 0);
            // A reset makes it usable again.
            negotiate(&mut t, 1 << VIRTIO_F_VERSION_1);
            assert_eq!(set_up_queue(&mut t, 0, 64, 0x10000), Effect::None);
            assert_eq!(w(&mut t, VIRTIO_MMIO_STATUS, RUNNING), Effect::Activated);
        }
    }

    #[test]
    fn a_queue_made_ready_on_a_running_device_is_news() {
        let mut t = transport();
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1);
        assert_eq!(set_up_queue(&mut t, 1, 64, 0x20000), Effect::None);
        assert_eq!(w(&mut t, VIRTIO_MMIO_STATUS, RUNNING), Effect::Activated);
        assert_eq!(set_up_queue(&mut t, 0, 64, 0x10000), Effect::Activated);
    }

    #[test]
    fn a_queue_that_does_not_exist_is_ignored() {
        let mut t = transport();
        negotiate(&mut t, 1 << VIRTIO_F_VERSION_1);
        assert_eq!(set_up_queue(&mut t, 5, 64, 0x10000), Effect::None);
        assert_eq!(r(&t, VIRTIO_MMIO_QUEUE_NUM_MAX), 0);
        assert_eq!(r(&t, VIRTIO_MMIO_QUEUE_READY), 0);
    }
}
