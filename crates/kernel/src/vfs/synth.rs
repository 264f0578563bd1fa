//! Synthetic subtrees: /proc and /sys are ordinary read-only nodes of the tree
//! (directories, symbolic links, and `Data::Generated` files whose bytes are made
//! when they are read, by `fs::proc`), so every path call (stat, lstat, readlink,
//! getdents, open, access, chdir) works on them unchanged. What they hold follows
//! the kernel's state (the processes, their descriptors and threads): the layer
//! that knows that state describes the subtree it wants as a [`Spec`], and
//! [`Vfs::sync`] makes the tree match, keeping the nodes that stay (and so their
//! inode numbers), adding what is new and dropping what went.

use super::tree::{Data, Ino, Vfs, ROOT};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// The entries a synthetic directory should have, by name.
pub type Entries = BTreeMap<Vec<u8>, Spec>;

/// One node of a synthetic subtree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    Dir(Entries),
    /// A generated file (mode 0444, or 0644 for the tunables of /proc/sys).
    File(u32),
    Link(Vec<u8>),
}

impl Spec {
    /// Whether node data `d` is of this kind (a node of another kind is replaced).
    fn fits(&self, d: &Data) -> bool {
        matches!(
            (self, d),
            (Spec::Dir(_), Data::Dir(_)) | (Spec::File(_), Data::Generated) | (Spec::Link(_), Data::Symlink(_))
        )
    }

    fn node(&self) -> (Data, u32) {
        match self {
            Spec::Dir(_) => (Data::Dir(BTreeMap::new()), 0o555),
            Spec::File(mode) => (Data::Generated, *mode),
            Spec::Link(t) => (Data::Symlink(t.clone()), 0o777),
        }
    }
}

impl Vfs {
    /// The directory `name` of the root where a synthetic subtree goes, made if
    /// missing. Made at boot before the rootfs is read, it hides the rootfs's own
    /// (empty) directory of that name: the tree's entries win over the image's and
    /// over a host root's listing.
    pub fn synth_root(&mut self, name: &[u8]) -> Ino {
        match self.entry_of(ROOT, name) {
            Some(ino) if self.node(ino).is_dir() && self.node(ino).host.is_none() => ino,
            _ => self.add_readonly(ROOT, name, Data::Dir(BTreeMap::new()), 0o555, 0),
        }
    }

    /// Whether `ino` is, or is under, one of the root's synthetic directories
    /// `roots` (made by [`Vfs::synth_root`]).
    pub fn in_synth<const N: usize>(&self, mut ino: Ino, roots: [&[u8]; N]) -> bool {
        let roots = roots.map(|n| self.entry_of(ROOT, n));
        while ino != ROOT {
            if roots.contains(&Some(ino)) {
                return true;
            }
            ino = self.node(ino).parent;
        }
        false
    }

    /// The path of `ino` if it is a live node of this tree (a descriptor of a
    /// kernel of another host test names a node of its own tree).
    pub fn live_path(&mut self, ino: Ino) -> Option<Vec<u8>> {
        self.nodes_get_mut(ino)?;
        self.path_of(ino).ok()
    }

    /// Makes directory `dir`'s entries what `want` says: entries not wanted (or of
    /// another kind) go with everything under them, missing ones are added (times
    /// `now`), links get their target; subdirectories are synced in turn.
    pub fn sync(&mut self, dir: Ino, want: &Entries, now: u64) {
        let Ok(have) = self.entries_from(dir, 2) else { return };
        let stale: Vec<(Vec<u8>, Ino)> = have
            .filter(|(name, ino)| !want.get(*name).is_some_and(|s| s.fits(&self.node(*ino).data)))
            .map(|(name, ino)| (name.to_vec(), ino))
            .collect();
        for (name, ino) in stale {
            self.drop_tree(dir, &name, ino);
        }
        for (name, spec) in want {
            let ino = match self.entry_of(dir, name) {
                Some(ino) => ino,
                None => {
                    let (data, mode) = spec.node();
                    self.add_readonly(dir, name, data, mode, now)
                }
            };
            match spec {
                Spec::Dir(sub) => self.sync(ino, sub, now),
                Spec::Link(t) if self.link_target(ino).is_ok_and(|old| old != t.as_slice()) => {
                    self.node_mut(ino).data = Data::Symlink(t.clone());
                }
                _ => {}
            }
        }
    }

    /// Takes entry `name` (node `ino`) of `dir` out, and everything under it.
    fn drop_tree(&mut self, dir: Ino, name: &[u8], ino: Ino) {
        let children: Vec<(Vec<u8>, Ino)> =
            self.entries_from(ino, 2).map(|c| c.map(|(n, i)| (n.to_vec(), i)).collect()).unwrap_or_default();
        for (n, i) in children {
            self.drop_tree(ino, &n, i);
        }
        self.drop_entry(dir, name, ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(entries: &[(&str, Spec)]) -> Entries {
        entries.iter().map(|(n, s)| (n.as_bytes().to_vec(), s.clone())).collect()
    }

    #[test]
    fn sync_adds_keeps_and_drops() {
        let mut v = Vfs::new();
        let proc = v.synth_root(b"proc");
        assert_eq!(v.synth_root(b"proc"), proc, "made once");
        let tmp = v.lookup(ROOT, b"/tmp", true).unwrap();
        assert!(v.in_synth(proc, [b"sys", b"proc"]) && !v.in_synth(tmp, [b"proc"]) && !v.in_synth(ROOT, [b"proc"]));
        let fd = |targets: &[(&str, &str)]| {
            Spec::Dir(targets.iter().map(|(n, t)| (n.as_bytes().to_vec(), Spec::Link(t.as_bytes().to_vec()))).collect())
        };
        let want = dir(&[
            ("self", Spec::Link(b"1".to_vec())),
            ("1", Spec::Dir(dir(&[("stat", Spec::File(0o444)), ("fd", fd(&[("0", "/dev/null")]))]))),
        ]);
        v.sync(proc, &want, 5);
        let stat = v.lookup(ROOT, b"/proc/self/stat", true).unwrap();
        assert!(matches!(v.node(stat).data, Data::Generated));
        assert_eq!(v.node(stat).st_mode(), 0o100444);
        assert!(v.node(stat).readonly);
        let zero = v.lookup(ROOT, b"/proc/1/fd/0", false).unwrap();
        assert_eq!(v.link_target(zero), Ok(&b"/dev/null"[..]));
        // Again with another descriptor and a changed target: the stat file keeps
        // its node, fd 0 its node with the new target, fd 3 is new.
        let want = dir(&[
            ("self", Spec::Link(b"1".to_vec())),
            ("1", Spec::Dir(dir(&[("stat", Spec::File(0o444)), ("fd", fd(&[("0", "/tmp/x"), ("3", "pipe:[4]")]))]))),
        ]);
        v.sync(proc, &want, 6);
        assert_eq!(v.lookup(ROOT, b"/proc/1/stat", true), Ok(stat));
        assert_eq!(v.lookup(ROOT, b"/proc/1/fd/0", false), Ok(zero));
        assert_eq!(v.link_target(zero), Ok(&b"/tmp/x"[..]));
        assert!(v.lookup(ROOT, b"/proc/1/fd/3", false).is_ok());
        // The process goes: its whole directory does.
        v.sync(proc, &dir(&[("self", Spec::Link(b"2".to_vec()))]), 7);
        assert_eq!(v.lookup(ROOT, b"/proc/1/stat", false), Err(crate::errno::Errno::ENOENT));
        assert_eq!(v.list(proc).unwrap().len(), 3);
        // Nothing can be made or removed there.
        assert_eq!(v.create(proc, b"x", 0o644, false, 0), Err(crate::errno::Errno::EROFS));
        assert_eq!(v.remove(proc, b"self", false), Err(crate::errno::Errno::EROFS));
    }
}
