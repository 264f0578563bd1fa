//! The process entry: a C `main` (the binary is `#![no_main]`), which the C library
//! calls without Rust's runtime set-up, which onering does not need. Compiled into
//! the binary only (main.rs includes this file): the library's tests have their own
//! `main`. Broken pipes must surface as EPIPE (the guest gets the error), so SIGPIPE
//! is ignored as Rust's runtime would.
#![allow(unsafe_code)]

#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: setting a signal disposition to SIG_IGN has no memory effects.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    libc::c_int::from(onering::cli::main())
}
