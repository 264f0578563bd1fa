//! The local APIC's page (`layout::LAPIC_PHYS`). KVM's in-kernel APIC serves it (the
//! kernel programs its one-shot timer and sends IPIs there, an exit to KVM but never
//! to us), so an access reaching the VMM means the guest disabled or moved its APIC,
//! which no correct guest does: it stops the VM with a message that says so. The
//! device exists so that the page is claimed on the bus, with a reason, instead of
//! looking like an address nobody thought of.

use super::{MmioAction, MmioDevice};
use onering_abi::layout::LAPIC_PHYS;

/// The local APIC's MMIO page, as seen from the VMM.
#[derive(Debug, Default)]
pub struct LocalApicPage;

fn stop(what: &str, offset: u64) -> MmioAction {
    MmioAction::GuestError(format!(
        "unexpected MMIO {what} at {:#x} (the local APIC page: KVM's in-kernel APIC serves it unless the guest \
         disabled or moved its APIC)",
        LAPIC_PHYS + offset
    ))
}

impl MmioDevice for LocalApicPage {
    fn read(&self, offset: u64, _: usize) -> MmioAction {
        stop("read", offset)
    }

    fn write(&self, offset: u64, _: u64, _: usize) -> MmioAction {
        stop("write", offset)
    }
}
