//! `--rootfs FILE.tar`: the archive served in place (the seed's tarfs). At start
//! the headers are read once (the `tar` crate, seeking over file data, so a 1 GiB
//! archive of few files indexes in milliseconds) into a tree of nodes; a file's
//! bytes are then read from the archive at their offset when the guest asks.
//! Names are the archive's, cleaned: leading `/` and `./` dropped, an entry with a
//! `..` component skipped (nothing can be placed outside the root). Hard links
//! share their target's bytes; devices, FIFOs and the like are left out, as for a
//! directory rootfs. Everything is read-only to the host (changes stay in the VM).
//! A gzip- or zstd-compressed archive (`.tar.gz`, `.tgz`, `.tar.zst`, known by its
//! magic bytes) cannot be read at an offset, so it is first decompressed (`flate2`,
//! `ruzstd`: pure Rust) into an unnamed temporary file (`O_TMPFILE` in the host's
//! temporary directory, gone when the VMM exits) and served from there: its start
//! costs the decompression, as a container engine pays it when it pulls a layer.

use onering_abi::HostStat;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

const S_IFDIR: u64 = 0o040000;
const S_IFREG: u64 = 0o100000;
const S_IFLNK: u64 = 0o120000;

/// One entry of the archive.
pub struct Node {
    pub stat: HostStat,
    /// Where a file's bytes start in the archive.
    pub data: u64,
    /// A link's target.
    pub target: Vec<u8>,
    pub children: BTreeMap<Vec<u8>, usize>,
}

/// An archive's tree; node 0 is its root.
pub struct TarIndex {
    /// The archive (shared by every handle on its entries).
    pub file: std::sync::Arc<File>,
    pub nodes: Vec<Node>,
}

fn node(mode: u64, ino: usize) -> Node {
    Node {
        stat: HostStat { mode, ino: ino as u64 + 1, nlink: 1, blksize: 4096, ..HostStat::default() },
        data: 0,
        target: Vec::new(),
        children: BTreeMap::new(),
    }
}

/// The archive at `path` as a file that can be read at any offset: itself, or, if
/// it is gzip- or zstd-compressed, its contents in an unnamed temporary file.
fn uncompressed(path: &Path) -> std::io::Result<File> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 4];
    let n = file.read(&mut magic)?;
    file.seek(SeekFrom::Start(0))?;
    let gzip = n >= 2 && magic[..2] == [0x1f, 0x8b];
    let zstd = n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd];
    if !gzip && !zstd {
        return Ok(file);
    }
    let mut out = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(std::env::temp_dir())?;
    let mut src = BufReader::new(file);
    if gzip {
        std::io::copy(&mut flate2::read::MultiGzDecoder::new(src), &mut out)?;
    } else {
        // One zstd frame after another until the file ends.
        while !src.fill_buf()?.is_empty() {
            let mut frame = ruzstd::decoding::StreamingDecoder::new(&mut src)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("zstd: {e}")))?;
            std::io::copy(&mut frame, &mut out)?;
        }
    }
    out.seek(SeekFrom::Start(0))?;
    Ok(out)
}

impl TarIndex {
    /// Reads the headers of archive `path`.
    pub fn open(path: &Path) -> std::io::Result<TarIndex> {
        let file = uncompressed(path)?;
        let mut index =
            TarIndex { file: std::sync::Arc::new(file.try_clone()?), nodes: vec![node(S_IFDIR | 0o755, 0)] };
        let mut archive = tar::Archive::new(file);
        for entry in archive.entries_with_seek()? {
            let entry = entry?;
            let h = entry.header();
            let parts: Vec<Vec<u8>> = entry
                .path_bytes()
                .split(|b| *b == b'/')
                .filter(|p| !p.is_empty() && *p != b".")
                .map(<[u8]>::to_vec)
                .collect();
            if parts.iter().any(|p| p == b"..") || parts.is_empty() {
                continue;
            }
            let mode = u64::from(h.mode().unwrap_or(0o644) & 0o7777);
            let kind = match h.entry_type() {
                tar::EntryType::Directory => S_IFDIR,
                tar::EntryType::Regular | tar::EntryType::Continuous => S_IFREG,
                tar::EntryType::Symlink => S_IFLNK,
                tar::EntryType::Link => {
                    // A hard link: its target's node under a second name.
                    let target = entry.link_name_bytes().map(|t| t.to_vec()).unwrap_or_default();
                    if let Some(t) = index.find(&target) {
                        let (dir, name) = index.parent_for(&parts);
                        index.nodes[dir].children.insert(name, t);
                        index.nodes[t].stat.nlink += 1;
                    }
                    continue;
                }
                _ => continue,
            };
            let (dir, name) = index.parent_for(&parts);
            let at = match index.nodes[dir].children.get(&name) {
                // (A later entry of the same name wins, as tar extracts; a
                // directory keeps its children.)
                Some(&i) => i,
                None => {
                    let i = index.nodes.len();
                    index.nodes.push(node(0, i));
                    index.nodes[dir].children.insert(name, i);
                    i
                }
            };
            let n = &mut index.nodes[at];
            n.stat.mode = kind | mode;
            n.stat.uid = h.uid().unwrap_or(0);
            n.stat.gid = h.gid().unwrap_or(0);
            let t = h.mtime().unwrap_or(0);
            (n.stat.mtime_sec, n.stat.atime_sec, n.stat.ctime_sec) = (t, t, t);
            if kind == S_IFREG {
                n.stat.size = entry.size();
                n.stat.blocks = entry.size().div_ceil(512);
                n.data = entry.raw_file_position();
            } else if kind == S_IFLNK {
                n.target = entry.link_name_bytes().map(|t| t.to_vec()).unwrap_or_default();
                n.stat.size = n.target.len() as u64;
            }
        }
        Ok(index)
    }

    /// The directory that holds `parts` (made as needed) and the last name.
    fn parent_for(&mut self, parts: &[Vec<u8>]) -> (usize, Vec<u8>) {
        let mut at = 0;
        for p in &parts[..parts.len() - 1] {
            at = match self.nodes[at].children.get(p) {
                Some(&i) if self.nodes[i].stat.mode & 0o170000 == S_IFDIR => i,
                _ => {
                    let i = self.nodes.len();
                    self.nodes.push(node(S_IFDIR | 0o755, i));
                    self.nodes[at].children.insert(p.clone(), i);
                    i
                }
            };
        }
        (at, parts[parts.len() - 1].clone())
    }

    /// The node at archive path `path` (no links followed).
    fn find(&self, path: &[u8]) -> Option<usize> {
        let mut at = 0;
        for p in path.split(|b| *b == b'/').filter(|p| !p.is_empty() && *p != b".") {
            at = *self.nodes[at].children.get(p)?;
        }
        Some(at)
    }

    /// The node at absolute `path`, following symbolic links inside the archive
    /// (at most 40), `..` stopping at the root.
    pub fn resolve(&self, path: &[u8]) -> Option<usize> {
        let mut todo: Vec<Vec<u8>> = path.split(|b| *b == b'/').rev().map(<[u8]>::to_vec).collect();
        let mut at: Vec<usize> = vec![0];
        let mut links = 0;
        while let Some(name) = todo.pop() {
            match &name[..] {
                b"" | b"." => continue,
                b".." => {
                    if at.len() > 1 {
                        at.pop();
                    }
                    continue;
                }
                _ => {}
            }
            let here = *at.last()?;
            let next = *self.nodes[here].children.get(&name)?;
            if self.nodes[next].stat.mode & 0o170000 == S_IFLNK {
                links += 1;
                if links > 40 {
                    return None;
                }
                let t = &self.nodes[next].target;
                if t.first() == Some(&b'/') {
                    at.truncate(1);
                }
                todo.extend(t.split(|b| *b == b'/').rev().map(<[u8]>::to_vec));
            } else {
                at.push(next);
            }
        }
        at.last().copied()
    }

    /// Up to `buf.len()` bytes of file `n` from `offset`: how many.
    pub fn read(&self, n: usize, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let node = &self.nodes[n];
        let left = node.stat.size.saturating_sub(offset);
        let len = (buf.len() as u64).min(left) as usize;
        if len == 0 {
            return Ok(0);
        }
        self.file.read_at(&mut buf[..len], node.data + offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test archive: a file, a link to it, and an entry named `../../escape`.
    fn archive() -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(6);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, "./etc/hostname", &b"hello\n"[..]).unwrap();
        let mut l = tar::Header::new_gnu();
        l.set_entry_type(tar::EntryType::Symlink);
        l.set_size(0);
        b.append_link(&mut l, "etc/name", "hostname").unwrap();
        let mut e = tar::Header::new_gnu();
        e.set_size(1);
        e.set_entry_type(tar::EntryType::Regular);
        // (A name with `..` is skipped; the builder refuses to write one, so
        // the header's bytes are set directly.)
        e.as_gnu_mut().unwrap().name[..12].copy_from_slice(b"../../escape");
        e.set_cksum();
        b.append(&e, &b"x"[..]).unwrap();
        b.into_inner().unwrap()
    }

    /// The same archive plain, gzip-compressed and zstd-compressed (in two
    /// frames) becomes the same tree.
    #[test]
    fn an_archive_becomes_a_tree_compressed_or_not() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("onering-tar-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = archive();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let (a, b) = plain.split_at(plain.len() / 3);
        let level = ruzstd::encoding::CompressionLevel::Fastest;
        let zst = [ruzstd::encoding::compress_to_vec(a, level), ruzstd::encoding::compress_to_vec(b, level)].concat();
        for (name, bytes) in [("t.tar", plain.clone()), ("t.tar.gz", gz.finish().unwrap()), ("t.tar.zst", zst)] {
            let path = dir.join(name);
            std::fs::write(&path, &bytes).unwrap();
            let t = TarIndex::open(&path).unwrap();
            let etc = t.nodes[0].children[&b"etc"[..]];
            let f = t.nodes[etc].children[&b"hostname"[..]];
            let mut buf = [0u8; 16];
            assert_eq!(t.read(f, 0, &mut buf).unwrap(), 6, "{name}");
            assert_eq!(&buf[..6], b"hello\n");
            assert_eq!(t.read(f, 4, &mut buf).unwrap(), 2);
            let l = t.nodes[etc].children[&b"name"[..]];
            assert_eq!(t.nodes[l].target, b"hostname");
            assert_eq!(t.nodes[0].children.len(), 1, "the .. entry was skipped");
        }
        std::fs::write(dir.join("bad.tar.gz"), [0x1f, 0x8b, 0, 1, 2, 3]).unwrap();
        assert!(TarIndex::open(&dir.join("bad.tar.gz")).is_err(), "a broken gzip stream is an error");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
