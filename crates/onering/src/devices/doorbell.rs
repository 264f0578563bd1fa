//! The hostcall doorbell: the guest kernel fills its vCPU's hostcall block, then
//! writes the hostcall number to `layout::HOSTCALL_DOORBELL_PHYS`, a page with no
//! memory behind it, so the write exits to the VMM (`onering_abi::hostcall`). The
//! device only turns that write into "serve hostcall N"; the exit handler serves it
//! with the vCPU's state. Any other access to the page is the guest's error, as it
//! was before there was a bus.

use super::{MmioAction, MmioDevice};

/// The doorbell page.
#[derive(Debug, Default)]
pub struct Doorbell;

impl MmioDevice for Doorbell {
    fn read(&self, _: u64, _: usize) -> MmioAction {
        MmioAction::Unhandled
    }

    fn write(&self, offset: u64, data: u64, _: usize) -> MmioAction {
        match offset {
            0 => MmioAction::Hostcall(data),
            _ => MmioAction::Unhandled,
        }
    }
}
