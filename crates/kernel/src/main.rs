//! The guest kernel image: everything, including the entry point `_start`, is in the
//! library; this file only makes the linker produce an executable of it.
#![no_std]
#![no_main]

use onering_kernel as _;
