//! Nodes whose contents are on the host: `--rootfs DIR` (the root's lower layer)
//! and `-v` volumes, reached through a [`HostOps`] (the kernel's is hostcalls; unit
//! tests use a map). Pure logic.
//!
//! A host directory is listed the first time a lookup or `getdents` needs it, and
//! its entries become nodes of the tree with the host's metadata (a big rootfs
//! directory gives a lookup only the name asked for, [`Vfs::prepare_lookup`],
//! until something needs all of it); a symbolic
//! link's target is read the first time it is followed. A regular file's bytes
//! are read on demand into a page cache (`Data::HostFile`: chunks of
//! `pages::CHUNK`, a missing chunk not read yet) with readahead, bounded by
//! `cache_limit` (the oldest chunks go first), and given back, oldest first, when
//! memory runs short (`shrink_cache`, which the kernel's reclaim function calls;
//! cached chunks are clean copies, the VM's own files are never touched). A read
//! fetches without the tree's lock; what it fetched is cached only if no write
//! or invalidation of the file came meanwhile (`HostRef::gen`). So
//! start-up does not depend on the size of the tree, and warm reads do not leave
//! the VM.
//!
//! Changes: in the rootfs they stay in the VM (its upper layer): a new entry is an
//! ordinary node of the tree, a removed one is gone from its directory's loaded
//! listing, and a file opened for writing is copied up into memory first
//! (`copy_up`). In a volume they go to the host (create, mkdir, unlink, rename,
//! link, truncate, chmod, times, owner; writes through `write_target`/`wrote`),
//! and a read-only volume refuses them (EROFS). The host cannot be trusted to
//! stay still, and need not be: the VMM confines every name to its mount.

use super::pages::{Pages, CHUNK};
use super::tree::{Data, Ino, Node, Vfs};
use crate::errno::Errno;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use onering_abi::HostStat;

/// How the kernel reaches host files (`onering_abi::hostfs`).
pub trait HostOps: Sync {
    fn lookup(&self, dir: u64, name: &[u8]) -> Result<(u64, HostStat), Errno>;
    /// Opens (or with `O_CREAT` makes) a regular file: an I/O handle.
    fn open(&self, dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat), Errno>;
    /// Opens `name` in `dir` for reading and writing, making it if missing
    /// (`flags`: the protocol's `O_EXCL`, only making it, and `O_TRUNC`, emptied),
    /// in one exit: the handle, its stat, and whether this call made it.
    fn open_create(&self, dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat, bool), Errno>;
    /// Every entry of directory `dir` with its stat, in order.
    fn readdir(&self, dir: u64, out: &mut dyn FnMut(&[u8], &HostStat)) -> Result<(), Errno>;
    fn readlink(&self, h: u64) -> Result<Vec<u8>, Errno>;
    fn stat(&self, h: u64) -> Result<HostStat, Errno>;
    /// The stat of entry `name` of `dir`, no handle made.
    fn stat_at(&self, dir: u64, name: &[u8]) -> Result<HostStat, Errno>;
    fn mkdir(&self, dir: u64, name: &[u8], mode: u32) -> Result<(u64, HostStat), Errno>;
    fn symlink(&self, dir: u64, name: &[u8], target: &[u8]) -> Result<(u64, HostStat), Errno>;
    fn unlink(&self, dir: u64, name: &[u8], rmdir: bool) -> Result<(), Errno>;
    /// RENAME, or LINK when `link`.
    fn rename(&self, link: bool, dir: u64, name: &[u8], dir2: u64, name2: &[u8]) -> Result<(), Errno>;
    fn truncate(&self, h: u64, len: u64) -> Result<(), Errno>;
    fn chmod(&self, h: u64, mode: u32) -> Result<(), Errno>;
    fn utimes(&self, h: u64, atime: Option<u64>, mtime: Option<u64>) -> Result<(), Errno>;
    fn chown(&self, h: u64, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno>;
    /// Makes room in the kernel heap for `bytes` more (one block of that size when
    /// `block`) before the tree grows by a host listing; false if memory is out.
    fn make_room(&self, bytes: usize, block: bool) -> bool;
    /// `pread` into `bufs` in order: bytes read.
    fn read(&self, h: u64, offset: u64, bufs: &mut [&mut [u8]]) -> Result<usize, Errno>;
    /// `pread` from `offset` into up to `count` new chunks of [`CHUNK`] bytes (what
    /// lies past the file's end reads as zeros): fewer, or none, when the heap runs
    /// short. The host's version does not zero what the host writes anyway.
    fn read_chunks(&self, h: u64, offset: u64, count: usize) -> Result<Vec<Box<[u8]>>, Errno> {
        let mut chunks = Vec::new();
        if chunks.try_reserve_exact(count).is_ok() {
            while chunks.len() < count {
                match super::pages::zeroed_chunk() {
                    Ok(c) => chunks.push(c),
                    Err(_) => break,
                }
            }
        }
        if !chunks.is_empty() {
            let mut bufs: Vec<&mut [u8]> = chunks.iter_mut().map(|c| &mut c[..]).collect();
            self.read(h, offset, &mut bufs)?;
        }
        Ok(chunks)
    }
    fn close(&self, h: u64);
}

/// The tree's way to the host (a reference, printed by name only).
#[derive(Clone, Copy)]
pub struct Ops(pub &'static dyn HostOps);

impl core::fmt::Debug for Ops {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("HostOps")
    }
}

impl core::ops::Deref for Ops {
    type Target = dyn HostOps;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

/// A rootfs directory whose host size (bytes, as its file system counts them)
/// is over this is looked up name by name rather than listed for a lookup: ext4
/// takes ~16 KiB for ~500 entries, and listing `/usr/lib/x86_64-linux-gnu` (1,100
/// entries, a stat each on the host) cost a dynamic program ~4 ms at start, and a
/// shell ~4 ms for its first command found in `/usr/bin`.
pub const BIG_DIR: u64 = 16 << 10;
/// Names asked of a big directory one by one before it is listed whole.
pub const ASK_MAX: u32 = 64;

/// What kind of mount a host node belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// The rootfs' lower layer: read from the host, changed only in the VM.
    Rootfs,
    /// A volume: changes go to the host; `ro` refuses them.
    Volume { ro: bool },
}

/// A node's link to the host.
#[derive(Debug)]
pub struct HostRef {
    pub layer: Layer,
    /// An `O_PATH` handle (None: not looked up yet, or let go).
    pub handle: Option<u64>,
    /// Its name in its parent on the host (for the calls made by name).
    pub name: Vec<u8>,
    /// A directory's listing or a link's target was read.
    pub loaded: bool,
    /// A rootfs directory too large to list for one lookup (its host size over
    /// [`BIG_DIR`]): until something needs the whole listing, names are looked
    /// up one by one ([`Vfs::prepare_lookup`]).
    pub big: bool,
    /// Names of a big directory asked of the host one by one so far: after
    /// [`ASK_MAX`] it is listed (a program probing many names, an import path
    /// searched, is then served from the tree again).
    pub asked: u32,
    /// An I/O handle on a regular file, and whether it was opened for writing.
    pub io: Option<(u64, bool)>,
    /// The host's inode and device (stat reports them).
    pub ino: u64,
    pub dev: u64,
    /// A mount's root keeps its handle for the VM's life.
    pub root: bool,
    /// The chunk after the last one a read fetched: a read that wants it is
    /// sequential and reads ahead; any other fetches one chunk (random reads
    /// would waste the readahead).
    pub next: usize,
    /// Counts the times the cache's chunks of the file went stale (a write, the
    /// cache dropped): chunks a read fetched without the tree's lock are cached
    /// only if it did not change meanwhile (a write that went to the host after
    /// the fetch and dropped the chunks before they were cached would be undone).
    pub gen: u64,
}

impl HostRef {
    /// A link to host entry `name` (inode `ino` on device `dev`) of a `layer`
    /// mount, nothing read or opened yet.
    fn new(layer: Layer, name: &[u8], ino: u64, dev: u64) -> HostRef {
        HostRef {
            layer,
            handle: None,
            name: name.to_vec(),
            loaded: false,
            big: false,
            asked: 0,
            io: None,
            ino,
            dev,
            root: false,
            next: 0,
            gen: 0,
        }
    }
}

/// Chunks read ahead past the one a read needs (512 KiB in all: one hostcall,
/// and what the heap can be made room for at once).
pub const READAHEAD: usize = 7;

/// A regular file's host read to make: the handle, the first chunk and how many,
/// and the file's `HostRef::gen` when it was planned (for [`Vfs::cache_fill`]).
pub struct ReadPlan {
    pub handle: u64,
    pub first: usize,
    pub count: usize,
    pub gen: u64,
}

fn node_of(layer: Layer, name: &[u8], st: &HostStat) -> Option<(Data, HostRef, u32)> {
    let kind = st.mode as u32 & super::tree::mode::S_IFMT;
    let data = match kind {
        super::tree::mode::S_IFDIR => Data::Dir(BTreeMap::new()),
        super::tree::mode::S_IFREG => {
            let mut p = Pages::new();
            p.set_len(st.size);
            Data::HostFile(p)
        }
        super::tree::mode::S_IFLNK => Data::Symlink(Vec::new()),
        _ => return None, // devices, FIFOs and sockets of the host are not shared
    };
    let h = HostRef {
        big: kind == super::tree::mode::S_IFDIR && layer == Layer::Rootfs && st.size > BIG_DIR,
        ..HostRef::new(layer, name, st.ino, st.dev)
    };
    Some((data, h, st.mode as u32 & 0o7777))
}

fn ns(sec: u64, nsec: u64) -> u64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

impl Vfs {
    /// Makes directory `at` (made if missing, as directories of the tree) the root
    /// of an in-memory file system (`--tmpfs`): empty, or with `copy` holding a
    /// copy of what was there (podman's `tmpcopyup`: read from the host now);
    /// `mode` its permission bits; `readonly` for it and all it holds. Its nodes
    /// have no link to the host, so a root written through (`--rootfs-rw`) leaves
    /// them alone. EBUSY for `/`.
    pub fn mount_memory(&mut self, at: &[u8], mode: u32, readonly: bool, copy: bool) -> Result<Ino, Errno> {
        let root = self.make_dirs(at)?;
        if root == super::tree::ROOT {
            return Err(Errno::EBUSY);
        }
        if !copy {
            self.node_mut(root).data = Data::Dir(BTreeMap::new());
        }
        // (Each node's link to the host goes once all are read: a node is looked
        // up through its parent's.)
        let (mut todo, mut seen) = (alloc::vec![root], Vec::new());
        while let Some(ino) = todo.pop() {
            if copy && self.node(ino).host.is_some() {
                match self.node(ino).data {
                    Data::HostFile(_) => self.copy_in(ino)?,
                    _ => self.load(ino)?,
                }
            }
            if let Data::Dir(e) = &self.node(ino).data {
                todo.extend(e.values().copied());
            }
            seen.push(ino);
        }
        for ino in seen {
            if let Some(h) = self.node_mut(ino).host.take() {
                self.forget_host_ref(&h);
            }
            self.node_mut(ino).readonly = readonly;
        }
        let n = self.node_mut(root);
        n.mode = mode & 0o7777;
        Ok(root)
    }

    /// Closes the host handles of a link to the host a node no longer has.
    fn forget_host_ref(&self, h: &HostRef) {
        let Some(ops) = self.hostops else { return };
        if let Some(x) = h.handle.filter(|_| !h.root) {
            ops.close(x);
        }
        if let Some((x, _)) = h.io {
            ops.close(x);
        }
    }

    /// Makes directory `at` (made if missing, as directories of the tree) the mount
    /// point of host directory `handle`.
    pub fn mount(&mut self, at: &[u8], handle: u64, layer: Layer, readonly: bool) -> Result<Ino, Errno> {
        let ino = self.make_dirs(at)?;
        let n = self.node_mut(ino);
        // (The root keeps /dev and /tmp; another mount point hides what was there.)
        if ino != super::tree::ROOT {
            n.data = Data::Dir(BTreeMap::new());
        }
        n.readonly = readonly;
        n.host = Some(Box::new(HostRef { handle: Some(handle), root: true, ..HostRef::new(layer, &[], 0, 0) }));
        if let Some(st) = self.hostops.and_then(|ops| ops.stat(handle).ok()) {
            let n = self.node_mut(ino);
            n.mode = st.mode as u32 & 0o7777;
            n.mtime = ns(st.mtime_sec, st.mtime_nsec);
            n.atime = ns(st.atime_sec, st.atime_nsec);
            if let Some(h) = n.host.as_mut() {
                (h.ino, h.dev) = (st.ino, st.dev);
            }
        }
        Ok(ino)
    }

    /// The directory at absolute `path`, made (as writable-tree directories) where
    /// missing; the lookups on the way load host directories.
    fn make_dirs(&mut self, path: &[u8]) -> Result<Ino, Errno> {
        let mut at = super::tree::ROOT;
        for part in path.split(|c| *c == b'/').filter(|p| !p.is_empty()) {
            at = match self.lookup(at, part, true) {
                Ok(i) if self.node(i).is_dir() => i,
                Ok(_) => return Err(Errno::ENOTDIR),
                Err(Errno::ENOENT) => self.add_dir(at, part),
                Err(e) => return Err(e),
            };
        }
        Ok(at)
    }

    /// Before `name` is looked up in directory `dir`: a rootfs directory too large
    /// to list ([`HostRef::big`]) that is not listed yet gets entry `name` alone
    /// (one stat on the host; a name it lacks is asked again next time, until
    /// [`ASK_MAX`] names were asked); any other host directory is listed
    /// ([`Vfs::load`]). A call that needs the whole
    /// directory (listing it, making or removing an entry) loads it, the names
    /// found one by one kept.
    pub fn prepare_lookup(&mut self, dir: Ino, name: &[u8]) -> Result<(), Errno> {
        let big = self.node(dir).host.as_ref().is_some_and(|h| h.big && !h.loaded && h.asked < ASK_MAX);
        if !big || self.node(dir).removed {
            return self.load(dir);
        }
        let Some(ops) = self.hostops else { return Ok(()) };
        if matches!(name, b"." | b"..") || !onering_abi::hostfs::valid_name(name) || self.has_entry(dir, name) {
            return Ok(());
        }
        let handle = self.handle_of(dir)?;
        if let Some(h) = self.node_mut(dir).host.as_mut() {
            h.asked += 1;
        }
        match ops.stat_at(handle, name) {
            Ok(st) => {
                self.room_for_node(ops)?;
                self.add_listed(dir, name, &st);
                Ok(())
            }
            Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads what host node `ino` has not read yet: a directory's listing (its
    /// entries join those made in the VM, which win) or a link's target.
    pub fn load(&mut self, ino: Ino) -> Result<(), Errno> {
        let Some(ops) = self.hostops else { return Ok(()) };
        let is_dir = match &self.node(ino).host {
            Some(h) if !h.loaded => self.node(ino).is_dir(),
            _ => return Ok(()),
        };
        let handle = self.handle_of(ino)?;
        if is_dir {
            // Entry by entry as they come (a listing of 100,000 is never held
            // whole), the heap made room as the tree grows: out of memory ends
            // the listing with ENOMEM, never a kernel panic.
            let mut out = Ok(());
            let mut added = 0usize;
            ops.readdir(handle, &mut |name, st| {
                if out.is_err() || self.has_entry(ino, name) {
                    return;
                }
                if added.is_multiple_of(256) && !ops.make_room(256 * 512, false) {
                    out = Err(Errno::ENOMEM);
                    return;
                }
                if let Err(e) = self.room_for_node(ops) {
                    out = Err(e);
                    return;
                }
                self.add_listed(ino, name, st);
                added += 1;
            })?;
            out?;
        } else if matches!(self.node(ino).data, Data::Symlink(_)) {
            let target = ops.readlink(handle)?;
            self.node_mut(ino).data = Data::Symlink(target);
        }
        self.let_go(ino);
        if let Some(h) = self.node_mut(ino).host.as_mut() {
            h.loaded = true;
        }
        Ok(())
    }

    /// The entry `name` of volume directory `dir` as the host has it now: a volume
    /// is shared with the host and other VMs, so the last name of every path is
    /// looked up again (one hostcall) unless the VM's own node or a mount is there:
    /// an entry gone on the host leaves the tree,
    /// a new one joins it, a replaced one is made anew, and a file's cached bytes
    /// go if its size or time changed. Directories above stay as first listed.
    pub fn refresh_entry(&mut self, dir: Ino, name: &[u8]) -> Result<(), Errno> {
        let Some(ops) = self.hostops else { return Ok(()) };
        let Some(Layer::Volume { .. }) = self.layer(dir) else { return Ok(()) };
        if !onering_abi::hostfs::valid_name(name) || !self.node(dir).host.as_ref().is_some_and(|h| h.loaded) {
            return Ok(());
        }
        let known = self.entry_of(dir, name);
        // The VM's own nodes (/dev, /proc, /tmp and onering's /etc files over a
        // root written through, `--rootfs-rw`) and mount points hide what the host
        // has there, as a mount does: the host is not asked.
        if known.is_some_and(|ino| self.node(ino).host.as_ref().is_none_or(|h| h.root)) {
            return Ok(());
        }
        let dh = self.handle_of(dir)?;
        let found = match ops.stat_at(dh, name) {
            Ok(st) => Some(st),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(e),
        };
        match (known, found) {
            (None, None) => {}
            (Some(ino), None) => self.drop_entry(dir, name, ino),
            (Some(ino), Some(st)) => {
                let same = self.node(ino).host.as_ref().is_some_and(|h| h.ino == st.ino && h.dev == st.dev);
                if !same {
                    self.drop_entry(dir, name, ino);
                    self.add_listed(dir, name, &st);
                } else if matches!(self.node(ino).data, Data::HostFile(_)) {
                    self.revalidate(ino, &st);
                }
            }
            (None, Some(st)) => {
                self.add_listed(dir, name, &st);
            }
        }
        Ok(())
    }

    /// Adds host entry `name` of `dir` with stat `st` as listed (None: a kind the
    /// VM does not share).
    fn add_listed(&mut self, dir: Ino, name: &[u8], st: &HostStat) -> Option<Ino> {
        let layer = self.layer(dir)?;
        let readonly = self.node(dir).readonly;
        let (data, h, mode) = node_of(layer, name, st)?;
        let child = self.add_host(dir, name, data, mode, readonly, h);
        let n = self.node_mut(child);
        n.mtime = ns(st.mtime_sec, st.mtime_nsec);
        n.atime = ns(st.atime_sec, st.atime_nsec);
        n.uid = st.uid as u32;
        n.gid = st.gid as u32;
        n.nlink = st.nlink.max(1) as u32;
        Some(child)
    }

    /// `open(O_CREAT)` of `name` in writable volume directory `dir` in one
    /// hostcall, the name not looked up first: the file opened for reading and
    /// writing, made if missing (`excl`: only made; `trunc`: emptied). The tree
    /// follows what the host answered: a file made is a new node (IN_CREATE), one
    /// there already joins the tree or, if the tree knew it, is revalidated by its
    /// stat. None when this is not the case (no volume's directory; an entry the
    /// tree knows as other than a host file) or the host's answer is for the path
    /// walk to judge (a link, a directory, no permission...): the caller opens the
    /// slow way, which finds the same error or follows the link.
    pub fn open_volume_file(
        &mut self,
        dir: Ino,
        name: &[u8],
        mode: u32,
        excl: bool,
        trunc: bool,
        now: u64,
    ) -> Result<Option<Ino>, Errno> {
        let Some(ops) = self.hostops else { return Ok(None) };
        let n = self.node(dir);
        if self.layer(dir) != Some(Layer::Volume { ro: false })
            || n.readonly
            || n.removed
            || !n.is_dir()
            || !onering_abi::hostfs::valid_name(name)
        {
            return Ok(None);
        }
        self.load(dir)?;
        let known = self.entry_of(dir, name);
        if known.is_some_and(|i| self.node(i).host.is_none() || !matches!(self.node(i).data, Data::HostFile(_))) {
            return Ok(None);
        }
        let dh = self.handle_of(dir)?;
        use onering_abi::hostfs::{O_EXCL, O_TRUNC};
        let flags = if excl { O_EXCL } else { 0 } | if trunc { O_TRUNC } else { 0 };
        let (h, st, created) = match ops.open_create(dh, name, flags, mode & 0o7777) {
            Ok(r) => r,
            Err(Errno::EEXIST) if excl => return Err(Errno::EEXIST),
            Err(_) => return Ok(None),
        };
        let same = known.filter(|i| self.host_ids(*i) == Some((st.ino, st.dev)));
        if let Some(ino) = same {
            self.revalidate(ino, &st);
            let old = self.node(ino).host.as_ref().and_then(|r| r.io);
            match old {
                // (Its writable handle stays: closing it would drop its host locks.)
                Some((_, true)) => ops.close(h),
                _ => {
                    if let Some(r) = self.node_mut(ino).host.as_mut() {
                        r.io = Some((h, true));
                    }
                    if let Some((o, _)) = old {
                        ops.close(o);
                    }
                }
            }
            if trunc {
                self.notify_node(ino, super::notify::IN_MODIFY);
            }
            return Ok(Some(ino));
        }
        if let Some(old) = known {
            self.drop_entry(dir, name, old);
        }
        if created {
            let ino = self.add_made(dir, name, h, &st, true, now);
            self.notify_entry(dir, super::notify::IN_CREATE, 0, name, false);
            return Ok(Some(ino));
        }
        let Some(ino) = self.add_listed(dir, name, &st) else {
            ops.close(h);
            return Ok(None);
        };
        if let Some(r) = self.node_mut(ino).host.as_mut() {
            r.io = Some((h, true));
        }
        Ok(Some(ino))
    }

    /// Drops the `O_PATH` handle of a node that no longer needs one (a link whose
    /// target was read; a file: handles are made again when needed). Directories
    /// keep theirs (their entries are looked up by it).
    fn let_go(&mut self, ino: Ino) {
        let Some(ops) = self.hostops else { return };
        if self.node(ino).is_dir() {
            return;
        }
        if let Some(h) = self.node_mut(ino).host.as_mut() {
            if !h.root {
                if let Some(x) = h.handle.take() {
                    ops.close(x);
                }
            }
        }
    }

    /// Node `ino`'s `O_PATH` handle, looked up by name in its parent if needed.
    pub fn handle_of(&mut self, ino: Ino) -> Result<u64, Errno> {
        let ops = self.hostops.ok_or(Errno::EIO)?;
        let (parent, name) = match &self.node(ino).host {
            Some(h) if h.handle.is_some() => return Ok(h.handle.unwrap_or_default()),
            Some(h) if !h.root => (self.node(ino).parent, h.name.clone()),
            _ => return Err(Errno::EIO),
        };
        if self.node(ino).removed {
            return Err(Errno::ENOENT);
        }
        let ph = self.handle_of(parent)?;
        let (h, _) = ops.lookup(ph, &name)?;
        if let Some(r) = self.node_mut(ino).host.as_mut() {
            r.handle = Some(h);
        }
        Ok(h)
    }

    /// The host directory handle of `dir` if it is a volume's (changes go to the
    /// host), None if it is not on the host or is the rootfs (changes stay here);
    /// EROFS for a read-only volume.
    pub fn volume_dir(&mut self, dir: Ino) -> Result<Option<u64>, Errno> {
        match self.node(dir).host.as_ref().map(|h| h.layer) {
            Some(Layer::Volume { ro: true }) => Err(Errno::EROFS),
            Some(Layer::Volume { ro: false }) => self.handle_of(dir).map(Some),
            _ => Ok(None),
        }
    }

    /// Node `ino`'s layer, if it is on the host.
    pub fn layer(&self, ino: Ino) -> Option<Layer> {
        self.node(ino).host.as_ref().map(|h| h.layer)
    }

    /// An I/O handle on `ino` if it is a host file whose bytes are the host's (not
    /// copied up into the VM): the VMM may read it itself.
    pub fn unchanged_host_file(&mut self, ino: Ino) -> Option<u64> {
        if !matches!(self.node(ino).data, Data::HostFile(_)) {
            return None;
        }
        self.io_handle(ino, false).ok()
    }

    /// An I/O handle on host file `ino` (opened for writing too if `write`).
    pub fn io_handle(&mut self, ino: Ino, write: bool) -> Result<u64, Errno> {
        let ops = self.hostops.ok_or(Errno::EIO)?;
        let (parent, name, old) = match &self.node(ino).host {
            Some(h) => match h.io {
                Some((x, w)) if w || !write => return Ok(x),
                old => (self.node(ino).parent, h.name.clone(), old),
            },
            None => return Err(Errno::EIO),
        };
        if self.node(ino).removed {
            // (Unlinked while open, before it was ever read: gone on the host.)
            return Err(Errno::ENOENT);
        }
        let ph = self.handle_of(parent)?;
        // A writable volume's file opens for writing too when it can, so that a
        // later write or lock does not need a new host descriptor (closing the old
        // one would drop its host locks).
        use onering_abi::hostfs::{O_RDONLY, O_RDWR};
        let ((x, st), write) = if write {
            (ops.open(ph, &name, O_RDWR, 0)?, true)
        } else if !self.node(ino).readonly && self.layer(ino) != Some(Layer::Rootfs) {
            match ops.open(ph, &name, O_RDWR, 0) {
                Ok(r) => (r, true),
                Err(_) => (ops.open(ph, &name, O_RDONLY, 0)?, false),
            }
        } else {
            (ops.open(ph, &name, O_RDONLY, 0)?, false)
        };
        // Opened again: what another process changed meanwhile is read anew
        // (close-to-open consistency, as NFS gives).
        self.revalidate(ino, &st);
        if let Some((o, _)) = old {
            ops.close(o);
        }
        if let Some(h) = self.node_mut(ino).host.as_mut() {
            h.io = Some((x, write));
        }
        Ok(x)
    }

    /// Host file `ino` as the host has it now (`st`): if its size or time changed
    /// (another process wrote it), its cached chunks go and its length follows.
    pub fn revalidate(&mut self, ino: Ino, st: &HostStat) {
        let mtime = ns(st.mtime_sec, st.mtime_nsec);
        let changed = self.node(ino).size() != st.size || self.node(ino).mtime != mtime;
        if !changed {
            return;
        }
        self.uncache(ino);
        let n = self.node_mut(ino);
        if let Data::HostFile(p) = &mut n.data {
            p.set_len(st.size);
        }
        n.mtime = mtime;
    }

    /// Host file `ino` after a lock on it was granted, `st` its stat then: the
    /// host's state is read again (another VM may have written it before it let
    /// the lock go, as SQLite's readers expect of a shared file).
    pub fn relock(&mut self, ino: Ino, st: &HostStat) {
        // (Its cached chunks go whatever the stat says: a host's times are
        // coarser than two writes, and a writer may keep the size.)
        self.uncache(ino);
        self.revalidate(ino, st);
    }

    /// Closes host file `ino`'s I/O handle (its last open file closed).
    pub fn release_io(&mut self, ino: Ino) {
        let Some(ops) = self.hostops else { return };
        if let Some(h) = self.nodes_get_mut(ino).and_then(|n| n.host.as_mut()) {
            if let Some((x, _)) = h.io.take() {
                ops.close(x);
            }
        }
    }

    /// Closes whatever host handles a freed node held.
    pub(super) fn forget_host(&self, n: &Node) {
        if let Some(h) = n.host.as_ref() {
            self.forget_host_ref(h);
        }
    }

    /// A rootfs file about to change: its bytes are read into memory and it becomes
    /// an ordinary file of the tree (the upper layer).
    pub fn copy_up(&mut self, ino: Ino) -> Result<(), Errno> {
        if self.layer(ino) != Some(Layer::Rootfs) || !matches!(self.node(ino).data, Data::HostFile(_)) {
            return Ok(());
        }
        self.copy_in(ino)
    }

    /// Host file `ino`'s bytes read into memory: it becomes a file of the tree.
    fn copy_in(&mut self, ino: Ino) -> Result<(), Errno> {
        let ops = self.hostops.ok_or(Errno::EIO)?;
        let size = self.node(ino).size();
        let h = self.io_handle(ino, false)?;
        let mut pages = Pages::new();
        let mut at = 0u64;
        while at < size {
            let n = (size - at).min(CHUNK as u64) as usize;
            let mut chunk = super::pages::zeroed_chunk()?;
            let got = ops.read(h, at, &mut [&mut chunk[..n]])?;
            pages.write_with(at, got, |o, dst| {
                dst.copy_from_slice(&chunk[o..o + dst.len()]);
                Ok(())
            })?;
            if got < n {
                break;
            }
            at += n as u64;
        }
        self.charge_file(pages.footprint())?;
        self.release_io(ino);
        self.uncache(ino);
        let n = self.node_mut(ino);
        n.data = Data::File(pages);
        n.host = None;
        Ok(())
    }

    /// What a read of `len` bytes at `offset` of host file `ino` must fetch first:
    /// None when every chunk it touches is cached (or it is past the end).
    pub fn read_plan(&mut self, ino: Ino, offset: u64, len: usize) -> Result<Option<ReadPlan>, Errno> {
        let Data::HostFile(p) = &self.node(ino).data else { return Ok(None) };
        let end = offset.saturating_add(len as u64).min(p.len());
        if offset >= end {
            return Ok(None);
        }
        let (a, b) = ((offset / CHUNK as u64) as usize, end.div_ceil(CHUNK as u64) as usize);
        let Some(first) = (a..b).find(|i| !p.has(*i)) else { return Ok(None) };
        let last = p.len().div_ceil(CHUNK as u64) as usize;
        let sequential = first == 0 || self.node(ino).host.as_ref().is_some_and(|h| h.next == first);
        let ahead = if sequential { READAHEAD } else { 0 };
        let count = (first..last.min(b.max(first + 1) + ahead)).take_while(|i| !p.has(*i)).count();
        if let Some(h) = self.node_mut(ino).host.as_mut() {
            h.next = first + count;
        }
        let handle = self.io_handle(ino, false)?;
        let gen = self.node(ino).host.as_ref().map_or(0, |h| h.gen);
        Ok(Some(ReadPlan { handle, first, count, gen }))
    }

    /// Puts chunks read for host file `ino` (from chunk `first` on, by a plan made
    /// at generation `gen`) in its cache, making room by forgetting the oldest
    /// cached chunks of all files. Nothing is cached if the file's chunks went
    /// stale since the plan (a write on another vCPU meanwhile: what was read may
    /// be older than it); the reader copies what it needs straight from the host.
    pub fn cache_fill(&mut self, ino: Ino, first: usize, gen: u64, chunks: Vec<alloc::boxed::Box<[u8]>>) {
        if self.nodes_get_mut(ino).and_then(|n| n.host.as_ref()).is_none_or(|h| h.gen != gen) {
            return;
        }
        for (i, c) in chunks.into_iter().enumerate() {
            while self.cache_used + CHUNK > self.cache_limit && self.evict_oldest().is_some() {}
            let Some(Data::HostFile(p)) = self.nodes_get_mut(ino).map(|n| &mut n.data) else { return };
            if p.has(first + i) || p.insert(first + i, c).is_err() {
                continue;
            }
            self.cache_used += CHUNK;
            if self.cache.try_reserve(1).is_ok() {
                self.cache.push_back((ino, first + i));
            }
        }
    }

    /// Forgets the oldest entry of the cache's queue: Some(true) if it named a
    /// chunk still cached (now freed), Some(false) if a stale one (the chunk went
    /// already, or its node is not a host file any more: copied up, or freed and
    /// its number reused by a /tmp file, whose data is never touched), None if the
    /// queue is empty. Cached chunks are clean (writes go through to the host and
    /// drop the chunks they touch, `wrote`) and used only under the tree's lock,
    /// which `&mut self` holds: any may go.
    fn evict_oldest(&mut self) -> Option<bool> {
        let (old, k) = self.cache.pop_front()?;
        if let Some(Data::HostFile(p)) = self.nodes_get_mut(old).map(|n| &mut n.data) {
            if p.has(k) {
                p.evict(k);
                self.cache_used = self.cache_used.saturating_sub(CHUNK);
                return Some(true);
            }
        }
        Some(false)
    }

    /// Memory pressure: forgets cached chunks, oldest first, until at least
    /// `bytes` were freed or the cache is empty; the bytes freed. (The kernel
    /// calls it through `onering_arch::mm::set_reclaim` when an allocation would
    /// fail, then gives the heap's emptied regions back to the chunk allocator.)
    pub fn shrink_cache(&mut self, bytes: usize) -> usize {
        let mut freed = 0usize;
        while freed * CHUNK < bytes {
            match self.evict_oldest() {
                Some(true) => freed += 1,
                Some(false) => {}
                None => break,
            }
        }
        onering_arch::cpu::count_by(onering_arch::cpu::Counter::Reclaimed, freed as u64);
        if self.cache.is_empty() {
            // (An emptied queue gives its memory back too.)
            self.cache = alloc::collections::VecDeque::new();
        }
        freed * CHUNK
    }

    /// Bytes the page cache holds now.
    pub fn cache_bytes(&self) -> usize {
        self.cache_used
    }

    /// Forgets host file `ino`'s cached chunks (all, or those from `from` on).
    fn uncache_from(&mut self, ino: Ino, from: usize) {
        self.stale(ino);
        let Some(Data::HostFile(p)) = self.nodes_get_mut(ino).map(|n| &mut n.data) else { return };
        let n = p.len().div_ceil(CHUNK as u64) as usize;
        let mut freed = 0;
        for i in from..n {
            if p.has(i) {
                p.evict(i);
                freed += CHUNK;
            }
        }
        self.cache_used = self.cache_used.saturating_sub(freed);
    }

    /// Host file `ino`'s cached chunks may be older than the host's now: a fetch
    /// in flight is not cached (`cache_fill`).
    fn stale(&mut self, ino: Ino) {
        if let Some(h) = self.nodes_get_mut(ino).and_then(|n| n.host.as_mut()) {
            h.gen = h.gen.wrapping_add(1);
        }
    }

    /// Forgets host file `ino`'s cached chunks.
    pub fn uncache(&mut self, ino: Ino) {
        self.uncache_from(ino, 0);
    }

    /// Where a write of host file `ino` goes: its I/O handle (for writing) and the
    /// position (`offset`, or the end when `append`).
    pub fn write_target(&mut self, ino: Ino, offset: u64, append: bool) -> Result<(u64, u64), Errno> {
        if self.node(ino).readonly {
            return Err(Errno::EROFS);
        }
        let h = self.io_handle(ino, true)?;
        Ok((h, if append { self.node(ino).size() } else { offset }))
    }

    /// After `n` bytes were written at `at` on the host: the chunks they touched
    /// leave the cache (they are read again), the length grows, the time is now.
    pub fn wrote(&mut self, ino: Ino, at: u64, n: u64, now: u64) {
        self.stale(ino);
        let first = (at / CHUNK as u64) as usize;
        if let Some(Data::HostFile(p)) = self.nodes_get_mut(ino).map(|x| &mut x.data) {
            let last = at.saturating_add(n).div_ceil(CHUNK as u64) as usize;
            let mut freed = 0;
            for i in first..last {
                if p.has(i) {
                    p.evict(i);
                    freed += CHUNK;
                }
            }
            if at + n > p.len() {
                p.set_len(at + n);
            }
            self.cache_used = self.cache_used.saturating_sub(freed);
        }
        if let Some(x) = self.nodes_get_mut(ino) {
            x.mtime = now;
        }
    }

    /// `truncate` of a volume file: on the host, then the cache.
    pub(super) fn host_truncate(&mut self, ino: Ino, len: u64) -> Result<(), Errno> {
        let ops = self.hostops.ok_or(Errno::EIO)?;
        let h = self.io_handle(ino, true)?;
        ops.truncate(h, len)?;
        self.uncache_from(ino, (len / CHUNK as u64) as usize);
        if let Data::HostFile(p) = &mut self.node_mut(ino).data {
            p.set_len(len);
        }
        Ok(())
    }

    /// The host's inode and device of node `ino`, if it is a host node.
    pub fn host_ids(&self, ino: Ino) -> Option<(u64, u64)> {
        self.node(ino).host.as_ref().filter(|h| !h.root || h.ino != 0).map(|h| (h.ino, h.dev))
    }

    /// A new node for host entry `name` made in volume directory `dir` by a call
    /// that returned handle `h` and stat `st` (the handle kept as the node's I/O
    /// handle for a file it opened, else let go).
    pub(super) fn add_made(&mut self, dir: Ino, name: &[u8], h: u64, st: &HostStat, io: bool, now: u64) -> Ino {
        let layer = self.layer(dir).unwrap_or(Layer::Volume { ro: false });
        let (data, mut r, mode) = node_of(layer, name, st).unwrap_or((
            Data::Dir(BTreeMap::new()),
            HostRef::new(layer, name, st.ino, st.dev),
            0o755,
        ));
        r.loaded = true;
        if io {
            r.io = Some((h, true));
        } else {
            r.handle = Some(h);
        }
        let is_dir = matches!(data, Data::Dir(_));
        let ino = self.add_host(dir, name, data, mode, false, r);
        let n = self.node_mut(ino);
        n.mtime = now;
        n.atime = now;
        n.uid = st.uid as u32;
        n.gid = st.gid as u32;
        if !is_dir {
            self.let_go(ino);
        }
        ino
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfs::tree::ROOT;
    use alloc::string::String;
    use onering_abi::hostfs::{O_EXCL, O_TRUNC};
    use std::sync::Mutex;

    /// A host in memory: paths to entries, handles to paths.
    #[derive(Default)]
    struct Fake {
        files: Mutex<BTreeMap<String, (u32, Vec<u8>)>>,
        handles: Mutex<Vec<String>>,
        calls: Mutex<Vec<String>>,
    }

    impl Fake {
        fn put(&self, path: &str, mode: u32, data: &[u8]) {
            self.files.lock().unwrap().insert(path.into(), (mode, data.to_vec()));
        }
        fn path(&self, h: u64) -> String {
            self.handles.lock().unwrap()[h as usize].clone()
        }
        fn stat_of(&self, path: &str) -> Result<HostStat, Errno> {
            let f = self.files.lock().unwrap();
            let (mode, data) = f.get(path).ok_or(Errno::ENOENT)?;
            let ino = f.keys().position(|k| k == path).unwrap_or(0) as u64 + 100;
            Ok(HostStat { ino, mode: u64::from(*mode), size: data.len() as u64, nlink: 1, ..Default::default() })
        }
        fn handle(&self, path: String) -> u64 {
            let mut h = self.handles.lock().unwrap();
            h.push(path);
            h.len() as u64 - 1
        }
        fn log(&self, what: &str) {
            self.calls.lock().unwrap().push(what.into());
        }
    }

    fn join(dir: &str, name: &[u8]) -> String {
        alloc::format!("{dir}/{}", core::str::from_utf8(name).unwrap())
    }

    impl HostOps for Fake {
        fn lookup(&self, dir: u64, name: &[u8]) -> Result<(u64, HostStat), Errno> {
            let p = join(&self.path(dir), name);
            let st = self.stat_of(&p)?;
            Ok((self.handle(p), st))
        }
        fn open(&self, dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat), Errno> {
            let p = join(&self.path(dir), name);
            if flags & onering_abi::hostfs::O_CREAT != 0 {
                self.log("create");
                self.put(&p, 0o100000 | mode, b"");
            }
            let st = self.stat_of(&p)?;
            Ok((self.handle(p), st))
        }
        fn open_create(&self, dir: u64, name: &[u8], flags: u64, mode: u32) -> Result<(u64, HostStat, bool), Errno> {
            self.log("open_create");
            let (excl, trunc) = (flags & O_EXCL != 0, flags & O_TRUNC != 0);
            let p = join(&self.path(dir), name);
            let existing = self.files.lock().unwrap().get(&p).map(|f| f.0);
            let created = match existing {
                Some(_) if excl => return Err(Errno::EEXIST),
                Some(m) if m & 0o170000 != 0o100000 => return Err(Errno::ELOOP),
                Some(_) => {
                    if trunc {
                        self.files.lock().unwrap().get_mut(&p).unwrap().1.clear();
                    }
                    false
                }
                None => {
                    self.put(&p, 0o100000 | mode, b"");
                    true
                }
            };
            let st = self.stat_of(&p)?;
            Ok((self.handle(p), st, created))
        }
        fn readdir(&self, dir: u64, out: &mut dyn FnMut(&[u8], &HostStat)) -> Result<(), Errno> {
            self.log("readdir");
            let prefix = alloc::format!("{}/", self.path(dir));
            let names: Vec<String> = self
                .files
                .lock()
                .unwrap()
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix).filter(|r| !r.contains('/')).map(String::from))
                .collect();
            for n in names {
                out(n.as_bytes(), &self.stat_of(&alloc::format!("{prefix}{n}"))?);
            }
            Ok(())
        }
        fn readlink(&self, h: u64) -> Result<Vec<u8>, Errno> {
            Ok(self.files.lock().unwrap()[&self.path(h)].1.clone())
        }
        fn stat(&self, h: u64) -> Result<HostStat, Errno> {
            self.stat_of(&self.path(h))
        }
        fn stat_at(&self, dir: u64, name: &[u8]) -> Result<HostStat, Errno> {
            self.stat_of(&join(&self.path(dir), name))
        }
        fn mkdir(&self, dir: u64, name: &[u8], mode: u32) -> Result<(u64, HostStat), Errno> {
            let p = join(&self.path(dir), name);
            self.put(&p, 0o040000 | mode, b"");
            Ok((self.handle(p.clone()), self.stat_of(&p)?))
        }
        fn symlink(&self, _: u64, _: &[u8], _: &[u8]) -> Result<(u64, HostStat), Errno> {
            Err(Errno::EPERM)
        }
        fn unlink(&self, dir: u64, name: &[u8], _: bool) -> Result<(), Errno> {
            self.log("unlink");
            self.files.lock().unwrap().remove(&join(&self.path(dir), name)).map(|_| ()).ok_or(Errno::ENOENT)
        }
        fn rename(&self, _: bool, _: u64, _: &[u8], _: u64, _: &[u8]) -> Result<(), Errno> {
            Err(Errno::EPERM)
        }
        fn truncate(&self, h: u64, len: u64) -> Result<(), Errno> {
            let p = self.path(h);
            self.files.lock().unwrap().get_mut(&p).ok_or(Errno::ENOENT)?.1.resize(len as usize, 0);
            Ok(())
        }
        fn chmod(&self, _: u64, _: u32) -> Result<(), Errno> {
            Ok(())
        }
        fn utimes(&self, _: u64, _: Option<u64>, _: Option<u64>) -> Result<(), Errno> {
            Ok(())
        }
        fn chown(&self, _: u64, _: Option<u32>, _: Option<u32>) -> Result<(), Errno> {
            Ok(())
        }
        fn make_room(&self, _: usize, _: bool) -> bool {
            true
        }
        fn read(&self, h: u64, offset: u64, bufs: &mut [&mut [u8]]) -> Result<usize, Errno> {
            self.log("read");
            let data = self.files.lock().unwrap()[&self.path(h)].1.clone();
            let mut at = offset as usize;
            let mut done = 0;
            for b in bufs.iter_mut() {
                let n = b.len().min(data.len().saturating_sub(at));
                b[..n].copy_from_slice(&data[at..at + n]);
                at += n;
                done += n;
            }
            Ok(done)
        }
        fn close(&self, _: u64) {}
    }

    /// A fake host with a rootfs (handle 0) and a volume (handle 1).
    fn setup() -> (&'static Fake, Vfs) {
        let fake: &'static Fake = Box::leak(Box::default());
        fake.handle("root".into());
        fake.handle("vol".into());
        fake.put("root", 0o040755, b"");
        fake.put("vol", 0o040755, b"");
        fake.put("root/etc", 0o040755, b"");
        fake.put("root/etc/big", 0o100644, &alloc::vec![7u8; 3 * CHUNK + 5]);
        fake.put("root/link", 0o120777, b"etc/big");
        fake.put("vol/a.txt", 0o100644, b"volume\n");
        let mut v = Vfs::new();
        v.set_host(fake, 64 * CHUNK);
        v.mount(b"/", 0, Layer::Rootfs, false).unwrap();
        v.mount(b"/data", 1, Layer::Volume { ro: false }, false).unwrap();
        (fake, v)
    }

    fn calls(f: &Fake, what: &str) -> usize {
        f.calls.lock().unwrap().iter().filter(|c| *c == what).count()
    }

    #[test]
    fn listings_load_once_and_links_resolve_in_the_tree() {
        let (fake, mut v) = setup();
        let big = v.lookup(ROOT, b"/link", true).unwrap();
        assert_eq!(v.node(big).size(), 3 * CHUNK as u64 + 5);
        assert!(v.lookup(ROOT, b"/dev/null", true).is_ok() && v.lookup(ROOT, b"/tmp", true).is_ok(), "kept");
        let before = calls(fake, "readdir");
        v.lookup(ROOT, b"/etc/big", true).unwrap();
        assert_eq!(calls(fake, "readdir"), before, "a listing is read once");
    }

    /// [`setup`], with a big directory `/etc/lib` holding `libc.so.6`.
    fn setup_big_lib() -> (&'static Fake, Vfs) {
        let (fake, v) = setup();
        fake.put("root/etc/lib", 0o040755, &alloc::vec![0u8; BIG_DIR as usize + 1]);
        fake.put("root/etc/lib/libc.so.6", 0o100644, b"elf");
        (fake, v)
    }

    /// A big rootfs directory gives a lookup the one name asked for (a name it
    /// lacks is not found); what lists it later has every entry once.
    #[test]
    fn a_big_rootfs_directory_is_looked_up_name_by_name_until_listed() {
        let (fake, mut v) = setup_big_lib();
        fake.put("root/etc/lib/libm.so.6", 0o100644, b"elf!");
        fake.put("root/etc/small", 0o040755, b"");
        fake.put("root/etc/small/x", 0o100644, b"x");
        fake.put("root/etc/lib2", 0o040755, &alloc::vec![0u8; BIG_DIR as usize + 1]);
        let lib = v.lookup(ROOT, b"/etc/lib", true).unwrap();
        let before = calls(fake, "readdir");
        let libc = v.lookup(ROOT, b"/etc/lib/libc.so.6", true).unwrap();
        assert_eq!(v.node(libc).size(), 3);
        assert_eq!(v.lookup(ROOT, b"/etc/lib/nothing", true), Err(Errno::ENOENT));
        assert_eq!(v.lookup(ROOT, b"/etc/lib/libc.so.6", true), Ok(libc), "found once, kept");
        assert_eq!(calls(fake, "readdir"), before, "no listing for a lookup");
        // Many names asked: listed then.
        let many = calls(fake, "readdir");
        for i in 0..ASK_MAX + 3 {
            let missing = alloc::format!("/etc/lib2/n{i}");
            assert_eq!(v.lookup(ROOT, missing.as_bytes(), true), Err(Errno::ENOENT));
        }
        assert_eq!(calls(fake, "readdir"), many + 1, "listed once, after ASK_MAX names");
        let before = calls(fake, "readdir");
        v.lookup(ROOT, b"/etc/small/x", true).unwrap();
        assert_eq!(calls(fake, "readdir"), before + 1, "a small directory is listed");
        v.load(lib).unwrap();
        assert_eq!(calls(fake, "readdir"), before + 2);
        assert!(v.has_entry(lib, b"libm.so.6"));
        assert_eq!(v.lookup(ROOT, b"/etc/lib/libc.so.6", true), Ok(libc), "the node looked up stays");
        let names: Vec<Vec<u8>> = v.list(lib).unwrap().into_iter().map(|e| e.0).collect();
        assert_eq!(names.iter().filter(|n| !n.starts_with(b".")).count(), 2, "each entry once");
    }

    /// A host directory walked through but not listed is not taken for empty:
    /// removing it, or renaming a directory over it, is ENOTEMPTY as its listing
    /// says.
    #[test]
    fn an_unlisted_host_directory_is_not_empty_to_rmdir() {
        let (fake, mut v) = setup_big_lib();
        fake.put("root/etc/empty", 0o040755, b"");
        let etc = v.lookup(ROOT, b"/etc", true).unwrap();
        assert_eq!(v.lookup(ROOT, b"/etc/lib/missing", true), Err(Errno::ENOENT));
        assert_eq!(v.remove(etc, b"lib", true), Err(Errno::ENOTEMPTY));
        assert_eq!(v.rename(etc, b"empty", etc, b"lib"), Err(Errno::ENOTEMPTY));
        assert_eq!(v.lookup(ROOT, b"/etc/lib/libc.so.6", true).map(|_| ()), Ok(()));
        assert_eq!(v.remove(etc, b"empty", true), Ok(()));
    }

    #[test]
    fn reads_fill_the_cache_with_readahead_and_copy_up_detaches() {
        let (fake, mut v) = setup();
        let big = v.lookup(ROOT, b"/etc/big", true).unwrap();
        let plan = v.read_plan(big, 10, 100).unwrap().expect("nothing cached yet");
        assert_eq!((plan.first, plan.count), (0, 4), "up to the end of the file");
        let mut chunks = Vec::new();
        for _ in 0..plan.count {
            chunks.push(super::super::pages::zeroed_chunk().unwrap());
        }
        let mut bufs: Vec<&mut [u8]> = chunks.iter_mut().map(|c| &mut c[..]).collect();
        fake.read(plan.handle, 0, &mut bufs).unwrap();
        v.cache_fill(big, plan.first, plan.gen, chunks);
        assert!(v.read_plan(big, 0, 3 * CHUNK + 5).unwrap().is_none(), "all cached");
        let mut b = [0u8; 4];
        assert_eq!(v.read(big, 3 * CHUNK as u64 + 3, &mut b), Ok(2));
        assert_eq!(&b[..2], &[7, 7]);
        // Writing a rootfs file copies it up: the host's stays.
        v.truncate(big, 1, 0).unwrap();
        assert!(v.node(big).host.is_none() && v.node(big).size() == 1);
        assert_eq!(fake.files.lock().unwrap()["root/etc/big"].1.len(), 3 * CHUNK + 5);
    }

    /// Reads `len` bytes of `ino` at `off` as the kernel does: what is not cached
    /// is fetched (with readahead) into the cache first.
    fn fetch(fake: &Fake, v: &mut Vfs, ino: Ino, off: u64, len: usize) -> Vec<u8> {
        if let Some(plan) = v.read_plan(ino, off, len).unwrap() {
            let mut chunks: Vec<Box<[u8]>> =
                (0..plan.count).map(|_| super::super::pages::zeroed_chunk().unwrap()).collect();
            let mut bufs: Vec<&mut [u8]> = chunks.iter_mut().map(|c| &mut c[..]).collect();
            fake.read(plan.handle, (plan.first * CHUNK) as u64, &mut bufs).unwrap();
            v.cache_fill(ino, plan.first, plan.gen, chunks);
        }
        let mut b = alloc::vec![0u8; len];
        let n = v.read(ino, off, &mut b).unwrap();
        b.truncate(n);
        b
    }

    #[test]
    fn a_fetch_that_a_write_overtook_is_not_cached() {
        let (fake, mut v) = setup();
        let a = v.lookup(ROOT, b"/data/a.txt", true).unwrap();
        let plan = v.read_plan(a, 0, 7).unwrap().expect("not cached yet");
        let old = fake.read_chunks(plan.handle, 0, plan.count).unwrap();
        // Another vCPU writes the file after the fetch, before it is cached: the
        // chunk it read is older than the host's and must not be cached.
        fake.put("vol/a.txt", 0o100644, b"VOLUME\n");
        v.wrote(a, 0, 7, 9);
        v.cache_fill(a, plan.first, plan.gen, old);
        assert_eq!(v.cache_bytes(), 0);
        assert_eq!(fetch(fake, &mut v, a, 0, 7), b"VOLUME\n");
        assert_eq!(v.cache_bytes(), CHUNK, "a fetch nothing overtook is cached");
    }

    #[test]
    fn chunks_read_past_the_end_hold_zeros() {
        let (fake, mut v) = setup();
        let big = v.lookup(ROOT, b"/etc/big", true).unwrap();
        let plan = v.read_plan(big, 3 * CHUNK as u64, 10).unwrap().expect("not cached yet");
        let chunks = fake.read_chunks(plan.handle, (plan.first * CHUNK) as u64, 2).unwrap();
        assert_eq!(chunks.len(), 2);
        assert!(chunks.iter().all(|c| c.len() == CHUNK));
        assert!(chunks[0][..5].iter().all(|b| *b == 7), "the file's last bytes");
        assert!(chunks[0][5..].iter().chain(chunks[1].iter()).all(|b| *b == 0), "past its end");
    }

    #[test]
    fn memory_pressure_takes_the_oldest_cached_chunks_and_never_file_data() {
        let (fake, mut v) = setup();
        fake.put("root/etc/other", 0o100644, &alloc::vec![3u8; 2 * CHUNK]);
        let big = v.lookup(ROOT, b"/etc/big", true).unwrap();
        let other = v.lookup(ROOT, b"/etc/other", true).unwrap();
        assert_eq!(fetch(fake, &mut v, big, 0, 10), [7; 10]); // chunks 0..4, readahead
        assert_eq!(fetch(fake, &mut v, other, 0, 10), [3; 10]); // chunks 0..2
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        let t = v.create(tmp, b"t", 0o644, false, 1).unwrap();
        v.write(t, 0, &alloc::vec![5u8; 2 * CHUNK], 1).unwrap();
        assert_eq!(v.cache_bytes(), 6 * CHUNK);
        // The oldest first, whole chunks, at least what was asked for.
        assert_eq!(v.shrink_cache(CHUNK + 1), 2 * CHUNK);
        assert_eq!(v.cache_bytes(), 4 * CHUNK);
        let plan = v.read_plan(big, 0, CHUNK).unwrap().expect("big's first chunks went");
        assert_eq!((plan.first, plan.count), (0, 2));
        assert!(v.read_plan(big, 2 * CHUNK as u64, 2 * CHUNK).unwrap().is_none(), "the rest stayed");
        assert!(v.read_plan(other, 0, 2 * CHUNK).unwrap().is_none(), "the newest stayed");
        // A cached file copied up is the VM's file now: its old entries in the
        // cache's queue leave its data alone, as they do /tmp's.
        assert_eq!(fetch(fake, &mut v, big, 0, 3 * CHUNK + 5), alloc::vec![7u8; 3 * CHUNK + 5]);
        v.truncate(big, 3 * CHUNK as u64, 2).unwrap();
        assert!(v.node(big).host.is_none());
        let before = calls(fake, "read");
        assert_eq!(v.shrink_cache(usize::MAX), 2 * CHUNK, "only other's chunks were left to give");
        assert_eq!((v.cache_bytes(), v.shrink_cache(1)), (0, 0), "nothing left");
        assert_eq!(v.read(big, 0, &mut [0u8; 1]), Ok(1));
        let mut all = alloc::vec![0u8; 3 * CHUNK];
        assert_eq!(v.read(big, 0, &mut all), Ok(3 * CHUNK));
        assert!(all.iter().all(|b| *b == 7), "the copied-up file's data stayed");
        let mut all = alloc::vec![0u8; 2 * CHUNK];
        assert_eq!(v.read(t, 0, &mut all), Ok(2 * CHUNK));
        assert!(all.iter().all(|b| *b == 5), "/tmp's data stayed");
        // What went is read from the host again.
        assert_eq!(fetch(fake, &mut v, other, CHUNK as u64, 4), [3; 4]);
        assert!(calls(fake, "read") > before);
    }

    #[test]
    fn open_with_create_on_a_volume_is_one_call_and_the_tree_follows_the_host() {
        let (fake, mut v) = setup();
        let data = v.lookup(ROOT, b"/data", true).unwrap();
        v.load(data).unwrap();
        let before = fake.calls.lock().unwrap().len();
        // A new name: made on the host by the one call, a node of the tree.
        let new = v.open_volume_file(data, b"new", 0o644, false, true, 5).unwrap().expect("a volume's file");
        assert_eq!(fake.calls.lock().unwrap()[before..], ["open_create"], "no lookup first");
        assert!(v.node(new).host.as_ref().is_some_and(|h| h.io.is_some_and(|(_, w)| w)), "opened for writing");
        assert_eq!(v.lookup(ROOT, b"/data/new", true), Ok(new));
        // O_EXCL on it: EEXIST from the host; without, it opens as it is.
        assert_eq!(v.open_volume_file(data, b"new", 0o644, true, false, 5), Err(Errno::EEXIST));
        assert_eq!(v.open_volume_file(data, b"new", 0o644, false, false, 5), Ok(Some(new)));
        // A file the tree knows, changed on the host: revalidated by the call's stat;
        // truncated by it when asked.
        let a = v.lookup(ROOT, b"/data/a.txt", true).unwrap();
        fake.put("vol/a.txt", 0o100644, b"longer now\n");
        assert_eq!(v.open_volume_file(data, b"a.txt", 0o644, false, false, 5), Ok(Some(a)));
        assert_eq!(v.node(a).size(), 11);
        assert_eq!(v.open_volume_file(data, b"a.txt", 0o644, false, true, 5), Ok(Some(a)));
        assert_eq!((v.node(a).size(), fake.files.lock().unwrap()["vol/a.txt"].1.len()), (0, 0));
        // A file the host made behind the VM's back joins the tree as it is.
        fake.put("vol/late", 0o100644, b"late");
        let late = v.open_volume_file(data, b"late", 0o644, false, false, 5).unwrap().expect("joined");
        assert_eq!(v.node(late).size(), 4);
        // What the path walk must judge goes the slow way: a link on the host, a
        // directory the tree knows, the rootfs.
        fake.put("vol/link", 0o120777, b"a.txt");
        assert_eq!(v.open_volume_file(data, b"link", 0o644, false, false, 5), Ok(None));
        v.create(data, b"dir", 0o755, true, 5).unwrap();
        assert_eq!(v.open_volume_file(data, b"dir", 0o644, false, false, 5), Ok(None));
        let etc = v.lookup(ROOT, b"/etc", true).unwrap();
        assert_eq!(v.open_volume_file(etc, b"x", 0o644, false, false, 5), Ok(None));
        assert!(!fake.files.lock().unwrap().contains_key("root/etc/x"));
    }

    #[test]
    fn volume_changes_go_to_the_host_and_its_changes_come_back() {
        let (fake, mut v) = setup();
        let data = v.lookup(ROOT, b"/data", true).unwrap();
        v.create(data, b"new", 0o644, false, 1).unwrap();
        assert_eq!(calls(fake, "create"), 1);
        assert!(fake.files.lock().unwrap().contains_key("vol/new"));
        v.remove(data, b"a.txt", false).unwrap();
        assert!(!fake.files.lock().unwrap().contains_key("vol/a.txt"));
        // The host adds and removes behind the VM's back: the last name follows.
        fake.put("vol/late", 0o100644, b"x");
        assert!(v.lookup(ROOT, b"/data/late", true).is_ok());
        fake.files.lock().unwrap().remove("vol/new");
        assert_eq!(v.lookup(ROOT, b"/data/new", true), Err(Errno::ENOENT));
        // A rootfs entry made in the VM stays in the VM.
        let etc = v.lookup(ROOT, b"/etc", true).unwrap();
        v.create(etc, b"mine", 0o644, false, 1).unwrap();
        assert!(!fake.files.lock().unwrap().contains_key("root/etc/mine"));
        assert_eq!(calls(fake, "create"), 1);
    }
}
