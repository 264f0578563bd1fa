//! cargo-fuzz target: the rewriter on bytes (a header chooses the addresses, function
//! ranges and trampoline base). The same function the plain fuzz tests run
//! (`onering_rewrite::fuzz::plan_bytes`); an invariant it breaks is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = onering_rewrite::fuzz::plan_bytes(data) {
        panic!("{e}");
    }
});
