//! Creating a vCPU in the state `arch` describes (CPUID first, then special
//! registers, XCR0, the `syscall` MSRs, KVM's steal-time record where the host
//! offers it, general registers and the local APIC), and
//! reading its TSC. Application processors are made runnable at once: ours start at
//! the kernel's entry like the boot processor, without a startup IPI.

use super::{ioctl, Result, VmError};
use crate::arch::{cpuid, regs};
use kvm_bindings::{kvm_msr_entry, kvm_run__bindgen_ty_1__bindgen_ty_6 as KvmMmio, kvm_xcrs, CpuId, Msrs};
use kvm_ioctls::{VcpuFd, VmFd};

/// The CPUID KVM answers `vcpu` with, as its state now is.
pub fn guest_cpuid(vcpu: &VcpuFd) -> Result<CpuId> {
    ioctl("KVM_GET_CPUID2", vcpu.get_cpuid2(kvm_bindings::KVM_MAX_CPUID_ENTRIES))
}

/// Creates vCPU `id`, ready to start in ring 3 at `entry` on `stack` with `rdi = arg`.
pub fn create_vcpu(vm: &VmFd, cpuid: &CpuId, id: u64, entry: u64, stack: u64, arg: u64, lstar: u64) -> Result<VcpuFd> {
    let vcpu = ioctl("KVM_CREATE_VCPU", vm.create_vcpu(id))?;
    let cpuid = cpuid::for_vcpu(cpuid, id);
    // CPUID first: KVM checks CR4 and XCR0 against it.
    ioctl("KVM_SET_CPUID2", vcpu.set_cpuid2(&cpuid))?;
    let sregs = regs::sregs(ioctl("KVM_GET_SREGS", vcpu.get_sregs())?, id);
    ioctl("KVM_SET_SREGS", vcpu.set_sregs(&sregs))?;
    let mut xcrs = kvm_xcrs { nr_xcrs: 1, ..Default::default() };
    xcrs.xcrs[0].xcr = 0;
    xcrs.xcrs[0].value = regs::xcr0(cpuid::xsave_supported(&cpuid));
    ioctl("KVM_SET_XCRS", vcpu.set_xcrs(&xcrs))?;
    let entries = [
        kvm_msr_entry { index: regs::MSR_STAR, data: regs::star(), ..Default::default() },
        kvm_msr_entry { index: regs::MSR_LSTAR, data: lstar, ..Default::default() },
        kvm_msr_entry { index: regs::MSR_SFMASK, data: regs::SFMASK, ..Default::default() },
    ];
    let msrs = Msrs::from_entries(&entries)
        .map_err(|_| VmError::Ioctl("KVM_SET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)))?;
    let n = ioctl("KVM_SET_MSRS", vcpu.set_msrs(&msrs))?;
    if n != entries.len() {
        return Err(VmError::Ioctl("KVM_SET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)));
    }
    enable_steal_time(&vcpu, id);
    ioctl("KVM_SET_REGS", vcpu.set_regs(&regs::regs(entry, stack, arg)))?;
    let mut lapic = ioctl("KVM_GET_LAPIC", vcpu.get_lapic())?;
    regs::lapic(&mut lapic);
    ioctl("KVM_SET_LAPIC", vcpu.set_lapic(&lapic))?;
    if id != 0 {
        // With the in-kernel APIC, KVM keeps application processors waiting for a
        // startup IPI; ours start at the kernel's entry like the boot processor.
        let runnable = kvm_bindings::kvm_mp_state { mp_state: kvm_bindings::KVM_MP_STATE_RUNNABLE };
        ioctl("KVM_SET_MP_STATE", vcpu.set_mp_state(runnable))?;
    }
    Ok(vcpu)
}

/// Points vCPU `id`'s `MSR_KVM_STEAL_TIME` at the steal-time record in its per-CPU
/// page (`onering_abi::StealTime`), so that KVM reports there how long the vCPU
/// thread waited for a host CPU. A KVM without steal time refuses the MSR: the
/// record then stays zero, which the guest reads as "never preempted".
fn enable_steal_time(vcpu: &VcpuFd, id: u64) {
    let gpa =
        onering_abi::layout::PERCPU_PHYS + id * onering_abi::layout::PERCPU_STRIDE + onering_abi::STEAL_TIME_OFFSET;
    let entry = kvm_msr_entry {
        index: onering_abi::MSR_KVM_STEAL_TIME,
        data: gpa | onering_abi::KVM_MSR_ENABLED,
        ..Default::default()
    };
    if let Ok(msrs) = Msrs::from_entries(&[entry]) {
        let _ = vcpu.set_msrs(&msrs);
    }
}

/// The guest's TSC frequency (Hz) and its current value.
pub fn tsc(vcpu: &VcpuFd) -> Result<(u64, u64)> {
    let khz = ioctl("KVM_GET_TSC_KHZ", vcpu.get_tsc_khz())?;
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry { index: regs::MSR_TSC, ..Default::default() }])
        .map_err(|_| VmError::Ioctl("KVM_GET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)))?;
    ioctl("KVM_GET_MSRS", vcpu.get_msrs(&mut msrs))?;
    Ok((u64::from(khz) * 1000, msrs.as_slice().first().map_or(0, |m| m.data)))
}

/// Completes the MMIO read the vCPU exited on (`len` bytes at `addr`) with `value`:
/// KVM hands `run.mmio.data` to the guest when the vCPU next runs. The whole `mmio`
/// member is written, as the exit described it (assigning a union member is safe;
/// only reading one is not).
pub fn complete_mmio_read(vcpu: &mut VcpuFd, addr: u64, len: usize, value: u64) {
    let run = vcpu.get_kvm_run();
    run.__bindgen_anon_1.mmio =
        KvmMmio { phys_addr: addr, data: value.to_le_bytes(), len: len.min(8) as u32, is_write: 0 };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::VmExit;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    /// On real KVM (these tests need /dev/kvm, as the guest tests do): a vCPU in real
    /// mode reads a word from an address without memory, the read is completed with
    /// a value, and the vCPU writes the word it got to another such address.
    #[test]
    fn an_mmio_read_is_completed_with_the_value_given() {
        let kvm = super::super::vm::open_kvm().expect("/dev/kvm");
        let vm = kvm.create_vm().unwrap();
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap();
        // mov 0x8000, %ax ; mov %ax, 0x9000 ; hlt
        mem.write_slice(&[0xa1, 0x00, 0x80, 0xa3, 0x00, 0x90, 0xf4], GuestAddress(0)).unwrap();
        super::super::vm::register_memory(&vm, &mem).unwrap();
        let mut vcpu = vm.create_vcpu(0).unwrap();
        let mut sregs = vcpu.get_sregs().unwrap();
        sregs.cs.base = 0;
        sregs.cs.selector = 0;
        sregs.ds.base = 0;
        sregs.ds.selector = 0;
        vcpu.set_sregs(&sregs).unwrap();
        vcpu.set_regs(&kvm_bindings::kvm_regs { rip: 0, rflags: 2, ..Default::default() }).unwrap();
        let exit = VmExit::from_kvm(vcpu.run().unwrap());
        assert_eq!(exit, VmExit::MmioRead { addr: 0x8000, len: 2 });
        complete_mmio_read(&mut vcpu, 0x8000, 2, 0xbeef_1234);
        let exit = VmExit::from_kvm(vcpu.run().unwrap());
        assert_eq!(exit, VmExit::MmioWrite { addr: 0x9000, data: 0x1234, len: 2 });
    }
}
