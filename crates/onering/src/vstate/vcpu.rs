//! Creating a vCPU in the state `arch` describes (CPUID first, then special
//! registers, XCR0, the `syscall` MSRs, general registers and the local APIC), and
//! reading its TSC. Application processors are made runnable at once: ours start at
//! the kernel's entry like the boot processor, without a startup IPI.

use super::{ioctl, Result, VmError};
use crate::arch::{cpuid, regs};
use kvm_bindings::{kvm_msr_entry, kvm_xcrs, CpuId, Msrs};
use kvm_ioctls::{VcpuFd, VmFd};

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

/// The guest's TSC frequency (Hz) and its current value.
pub fn tsc(vcpu: &VcpuFd) -> Result<(u64, u64)> {
    let khz = ioctl("KVM_GET_TSC_KHZ", vcpu.get_tsc_khz())?;
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry { index: regs::MSR_TSC, ..Default::default() }])
        .map_err(|_| VmError::Ioctl("KVM_GET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)))?;
    ioctl("KVM_GET_MSRS", vcpu.get_msrs(&mut msrs))?;
    Ok((u64::from(khz) * 1000, msrs.as_slice().first().map_or(0, |m| m.data)))
}
