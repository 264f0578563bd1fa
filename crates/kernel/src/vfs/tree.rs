//! The file tree: one in-memory tree of directories, files, symbolic links,
//! devices and named pipes. `/dev` holds the devices, `/tmp` is writable memory, and the rest is the
//! read-only copy of `--rootfs` (file contents stay where the VMM put them, in guest
//! memory outside the heap). Pure logic: no user memory, no hostcalls.

use super::pages::CHUNK;
use crate::errno::Errno;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

/// Index of a node.
pub type Ino = usize;

pub const ROOT: Ino = 0;
/// Longest path accepted (Linux's PATH_MAX).
pub const PATH_MAX: usize = 4096;
const NAME_MAX: usize = 255;
/// Symbolic links followed in one lookup before ELOOP (Linux's limit).
const MAX_SYMLINKS: usize = 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Null,
    Zero,
    Full,
    /// /dev/random (1:8) and /dev/urandom (1:9): the same bytes.
    Random,
    Urandom,
    Stdin,
    Stdout,
    Stderr,
    /// /dev/tty: the controlling terminal.
    Tty,
}

impl Device {
    /// The descriptor /dev/stdin, /dev/stdout or /dev/stderr stands for.
    pub fn std_fd(self) -> Option<u64> {
        match self {
            Device::Stdin => Some(0),
            Device::Stdout => Some(1),
            Device::Stderr => Some(2),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub enum Data {
    Dir(BTreeMap<Vec<u8>, Ino>),
    /// A writable file, in chunks of memory.
    File(super::pages::Pages),
    /// A read-only file whose bytes live outside the heap (the rootfs image).
    Static(&'static [u8]),
    /// A regular file on the host (`vfs::host`): its length, and the chunks of it
    /// read so far (the page cache).
    HostFile(super::pages::Pages),
    Symlink(Vec<u8>),
    Device(Device),
    /// A named pipe (`mkfifo`): opening it gives an end of this pipe.
    Fifo(alloc::sync::Arc<onering_arch::sync::Mutex<crate::pipebuf::PipeBuf>>),
    /// A socket's name (`bind` of an AF_UNIX path): leads to the socket while it
    /// is open (`net::unix`); opening it is ENXIO.
    Socket(alloc::sync::Weak<dyn core::any::Any + Send + Sync>),
    /// A file of /proc or /sys (`synth`): its bytes are made when it is read.
    Generated,
}

#[derive(Debug)]
pub struct Node {
    pub data: Data,
    /// Permission bits (0o7777).
    pub mode: u32,
    pub readonly: bool,
    pub parent: Ino,
    /// Modification and access times, ns since the epoch.
    pub mtime: u64,
    pub atime: u64,
    /// Owner (the whole tree starts as the program's user's).
    pub uid: u32,
    pub gid: u32,
    /// Names it has (hard links); directories count 1.
    pub nlink: u32,
    /// Taken out of the tree (unlinked, replaced, removed): still usable by open
    /// files, freed when the last one closes.
    pub removed: bool,
    /// Open files referring to this node.
    opens: Arc<AtomicUsize>,
    /// Its link to the host, for nodes of `--rootfs DIR` and volumes.
    pub host: Option<alloc::boxed::Box<super::host::HostRef>>,
}

/// Keeps a node alive while an open file refers to it.
#[derive(Debug)]
pub struct Hold(Arc<AtomicUsize>);

impl Clone for Hold {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::Relaxed);
        Hold(self.0.clone())
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What one node costs the budget besides its data and name.
const NODE_COST: usize = 160;

/// File type bits of `st_mode`.
pub mod mode {
    pub const S_IFMT: u32 = 0o170000;
    pub const S_IFDIR: u32 = 0o040000;
    pub const S_IFREG: u32 = 0o100000;
    pub const S_IFLNK: u32 = 0o120000;
    pub const S_IFCHR: u32 = 0o020000;
    pub const S_IFIFO: u32 = 0o010000;
    pub const S_IFSOCK: u32 = 0o140000;
}

impl Node {
    /// `st_mode`: type and permissions.
    pub fn st_mode(&self) -> u32 {
        let t = match self.data {
            Data::Dir(_) => mode::S_IFDIR,
            Data::File(_) | Data::Static(_) | Data::HostFile(_) | Data::Generated => mode::S_IFREG,
            Data::Symlink(_) => mode::S_IFLNK,
            Data::Device(_) => mode::S_IFCHR,
            Data::Fifo(_) => mode::S_IFIFO,
            Data::Socket(_) => mode::S_IFSOCK,
        };
        t | (self.mode & 0o7777)
    }

    pub fn size(&self) -> u64 {
        match &self.data {
            Data::File(p) | Data::HostFile(p) => p.len(),
            Data::Static(s) => s.len() as u64,
            Data::Symlink(t) => t.len() as u64,
            Data::Dir(_) | Data::Device(_) | Data::Fifo(_) | Data::Socket(_) | Data::Generated => 0,
        }
    }

    pub fn is_dir(&self) -> bool {
        matches!(self.data, Data::Dir(_))
    }
}

#[derive(Debug)]
pub struct Vfs {
    nodes: Vec<Option<Node>>,
    free: Vec<Ino>,
    /// Removed nodes still open somewhere.
    removed: Vec<Ino>,
    /// Heap bytes the writable tree (nodes, names, file data) uses, and may use: past
    /// the limit, creating and growing fail with ENOSPC instead of exhausting the
    /// kernel heap.
    used: usize,
    limit: usize,
    /// Owner of new nodes.
    owner: (u32, u32),
    /// How host nodes reach the host (None: the tree has none).
    pub(super) hostops: Option<super::host::Ops>,
    /// The page cache of host files: chunks in the order they came (the oldest go
    /// first past `cache_limit` bytes).
    pub(super) cache: alloc::collections::VecDeque<(Ino, usize)>,
    pub(super) cache_used: usize,
    pub(super) cache_limit: usize,
    /// inotify's watches (`notify`): the operations below report to it.
    pub(super) notify: super::notify::Watches,
}

impl Default for Vfs {
    fn default() -> Self {
        Self::new()
    }
}

impl Vfs {
    /// A tree with `/`, `/dev` (null, zero, full, random, urandom, stdin, stdout, stderr, tty, fd, shm)
    /// and a writable `/tmp`.
    pub fn new() -> Vfs {
        let mut v = Vfs {
            nodes: Vec::new(),
            free: Vec::new(),
            removed: Vec::new(),
            used: 0,
            limit: usize::MAX,
            owner: (0, 0),
            hostops: None,
            cache: alloc::collections::VecDeque::new(),
            cache_used: 0,
            cache_limit: 64 << 20,
            notify: super::notify::Watches::default(),
        };
        v.nodes.push(Some(Node {
            data: Data::Dir(BTreeMap::new()),
            mode: 0o755,
            readonly: true,
            parent: ROOT,
            mtime: 0,
            atime: 0,
            uid: 0,
            gid: 0,
            nlink: 1,
            removed: false,
            opens: Arc::new(AtomicUsize::new(0)),
            host: None,
        }));
        let dev = v.add(ROOT, b"dev", Data::Dir(BTreeMap::new()), 0o755, true);
        for (name, d) in [
            (&b"null"[..], Device::Null),
            (b"zero", Device::Zero),
            (b"full", Device::Full),
            (b"random", Device::Random),
            (b"urandom", Device::Urandom),
            (b"stdin", Device::Stdin),
            (b"stdout", Device::Stdout),
            (b"stderr", Device::Stderr),
            (b"tty", Device::Tty),
        ] {
            v.add(dev, name, Data::Device(d), 0o666, false);
        }
        // As Linux's devtmpfs has it (bash's process substitution opens /dev/fd/N).
        v.add(dev, b"fd", Data::Symlink(b"/proc/self/fd".to_vec()), 0o777, false);
        // POSIX shared memory and named semaphores (shm_open, sem_open) live here.
        v.add(dev, b"shm", Data::Dir(BTreeMap::new()), 0o1777, false);
        v.add(ROOT, b"tmp", Data::Dir(BTreeMap::new()), 0o1777, false);
        v
    }

    /// Makes `uid`/`gid` the owner of every node there is and of new ones.
    pub fn set_owner(&mut self, uid: u32, gid: u32) {
        self.owner = (uid, gid);
        for n in self.nodes.iter_mut().flatten() {
            n.uid = uid;
            n.gid = gid;
        }
    }

    /// `chmod`: the permission bits of `ino`.
    pub fn set_mode(&mut self, ino: Ino, mode: u32) -> Result<(), Errno> {
        self.writable_node(ino)?;
        self.host_attr(ino, |ops, h| ops.chmod(h, mode & 0o7777))?;
        self.node_mut(ino).mode = mode & 0o7777;
        self.notify_node(ino, super::notify::IN_ATTRIB);
        Ok(())
    }

    /// `chown`: the owner of `ino` (None: unchanged).
    pub fn set_owner_of(&mut self, ino: Ino, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
        self.writable_node(ino)?;
        self.host_attr(ino, |ops, h| ops.chown(h, uid, gid))?;
        let n = self.node_mut(ino);
        n.uid = uid.unwrap_or(n.uid);
        n.gid = gid.unwrap_or(n.gid);
        if uid.is_some() || gid.is_some() {
            self.notify_node(ino, super::notify::IN_ATTRIB);
        }
        Ok(())
    }

    /// `utimensat`: access and modification times of `ino` (None: unchanged).
    pub fn set_times(&mut self, ino: Ino, atime: Option<u64>, mtime: Option<u64>) -> Result<(), Errno> {
        self.writable_node(ino)?;
        self.host_attr(ino, |ops, h| ops.utimes(h, atime, mtime))?;
        let n = self.node_mut(ino);
        n.atime = atime.unwrap_or(n.atime);
        n.mtime = mtime.unwrap_or(n.mtime);
        // (As Linux: both times are an attribute change, one alone an access or a
        // modification.)
        use super::notify::{IN_ACCESS, IN_ATTRIB, IN_MODIFY};
        match (atime.is_some(), mtime.is_some()) {
            (true, true) => self.notify_node(ino, IN_ATTRIB),
            (true, false) => self.notify_node(ino, IN_ACCESS),
            (false, true) => self.notify_node(ino, IN_MODIFY),
            (false, false) => {}
        }
        Ok(())
    }

    /// An attribute change of a volume's node made on the host first (by its
    /// handle); a rootfs node's stays in the VM.
    fn host_attr(
        &mut self,
        ino: Ino,
        f: impl FnOnce(&dyn super::host::HostOps, u64) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        if !matches!(self.layer(ino), Some(super::host::Layer::Volume { .. })) {
            return Ok(());
        }
        let ops = self.hostops.ok_or(Errno::EIO)?;
        let h = self.handle_of(ino)?;
        let r = f(ops.0, h);
        if !self.node(ino).is_dir() {
            // (Files and links do not keep an O_PATH handle.)
            if let Some(x) = self.node_mut(ino).host.as_mut().filter(|x| !x.root).and_then(|x| x.handle.take()) {
                ops.close(x);
            }
        }
        r
    }

    /// Nodes of the read-only rootfs cannot change (devices and the writable tree
    /// can).
    fn writable_node(&self, ino: Ino) -> Result<(), Errno> {
        if self.node(ino).readonly {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// `link`: a new name `name` in `dir` for the file (not directory) `ino`.
    pub fn link(&mut self, ino: Ino, dir: Ino, name: &[u8]) -> Result<(), Errno> {
        if self.node(ino).is_dir() {
            return Err(Errno::EPERM);
        }
        if name.is_empty() || name == b"." || name == b".." || self.entries(dir)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        if self.node(dir).removed || self.node(ino).removed {
            return Err(Errno::ENOENT);
        }
        self.writable_dir(dir)?;
        if self.node(ino).readonly {
            // Across the read-only rootfs and the writable tree: another "device".
            return Err(Errno::EXDEV);
        }
        match (self.volume_dir(self.node(ino).parent)?, self.volume_dir(dir)?) {
            (Some(x), Some(y)) => {
                let from = self.node(ino).host.as_ref().map(|h| h.name.clone()).unwrap_or_default();
                self.hostops.ok_or(Errno::EIO)?.rename(true, x, &from, y, name)?;
            }
            (None, None) => self.copy_up(ino)?,
            _ => return Err(Errno::EXDEV),
        }
        self.charge(name.len())?;
        if let Data::Dir(e) = &mut self.node_mut(dir).data {
            e.insert(name.to_vec(), ino);
        }
        self.node_mut(ino).nlink += 1;
        self.notify_self(ino, super::notify::IN_ATTRIB);
        self.notify_entry(dir, super::notify::IN_CREATE, 0, name, false);
        Ok(())
    }

    /// One name of `ino` is gone: the node goes when its last name does.
    fn unlinked(&mut self, ino: Ino) {
        let n = self.node_mut(ino);
        if n.nlink > 1 {
            n.nlink -= 1;
        } else {
            self.detach(ino);
        }
    }

    /// Bytes the writable tree uses and may use.
    pub fn usage(&self) -> (usize, usize) {
        (self.used, self.limit)
    }

    /// Caps the heap the writable tree may use.
    pub fn set_limit(&mut self, bytes: usize) {
        self.limit = bytes;
    }

    fn charge(&mut self, bytes: usize) -> Result<(), Errno> {
        let after = self.used.checked_add(bytes).filter(|u| *u <= self.limit).ok_or(Errno::ENOSPC)?;
        self.used = after;
        Ok(())
    }

    /// How many open files (holds) refer to `ino`.
    pub fn open_count(&self, ino: Ino) -> usize {
        self.node(ino).opens.load(Ordering::Relaxed)
    }

    /// Marks `ino` open (for as long as the returned hold lives).
    pub fn hold(&self, ino: Ino) -> Hold {
        let c = self.node(ino).opens.clone();
        c.fetch_add(1, Ordering::Relaxed);
        Hold(c)
    }

    /// Takes `ino` out of the tree; frees it now or when its last open file closes.
    fn detach(&mut self, ino: Ino) {
        self.notify_gone(ino);
        self.node_mut(ino).removed = true;
        self.removed.push(ino);
        self.reap();
    }

    /// Frees removed nodes nobody has open any more.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.removed.len() {
            let ino = self.removed[i];
            if self.node(ino).opens.load(Ordering::Relaxed) == 0 {
                self.removed.swap_remove(i);
                if let Some(n) = self.nodes[ino].take() {
                    self.forget_host(&n);
                    let data = match &n.data {
                        Data::File(p) => p.footprint(),
                        Data::HostFile(p) => {
                            self.cache_used = self.cache_used.saturating_sub(p.footprint() / CHUNK * CHUNK);
                            0
                        }
                        _ => 0,
                    };
                    self.used = self.used.saturating_sub(NODE_COST + data);
                }
                self.free.push(ino);
            } else {
                i += 1;
            }
        }
    }

    pub fn node(&self, ino: Ino) -> &Node {
        self.nodes[ino].as_ref().expect("live inode")
    }

    pub(super) fn node_mut(&mut self, ino: Ino) -> &mut Node {
        self.nodes[ino].as_mut().expect("live inode")
    }

    pub(super) fn nodes_get_mut(&mut self, ino: Ino) -> Option<&mut Node> {
        self.nodes.get_mut(ino)?.as_mut()
    }

    /// Lets the tree reach host files through `ops`; the page cache may take
    /// `cache_limit` bytes.
    pub fn set_host(&mut self, ops: &'static dyn super::host::HostOps, cache_limit: usize) {
        self.hostops = Some(super::host::Ops(ops));
        self.cache_limit = cache_limit;
    }

    pub(super) fn entry_of(&self, dir: Ino, name: &[u8]) -> Option<Ino> {
        self.entries(dir).ok()?.get(name).copied()
    }

    /// Takes entry `name` (node `ino`) out of directory `dir`, as if unlinked
    /// (the host removed or replaced it).
    pub(super) fn drop_entry(&mut self, dir: Ino, name: &[u8], ino: Ino) {
        if let Data::Dir(e) = &mut self.node_mut(dir).data {
            e.remove(name);
        }
        if self.node(ino).is_dir() {
            self.detach(ino);
        } else {
            self.unlinked(ino);
        }
    }

    /// Room for one more node in the node table (its next doubling made room for
    /// in the heap first, through `ops`).
    pub(super) fn room_for_node(&mut self, ops: super::host::Ops) -> Result<(), Errno> {
        if !self.free.is_empty() || self.nodes.len() < self.nodes.capacity() {
            return Ok(());
        }
        let want = self.nodes.capacity().max(64) * core::mem::size_of::<Option<Node>>();
        ops.make_room(want * 2, true);
        self.nodes.try_reserve(self.nodes.capacity().max(64)).map_err(|_| Errno::ENOMEM)
    }

    pub(super) fn has_entry(&self, dir: Ino, name: &[u8]) -> bool {
        self.entries(dir).is_ok_and(|e| e.contains_key(name))
    }

    /// A directory of the tree made where a mount point needs one.
    pub(super) fn add_dir(&mut self, dir: Ino, name: &[u8]) -> Ino {
        self.add(dir, name, Data::Dir(BTreeMap::new()), 0o755, true)
    }

    /// Adds host entry `name` under `dir`.
    pub(super) fn add_host(
        &mut self,
        dir: Ino,
        name: &[u8],
        data: Data,
        mode: u32,
        readonly: bool,
        host: super::host::HostRef,
    ) -> Ino {
        let ino = self.add(dir, name, data, mode, readonly);
        self.node_mut(ino).host = Some(alloc::boxed::Box::new(host));
        ino
    }

    /// Charges `bytes` of file data to the writable tree's budget.
    pub(super) fn charge_file(&mut self, bytes: usize) -> Result<(), Errno> {
        self.charge(bytes)
    }

    /// Adds `name` under the directory `dir` (replacing nothing: the caller checked).
    fn add(&mut self, dir: Ino, name: &[u8], data: Data, mode: u32, readonly: bool) -> Ino {
        let (uid, gid) = self.owner;
        let node = Node {
            data,
            mode,
            readonly,
            parent: dir,
            mtime: 0,
            atime: 0,
            uid,
            gid,
            nlink: 1,
            removed: false,
            opens: Arc::new(AtomicUsize::new(0)),
            host: None,
        };
        let ino = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        if let Data::Dir(entries) = &mut self.node_mut(dir).data {
            entries.insert(name.to_vec(), ino);
        }
        ino
    }

    fn entries(&self, dir: Ino) -> Result<&BTreeMap<Vec<u8>, Ino>, Errno> {
        match &self.node(dir).data {
            Data::Dir(e) => Ok(e),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// Resolves `path` from `cwd`. The last component's symbolic link is followed
    /// only when `follow` is set.
    pub fn lookup(&mut self, cwd: Ino, path: &[u8], follow: bool) -> Result<Ino, Errno> {
        let mut budget = MAX_SYMLINKS;
        self.walk(cwd, path, follow, &mut budget)
    }

    fn walk(&mut self, cwd: Ino, path: &[u8], follow: bool, budget: &mut usize) -> Result<Ino, Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        // A trailing slash makes the last component a directory: follow its link.
        let follow = follow || path.ends_with(b"/");
        let mut at = if path[0] == b'/' { ROOT } else { cwd };
        let parts: Vec<&[u8]> = path.split(|c| *c == b'/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            if part.len() > NAME_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            self.entries(at)?;
            self.prepare_lookup(at, part)?;
            if last && self.node(at).host.is_some() {
                self.refresh_entry(at, part)?;
            }
            let next = match *part {
                b"." => at,
                b".." => self.node(at).parent,
                name => *self.entries(at)?.get(name).ok_or(Errno::ENOENT)?,
            };
            if matches!(self.node(next).data, Data::Symlink(_)) && (!last || follow) {
                if *budget == 0 {
                    return Err(Errno::ELOOP);
                }
                *budget -= 1;
                self.load(next)?;
                let target = self.link_target(next)?.to_vec();
                at = self.walk(at, &target, true, budget)?;
                continue;
            }
            at = next;
        }
        // "dir/" must name a directory.
        if path.ends_with(b"/") && !self.node(at).is_dir() {
            return Err(Errno::ENOTDIR);
        }
        Ok(at)
    }

    /// The directory that would hold `path`, and the last component's name.
    pub fn parent_of<'p>(&mut self, cwd: Ino, path: &'p [u8]) -> Result<(Ino, &'p [u8]), Errno> {
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let trimmed = {
            let mut end = path.len();
            while end > 1 && path[end - 1] == b'/' {
                end -= 1;
            }
            &path[..end]
        };
        let (dir, name) = match trimmed.iter().rposition(|c| *c == b'/') {
            Some(0) => (ROOT, &trimmed[1..]),
            Some(i) => (self.lookup(cwd, &trimmed[..i], true)?, &trimmed[i + 1..]),
            None => (cwd, trimmed),
        };
        self.entries(dir)?;
        self.load(dir)?;
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        Ok((dir, name))
    }

    fn writable_dir(&self, dir: Ino) -> Result<(), Errno> {
        if self.node(dir).readonly {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// Creates a regular file (or a directory) named `name` in `dir`.
    pub fn create(&mut self, dir: Ino, name: &[u8], mode: u32, directory: bool, now: u64) -> Result<Ino, Errno> {
        let ino = self.create_node(dir, name, mode, directory, now)?;
        self.notify_entry(dir, super::notify::IN_CREATE, 0, name, directory);
        Ok(ino)
    }

    fn create_node(&mut self, dir: Ino, name: &[u8], mode: u32, directory: bool, now: u64) -> Result<Ino, Errno> {
        self.entries(dir)?;
        self.load(dir)?;
        if name.is_empty() || name == b"." || name == b".." {
            return Err(Errno::EEXIST);
        }
        if self.node(dir).removed {
            return Err(Errno::ENOENT);
        }
        if self.entries(dir)?.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        self.writable_dir(dir)?;
        self.reap();
        if let Some(h) = self.volume_dir(dir)? {
            let ops = self.hostops.ok_or(Errno::EIO)?;
            let (x, st) = if directory {
                ops.mkdir(h, name, mode & 0o7777)?
            } else {
                let flags = onering_abi::hostfs::O_CREAT | onering_abi::hostfs::O_EXCL | onering_abi::hostfs::O_RDWR;
                ops.open(h, name, flags, mode & 0o7777)?
            };
            return Ok(self.add_made(dir, name, x, &st, !directory, now));
        }
        self.charge(NODE_COST + name.len())?;
        // The node table grows by doubling: a heap too fragmented or full for that
        // is ENOSPC too, not a kernel panic.
        if self.free.is_empty() && self.nodes.try_reserve(1).is_err() {
            self.used -= NODE_COST + name.len();
            return Err(Errno::ENOSPC);
        }
        let data = if directory { Data::Dir(BTreeMap::new()) } else { Data::File(super::pages::Pages::new()) };
        let ino = self.add(dir, name, data, mode & 0o7777, false);
        self.node_mut(ino).mtime = now;
        self.node_mut(ino).atime = now;
        Ok(ino)
    }

    /// Creates a named pipe `name` in `dir`.
    pub fn mkfifo(&mut self, dir: Ino, name: &[u8], mode: u32, now: u64) -> Result<Ino, Errno> {
        let ino = self.create(dir, name, mode, false, now)?;
        self.node_mut(ino).data =
            Data::Fifo(alloc::sync::Arc::new(onering_arch::sync::Mutex::new(crate::pipebuf::PipeBuf::fifo())));
        Ok(ino)
    }

    /// The pipe of named pipe `ino`.
    pub fn fifo(&self, ino: Ino) -> Option<alloc::sync::Arc<onering_arch::sync::Mutex<crate::pipebuf::PipeBuf>>> {
        match &self.node(ino).data {
            Data::Fifo(p) => Some(p.clone()),
            _ => None,
        }
    }

    /// Creates socket file `name` in `dir`, leading to `target`.
    pub fn mksock(
        &mut self,
        dir: Ino,
        name: &[u8],
        mode: u32,
        now: u64,
        target: alloc::sync::Weak<dyn core::any::Any + Send + Sync>,
    ) -> Result<Ino, Errno> {
        let ino = self.create(dir, name, mode, false, now)?;
        self.node_mut(ino).data = Data::Socket(target);
        Ok(ino)
    }

    /// What socket file `ino` leads to: None if it is no socket file, or its
    /// socket is closed.
    pub fn socket(&self, ino: Ino) -> Option<Option<alloc::sync::Arc<dyn core::any::Any + Send + Sync>>> {
        match &self.node(ino).data {
            Data::Socket(w) => Some(w.upgrade()),
            _ => None,
        }
    }

    /// Creates a symbolic link `name` in `dir` pointing at `target`.
    pub fn symlink(&mut self, dir: Ino, name: &[u8], target: &[u8], now: u64) -> Result<Ino, Errno> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if self.has_entry(dir, name) {
            return Err(Errno::EEXIST);
        }
        self.writable_dir(dir)?;
        if let Some(h) = self.volume_dir(dir)? {
            let ops = self.hostops.ok_or(Errno::EIO)?;
            let (x, st) = ops.symlink(h, name, target)?;
            let ino = self.add_made(dir, name, x, &st, false, now);
            self.node_mut(ino).data = Data::Symlink(target.to_vec());
            self.notify_entry(dir, super::notify::IN_CREATE, 0, name, false);
            return Ok(ino);
        }
        let ino = self.create(dir, name, 0o777, false, now)?;
        if let Err(e) = self.charge(target.len()) {
            let _ = self.remove(dir, name, false);
            return Err(e);
        }
        self.node_mut(ino).data = Data::Symlink(target.to_vec());
        Ok(ino)
    }

    /// Adds a read-only node while building the tree from the rootfs image.
    pub fn add_readonly(&mut self, dir: Ino, name: &[u8], data: Data, mode: u32, mtime: u64) -> Ino {
        let _ = self.load(dir);
        if let Ok(e) = self.entries(dir) {
            if let Some(existing) = e.get(name) {
                return *existing;
            }
        }
        let ino = self.add(dir, name, data, mode, true);
        self.node_mut(ino).mtime = mtime;
        self.node_mut(ino).atime = mtime;
        ino
    }

    /// Removes `name` from `dir`: a file or link (`dir_only` false, `unlink`), or an
    /// empty directory (`dir_only` true, `rmdir`).
    pub fn remove(&mut self, dir: Ino, name: &[u8], dir_only: bool) -> Result<(), Errno> {
        self.entries(dir)?;
        self.load(dir)?;
        if name == b"." || name == b".." {
            return Err(Errno::EINVAL);
        }
        let ino = *self.entries(dir)?.get(name).ok_or(Errno::ENOENT)?;
        self.writable_dir(dir)?;
        if dir_only && self.node(ino).is_dir() {
            // Empty only if its host listing, not read yet, says so too.
            self.load(ino)?;
        }
        match (&self.node(ino).data, dir_only) {
            (Data::Dir(e), true) if !e.is_empty() => return Err(Errno::ENOTEMPTY),
            (Data::Dir(_), false) => return Err(Errno::EISDIR),
            (Data::Dir(_), true) => {}
            (_, true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        if self.node(ino).readonly {
            return Err(Errno::EROFS);
        }
        if let Some(h) = self.volume_dir(dir)? {
            self.hostops.ok_or(Errno::EIO)?.unlink(h, name, dir_only)?;
        }
        if let Data::Dir(e) = &mut self.node_mut(dir).data {
            e.remove(name);
        }
        // (As Linux: the link count's change, the node's end, then the entry's.)
        let is_dir = self.node(ino).is_dir();
        if !is_dir {
            self.notify_self(ino, super::notify::IN_ATTRIB);
        }
        self.unlinked(ino);
        self.notify_entry(dir, super::notify::IN_DELETE, 0, name, is_dir);
        Ok(())
    }

    /// `rename(2)` within the writable part of the tree.
    pub fn rename(&mut self, from_dir: Ino, from: &[u8], to_dir: Ino, to: &[u8]) -> Result<(), Errno> {
        for d in [from_dir, to_dir] {
            self.entries(d)?;
            self.load(d)?;
        }
        let ino = *self.entries(from_dir)?.get(from).ok_or(Errno::ENOENT)?;
        self.entries(to_dir)?;
        if self.node(to_dir).removed {
            return Err(Errno::ENOENT);
        }
        self.writable_dir(from_dir)?;
        self.writable_dir(to_dir)?;
        if self.node(ino).readonly {
            return Err(Errno::EROFS);
        }
        if to.is_empty() || to == b"." || to == b".." {
            return Err(Errno::EINVAL);
        }
        // A directory cannot move into itself.
        let mut p = to_dir;
        loop {
            if p == ino {
                return Err(Errno::EINVAL);
            }
            if p == ROOT {
                break;
            }
            p = self.node(p).parent;
        }
        let replaced = self.entries(to_dir)?.get(to).copied();
        if let Some(old) = replaced {
            if old == ino {
                return Ok(());
            }
            if self.node(ino).is_dir() && self.node(old).is_dir() {
                // Empty only if its host listing, not read yet, says so too.
                self.load(old)?;
            }
            match (self.node(ino).is_dir(), &self.node(old).data) {
                (true, Data::Dir(e)) if !e.is_empty() => return Err(Errno::ENOTEMPTY),
                (true, Data::Dir(_)) => {}
                (true, _) => return Err(Errno::ENOTDIR),
                (false, Data::Dir(_)) => return Err(Errno::EISDIR),
                _ => {}
            }
        }
        self.host_move(ino, from_dir, from, to_dir, to)?;
        if let Data::Dir(e) = &mut self.node_mut(from_dir).data {
            e.remove(from);
        }
        if let Data::Dir(e) = &mut self.node_mut(to_dir).data {
            e.insert(to.to_vec(), ino);
        }
        self.node_mut(ino).parent = to_dir;
        self.notify_rename(ino, (from_dir, from), (to_dir, to), replaced);
        if let Some(old) = replaced {
            self.unlinked(old);
        }
        Ok(())
    }

    /// The host's side of moving `ino` (named `from` in `from_dir`) to `to` in
    /// `to_dir`: within one volume, a rename on the host; out of the rootfs, a file
    /// is copied up and a directory keeps its handle (its entries are looked up
    /// by it); across mounts, EXDEV.
    fn host_move(&mut self, ino: Ino, from_dir: Ino, from: &[u8], to_dir: Ino, to: &[u8]) -> Result<(), Errno> {
        use super::host::Layer;
        let (a, b) = (self.volume_dir(from_dir)?, self.volume_dir(to_dir)?);
        match (a, b) {
            (Some(x), Some(y)) => {
                self.hostops.ok_or(Errno::EIO)?.rename(false, x, from, y, to)?;
                if let Some(h) = self.node_mut(ino).host.as_mut() {
                    h.name = to.to_vec();
                }
                // (A replaced entry is gone on the host too.)
                Ok(())
            }
            (None, None) => {
                if self.layer(ino) == Some(Layer::Rootfs) {
                    if self.node(ino).is_dir() {
                        self.handle_of(ino)?;
                        if let Some(h) = self.node_mut(ino).host.as_mut() {
                            h.root = true; // (keeps its handle: its name is no longer its host name)
                        }
                    } else {
                        self.copy_up(ino)?;
                        if matches!(self.node(ino).data, Data::Symlink(_)) {
                            self.load(ino)?;
                            self.node_mut(ino).host = None;
                        }
                    }
                }
                Ok(())
            }
            _ => Err(Errno::EXDEV),
        }
    }

    /// Reads file bytes at `offset` into `buf`; returns how many.
    pub fn read(&self, ino: Ino, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut done = 0;
        self.read_with(ino, offset, buf.len(), |piece| {
            buf[done..done + piece.len()].copy_from_slice(piece);
            done += piece.len();
            Ok(())
        })
    }

    /// Hands the bytes of file `ino` from `offset` (at most `len`) to `out`, piece
    /// by piece in order (holes as zeros), without copying them first; how many.
    pub fn read_with(
        &self,
        ino: Ino,
        offset: u64,
        len: usize,
        mut out: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        match &self.node(ino).data {
            Data::File(p) => p.each(offset, len, |chunk, at, n| match chunk {
                Some(c) => out(&c[at..at + n]),
                None => out(&ZEROS[..n]),
            }),
            // (Only cached chunks: the caller fetched the rest, see `read_plan`.)
            Data::HostFile(p) => p.each(offset, len, |chunk, at, n| match chunk {
                Some(c) => out(&c[at..at + n]),
                None => Err(Errno::EIO),
            }),
            Data::Static(s) => {
                let start = offset.min(s.len() as u64) as usize;
                let n = len.min(s.len() - start);
                out(&s[start..start + n])?;
                Ok(n)
            }
            Data::Dir(_) => Err(Errno::EISDIR),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Writes `data` at `offset`, growing the file (holes read as zeros).
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8], now: u64) -> Result<usize, Errno> {
        self.write_with(ino, offset, data.len(), now, |at, dst| {
            dst.copy_from_slice(&data[at..at + dst.len()]);
            Ok(())
        })
    }

    /// Writes `len` bytes at `offset`, filled in place piece by piece by
    /// `fill(offset in the data, destination)` (a copy from user memory), growing
    /// the file. The memory new chunks take is charged to the tree's budget first
    /// (ENOSPC past it). When the heap has no block for a new chunk, the page
    /// cache gives back clean chunks (oldest first) and the write is tried again;
    /// ENOSPC once it has none left. If `fill` fails, the file is as it was in size.
    pub fn write_with(
        &mut self,
        ino: Ino,
        offset: u64,
        len: usize,
        now: u64,
        mut fill: impl FnMut(usize, &mut [u8]) -> Result<(), Errno>,
    ) -> Result<usize, Errno> {
        let end = offset.checked_add(len as u64).filter(|e| *e <= MAX_FILE).ok_or(Errno::EFBIG)?;
        let p = self.pages(ino)?;
        let old = p.len();
        let first = (offset / CHUNK as u64) as usize;
        let last = end.div_ceil(CHUNK as u64) as usize;
        let new = (first..last).filter(|i| !p.has(*i)).count() * CHUNK;
        let before = p.footprint();
        self.charge(new)?;
        let mut r = self.pages_mut(ino)?.write_with(offset, len, &mut fill);
        while r == Err(Errno::ENOSPC) && self.shrink_cache(new.max(CHUNK)) > 0 {
            let p = self.pages_mut(ino)?;
            p.set_len(old);
            r = p.write_with(offset, len, &mut fill);
        }
        let p = self.pages_mut(ino)?;
        if r.is_err() {
            p.set_len(old);
        }
        let after = p.footprint();
        self.used = (self.used + after).saturating_sub(before + new);
        self.node_mut(ino).mtime = now;
        r
    }

    fn pages(&self, ino: Ino) -> Result<&super::pages::Pages, Errno> {
        match &self.node(ino).data {
            Data::File(p) => Ok(p),
            Data::Dir(_) => Err(Errno::EISDIR),
            Data::Static(_) => Err(Errno::EROFS),
            _ => Err(Errno::EINVAL),
        }
    }

    fn pages_mut(&mut self, ino: Ino) -> Result<&mut super::pages::Pages, Errno> {
        match &mut self.node_mut(ino).data {
            Data::File(p) => Ok(p),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Sets a file's length (growing makes a hole: no memory).
    pub fn truncate(&mut self, ino: Ino, len: u64, now: u64) -> Result<(), Errno> {
        if len > MAX_FILE {
            return Err(Errno::EFBIG);
        }
        if matches!(self.node(ino).data, Data::HostFile(_)) {
            if self.node(ino).readonly {
                return Err(Errno::EROFS);
            }
            if self.layer(ino) != Some(super::host::Layer::Rootfs) {
                self.host_truncate(ino, len)?;
                self.node_mut(ino).mtime = now;
                self.notify_node(ino, super::notify::IN_MODIFY);
                return Ok(());
            }
            self.copy_up(ino)?;
        }
        let before = self.pages(ino)?.footprint();
        let p = self.pages_mut(ino)?;
        p.set_len(len);
        let after = p.footprint();
        self.used = (self.used + after).saturating_sub(before);
        self.node_mut(ino).mtime = now;
        self.notify_node(ino, super::notify::IN_MODIFY);
        Ok(())
    }

    /// The entries of directory `dir` from number `pos` on ("." and ".." first),
    /// without copying.
    pub fn entries_from(&self, dir: Ino, pos: usize) -> Result<impl Iterator<Item = (&[u8], Ino)>, Errno> {
        let e = self.entries(dir)?;
        let dots = [(&b"."[..], dir), (&b".."[..], self.node(dir).parent)];
        Ok(dots.into_iter().chain(e.iter().map(|(n, i)| (n.as_slice(), *i))).skip(pos))
    }

    /// The directory entries of `dir`, "." and ".." first: (name, inode).
    #[cfg(test)]
    pub fn list(&self, dir: Ino) -> Result<Vec<(Vec<u8>, Ino)>, Errno> {
        let e = self.entries(dir)?;
        let mut out = Vec::with_capacity(e.len() + 2);
        out.push((b".".to_vec(), dir));
        out.push((b"..".to_vec(), self.node(dir).parent));
        out.extend(e.iter().map(|(n, i)| (n.clone(), *i)));
        Ok(out)
    }

    /// The absolute path of directory `ino`; ENOENT if it (or a parent) was removed.
    pub fn path_of(&self, mut ino: Ino) -> Result<Vec<u8>, Errno> {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        while ino != ROOT {
            let parent = self.node(ino).parent;
            let name =
                self.entries(parent).ok().and_then(|e| e.iter().find(|(_, i)| **i == ino).map(|(n, _)| n.clone()));
            match name {
                Some(n) if !self.node(ino).removed => parts.push(n),
                _ => return Err(Errno::ENOENT), // removed while in use
            }
            ino = parent;
        }
        if parts.is_empty() {
            return Ok(b"/".to_vec());
        }
        let mut out = Vec::new();
        for p in parts.iter().rev() {
            out.push(b'/');
            out.extend_from_slice(p);
        }
        Ok(out)
    }

    pub fn device(&self, ino: Ino) -> Option<Device> {
        match self.node(ino).data {
            Data::Device(d) => Some(d),
            _ => None,
        }
    }

    /// A symbolic link's target.
    pub fn link_target(&self, ino: Ino) -> Result<&[u8], Errno> {
        match &self.node(ino).data {
            Data::Symlink(t) => Ok(t),
            _ => Err(Errno::EINVAL),
        }
    }
}

/// Largest file in /tmp (bounded by guest memory anyway).
const MAX_FILE: u64 = 1 << 34;
/// What a hole reads as.
static ZEROS: [u8; CHUNK] = [0; CHUNK];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_tmp_exist() {
        let mut v = Vfs::new();
        let null = v.lookup(ROOT, b"/dev/null", true).unwrap();
        assert_eq!(v.device(null), Some(Device::Null));
        let tmp = v.lookup(ROOT, b"/tmp/", true).unwrap();
        assert!(v.node(tmp).is_dir());
        assert_eq!(v.lookup(ROOT, b"/dev/null/", true), Err(Errno::ENOTDIR));
        assert_eq!(v.lookup(ROOT, b"/nope", true), Err(Errno::ENOENT));
        assert_eq!(v.lookup(ROOT, b"", true), Err(Errno::ENOENT));
        assert_eq!(v.lookup(tmp, b"../dev/./zero", true).map(|i| v.device(i)), Ok(Some(Device::Zero)));
    }

    #[test]
    fn files_in_tmp() {
        let mut v = Vfs::new();
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        let f = v.create(tmp, b"a", 0o644, false, 1).unwrap();
        assert_eq!(v.create(tmp, b"a", 0o644, false, 1), Err(Errno::EEXIST));
        assert_eq!(v.write(f, 4, b"xy", 2), Ok(2));
        let mut buf = [9u8; 10];
        assert_eq!(v.read(f, 0, &mut buf), Ok(6));
        assert_eq!(&buf[..6], b"\0\0\0\0xy");
        assert_eq!(v.read(f, 100, &mut buf), Ok(0));
        v.truncate(f, 1, 3).unwrap();
        assert_eq!(v.node(f).size(), 1);
        let d = v.create(tmp, b"d", 0o755, true, 1).unwrap();
        assert_eq!(v.path_of(d).unwrap(), b"/tmp/d");
        v.rename(tmp, b"a", d, b"b").unwrap();
        assert_eq!(v.lookup(ROOT, b"/tmp/d/b", true), Ok(f));
        assert_eq!(v.remove(tmp, b"d", true), Err(Errno::ENOTEMPTY));
        assert_eq!(v.remove(tmp, b"d", false), Err(Errno::EISDIR));
        assert_eq!(v.rename(tmp, b"d", d, b"inside"), Err(Errno::EINVAL));
        v.remove(d, b"b", false).unwrap();
        v.remove(tmp, b"d", true).unwrap();
        assert_eq!(v.lookup(ROOT, b"/tmp/d", true), Err(Errno::ENOENT));
    }

    #[test]
    fn removed_files_are_freed_when_closed_and_the_budget_holds() {
        let mut v = Vfs::new();
        v.set_limit(200 * 1024);
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        let big = alloc::vec![1u8; 100 * 1024]; // (two chunks)
        for round in 0..10 {
            let f = v.create(tmp, b"f", 0o644, false, 0).unwrap();
            let open = v.hold(f);
            v.write(f, 0, &big, 0).unwrap();
            v.remove(tmp, b"f", false).unwrap();
            // Still open: still readable, and still counted.
            let mut b = [0u8; 4];
            assert_eq!(v.read(f, 0, &mut b), Ok(4), "round {round}");
            assert_eq!(v.create(tmp, b"g", 0o644, false, 0).map(|g| v.write(g, 0, &big, 0)), Ok(Err(Errno::ENOSPC)));
            v.remove(tmp, b"g", false).unwrap();
            drop(open);
        }
        let f = v.create(tmp, b"h", 0o644, false, 0).unwrap();
        assert_eq!(v.write(f, 1 << 20, &[1u8; 300 * 1024], 0), Err(Errno::ENOSPC));
        assert_eq!(v.node(f).size(), 0, "nothing went in");
        // A hole costs nothing: a sparse file far larger than the budget.
        v.truncate(f, 1 << 30, 0).unwrap();
        assert_eq!(v.write(f, (1 << 30) - 1, b"x", 0), Ok(1));
        v.truncate(f, 0, 0).unwrap();
    }

    #[test]
    fn a_removed_directory_takes_nothing_new() {
        let mut v = Vfs::new();
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        let d = v.create(tmp, b"d", 0o755, true, 0).unwrap();
        let _cwd = v.hold(d);
        v.remove(tmp, b"d", true).unwrap();
        assert_eq!(v.create(d, b"x", 0o644, false, 0), Err(Errno::ENOENT));
        assert_eq!(v.path_of(d), Err(Errno::ENOENT));
        assert_eq!(v.path_of(tmp).unwrap(), b"/tmp");
    }

    #[test]
    fn read_only_parts_refuse_changes() {
        let mut v = Vfs::new();
        assert_eq!(v.create(ROOT, b"x", 0o644, false, 0), Err(Errno::EROFS));
        static DATA: &[u8] = b"hello";
        let etc = v.add_readonly(ROOT, b"etc", Data::Dir(BTreeMap::new()), 0o755, 0);
        let f = v.add_readonly(etc, b"motd", Data::Static(DATA), 0o644, 0);
        assert_eq!(v.write(f, 0, b"x", 0), Err(Errno::EROFS));
        assert_eq!(v.remove(etc, b"motd", false), Err(Errno::EROFS));
        let mut b = [0u8; 8];
        assert_eq!(v.read(f, 1, &mut b), Ok(4));
    }

    #[test]
    fn symlinks_resolve_and_loops_stop() {
        let mut v = Vfs::new();
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        v.add_readonly(ROOT, b"t", Data::Symlink(b"/tmp".to_vec()), 0o777, 0);
        v.add_readonly(ROOT, b"loop", Data::Symlink(b"/loop".to_vec()), 0o777, 0);
        assert_eq!(v.lookup(ROOT, b"/t", true), Ok(tmp));
        assert_ne!(v.lookup(ROOT, b"/t", false), Ok(tmp));
        assert_eq!(v.lookup(ROOT, b"/t/", false), Ok(tmp));
        assert_eq!(v.lookup(ROOT, b"/loop", true), Err(Errno::ELOOP));
        let long = alloc::vec![b'a'; PATH_MAX];
        assert_eq!(v.lookup(ROOT, &long, true), Err(Errno::ENAMETOOLONG));
    }

    #[test]
    fn parent_of_splits_paths() {
        let mut v = Vfs::new();
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        assert_eq!(v.parent_of(ROOT, b"/tmp/new"), Ok((tmp, &b"new"[..])));
        assert_eq!(v.parent_of(tmp, b"new/"), Ok((tmp, &b"new"[..])));
        assert_eq!(v.parent_of(ROOT, b"/x"), Ok((ROOT, &b"x"[..])));
        assert_eq!(v.parent_of(ROOT, b"/nope/x"), Err(Errno::ENOENT));
        assert_eq!(v.parent_of(ROOT, b"/dev/null/x"), Err(Errno::ENOTDIR));
    }

    #[test]
    fn hard_links_and_attributes() {
        let mut v = Vfs::new();
        v.set_owner(1000, 100);
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        let a = v.create(tmp, b"a", 0o644, false, 5).unwrap();
        assert_eq!((v.node(a).uid, v.node(a).gid, v.node(a).atime), (1000, 100, 5));
        v.link(a, tmp, b"b").unwrap();
        assert_eq!(v.link(a, tmp, b"b"), Err(Errno::EEXIST));
        assert_eq!(v.link(tmp, tmp, b"c"), Err(Errno::EPERM), "no links to directories");
        assert_eq!(v.node(a).nlink, 2);
        v.remove(tmp, b"a", false).unwrap();
        assert_eq!(v.lookup(tmp, b"b", true), Ok(a), "the other name still works");
        assert!(!v.node(a).removed);
        v.remove(tmp, b"b", false).unwrap();
        assert_eq!(v.lookup(tmp, b"b", true), Err(Errno::ENOENT));
        let c = v.create(tmp, b"c", 0o600, false, 0).unwrap();
        v.set_mode(c, 0o4755).unwrap();
        v.set_owner_of(c, None, Some(7)).unwrap();
        v.set_times(c, Some(1), None).unwrap();
        let n = v.node(c);
        assert_eq!((n.st_mode() & 0o7777, n.uid, n.gid, n.atime, n.mtime), (0o4755, 1000, 7, 1, 0));
        assert_eq!(v.set_mode(ROOT, 0o700), Err(Errno::EROFS));
    }
}
