//! The file tree: one in-memory tree of directories, files, symbolic links and
//! devices (`tree`), filled from the `--rootfs` image (`rootfs`), the synthetic subtrees of /proc
//! and /sys (`synth`), and path
//! arithmetic; inotify's watches and queues (`notify`). Pure logic: no user
//! memory, no hostcalls, no locks of its own (the kernel keeps the tree behind one
//! lock) but each inotify queue's, a leaf.

pub mod host;
pub mod notify;
pub mod pages;
pub mod rootfs;
pub mod synth;
pub mod tree;

pub use tree::*;

pub use onering_abi::path::absolute;
