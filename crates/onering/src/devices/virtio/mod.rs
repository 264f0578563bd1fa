//! Virtio devices over the MMIO transport (virtio 1.x, transport version 2, split
//! queues). `mmio` is the register page and the device's life cycle (feature
//! negotiation, queue set-up, status, reset) as plain state, unit-tested register by
//! register; `net` is the network device on top of it, with its I/O thread and the
//! back-end trait that `devices::netback` implements (passt, TAP).
//!
//! Queue handling is rust-vmm's `virtio-queue` (descriptor chains, the available
//! and used rings, EVENT_IDX), so chains from a hostile guest are validated by code
//! many VMMs share; constants come from `virtio-bindings`. The guest owns the rings:
//! nothing read from them is trusted (see docs/design.md, Network device).

pub mod mmio;
pub mod net;

use thiserror::Error;

/// Why a virtio device could not be set up or served.
#[derive(Debug, Error)]
pub enum VirtioError {
    #[error("cannot start the network device's I/O thread: {0}")]
    Start(std::io::Error),
    #[error("virtio queue: {0}")]
    Queue(virtio_queue::Error),
}
