//! The device model: guest-physical MMIO ranges served by devices on an [`MmioBus`].
//! When a vCPU exits on an MMIO access, the exit handler asks the bus; the device
//! whose range holds the access answers with an [`MmioAction`], what the exit handler
//! should do next (resume, complete a read, serve a hostcall, stop the VM). Devices
//! never see the vCPU or guest memory: they are plain state machines behind a small
//! trait, unit-tested without KVM, and the exit handler stays the one place that acts
//! on the vCPU.
//!
//! Today's devices: the hostcall doorbell ([`doorbell`]), how the guest kernel asks
//! the VMM for services, and the local APIC's page ([`lapic`]), which KVM's in-kernel
//! APIC serves without an exit; an exit there means the guest disabled or moved its
//! APIC, and stops the VM. An access no device claims stops the VM too ("unexpected
//! MMIO write at ..."), as does one a device does not take.
//!
//! A device with a back end on the host (a virtio device's queues over a tap or a
//! file, a console on stdin) registers its file descriptors with the event loop
//! (`crate::event_loop`) and, when there is work for the guest, wakes a vCPU with
//! `Machine::kick` (see docs/design.md, The VMM).

pub mod bus;
pub mod doorbell;
pub mod lapic;
pub mod netback;
pub mod virtio;

use onering_abi::layout::{self, PAGE_SIZE};
use std::sync::Arc;

pub use bus::{BusError, MmioBus};

/// What the exit handler should do after a device took an access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MmioAction {
    /// The access is done: resume the vCPU.
    Done,
    /// Complete the vCPU's read with this value (its low bytes, little-endian) and
    /// resume. Only from [`MmioDevice::read`].
    Value(u64),
    /// The hostcall doorbell rang with this number: serve the hostcall for the vCPU.
    Hostcall(u64),
    /// The device does not take this access: the same guest error as an address no
    /// device claims.
    Unhandled,
    /// No correct guest does this: stop the VM with this message.
    GuestError(String),
}

/// A device on the MMIO bus. Shared by all vCPU threads, so `&self`: a device with
/// state keeps it behind its own lock or atomics.
pub trait MmioDevice: Send + Sync {
    /// A read of `len` bytes (1, 2, 4 or 8) at `offset` into the device's range.
    fn read(&self, offset: u64, len: usize) -> MmioAction;
    /// A write of the `len` low bytes of `data` at `offset`.
    fn write(&self, offset: u64, data: u64, len: usize) -> MmioAction;
}

/// onering's bus: the hostcall doorbell's page and the local APIC's page.
pub fn standard_bus() -> Result<MmioBus, BusError> {
    let mut bus = MmioBus::new();
    bus.insert(layout::HOSTCALL_DOORBELL_PHYS, PAGE_SIZE, Arc::new(doorbell::Doorbell))?;
    bus.insert(layout::LAPIC_PHYS, PAGE_SIZE, Arc::new(lapic::LocalApicPage))?;
    Ok(bus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_bus_routes_hostcalls_and_refuses_the_rest() {
        let bus = standard_bus().unwrap();
        assert_eq!(bus.write(layout::HOSTCALL_DOORBELL_PHYS, 7, 8), MmioAction::Hostcall(7));
        assert_eq!(bus.write(layout::HOSTCALL_DOORBELL_PHYS, 7, 4), MmioAction::Hostcall(7));
        assert_eq!(bus.write(layout::HOSTCALL_DOORBELL_PHYS + 8, 7, 8), MmioAction::Unhandled);
        assert_eq!(bus.read(layout::HOSTCALL_DOORBELL_PHYS, 8), MmioAction::Unhandled);
        assert!(matches!(bus.write(layout::LAPIC_PHYS + 0xb0, 0, 4), MmioAction::GuestError(_)));
        assert!(matches!(bus.read(layout::LAPIC_PHYS + 0x20, 4), MmioAction::GuestError(_)));
        assert_eq!(bus.write(layout::LAPIC_PHYS + PAGE_SIZE, 0, 4), MmioAction::Unhandled);
        assert_eq!(bus.write(0x1234, 0, 8), MmioAction::Unhandled);
    }
}
