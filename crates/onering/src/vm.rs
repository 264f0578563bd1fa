//! The KVM virtual machine: guest RAM, the VM and vCPU file descriptors, and the
//! register state each vCPU starts with.

use crate::x86;
use kvm_bindings::{kvm_msr_entry, kvm_userspace_memory_region, kvm_xcrs, CpuId, Msrs, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use onering_abi::layout;
use thiserror::Error;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

#[derive(Debug, Error)]
pub enum VmError {
    #[error("/dev/kvm does not exist: this machine does not offer KVM")]
    NoKvm,
    #[error("permission denied opening /dev/kvm (run as root or join the kvm group)")]
    KvmPermission,
    #[error("cannot open /dev/kvm: {0}")]
    KvmOpen(std::io::Error),
    #[error("cannot allocate {0} MiB of guest memory: {1}")]
    Memory(u64, String),
    #[error("KVM {0} failed: {1}")]
    Ioctl(&'static str, kvm_ioctls::Error),
}

type Result<T> = std::result::Result<T, VmError>;

fn ioctl<T>(what: &'static str, r: std::result::Result<T, kvm_ioctls::Error>) -> Result<T> {
    r.map_err(|e| VmError::Ioctl(what, e))
}

/// Guest-physical RAM ranges for `size` bytes: below the 32-bit MMIO hole, then above 4 GiB.
pub fn ram_ranges(size: u64) -> Vec<(GuestAddress, usize)> {
    let low = size.min(layout::MMIO_HOLE_START);
    let mut r = vec![(GuestAddress(0), low as usize)];
    if size > low {
        r.push((GuestAddress(layout::HIGH_RAM_START), (size - low) as usize));
    }
    r
}

/// Allocates guest RAM: anonymous memory the host backs lazily.
pub fn guest_memory(size: u64) -> Result<GuestMemoryMmap> {
    GuestMemoryMmap::from_ranges(&ram_ranges(size)).map_err(|e| VmError::Memory(size >> 20, e.to_string()))
}

/// Asks for transparent huge pages for guest-physical memory from `from` on: the
/// chunks the guest kernel hands out for the program's heap and mappings, where a
/// guest 2 MiB page backed by one host 2 MiB page makes first touches cheap. Not
/// below it: a huge page costs ~1 ms to allocate here, and the boot area, kernel and
/// stacks below are only sparsely touched.
pub fn advise_pool(mem: &GuestMemoryMmap, from: u64) {
    for region in mem.iter() {
        let (start, len) = (region.start_addr().0, region.len());
        let begin = from.max(start);
        if begin >= start + len {
            continue;
        }
        if let Ok(host) = mem.get_host_address(GuestAddress(begin)) {
            crate::sys::advise_hugepages(host, (start + len - begin) as usize);
        }
    }
}

/// Opens /dev/kvm (or the device named by `ONERING_KVM_DEVICE`, which the tests use
/// to simulate a machine without KVM).
pub fn open_kvm() -> Result<Kvm> {
    let path = std::env::var_os("ONERING_KVM_DEVICE").unwrap_or_else(|| "/dev/kvm".into());
    let path =
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).map_err(|_| VmError::NoKvm)?;
    Kvm::new_with_path(path).map_err(|e| match e.errno() {
        libc::ENOENT | libc::ENXIO | libc::ENODEV => VmError::NoKvm,
        libc::EACCES | libc::EPERM => VmError::KvmPermission,
        _ => VmError::KvmOpen(std::io::Error::from_raw_os_error(e.errno())),
    })
}

/// Creates the VM (the slowest step here, ~0.25 ms).
pub fn create_vm(kvm: &Kvm) -> Result<VmFd> {
    ioctl("KVM_CREATE_VM", kvm.create_vm())
}

/// Gives the VM KVM's in-kernel interrupt controller, so each vCPU has a local APIC
/// (one-shot timer, IPIs) that KVM emulates without a trip to the VMM. After the
/// memory is registered: with the controller present, registering costs ~7 ms
/// here instead of ~0.1 ms.
pub fn create_irqchip(vm: &VmFd) -> Result<()> {
    ioctl("KVM_CREATE_IRQCHIP", vm.create_irq_chip())
}

/// Programs a vCPU's local APIC as the kernel expects it (`onering_abi::lapic`):
/// enabled, timer one-shot on `vectors::TIMER` counting nanoseconds.
fn setup_lapic(vcpu: &VcpuFd) -> Result<()> {
    use onering_abi::lapic;
    let mut state = ioctl("KVM_GET_LAPIC", vcpu.get_lapic())?;
    let mut set = |reg: u64, v: u32| {
        for (i, b) in v.to_le_bytes().iter().enumerate() {
            state.regs[reg as usize + i] = *b as _;
        }
    };
    set(lapic::SPURIOUS, lapic::SPURIOUS_ENABLE);
    set(lapic::TIMER_DIVIDE, lapic::DIVIDE_BY_1);
    set(lapic::LVT_TIMER, u32::from(onering_abi::vectors::TIMER));
    ioctl("KVM_SET_LAPIC", vcpu.set_lapic(&state))
}

/// Registers all of guest memory with the VM, one slot per region.
pub fn register_memory(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<()> {
    for (slot, region) in mem.iter().enumerate() {
        let r = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: region.as_ptr() as u64,
        };
        ioctl("KVM_SET_USER_MEMORY_REGION", crate::sys::register_memory(vm, r))?;
    }
    Ok(())
}

/// The CPUID the vCPUs get: everything KVM supports.
pub fn supported_cpuid(kvm: &Kvm) -> Result<CpuId> {
    ioctl("KVM_GET_SUPPORTED_CPUID", kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES))
}

/// XSAVE features the CPU supports (CPUID leaf 0xD, subleaf 0).
fn xsave_supported(cpuid: &CpuId) -> u64 {
    cpuid
        .as_slice()
        .iter()
        .find(|e| e.function == 0xd && e.index == 0)
        .map(|e| u64::from(e.eax) | (u64::from(e.edx) << 32))
        .unwrap_or(3)
}

/// Creates vCPU `id`, ready to start in ring 3 at `entry` on `stack` with `rdi = arg`.
pub fn create_vcpu(vm: &VmFd, cpuid: &CpuId, id: u64, entry: u64, stack: u64, arg: u64, lstar: u64) -> Result<VcpuFd> {
    let vcpu = ioctl("KVM_CREATE_VCPU", vm.create_vcpu(id))?;
    let mut cpuid = cpuid.clone();
    for e in cpuid.as_mut_slice() {
        match e.function {
            1 => e.ebx = (e.ebx & 0x00ff_ffff) | ((id as u32) << 24),
            0xb | 0x1f => e.edx = id as u32,
            _ => {}
        }
    }
    // CPUID first: KVM checks CR4 and XCR0 against it.
    ioctl("KVM_SET_CPUID2", vcpu.set_cpuid2(&cpuid))?;
    let sregs = x86::sregs(ioctl("KVM_GET_SREGS", vcpu.get_sregs())?, id);
    ioctl("KVM_SET_SREGS", vcpu.set_sregs(&sregs))?;
    let mut xcrs = kvm_xcrs { nr_xcrs: 1, ..Default::default() };
    xcrs.xcrs[0].xcr = 0;
    xcrs.xcrs[0].value = x86::xcr0(xsave_supported(&cpuid));
    ioctl("KVM_SET_XCRS", vcpu.set_xcrs(&xcrs))?;
    let entries = [
        kvm_msr_entry { index: x86::MSR_STAR, data: x86::star(), ..Default::default() },
        kvm_msr_entry { index: x86::MSR_LSTAR, data: lstar, ..Default::default() },
        kvm_msr_entry { index: x86::MSR_SFMASK, data: x86::SFMASK, ..Default::default() },
    ];
    let msrs = Msrs::from_entries(&entries)
        .map_err(|_| VmError::Ioctl("KVM_SET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)))?;
    let n = ioctl("KVM_SET_MSRS", vcpu.set_msrs(&msrs))?;
    if n != entries.len() {
        return Err(VmError::Ioctl("KVM_SET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)));
    }
    ioctl("KVM_SET_REGS", vcpu.set_regs(&x86::regs(entry, stack, arg)))?;
    setup_lapic(&vcpu)?;
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
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry { index: x86::MSR_TSC, ..Default::default() }])
        .map_err(|_| VmError::Ioctl("KVM_GET_MSRS", kvm_ioctls::Error::new(libc::EINVAL)))?;
    ioctl("KVM_GET_MSRS", vcpu.get_msrs(&mut msrs))?;
    Ok((u64::from(khz) * 1000, msrs.as_slice()[0].data))
}
