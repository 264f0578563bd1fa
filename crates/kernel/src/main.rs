//! The guest kernel image: the framework (`onering_arch`) and the kernel linked
//! into one executable. This file only names the kernel's entry hooks for the
//! framework's entry code.
#![no_std]
#![no_main]

onering_arch::entry_point! {
    main: onering_kernel::boot::kmain,
    syscall: onering_kernel::boot::syscall_hook,
    syscall_observed: onering_kernel::boot::syscall_hook_observed,
    fault: onering_kernel::boot::fault_hook,
    interrupt: onering_kernel::boot::interrupt_hook,
}
