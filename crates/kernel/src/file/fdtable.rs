//! The file-descriptor table: descriptor numbers to open file descriptions, with
//! the close-on-exec flag each descriptor has of its own. Pure logic.
//!
//! Descriptors are bounded by the process's RLIMIT_NOFILE (soft 1024, hard
//! 524288 by default, as systemd gives Linux processes; Go raises its soft limit
//! to the hard one at start). The lowest free descriptor is found from a hint
//! (every slot below it is in use), so opening the next of ten thousand
//! connections does not scan the ones before it.

use super::FileRef;
use crate::errno::Errno;
use alloc::vec::Vec;

/// RLIMIT_NOFILE by default: (soft, hard).
pub const NOFILE_DEFAULT: (u64, u64) = (1024, 524_288);
/// The most RLIMIT_NOFILE can be raised to (Linux's `fs.nr_open`).
pub const NR_OPEN: u64 = onering_abi::NR_OPEN;

#[derive(Debug, Clone)]
struct Slot {
    file: FileRef,
    cloexec: bool,
}

#[derive(Debug, Clone)]
pub struct FdTable {
    slots: Vec<Option<Slot>>,
    /// Every descriptor below this one is in use.
    free_from: usize,
    /// Descriptors are below this (the soft RLIMIT_NOFILE).
    limit: usize,
}

impl Default for FdTable {
    fn default() -> Self {
        FdTable { slots: Vec::new(), free_from: 0, limit: NOFILE_DEFAULT.0 as usize }
    }
}

impl FdTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The soft RLIMIT_NOFILE: new descriptors are below it (open ones above stay).
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit.min(NR_OPEN) as usize;
    }

    pub fn limit(&self) -> u64 {
        self.limit as u64
    }

    pub fn get(&self, fd: u64) -> Result<&FileRef, Errno> {
        // Descriptors are C ints: the upper 32 bits of the register do not count.
        let fd = fd as u32;
        self.slots.get(fd as usize).and_then(|s| s.as_ref()).map(|s| &s.file).ok_or(Errno::EBADF)
    }

    /// Installs `file` at the lowest free descriptor `>= min`.
    pub fn insert_from(&mut self, min: usize, file: FileRef, cloexec: bool) -> Result<u64, Errno> {
        if min >= self.limit {
            return Err(Errno::EINVAL);
        }
        let start = min.max(self.free_from);
        let fd = (start..self.limit).find(|i| self.slots.get(*i).is_none_or(|s| s.is_none())).ok_or(Errno::EMFILE)?;
        self.grow(fd)?;
        self.slots[fd] = Some(Slot { file, cloexec });
        if start == self.free_from {
            self.free_from = fd + 1;
        }
        Ok(fd as u64)
    }

    /// Makes room for descriptor `i`. A new open file lives on: ENFILE when the
    /// kernel heap cannot grow past its reserve (see `onering_arch::heap`).
    fn grow(&mut self, i: usize) -> Result<(), Errno> {
        if !onering_arch::heap::ensure(4096) {
            return Err(Errno::ENFILE);
        }
        if self.slots.len() <= i {
            let more = i + 1 - self.slots.len();
            if self.slots.try_reserve(more).is_err() {
                // A table past half a heap chunk needs a block of its own.
                let bytes = (i + 1).next_power_of_two() * core::mem::size_of::<Option<Slot>>();
                if !onering_arch::heap::ensure_block(bytes) {
                    return Err(Errno::ENFILE);
                }
                self.slots.try_reserve(more).map_err(|_| Errno::ENFILE)?;
            }
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
        if i >= self.limit {
            return Err(Errno::EBADF);
        }
        self.grow(i)?;
        if i == self.free_from {
            self.free_from = i + 1;
        }
        Ok(self.slots[i].replace(Slot { file, cloexec }).map(|s| s.file))
    }

    /// Closes `fd`, handing back its open file (the caller drops it, after
    /// releasing the table: the last close of a pipe end wakes its peers).
    pub fn take(&mut self, fd: u64) -> Result<FileRef, Errno> {
        let fd = fd as u32;
        let slot = self.slots.get_mut(fd as usize).ok_or(Errno::EBADF)?;
        let file = slot.take().map(|s| s.file).ok_or(Errno::EBADF)?;
        self.free_from = self.free_from.min(fd as usize);
        Ok(file)
    }

    /// Every open file (with its descriptor).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &FileRef)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i as u64, &s.file)))
    }

    /// Empties the table, handing the files back (to be dropped outside locks).
    pub fn clear(&mut self) -> Vec<FileRef> {
        self.free_from = 0;
        self.slots.drain(..).flatten().map(|s| s.file).collect()
    }

    /// `execve`: closes the close-on-exec descriptors, handing their files back
    /// (to be dropped outside locks).
    pub fn take_cloexec(&mut self) -> Vec<FileRef> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.as_ref().is_some_and(|s| s.cloexec) {
                out.extend(s.take().map(|s| s.file));
                self.free_from = self.free_from.min(i);
            }
        }
        out
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
        assert!(t.install(NOFILE_DEFAULT.0, file(6), false).is_err());
        assert_eq!(t.get(u64::MAX).map(|_| ()), Err(Errno::EBADF), "an int: -1");
    }

    #[test]
    fn table_fills_up() {
        let mut t = FdTable::new();
        let n = NOFILE_DEFAULT.0 as usize;
        for i in 0..n {
            assert_eq!(t.insert(file(i), false), Ok(i as u64));
        }
        assert_eq!(t.insert(file(0), false), Err(Errno::EMFILE));
        assert_eq!(t.insert_from(n, file(0), false).map(|_| ()), Err(Errno::EINVAL), "F_DUPFD at the limit");
        // A raised limit: the next descriptors, found without rescanning.
        t.set_limit(20_000);
        for i in n..20_000 {
            assert_eq!(t.insert(file(i), false), Ok(i as u64));
        }
        assert_eq!(t.insert(file(0), false), Err(Errno::EMFILE));
        // Closing low and high descriptors: the lowest free comes back first.
        t.take(7000).unwrap();
        t.take(3).unwrap();
        assert_eq!(t.insert(file(1), false), Ok(3));
        assert_eq!(t.insert(file(1), false), Ok(7000));
        t.take(19_999).unwrap();
        assert_eq!(t.insert_from(10, file(1), false), Ok(19_999));
        // Lowered below open descriptors: they stay, new ones are refused.
        t.set_limit(100);
        assert!(t.get(150).is_ok());
        t.take(50).unwrap();
        assert_eq!(t.insert(file(1), false), Ok(50));
        assert_eq!(t.install(150, file(1), false).map(|_| ()), Err(Errno::EBADF));
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
