//! cargo-fuzz target: function discovery (symbols, .eh_frame, .eh_frame_hdr). The same
//! function the plain fuzz tests run (`onering_rewrite::fuzz::function_discovery`); an
//! invariant it breaks is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = onering_rewrite::fuzz::function_discovery(data) {
        panic!("{e}");
    }
});
