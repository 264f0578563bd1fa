//! What CPU 0 finds at its first instruction, checked and turned into owned
//! resources for the kernel: the boot info (its magic and ABI version checked), the
//! heap set up, the free guest RAM as a chunk allocator, the page tables, the
//! program's image and stack chunks the VMM mapped, and the byte ranges the VMM
//! placed for the kernel's whole life (the rootfs image, the working directory).
//!
//! The guest trusts the VMM (it built the machine): the boot info's addresses are
//! believed, but checked to lie in guest RAM below `phys_free_start`, so that a
//! broken VMM makes a clear panic rather than a wild read.

use crate::mm::{BootBlocks, ChunkAllocator, PageTables};
use onering_abi::layout::direct;
use onering_abi::{BootInfo, ABI_VERSION, BOOT_MAGIC};

/// The boot resources, given to the kernel's main on CPU 0 (once).
pub struct Boot {
    pub info: &'static BootInfo,
    /// Free guest RAM.
    pub chunks: ChunkAllocator,
    /// The live page tables' user half.
    pub page_tables: PageTables,
    /// The program's image and stack, mapped by the VMM: (virtual block, chunk).
    pub user_blocks: BootBlocks,
    /// The `--rootfs` image (empty without one).
    pub rootfs: &'static [u8],
    /// The working directory (`-w`), empty for `/`.
    pub workdir: &'static [u8],
    /// The tmpfs mounts (`onering_abi::tmpfs` records).
    pub tmpfs: &'static [u8],
}

impl core::fmt::Debug for Boot {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Boot").field("rootfs", &self.rootfs.len()).finish()
    }
}

#[cfg(target_os = "none")]
pub(crate) fn init(boot_info: u64) -> Boot {
    // SAFETY: the VMM passes (in rdi, see `_start`) the direct-map address of the
    // BootInfo it wrote in the boot area; nothing writes it afterwards, so a shared
    // `'static` reference to it is sound. Its fields are plain integers.
    let info: &'static BootInfo = unsafe { &*(boot_info as *const BootInfo) };
    if info.magic != BOOT_MAGIC || info.abi_version != ABI_VERSION {
        panic!("boot info of ABI version {} (kernel speaks {ABI_VERSION})", info.abi_version);
    }
    crate::heap::init(info);
    crate::supervisor::init(info.flags);
    crate::cpuid::init();
    crate::mm::set_small_pages_end(info.phys_free_start);
    crate::task::init();
    let mut chunks = ChunkAllocator::new();
    for (i, r) in info.mem.iter().take(info.nmem as usize).enumerate() {
        let start = if i == 0 { info.phys_free_start } else { r.start };
        chunks.add_range(start, r.start.saturating_add(r.size));
    }
    let Some(mut page_tables) = PageTables::claim() else { panic!("the page tables were claimed before boot") };
    Boot {
        info,
        chunks,
        user_blocks: crate::mm::boot_blocks(&info.user_maps, info.phys_free_start, &mut page_tables),
        page_tables,
        rootfs: reserved(info, info.rootfs_phys, info.rootfs_size),
        workdir: reserved(info, info.workdir_phys, info.workdir_len),
        tmpfs: reserved(info, info.tmpfs_phys, info.tmpfs_len),
    }
}

/// Bytes the VMM placed in guest RAM below `phys_free_start` for the kernel's
/// whole life.
#[cfg(target_os = "none")]
fn reserved(info: &BootInfo, phys: u64, len: u64) -> &'static [u8] {
    if len == 0 {
        return &[];
    }
    let end = phys.checked_add(len);
    let low = info.mem[0];
    if end.is_none_or(|e| e > info.phys_free_start || e > low.start + low.size) || phys < low.start {
        panic!("the VMM placed boot data at {phys:#x} (+{len:#x}) outside its reserved memory");
    }
    // SAFETY: [phys, phys + len) lies in RAM region 0 below phys_free_start (checked
    // above), which the VMM reserved for this data and which nothing writes after
    // boot (the kernel's chunk allocator starts at phys_free_start); the direct map
    // maps all RAM.
    unsafe { core::slice::from_raw_parts(direct(phys) as *const u8, len as usize) }
}
