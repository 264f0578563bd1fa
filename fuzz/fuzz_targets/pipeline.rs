//! cargo-fuzz target: what the loader does with a program file: parse it, find its
//! functions, plan the rewrite. The same function the plain fuzz tests run
//! (`onering_rewrite::fuzz::pipeline`); an invariant it breaks is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = onering_rewrite::fuzz::pipeline(data) {
        panic!("{e}");
    }
});
