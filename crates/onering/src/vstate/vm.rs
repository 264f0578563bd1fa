//! The VM itself: /dev/kvm, the VM file descriptor with its in-kernel interrupt
//! controller, and guest RAM (anonymous host memory, lazily backed, registered with
//! KVM one slot per region).

use super::{ioctl, Result, VmError};
use crate::layout::ram_ranges;
use kvm_bindings::{kvm_userspace_memory_region, CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

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
    let kvm = Kvm::new_with_path(path).map_err(|e| match e.errno() {
        libc::ENOENT | libc::ENXIO | libc::ENODEV => VmError::NoKvm,
        libc::EACCES | libc::EPERM => VmError::KvmPermission,
        _ => VmError::KvmOpen(std::io::Error::from_raw_os_error(e.errno())),
    })?;
    check_kvm(&kvm)?;
    Ok(kvm)
}

/// What onering needs of KVM, checked up front so that an old or unusual one gives
/// one clear line rather than a failed ioctl later.
fn check_kvm(kvm: &Kvm) -> Result<()> {
    use kvm_ioctls::Cap;
    let version = kvm.get_api_version();
    if version < 0 {
        return Err(VmError::NotKvm);
    }
    if version != 12 {
        return Err(VmError::OldKvm(format!("KVM API version {version}, not 12")));
    }
    let needed = [
        (Cap::UserMemory, "KVM_CAP_USER_MEMORY"),
        (Cap::Irqchip, "KVM_CAP_IRQCHIP"),
        (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID"),
        (Cap::GetTscKhz, "KVM_CAP_GET_TSC_KHZ"),
        (Cap::SignalMsi, "KVM_CAP_SIGNAL_MSI"),
    ];
    match needed.iter().find(|(cap, _)| !kvm.check_extension(*cap)) {
        Some((_, name)) => Err(VmError::OldKvm(format!("it lacks {name}"))),
        None => Ok(()),
    }
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
