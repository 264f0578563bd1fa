//! User memory as handlers see it: the [`UserMem`] trait (fallible copies in and
//! out, user atomics, an access check), with helpers for the common shapes
//! (integers, C strings, arrays). Handlers only ever copy: no reference into user
//! memory exists, because another thread may change or unmap it at any moment.
//!
//! [`GuestUser`] is the real one: it checks the range against the VMAs (mapped,
//! readable or writable as asked, lazily backed blocks backed now), under the memory
//! lock, then copies with `onering_arch::user`, outside that lock, so that a copy
//! that still faults (an `munmap` raced with it) can back a page or fail with
//! EFAULT. Its unprotected view (`UserMem::unprotected`) checks only that pages are
//! mapped, for the kernel's own copies into and out of file mappings. Host tests use
//! a fake over a plain buffer.

use super::UserSpace;
use crate::errno::Errno;
use alloc::vec;
use alloc::vec::Vec;
use onering_arch::sync::Mutex;

pub trait UserMem: Sync {
    /// Checks that the program may access `[addr, addr + len)` (`write`: writably),
    /// backing lazily backed blocks: EFAULT or ENOMEM.
    fn check(&self, addr: u64, len: u64, write: bool) -> Result<(), Errno>;
    /// Copies user memory at `addr` into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno>;
    /// Copies `data` to user memory at `addr`.
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno>;
    /// Sets `len` bytes at `addr` to `byte`.
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<(), Errno>;
    /// Atomically reads the aligned word at `addr` (EINVAL if misaligned).
    fn load_u32(&self, addr: u64) -> Result<u32, Errno>;
    /// Atomically replaces the aligned word at `addr` by `new` if it holds `old`;
    /// the value found.
    fn cmpxchg_u32(&self, addr: u64, old: u32, new: u32) -> Result<u32, Errno>;
    /// Runs `f` on this memory as the kernel itself may use it: every mapped page
    /// readable and writable, whatever protection the program gave it (to fill file
    /// mappings and write them back).
    fn unprotected(&self, f: &mut dyn FnMut(&dyn UserMem));
    /// Runs `f` on this memory as it may be used under a lock that reading a file
    /// takes (the tree's): a block of a file mapping not filled yet is EFAULT
    /// there, not filled (which would take that lock again). Callers check the
    /// range first, before the lock, which fills it.
    fn no_fill(&self, f: &mut dyn FnMut(&dyn UserMem));
    /// Where the VMM finds `[addr, addr + len)`, checked writable: for a host
    /// call that reads a file straight into it.
    fn host_addr(&self, addr: u64, len: u64) -> Result<u64, Errno>;
}

/// Typed helpers over any [`UserMem`].
pub trait UserMemExt: UserMem {
    fn read_u64(&self, addr: u64) -> Result<u64, Errno> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    fn read_u32(&self, addr: u64) -> Result<u32, Errno> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
    fn write_u64(&self, addr: u64, v: u64) -> Result<(), Errno> {
        self.write(addr, &v.to_le_bytes())
    }
    fn write_u32(&self, addr: u64, v: u32) -> Result<(), Errno> {
        self.write(addr, &v.to_le_bytes())
    }
    /// `N` bytes at `addr`.
    fn read_array<const N: usize>(&self, addr: u64) -> Result<[u8; N], Errno> {
        let mut b = [0u8; N];
        self.read(addr, &mut b)?;
        Ok(b)
    }
    /// `len` bytes at `addr`, in a new buffer (`len` is bounded by the caller).
    fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| Errno::ENOMEM)?;
        v.resize(len, 0);
        self.read(addr, &mut v)?;
        Ok(v)
    }
    /// The NUL-terminated string at `addr` (without the NUL), at most `max` bytes:
    /// ENAMETOOLONG if longer, EFAULT if it runs into unmapped memory. Read a page
    /// at a time, so a short string at the end of a mapping is fine.
    fn read_cstr(&self, addr: u64, max: usize) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        let mut at = addr;
        loop {
            let to_page_end = 4096 - (at % 4096);
            let piece = to_page_end.min((max + 1 - out.len()) as u64) as usize;
            let mut b = vec![0u8; piece];
            self.read(at, &mut b)?;
            if let Some(nul) = b.iter().position(|c| *c == 0) {
                out.extend_from_slice(&b[..nul]);
                return Ok(out);
            }
            out.extend_from_slice(&b);
            if out.len() > max {
                return Err(Errno::ENAMETOOLONG);
            }
            at = at.checked_add(piece as u64).ok_or(Errno::EFAULT)?;
        }
    }
}

impl<T: UserMem + ?Sized> UserMemExt for T {}

/// The program's memory.
#[derive(Clone, Copy)]
pub struct GuestUser<'a> {
    space: &'a Mutex<UserSpace>,
    /// Protections ignored (`UserMem::unprotected`).
    unprotected: bool,
    /// Blocks of file mappings may be filled here (not under the tree's lock:
    /// `UserMem::no_fill`).
    fills: bool,
}

impl<'a> GuestUser<'a> {
    pub fn new(space: &'a Mutex<UserSpace>) -> Self {
        GuestUser { space, unprotected: false, fills: true }
    }
}

fn fault(_: onering_arch::user::Fault) -> Errno {
    Errno::EFAULT
}

impl UserMem for GuestUser<'_> {
    /// Checks under the memory lock; a block of a file mapping owed its data is
    /// filled without it (or, being filled by another CPU, waited for), and the
    /// range checked again (`AddressSpace::check_for`).
    fn check(&self, addr: u64, len: u64, write: bool) -> Result<(), Errno> {
        use super::vma::{PROT_READ, PROT_WRITE};
        let need = match (self.unprotected, write) {
            (true, _) => 0,
            (false, true) => PROT_WRITE,
            (false, false) => PROT_READ,
        };
        loop {
            let fill = {
                let mut space = self.space.lock();
                // (A space being built by execve may still hold an earlier
                // space's entries where it maps nothing yet: cleared before the
                // kernel touches the range, so it faults as it should.)
                space.mmu().settle_range(addr, addr.saturating_add(len));
                match space.check_for(addr, len, need)? {
                    None => return Ok(()),
                    Some(_) if !self.fills => return Err(Errno::EFAULT),
                    Some(block) => space.start_fill(block)?,
                }
            };
            match fill {
                Some(fill) => {
                    let fill = fill.run();
                    let (r, pieces) = self.space.lock().filled(fill);
                    drop(pieces);
                    r?;
                }
                None => onering_arch::sync::relax(),
            }
        }
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.check(addr, buf.len() as u64, false)?;
        onering_arch::user::read(addr, buf).map_err(fault)
    }

    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        self.check(addr, data.len() as u64, true)?;
        onering_arch::user::write(addr, data).map_err(fault)
    }

    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<(), Errno> {
        self.check(addr, len, true)?;
        onering_arch::user::fill(addr, byte, len).map_err(fault)
    }

    fn load_u32(&self, addr: u64) -> Result<u32, Errno> {
        if !addr.is_multiple_of(4) {
            return Err(Errno::EINVAL);
        }
        self.check(addr, 4, false)?;
        onering_arch::user::load_u32(addr).map_err(fault)
    }

    fn cmpxchg_u32(&self, addr: u64, old: u32, new: u32) -> Result<u32, Errno> {
        if !addr.is_multiple_of(4) {
            return Err(Errno::EINVAL);
        }
        self.check(addr, 4, true)?;
        onering_arch::user::cmpxchg_u32(addr, old, new).map_err(fault)
    }

    fn unprotected(&self, f: &mut dyn FnMut(&dyn UserMem)) {
        f(&GuestUser { unprotected: true, ..*self })
    }

    fn no_fill(&self, f: &mut dyn FnMut(&dyn UserMem)) {
        f(&GuestUser { fills: false, ..*self })
    }

    fn host_addr(&self, addr: u64, len: u64) -> Result<u64, Errno> {
        self.check(addr, len, true).map(|()| addr)
    }
}

/// What a [`BufferMem`] stores its bytes in: a kernel buffer, or a chunk of guest
/// memory (a block of a file mapping being filled, not mapped yet).
pub trait Store: Send {
    fn size(&self) -> usize;
    fn get(&self, off: usize, buf: &mut [u8]);
    fn put(&mut self, off: usize, data: &[u8]);
    /// The kernel's address of byte `off`.
    fn addr(&self, off: usize) -> u64;
}

impl Store for Vec<u8> {
    fn size(&self) -> usize {
        self.len()
    }
    fn get(&self, off: usize, buf: &mut [u8]) {
        buf.copy_from_slice(&self[off..off + buf.len()]);
    }
    fn put(&mut self, off: usize, data: &[u8]) {
        self[off..off + data.len()].copy_from_slice(data);
    }
    fn addr(&self, off: usize) -> u64 {
        self.as_ptr() as u64 + off as u64
    }
}

impl Store for onering_arch::mm::Chunk {
    fn size(&self) -> usize {
        onering_abi::layout::HUGE_PAGE_SIZE as usize
    }
    fn get(&self, off: usize, buf: &mut [u8]) {
        self.read(off as u64, buf)
    }
    fn put(&mut self, off: usize, data: &[u8]) {
        self.write(off as u64, data)
    }
    fn addr(&self, off: usize) -> u64 {
        onering_abi::layout::direct(self.phys() + off as u64)
    }
}

/// User memory that is a kernel buffer: `size` bytes at a made-up address `base`,
/// all readable and writable. Host tests use it as the program's memory; the
/// kernel as a bounce buffer between two files (`sendfile`, `splice`), and over a
/// chunk, as the block of a file mapping it fills (`space::Fill`).
pub struct BufferMem<S: Store = Vec<u8>> {
    pub base: u64,
    pub mem: Mutex<S>,
}

impl BufferMem {
    pub fn new(base: u64, size: usize) -> Self {
        BufferMem { base, mem: Mutex::new(vec![0; size]) }
    }
}

impl<S: Store> BufferMem<S> {
    fn range(&self, addr: u64, len: u64) -> Result<core::ops::Range<usize>, Errno> {
        if len == 0 {
            return Ok(0..0);
        }
        let size = self.mem.lock().size() as u64;
        let off = addr.checked_sub(self.base).ok_or(Errno::EFAULT)?;
        let end = off.checked_add(len).filter(|e| *e <= size).ok_or(Errno::EFAULT)?;
        Ok(off as usize..end as usize)
    }
}

impl<S: Store> UserMem for BufferMem<S> {
    fn check(&self, addr: u64, len: u64, _: bool) -> Result<(), Errno> {
        self.range(addr, len).map(|_| ())
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let r = self.range(addr, buf.len() as u64)?;
        self.mem.lock().get(r.start, buf);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        let r = self.range(addr, data.len() as u64)?;
        self.mem.lock().put(r.start, data);
        Ok(())
    }
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<(), Errno> {
        let r = self.range(addr, len)?;
        let piece = [byte; 512];
        let mut mem = self.mem.lock();
        for at in r.clone().step_by(piece.len()) {
            mem.put(at, &piece[..piece.len().min(r.end - at)]);
        }
        Ok(())
    }
    fn load_u32(&self, addr: u64) -> Result<u32, Errno> {
        if !addr.is_multiple_of(4) {
            return Err(Errno::EINVAL);
        }
        self.read_u32(addr)
    }
    fn cmpxchg_u32(&self, addr: u64, old: u32, new: u32) -> Result<u32, Errno> {
        let cur = self.load_u32(addr)?;
        if cur == old {
            self.write_u32(addr, new)?;
        }
        Ok(cur)
    }
    fn unprotected(&self, f: &mut dyn FnMut(&dyn UserMem)) {
        f(self)
    }
    fn no_fill(&self, f: &mut dyn FnMut(&dyn UserMem)) {
        f(self)
    }
    fn host_addr(&self, addr: u64, len: u64) -> Result<u64, Errno> {
        let r = self.range(addr, len)?;
        Ok(self.mem.lock().addr(r.start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_end_at_their_nul_and_are_bounded() {
        let u = BufferMem::new(0x1000, 8192);
        u.write(0x1ffe, b"ab\0").unwrap(); // across a page boundary
        assert_eq!(u.read_cstr(0x1ffe, 100).unwrap(), b"ab");
        u.write(0x1000, &[b'x'; 50]).unwrap();
        assert_eq!(u.read_cstr(0x1000, 10), Err(Errno::ENAMETOOLONG));
        u.write(0x2ffe, b"zz").unwrap(); // runs off the end of the memory
        assert_eq!(u.read_cstr(0x2ffe, 100), Err(Errno::EFAULT));
        assert_eq!(u.read_u64(0x10), Err(Errno::EFAULT));
    }

    #[test]
    fn buffers_fill_in_pieces_and_say_where_they_are() {
        let u = BufferMem::new(0x1000, 8192);
        u.fill(0x1001, 7, 1500).unwrap();
        let got = u.read_vec(0x1000, 1502).unwrap();
        assert_eq!((got[0], got[1], got[1500], got[1501]), (0, 7, 7, 0));
        assert_eq!(u.fill(0x2fff, 1, 2), Err(Errno::EFAULT));
        let at = u.host_addr(0x1010, 16).unwrap();
        assert_eq!(at, u.mem.lock().as_ptr() as u64 + 0x10);
        assert_eq!(u.host_addr(0x2ff0, 17), Err(Errno::EFAULT));
    }
}
