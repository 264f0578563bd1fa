//! Memory management: the VMA set, the address space (its backing by 2 MiB chunks,
//! `brk`, `mmap`, the checks behind every user-memory access), file mappings
//! (`filemap`: how they are filled and written back), and user-memory
//! access (`user`): the `UserMem` trait handlers copy through, and its guest
//! implementation.
//!
//! The machine side (chunks, page tables, the copy routines that survive faults)
//! is `onering_arch::mm` and `onering_arch::user`; this module decides, arch does.

pub mod filemap;
pub mod space;
pub mod spaces;
pub mod user;
pub mod vma;

use crate::errno::Errno;
use onering_arch::mm::{Chunk, ChunkAllocator, MapError, PageTables};

/// An address space, with its page tables.
pub type UserSpace = space::AddressSpace<PageTables>;

fn errno(e: MapError) -> Errno {
    match e {
        MapError::NoMemory => Errno::ENOMEM,
        MapError::BadAddress => Errno::EFAULT,
    }
}

impl space::Mmu for PageTables {
    fn map_block(
        &mut self,
        virt: u64,
        chunk: &Chunk,
        chunks: &mut ChunkAllocator,
        writable: bool,
    ) -> Result<(), Errno> {
        PageTables::map_block(self, virt, chunk, chunks, writable).map_err(errno)
    }

    fn split_block(
        &mut self,
        virt: u64,
        base: &Chunk,
        copy: &Chunk,
        copied: &[u64; 8],
        chunks: &mut ChunkAllocator,
    ) -> Result<(), Errno> {
        PageTables::split_block(self, virt, base, copy, copied, chunks).map_err(errno)
    }

    fn map_copied_page(&mut self, virt: u64) {
        PageTables::map_copied_page(self, virt)
    }

    fn unmap_block(&mut self, virt: u64) {
        PageTables::unmap_block(self, virt)
    }

    fn new_space(&mut self, chunks: &mut ChunkAllocator) -> Result<Self, Errno> {
        PageTables::new_space_for(chunks, self.root()).map_err(|_| Errno::ENOMEM)
    }

    fn release(&mut self) {
        PageTables::release(self)
    }

    fn write(&mut self, _virt: u64, chunk: &mut Chunk, offset: u64, data: &[u8]) {
        chunk.write(offset, data)
    }

    fn zero(&mut self, _virt: u64, len: u64, chunk: &mut Chunk, offset: u64) {
        chunk.zero(offset, len)
    }

    fn copy(
        &mut self,
        _from: u64,
        _to: u64,
        len: u64,
        src: &mut Chunk,
        src_off: u64,
        dst: Option<&mut Chunk>,
        dst_off: u64,
    ) {
        match dst {
            Some(d) => d.copy_from(dst_off, src, src_off, len),
            None => src.copy_within(src_off, dst_off, len),
        }
    }
}
