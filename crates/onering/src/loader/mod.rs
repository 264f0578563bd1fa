//! Lays out the guest before boot: the kernel image, per-CPU stacks and headers,
//! the kernel heap, the program's segments and its initial stack, the page tables,
//! GDT, IDT and TSSs, and the boot info that tells the kernel where all of it is.
//!
//! Guest-physical memory is handed out bottom-up in 2 MiB chunks after the kernel;
//! what is left is the kernel's to allocate. The program is loaded here rather than
//! in the guest because the VMM must validate it anyway (exit status 126), and
//! copying it straight into place costs the guest no page touches at boot.
//!
//! `stack` builds the program's initial stack (argv, envp, auxv), `rootfs` the image
//! of a `--rootfs` directory; the program file itself was parsed, and its rewrite
//! planned, by `onering_rewrite`: this module only places the result.

pub mod rootfs;
pub use onering_rewrite::stack;

use crate::arch::paging::{PTE_GLOBAL, PTE_PCD, PTE_PWT};
use crate::arch::{tables, ArchError, PageTables};
use crate::embedded::kernel_image;
use crate::layout::{cpu_stack_tops, ram_ranges, stacks_base};
use onering_abi::layout::{self, align_down, align_up, direct, HUGE_PAGE_SIZE};
use onering_abi::percpu_offsets as pc;
use onering_abi::{
    vvar, BootInfo, MemRegion, NetInfo, PerCpuHeader, Segment, UserMapping, ABI_VERSION, BOOT_MAGIC, MAX_SEGMENTS,
};
use onering_rewrite::elf::Program;
use onering_rewrite::{functions, rewrite};
use stack::{StackError, StackSpec};
use thiserror::Error;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

const MIB: u64 = 1 << 20;
/// Guest memory a Go program needs past its image, and 1 MiB more per vCPU
/// (measured: Go 1.2x's hello world runs in 46 MiB at --smp 1, not in 44; at
/// --smp 4 in 48 MiB, not in 46), with 4 MiB to spare: how much the runtime
/// touches at start varies from run to run (the test's hello at the minimum
/// without it: killed in 1 of 6 runs, needing 2 MiB more).
const GO_RUNTIME_MIN: u64 = 28 * MIB;

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("--mem {have} MiB is too small: onering needs at least {need} MiB for this program")]
    MemTooSmall { need: u64, have: u64 },
    #[error("too large for --mem {mem} MiB (it needs {need} MiB of guest memory; try a larger --mem)")]
    ImageTooLarge { need: u64, mem: u64 },
    #[error("--rootfs needs more memory: {need} MiB in all, --mem is {mem} MiB")]
    RootfsTooLarge { need: u64, mem: u64 },
    #[error("its segments lie outside the user address space ({0:#x})")]
    BadAddress(u64),
    #[error("its entry point {0:#x} lies outside the user address space")]
    BadEntry(u64),
    #[error("{0}")]
    Stack(#[from] StackError),
    #[error("building the machine: {0}")]
    Arch(#[from] ArchError),
    #[error("writing guest memory at {0:#x} failed")]
    Memory(u64),
}

impl LoadError {
    /// Whether the program is at fault (126) rather than onering's configuration (125).
    pub fn is_program_error(&self) -> bool {
        matches!(
            self,
            LoadError::ImageTooLarge { .. } | LoadError::BadAddress(_) | LoadError::BadEntry(_) | LoadError::Stack(_)
        )
    }
}

type Result<T> = std::result::Result<T, LoadError>;

/// What the VM runs and with what.
pub struct LoadSpec<'a> {
    pub mem_size: u64,
    pub ncpus: u64,
    pub argv: &'a [Vec<u8>],
    pub envp: &'a [Vec<u8>],
    pub execfn: &'a [u8],
    pub flags: u64,
    pub stdio: u64,
    pub uid: u64,
    pub gid: u64,
    pub random: [u8; 16],
    /// Seed of the kernel's random generator.
    pub seed: [u64; 2],
    pub hwcap: u64,
    /// How to rewrite the program's `syscall` instructions ([`plan_rewrite`]); None:
    /// leave them, every system call traps.
    pub rewrite: Option<&'a rewrite::Plan>,
    /// The `--rootfs` image (empty for none) and the working directory (`-w`).
    pub rootfs: &'a [u8],
    pub workdir: &'a [u8],
    /// The vDSO to map (with AT_SYSINFO_EHDR), or none.
    pub vdso: Option<&'a [u8]>,
    /// The network device and the VM's addresses (`present` 0: none).
    pub net: NetInfo,
    /// The system calls `--trace` shows (a bit each; with `flags::TRACE`).
    pub trace_set: [u64; onering_abi::trace::SET_WORDS],
    /// `--hostname` (empty: the default).
    pub hostname: &'a [u8],
    /// The program's capability sets (`onering_abi::caps`).
    pub caps: [u64; onering_abi::caps::SETS],
    /// `--ulimit NAME=SOFT:HARD`: (resource number, soft, hard) each.
    pub rlimits: &'a [(usize, u64, u64)],
    /// The tmpfs mounts (`onering_abi::tmpfs` records; empty: none).
    pub tmpfs: &'a [u8],
}

fn write(mem: &GuestMemoryMmap, pa: u64, data: &[u8]) -> Result<()> {
    mem.write_slice(data, GuestAddress(pa)).map_err(|_| LoadError::Memory(pa))
}

/// Copies the kernel image to `KERNEL_PHYS`, in a chunk of its own that the host
/// is asked to back with a huge page (`MADV_HUGEPAGE` before the copy); false if
/// the host gives no transparent huge pages (then [`map_kernel`] saves memory
/// instead). It costs each VM ~2 MiB of host memory the file mapping shared
/// (bench/density.sh: 4.8 MiB a VM instead of 2.8) and saves every start ~2 ms
/// of shadow fills (perf.md).
fn kernel_on_huge_page(mem: &GuestMemoryMmap) -> bool {
    const _: () = assert!(layout::KERNEL_PHYS.is_multiple_of(HUGE_PAGE_SIZE));
    let in_chunk = kernel_image::MEM_END - layout::KERNEL_VBASE <= layout::KERNEL_PHYS + HUGE_PAGE_SIZE;
    let Ok(host) = mem.get_host_address(GuestAddress(layout::KERNEL_PHYS)) else { return false };
    // (The host's mapping must be 2 MiB aligned too for a huge page to back it.)
    if !in_chunk || !(host as usize).is_multiple_of(HUGE_PAGE_SIZE as usize) || !crate::sys::huge_pages_offered() {
        return false;
    }
    crate::sys::advise_hugepages(host, HUGE_PAGE_SIZE as usize);
    write(mem, layout::KERNEL_PHYS, kernel_image::IMAGE).is_ok()
}

/// Maps the kernel image at `KERNEL_PHYS` from the executable file, private and
/// copy-on-write: its pages are the page cache's, shared by every VM, until the
/// guest writes one (~1.4 MiB a VM the host need not hold; docs/perf.md, Density).
/// Checked by reading its first and last page back; false (the caller copies it)
/// if that could not be done. The rest of its last page holds the file's next bytes.
fn map_kernel(mem: &GuestMemoryMmap) -> bool {
    let image = kernel_image::IMAGE;
    let len = align_up(image.len() as u64, layout::PAGE_SIZE) as usize;
    let Some((file, offset)) = crate::embedded::kernel_image_file() else { return false };
    let Ok(host) = mem.get_host_address(GuestAddress(layout::KERNEL_PHYS)) else { return false };
    if !crate::sys::map_file_private(host, len, &file, offset) {
        return false;
    }
    let same = |at: usize, n: usize| {
        let mut b = vec![0u8; n];
        mem.read_slice(&mut b, GuestAddress(layout::KERNEL_PHYS + at as u64)).is_ok() && b[..] == image[at..at + n]
    };
    let page = layout::PAGE_SIZE as usize;
    let last = (image.len() - 1) & !(page - 1);
    same(0, page.min(image.len())) && same(last, image.len() - last)
}

/// Kernel heap size for a VM of `mem` bytes.
fn heap_size(mem: u64) -> u64 {
    match mem {
        m if m >= 1024 * MIB => 16 * MIB,
        m if m >= 256 * MIB => 8 * MIB,
        _ => 4 * MIB,
    }
}

/// How many system-call sites, and how many `cpuid` sites, were found and
/// rewritten in the first program.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewriteStats {
    pub sites: usize,
    pub rewritten: usize,
    pub cpuid_sites: usize,
    pub cpuid_rewritten: usize,
}

/// Where the program goes: the load bias (static-pie) and the end of its image.
pub fn placement(prog: &Program) -> (u64, u64) {
    let (lo, hi) = prog.span();
    // Addresses wrap (a hostile file may place a static-pie anywhere); the loader's
    // range check rejects whatever does not land in user space.
    let bias = if prog.pie { layout::PIE_BASE.wrapping_sub(align_down(lo, HUGE_PAGE_SIZE)) } else { 0 };
    (bias, hi.wrapping_add(bias))
}

/// Plans the rewriting of `prog`'s system-call sites, trampolines after its image.
/// Independent of guest memory, so it can run while the VM is being created.
pub fn plan_rewrite(prog: &Program, file: &[u8]) -> rewrite::Plan {
    let (bias, vhi) = placement(prog);
    // An image that ends at the top of the address space gets no rewrite: `load`
    // refuses it anyway (it does not lie in user space).
    match vhi.checked_next_multiple_of(layout::PAGE_SIZE) {
        Some(base) => crate::plancache::plan(prog, file, bias, base),
        None => rewrite::Plan::default(),
    }
}

/// Writes everything into `mem`; returns the boot info (also written to memory,
/// except the clock fields, which `write_boot_info` fills in just before the start).
pub fn load(mem: &GuestMemoryMmap, spec: &LoadSpec, prog: &Program, file: &[u8]) -> Result<(BootInfo, RewriteStats)> {
    let ram = ram_ranges(spec.mem_size);
    let low_end = ram[0].0 .0 + ram[0].1 as u64;

    // Fixed costs: boot area, kernel, per-CPU stacks, heap, the program's stack.
    // The kernel's mapping ends where the per-CPU stacks start.
    let stacks = stacks_base();
    let kernel_span = stacks;
    let stacks_size = align_up(spec.ncpus * layout::CPU_STACKS_SIZE, HUGE_PAGE_SIZE);
    let heap = stacks + stacks_size;
    let heap_size = heap_size(spec.mem_size);
    let mut next = heap + heap_size;
    let stack_phys = next;
    next += layout::STACK_SIZE;
    // And at least a few chunks to run with (page tables, a little heap).
    let fixed = next + 4 * HUGE_PAGE_SIZE;
    if fixed > low_end {
        return Err(LoadError::MemTooSmall { need: fixed.div_ceil(MIB), have: spec.mem_size / MIB });
    }

    // The program: its image in whole 2 MiB blocks, backed by contiguous chunks. An
    // entry point in the kernel's half or past the canonical addresses could never
    // be the program's (one elsewhere in its half just faults, as on Linux).
    let (bias, vhi) = placement(prog);
    let entry = prog.entry.wrapping_add(bias);
    if entry >= layout::USER_END {
        return Err(LoadError::BadEntry(entry));
    }
    let vlo = prog.span().0.wrapping_add(bias);
    if vlo < 0x1_0000 || vhi > layout::MMAP_TOP || vhi < vlo {
        return Err(LoadError::BadAddress(if vlo < 0x1_0000 { vlo } else { vhi }));
    }
    // Rewrite the system-call sites; the trampolines go on the page after the image
    // (the rest of its last page is the program's: glibc's loader allocates there), inside
    // its mapping, and the program break starts after them.
    let none = rewrite::Plan::default();
    let rewrite = spec.rewrite.unwrap_or(&none);
    let tramp_base = align_up(vhi, layout::PAGE_SIZE);
    let tramp_end = if rewrite.trampolines.is_empty() { vhi } else { tramp_base + rewrite.trampolines.len() as u64 };
    // Then the vDSO, if any, with its clock page below it; the break after that.
    let vdso_base = spec.vdso.map_or(0, |_| align_up(tramp_end, layout::PAGE_SIZE) + vvar::BELOW_VDSO);
    let vend = match spec.vdso {
        Some(v) => vdso_base + align_up(v.len() as u64, layout::PAGE_SIZE),
        None => tramp_end,
    };
    let img_virt = align_down(vlo, HUGE_PAGE_SIZE);
    let img_size = align_up(vend, HUGE_PAGE_SIZE) - img_virt;
    let img_phys = next;
    next += img_size;
    // A Go program's runtime maps a 32 MiB arena index and its first heap arenas
    // at start: below this much memory past the image it dies at once ("out of
    // memory allocating heap arena map"), so it is refused here, naming the minimum.
    let go_need = next + GO_RUNTIME_MIN + spec.ncpus * MIB;
    if functions::section(file, b".go.buildinfo").is_some() && go_need > low_end {
        return Err(LoadError::MemTooSmall { need: go_need.div_ceil(MIB), have: spec.mem_size / MIB });
    }
    if next + 2 * HUGE_PAGE_SIZE > low_end {
        return Err(LoadError::ImageTooLarge {
            need: (next + 2 * HUGE_PAGE_SIZE).div_ceil(MIB),
            mem: spec.mem_size / MIB,
        });
    }
    for s in &prog.segments {
        let pa = img_phys + (s.vaddr.wrapping_add(bias) - img_virt);
        write(mem, pa, s.bytes(file))?;
    }
    for patch in &rewrite.patches {
        write(mem, img_phys + (patch.addr - img_virt), &patch.bytes)?;
    }
    write(mem, img_phys + (tramp_base - img_virt), &rewrite.trampolines)?;
    if let Some(v) = spec.vdso {
        write(mem, img_phys + (vdso_base - img_virt), v)?;
    }
    // The kernel: copied into a chunk the host backs with a huge page where it has
    // them (each 4 KiB page of it the guest touches then needs no shadow fill of its
    // own: ~2 ms of a static hello's 6 ms start went to ~160 such fills); else its
    // pages mapped from the executable (shared by all VMs until written), or copied.
    if !kernel_on_huge_page(mem) && !map_kernel(mem) {
        write(mem, layout::KERNEL_PHYS, kernel_image::IMAGE)?;
    }
    // The rest of its last page is the start of its .bss: zeroes.
    let image_end = layout::KERNEL_PHYS + kernel_image::IMAGE.len() as u64;
    write(mem, image_end, &vec![0; (align_up(image_end, layout::PAGE_SIZE) - image_end) as usize])?;

    // The rootfs image, the working directory and the tmpfs mounts, in chunks of
    // their own.
    let (rootfs_phys, workdir_phys) = (next, next + spec.rootfs.len() as u64);
    let tmpfs_phys = workdir_phys + spec.workdir.len() as u64;
    let boot_data = spec.rootfs.len() + spec.workdir.len() + spec.tmpfs.len();
    if boot_data != 0 {
        next += align_up(boot_data as u64, HUGE_PAGE_SIZE);
        if next + 2 * HUGE_PAGE_SIZE > low_end {
            return Err(LoadError::RootfsTooLarge {
                need: (next + 2 * HUGE_PAGE_SIZE).div_ceil(MIB),
                mem: spec.mem_size / MIB,
            });
        }
        write(mem, rootfs_phys, spec.rootfs)?;
        write(mem, workdir_phys, spec.workdir)?;
        write(mem, tmpfs_phys, spec.tmpfs)?;
    }

    // The initial stack.
    let mut auxv = vec![
        (stack::AT_PHDR, prog.phdr_addr().map_or(0, |a| a + bias)),
        (stack::AT_PHENT, 56),
        (stack::AT_PHNUM, prog.phnum),
        (stack::AT_PAGESZ, layout::PAGE_SIZE),
        (stack::AT_BASE, 0),
        (stack::AT_FLAGS, 0),
        (stack::AT_ENTRY, entry),
        (stack::AT_UID, spec.uid),
        (stack::AT_EUID, spec.uid),
        (stack::AT_GID, spec.gid),
        (stack::AT_EGID, spec.gid),
        (stack::AT_HWCAP, spec.hwcap),
        // Not HWCAP2_FSGSBASE: the GS base belongs to the kernel.
        (stack::AT_HWCAP2, 0),
        (stack::AT_CLKTCK, 100),
        (stack::AT_SECURE, 0),
    ];
    if vdso_base != 0 {
        // Without it the C libraries and Go make the (rewritten) system call.
        auxv.push((stack::AT_SYSINFO_EHDR, vdso_base));
    }
    let st = stack::build(
        layout::STACK_TOP,
        &StackSpec { argv: spec.argv, envp: spec.envp, execfn: spec.execfn, random: spec.random, auxv: &auxv },
    )?;
    let stack_virt = layout::STACK_TOP - layout::STACK_SIZE;
    write(mem, stack_phys + (st.sp - stack_virt), &st.bytes)?;

    // Page tables.
    let mut pt = PageTables::new(mem);
    pt.map_range(layout::KERNEL_VBASE, 0, kernel_span, PTE_GLOBAL)?;
    for (start, size) in &ram {
        pt.map_range(direct(start.0), start.0, *size as u64, PTE_GLOBAL)?;
    }
    pt.map_2m(direct(layout::MMIO_PAGE_PHYS), layout::MMIO_PAGE_PHYS, PTE_PCD | PTE_PWT)?;
    pt.map_range(img_virt, img_phys, img_size, 0)?;
    pt.map_range(stack_virt, stack_phys, layout::STACK_SIZE, 0)?;

    // Descriptor tables and per-CPU state.
    tables::write_gdt(mem, spec.ncpus)?;
    let stubs = tables::Stubs {
        exceptions: kernel_image::EXCEPTION_STUBS,
        interrupt: kernel_image::INTERRUPT_STUB,
        preempt: kernel_image::PREEMPT_STUB,
    };
    tables::write_idt(mem, &stubs)?;
    for cpu in 0..spec.ncpus {
        let (kstack, fstack, ist) = cpu_stack_tops(cpu);
        tables::write_tss(mem, cpu, direct(ist))?;
        let header = PerCpuHeader {
            self_ptr: layout::percpu_virt(cpu),
            cpu,
            kstack_top: direct(kstack),
            fault_stack_top: direct(fstack),
            ..Default::default()
        };
        let pa = layout::PERCPU_PHYS + cpu * layout::PERCPU_STRIDE;
        write(mem, pa, &percpu_bytes(&header))?;
        // The frame the exception stubs `iretq` through to their ring-3 landing,
        // on IST1 just below what the stub and the CPU left there.
        let frame = [
            kernel_image::EXCEPTION_LANDING,
            u64::from(layout::USER_CS),
            0x202,
            direct(ist) - 7 * 8,
            u64::from(layout::USER_DS),
        ];
        let (ptr, at) = (pc::EXCEPTION_FRAME_PTR as u64, pc::EXCEPTION_FRAME as u64);
        write(mem, pa + ptr, &(layout::percpu_virt(cpu) + at).to_le_bytes())?;
        write(mem, pa + at, &words_to_bytes(&frame))?;
        // The poll slot's root until the guest first switches address space.
        let root = pa + onering_abi::hostcall::POLL_OFFSET + onering_abi::hostcall::poll_offsets::ROOT;
        write(mem, root, &layout::BOOT_PT_PHYS.to_le_bytes())?;
    }

    let mut mem_regions = [MemRegion::default(); onering_abi::MAX_MEM_REGIONS];
    for (i, (start, size)) in ram.iter().enumerate() {
        mem_regions[i] = MemRegion { start: start.0, size: *size as u64 };
    }
    let (segments, nsegments) = segment_protections(prog, bias);
    let bi = BootInfo {
        magic: BOOT_MAGIC,
        abi_version: ABI_VERSION,
        flags: spec.flags,
        ncpus: spec.ncpus,
        mem: mem_regions,
        nmem: ram.len() as u64,
        phys_free_start: next,
        heap_phys: heap,
        heap_size,
        entry,
        user_sp: st.sp,
        brk_start: vend,
        image_start: vlo,
        user_maps: [
            UserMapping { virt: img_virt, size: img_size, phys: img_phys },
            UserMapping { virt: stack_virt, size: layout::STACK_SIZE, phys: stack_phys },
        ],
        stdio: spec.stdio,
        uid: spec.uid,
        gid: spec.gid,
        execfn: st.execfn,
        execfn_len: spec.execfn.len() as u64,
        seed: spec.seed,
        rootfs_phys,
        rootfs_size: spec.rootfs.len() as u64,
        workdir_phys,
        workdir_len: spec.workdir.len() as u64,
        tmpfs_phys,
        tmpfs_len: spec.tmpfs.len() as u64,
        vdso_base,
        vdso_len: spec.vdso.map_or(0, |v| v.len() as u64),
        segments,
        nsegments,
        net: spec.net,
        trace_set: spec.trace_set,
        hostname: onering_abi::hostname_words(spec.hostname),
        caps: spec.caps,
        rlimits: {
            let mut r = [[0; 2]; onering_abi::rlimit::COUNT];
            for (n, soft, hard) in spec.rlimits {
                r[*n] = [*soft, *hard];
            }
            r
        },
        rlimits_set: spec.rlimits.iter().fold(0, |m, (n, ..)| m | 1 << n),
        ..Default::default()
    };
    write_boot_info(mem, &bi)?;
    let stats = RewriteStats {
        sites: rewrite.sites,
        rewritten: rewrite.rewritten,
        cpuid_sites: rewrite.cpuid_sites,
        cpuid_rewritten: rewrite.cpuid_rewritten,
    };
    Ok((bi, stats))
}

fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The loadable segments with their `PROT_*` bits (ELF's `PF_X` 1, `PF_W` 2,
/// `PF_R` 4 become `PROT_EXEC` 4, `PROT_WRITE` 2, `PROT_READ` 1); none if there
/// are too many to pass.
fn segment_protections(prog: &Program, bias: u64) -> ([Segment; MAX_SEGMENTS], u64) {
    let mut out = [Segment::default(); MAX_SEGMENTS];
    if prog.segments.len() > MAX_SEGMENTS {
        return (out, 0);
    }
    for (o, s) in out.iter_mut().zip(&prog.segments) {
        let f = u64::from(s.flags);
        let prot = (f & 4) >> 2 | (f & 2) | (f & 1) << 2;
        let start = s.vaddr.wrapping_add(bias);
        *o = Segment { start, end: start.wrapping_add(s.memsz), prot };
    }
    (out, prog.segments.len() as u64)
}

fn percpu_bytes(h: &PerCpuHeader) -> Vec<u8> {
    let mut w = vec![h.self_ptr, h.cpu, h.kstack_top, h.fault_stack_top, h.user_rsp, h.in_fault];
    w.extend(h.hostcall.args);
    w.push(h.hostcall.ret);
    w.extend([h.traps, h.interrupts, h.lapic_writes, h.switches]);
    words_to_bytes(&w)
}

/// Writes the CPUID table the kernel answers rewritten `cpuid`s from
/// (`onering_abi::cpuid`).
pub fn write_cpuid(mem: &GuestMemoryMmap, entries: &[onering_abi::cpuid::Entry]) -> Result<()> {
    write(mem, layout::CPUID_PHYS, &onering_abi::cpuid::encode(entries))
}

/// Serializes the boot info field by field (it is `#[repr(C)]`, all `u64`s).
pub fn write_boot_info(mem: &GuestMemoryMmap, bi: &BootInfo) -> Result<()> {
    let mut w = vec![bi.magic, bi.abi_version, bi.flags, bi.ncpus];
    for r in &bi.mem {
        w.extend([r.start, r.size]);
    }
    w.extend([
        bi.nmem,
        bi.phys_free_start,
        bi.heap_phys,
        bi.heap_size,
        bi.tsc_hz,
        bi.boot_tsc,
        bi.boot_realtime_ns,
        bi.entry,
        bi.user_sp,
        bi.brk_start,
        bi.image_start,
    ]);
    for m in &bi.user_maps {
        w.extend([m.virt, m.size, m.phys]);
    }
    w.extend([bi.stdio, bi.uid, bi.gid, bi.execfn, bi.execfn_len]);
    w.extend(bi.seed);
    w.extend([bi.rootfs_phys, bi.rootfs_size, bi.workdir_phys, bi.workdir_len, bi.vdso_base]);
    for s in &bi.segments {
        w.extend([s.start, s.end, s.prot]);
    }
    w.push(bi.nsegments);
    let n = &bi.net;
    w.extend([n.present, n.mac, n.ipv4, n.prefix4, n.gateway4, n.dns4, n.mtu]);
    w.push(bi.vdso_len);
    w.extend(bi.trace_set);
    w.extend(bi.hostname);
    w.extend(bi.caps);
    for r in &bi.rlimits {
        w.extend(r);
    }
    w.push(bi.rlimits_set);
    w.extend([bi.tmpfs_phys, bi.tmpfs_len]);
    debug_assert_eq!(w.len() * 8, std::mem::size_of::<BootInfo>());
    write(mem, layout::BOOT_INFO_PHYS, &words_to_bytes(&w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use onering_rewrite::testing::tiny_elf;

    fn spec(mem: u64) -> LoadSpec<'static> {
        LoadSpec {
            mem_size: mem,
            ncpus: 1,
            argv: &[],
            envp: &[],
            execfn: b"p",
            flags: 0,
            stdio: 0,
            uid: 0,
            gid: 0,
            random: [0; 16],
            seed: [1, 2],
            rootfs: &[],
            workdir: &[],
            tmpfs: &[],
            hwcap: 0,
            rewrite: None,
            vdso: None,
            net: NetInfo::default(),
            trace_set: [0; onering_abi::trace::SET_WORDS],
            hostname: b"",
            caps: onering_abi::caps::default_for(0),
            rlimits: &[],
        }
    }

    #[test]
    fn boot_info_layout_matches_the_struct() {
        assert_eq!(std::mem::size_of::<BootInfo>() % 8, 0);
        let m = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
        let net = NetInfo { present: 1, mac: 0x5634_1200_5452, mtu: 1500, ..Default::default() };
        let mut trace_set = [0; onering_abi::trace::SET_WORDS];
        trace_set[onering_abi::trace::SET_WORDS - 1] = 0x55;
        let hostname = onering_abi::hostname_words(b"box");
        let caps = [1, 2, 3, 4, 5];
        let mut rlimits = [[0; 2]; onering_abi::rlimit::COUNT];
        rlimits[onering_abi::rlimit::COUNT - 1] = [6, 7];
        let bi = BootInfo {
            magic: BOOT_MAGIC,
            nsegments: 77,
            net,
            vdso_len: 9,
            trace_set,
            hostname,
            caps,
            rlimits,
            rlimits_set: 8,
            ..Default::default()
        };
        write_boot_info(&m, &bi).unwrap();
        let at = |off: usize| m.read_obj::<u64>(GuestAddress(layout::BOOT_INFO_PHYS + off as u64)).unwrap();
        assert_eq!(
            at(std::mem::offset_of!(BootInfo, hostname)),
            u64::from_le_bytes(*b"box\0\0\0\0\0"),
            "the host name"
        );
        assert_eq!(at(std::mem::offset_of!(BootInfo, caps) + 32), 5, "the capability sets");
        assert_eq!(at(std::mem::offset_of!(BootInfo, rlimits_set) - 8), 7, "the last resource's hard limit");
        assert_eq!(at(std::mem::offset_of!(BootInfo, rlimits_set)), 8);
        let trace_end = std::mem::offset_of!(BootInfo, hostname) - 8;
        assert_eq!(at(trace_end), 0x55, "the trace set before it");
        assert_eq!(at(std::mem::offset_of!(BootInfo, vdso_len)), 9);
        assert_eq!(at(std::mem::offset_of!(BootInfo, net) + std::mem::offset_of!(NetInfo, mtu)), 1500);
        assert_eq!(at(std::mem::offset_of!(BootInfo, nsegments)), 77);
        assert_eq!(at(std::mem::offset_of!(BootInfo, net)), 1);
        assert_eq!(at(std::mem::offset_of!(BootInfo, net) + 8), 0x5634_1200_5452);
    }

    #[test]
    fn loads_a_program_and_maps_it() {
        let file = tiny_elf(&[0xf4, 0x90, 0x90]);
        let prog = Program::parse(&file).unwrap();
        let mem = GuestMemoryMmap::from_ranges(&ram_ranges(64 << 20)).unwrap();
        let (bi, _) = load(&mem, &spec(64 << 20), &prog, &file).unwrap();
        assert_eq!(bi.entry, 0x401000);
        assert_eq!(bi.brk_start, 0x401103);
        let (pa, _) = crate::arch::translate(&mem, layout::BOOT_PT_PHYS, 0x401000).unwrap();
        let b: u8 = mem.read_obj(GuestAddress(pa)).unwrap();
        assert_eq!(b, 0xf4);
        let (sp_pa, _) = crate::arch::translate(&mem, layout::BOOT_PT_PHYS, bi.user_sp).unwrap();
        let argc: u64 = mem.read_obj(GuestAddress(sp_pa)).unwrap();
        assert_eq!(argc, 0);
        assert!(crate::arch::translate(&mem, layout::BOOT_PT_PHYS, kernel_image::ENTRY).is_some());
        assert!(bi.phys_free_start < 64 << 20);
        assert_eq!(bi.vdso_base, 0, "no vDSO asked for");
    }

    #[test]
    fn the_vdso_follows_the_image_with_its_clock_page_below() {
        let file = tiny_elf(&[0x90]);
        let prog = Program::parse(&file).unwrap();
        let mem = GuestMemoryMmap::from_ranges(&ram_ranges(64 << 20)).unwrap();
        let vdso = [0x7fu8, b'E', b'L', b'F', 1, 2, 3];
        let (bi, _) = load(&mem, &LoadSpec { vdso: Some(&vdso), ..spec(64 << 20) }, &prog, &file).unwrap();
        assert_eq!(bi.vdso_base, 0x403000, "a page for the clock between the image and the vDSO");
        assert_eq!(bi.brk_start, 0x404000, "the break after the vDSO");
        let (pa, _) = crate::arch::translate(&mem, layout::BOOT_PT_PHYS, bi.vdso_base).unwrap();
        let mut got = [0u8; 7];
        mem.read_slice(&mut got, GuestAddress(pa)).unwrap();
        assert_eq!(got, vdso);
        assert!(crate::embedded::vdso::IMAGE.starts_with(b"\x7fELF"));
    }

    #[test]
    fn memory_limits() {
        let file = tiny_elf(&[0x90]);
        let prog = Program::parse(&file).unwrap();
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
        assert!(matches!(load(&mem, &spec(8 << 20), &prog, &file), Err(LoadError::MemTooSmall { .. })));
        // A program whose image spans 100 MiB does not fit in 64 MiB.
        let mut big = prog.clone();
        big.segments[0].memsz = 100 << 20;
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
        let e = load(&mem, &spec(64 << 20), &big, &file).unwrap_err();
        assert!(matches!(e, LoadError::ImageTooLarge { .. }) && e.is_program_error());
    }

    #[test]
    fn an_entry_point_outside_the_user_half_is_the_programs_error() {
        for entry in [0xffff_ffff_8000_1000u64, 0x8000_0000_0000_0000, layout::USER_END] {
            let mut file = tiny_elf(&[0x90]);
            file[24..32].copy_from_slice(&entry.to_le_bytes());
            let prog = Program::parse(&file).unwrap();
            let mem = GuestMemoryMmap::from_ranges(&ram_ranges(64 << 20)).unwrap();
            let e = load(&mem, &spec(64 << 20), &prog, &file).unwrap_err();
            assert!(matches!(e, LoadError::BadEntry(a) if a == entry) && e.is_program_error(), "{e}");
        }
    }
}
