//! Memory management: 2 MiB chunk allocation, the VMA set, and the address space.

pub mod chunks;
pub mod space;
pub mod vma;
