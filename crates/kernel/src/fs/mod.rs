//! Files: the file tree (`vfs`) and open files, pipes and descriptors (`file`).

pub mod file;
pub mod vfs;
