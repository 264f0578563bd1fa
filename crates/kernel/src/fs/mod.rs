//! Files: the file tree (`vfs`, filled from the rootfs image by `rootfs`) and open
//! files, pipes and descriptors (`file`).

pub mod file;
pub mod rootfs;
pub mod vfs;
