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
use spin::Mutex;

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
pub struct GuestUser<'a> {
    space: &'a Mutex<UserSpace>,
    /// Protections ignored (`UserMem::unprotected`).
    unprotected: bool,
}

impl<'a> GuestUser<'a> {
    pub fn new(space: &'a Mutex<UserSpace>) -> Self {
        GuestUser { space, unprotected: false }
    }
}

fn fault(_: onering_arch::user::Fault) -> Errno {
    Errno::EFAULT
}

impl UserMem for GuestUser<'_> {
    fn check(&self, addr: u64, len: u64, write: bool) -> Result<(), Errno> {
        let space = self.space.lock();
        if self.unprotected {
            space.check_mapped(addr, len)
        } else {
            space.check(addr, len, write)
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
        f(&GuestUser { space: self.space, unprotected: true })
    }
}

/// User memory that is a kernel buffer: `size` bytes at a made-up address `base`,
/// all readable and writable. Host tests use it as the program's memory; the
/// kernel as a bounce buffer between two files (`sendfile`, `splice`).
pub struct BufferMem {
    pub base: u64,
    pub mem: Mutex<Vec<u8>>,
}

impl BufferMem {
    pub fn new(base: u64, size: usize) -> Self {
        BufferMem { base, mem: Mutex::new(vec![0; size]) }
    }

    fn range(&self, addr: u64, len: u64) -> Result<core::ops::Range<usize>, Errno> {
        if len == 0 {
            return Ok(0..0);
        }
        let size = self.mem.lock().len() as u64;
        let off = addr.checked_sub(self.base).ok_or(Errno::EFAULT)?;
        let end = off.checked_add(len).filter(|e| *e <= size).ok_or(Errno::EFAULT)?;
        Ok(off as usize..end as usize)
    }
}

impl UserMem for BufferMem {
    fn check(&self, addr: u64, len: u64, _: bool) -> Result<(), Errno> {
        self.range(addr, len).map(|_| ())
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Errno> {
        let r = self.range(addr, buf.len() as u64)?;
        buf.copy_from_slice(&self.mem.lock()[r]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        let r = self.range(addr, data.len() as u64)?;
        self.mem.lock()[r].copy_from_slice(data);
        Ok(())
    }
    fn fill(&self, addr: u64, byte: u8, len: u64) -> Result<(), Errno> {
        let r = self.range(addr, len)?;
        self.mem.lock()[r].fill(byte);
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
}
