//! The CPUID each vCPU gets: everything KVM supports (`KVM_GET_SUPPORTED_CPUID`),
//! with the vCPU's own APIC id, and the XSAVE features that decide XCR0; and the
//! table the guest answers rewritten `cpuid`s from.

use kvm_bindings::CpuId;

/// `supported` as vCPU `id` sees it: its APIC id in leaf 1 and in the topology
/// leaves 0xb and 0x1f.
pub fn for_vcpu(supported: &CpuId, id: u64) -> CpuId {
    let mut cpuid = supported.clone();
    for e in cpuid.as_mut_slice() {
        [e.eax, e.ebx, e.ecx, e.edx] = onering_abi::cpuid::for_cpu(e.function, [e.eax, e.ebx, e.ecx, e.edx], id as u32);
    }
    cpuid
}

/// `cpuid`'s entries as the guest's CPUID table (`onering_abi::cpuid`).
pub fn table(cpuid: &CpuId) -> Vec<onering_abi::cpuid::Entry> {
    cpuid
        .as_slice()
        .iter()
        .map(|e| onering_abi::cpuid::Entry {
            function: e.function,
            index: e.index,
            flags: e.flags & onering_abi::cpuid::SIGNIFICANT_INDEX,
            eax: e.eax,
            ebx: e.ebx,
            ecx: e.ecx,
            edx: e.edx,
        })
        .collect()
}

/// XSAVE features the CPU supports (CPUID leaf 0xD, subleaf 0); x87 and SSE if the
/// leaf is missing.
pub fn xsave_supported(cpuid: &CpuId) -> u64 {
    cpuid
        .as_slice()
        .iter()
        .find(|e| e.function == 0xd && e.index == 0)
        .map(|e| u64::from(e.eax) | (u64::from(e.edx) << 32))
        .unwrap_or(3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    #[test]
    fn each_vcpu_gets_its_apic_id() {
        let entries = [
            kvm_cpuid_entry2 { function: 1, ebx: 0xaa00_1234, ..Default::default() },
            kvm_cpuid_entry2 { function: 0xb, edx: 9, ..Default::default() },
            kvm_cpuid_entry2 { function: 0xd, index: 0, eax: 0xe7, edx: 0, ..Default::default() },
        ];
        let supported = CpuId::from_entries(&entries).unwrap();
        let c = for_vcpu(&supported, 3);
        assert_eq!(c.as_slice()[0].ebx, 0x0300_1234);
        assert_eq!(c.as_slice()[1].edx, 3);
        assert_eq!(xsave_supported(&c), 0xe7);
        assert_eq!(xsave_supported(&CpuId::new(0).unwrap()), 3);
    }
}
