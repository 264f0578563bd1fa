//! cargo-fuzz target: the ELF parser. The same function the plain fuzz tests run
//! (`onering_rewrite::fuzz::elf`); an invariant it breaks is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(e) = onering_rewrite::fuzz::elf(data) {
        panic!("{e}");
    }
});
