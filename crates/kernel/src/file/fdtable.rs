//! The file-descriptor table: descriptor numbers to open file descriptions, with
//! the close-on-exec flag each descriptor has of its own. Pure logic.

use super::FileRef;
use crate::errno::Errno;
use alloc::vec::Vec;

/// Most open descriptors (RLIMIT_NOFILE).
pub const MAX_FDS: usize = 1024;

#[derive(Debug, Clone)]
struct Slot {
    file: FileRef,
    cloexec: bool,
}

#[derive(Debug, Default, Clone)]
pub struct FdTable {
    slots: Vec<Option<Slot>>,
}

impl FdTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, fd: u64) -> Result<&FileRef, Errno> {
        // Descriptors are C ints: the upper 32 bits of the register do not count.
        let fd = fd as u32;
        self.slots.get(fd as usize).and_then(|s| s.as_ref()).map(|s| &s.file).ok_or(Errno::EBADF)
    }

    /// Installs `file` at the lowest free descriptor `>= min`.
    pub fn insert_from(&mut self, min: usize, file: FileRef, cloexec: bool) -> Result<u64, Errno> {
        if min >= MAX_FDS {
            return Err(Errno::EINVAL);
        }
        let fd = (min..MAX_FDS).find(|i| self.slots.get(*i).is_none_or(|s| s.is_none())).ok_or(Errno::EMFILE)?;
        self.grow(fd)?;
        self.slots[fd] = Some(Slot { file, cloexec });
        Ok(fd as u64)
    }

    /// Makes room for descriptor `i`. A new open file lives on: ENFILE when the
    /// kernel heap cannot grow past its reserve (see `onering_arch::heap`).
    fn grow(&mut self, i: usize) -> Result<(), Errno> {
        if !onering_arch::heap::ensure(4096) {
            return Err(Errno::ENFILE);
        }
        if self.slots.len() <= i {
            self.slots.try_reserve(i + 1 - self.slots.len()).map_err(|_| Errno::ENFILE)?;
            self.slots.resize(i + 1, None);
        }
        Ok(())
    }

    pub fn insert(&mut self, file: FileRef, cloexec: bool) -> Result<u64, Errno> {
        self.insert_from(0, file, cloexec)
    }

    /// Puts `file` at exactly `fd`; returns what was there (`dup2`), for the
    /// caller to drop outside its locks.
    pub fn install(&mut self, fd: u64, file: FileRef, cloexec: bool) -> Result<Option<FileRef>, Errno> {
        let i = fd as u32 as usize;
        if i >= MAX_FDS {
            return Err(Errno::EBADF);
        }
        self.grow(i)?;
        Ok(self.slots[i].replace(Slot { file, cloexec }).map(|s| s.file))
    }

    /// Closes `fd`, handing back its open file (the caller drops it, after
    /// releasing the table: the last close of a pipe end wakes its peers).
    pub fn take(&mut self, fd: u64) -> Result<FileRef, Errno> {
        let fd = fd as u32;
        let slot = self.slots.get_mut(fd as usize).ok_or(Errno::EBADF)?;
        slot.take().map(|s| s.file).ok_or(Errno::EBADF)
    }

    /// Every open file (with its descriptor).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &FileRef)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i as u64, &s.file)))
    }

    /// Empties the table, handing the files back (to be dropped outside locks).
    pub fn clear(&mut self) -> Vec<FileRef> {
        self.slots.drain(..).flatten().map(|s| s.file).collect()
    }

    pub fn cloexec(&self, fd: u64) -> Result<bool, Errno> {
        self.slots.get(fd as u32 as usize).and_then(|s| s.as_ref()).map(|s| s.cloexec).ok_or(Errno::EBADF)
    }

    pub fn set_cloexec(&mut self, fd: u64, on: bool) -> Result<(), Errno> {
        let s = self.slots.get_mut(fd as u32 as usize).and_then(|s| s.as_mut()).ok_or(Errno::EBADF)?;
        s.cloexec = on;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::tests::Plain;
    use crate::file::{oflag, OpenFile};
    use crate::vfs::Ino;

    fn file(ino: Ino) -> FileRef {
        OpenFile::new(Plain(ino), oflag::O_RDWR)
    }

    #[test]
    fn lowest_free_descriptor() {
        let mut t = FdTable::new();
        assert_eq!(t.insert(file(1), false), Ok(0));
        assert_eq!(t.insert(file(2), false), Ok(1));
        assert!(t.take(0).is_ok());
        assert_eq!(t.take(0).map(|_| ()), Err(Errno::EBADF));
        assert_eq!(t.insert(file(3), true), Ok(0));
        assert_eq!(t.insert_from(10, file(4), false), Ok(10));
        assert_eq!(t.cloexec(0), Ok(true));
        assert_eq!(t.get(5).map(|_| ()), Err(Errno::EBADF));
        assert!(t.install(1, file(5), false).is_ok());
        assert_eq!(t.get(1).unwrap().node(), Some(5));
        assert!(t.install(MAX_FDS as u64, file(6), false).is_err());
        assert_eq!(t.get(u64::MAX).map(|_| ()), Err(Errno::EBADF), "an int: -1");
    }

    #[test]
    fn table_fills_up() {
        let mut t = FdTable::new();
        for i in 0..MAX_FDS {
            assert_eq!(t.insert(file(i), false), Ok(i as u64));
        }
        assert_eq!(t.insert(file(0), false), Err(Errno::EMFILE));
    }

    #[test]
    fn dup_shares_the_offset() {
        let mut t = FdTable::new();
        let f = file(1);
        t.insert(f.clone(), false).unwrap();
        t.insert(f, false).unwrap();
        t.get(0).unwrap().set_offset(42);
        assert_eq!(t.get(1).unwrap().offset(), 42);
    }
}
