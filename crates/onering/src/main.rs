//! onering: run one unmodified static Linux program in its own thin KVM virtual
//! machine. `onering run [OPTIONS] <PROGRAM> [ARGS]...`
//!
//! The binary is only the process entry: a C `main` (`sys/entry.rs`) that calls the
//! library's `cli::main`. There is no Rust `main`: Rust's runtime set-up (stack-guard
//! discovery reads /proc/self/maps, a signal stack, handlers) costs ~0.1 ms of a
//! 2 ms start, and onering needs none of it.
#![deny(unsafe_code)]
#![cfg_attr(not(test), no_main)]

// The entry's source lives with the rest of the unsafe code, in `sys/`; it is
// compiled here because a C `main` in the library would clash with the test
// harnesses' `main` in every test that links the library.
#[cfg(not(test))]
#[path = "sys/entry.rs"]
mod entry;
