//! Builds the read-only part of the file tree from the `--rootfs` image the VMM
//! wrote (format: `onering_abi::rootfs`). File contents are not copied: nodes point
//! into the image. A malformed image stops the parse at the bad record.

use super::tree::{Data, Vfs, ROOT};
use alloc::collections::BTreeMap;
use onering_abi::rootfs::{Header, DIR, FILE, HEADER_SIZE, SYMLINK};

/// Adds every record of `image` to `vfs`; returns how many were added.
pub fn load(vfs: &mut Vfs, image: &'static [u8]) -> usize {
    let mut at = 0usize;
    let mut added = 0;
    while let Some(h) = image.get(at..).and_then(Header::from_bytes) {
        let Some(len) = h.record_len() else { break };
        let Some(record) = image.get(at..at.saturating_add(len)) else {
            break;
        };
        let path_end = HEADER_SIZE + h.path_len as usize;
        let path = &record[HEADER_SIZE..path_end];
        let data: &'static [u8] = &image[at + path_end..at + path_end + h.data_len as usize];
        at += len;
        let Ok((dir, name)) = vfs.parent_of(ROOT, path) else {
            continue;
        };
        if name.is_empty() {
            continue;
        }
        let node = match h.kind {
            DIR => Data::Dir(BTreeMap::new()),
            FILE => Data::Static(data),
            SYMLINK => Data::Symlink(data.to_vec()),
            _ => continue,
        };
        vfs.add_readonly(dir, name, node, h.mode & 0o7777, h.mtime_ns);
        added += 1;
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn record(out: &mut Vec<u8>, kind: u32, path: &[u8], data: &[u8]) {
        let h = Header { kind, mode: 0o644, mtime_ns: 7, path_len: path.len() as u32, data_len: data.len() as u64 };
        out.extend(h.to_bytes());
        out.extend(path);
        out.extend(data);
        out.resize(out.len().next_multiple_of(8), 0);
    }

    #[test]
    fn builds_the_tree() {
        let mut img = Vec::new();
        record(&mut img, DIR, b"etc", b"");
        record(&mut img, FILE, b"etc/hostname", b"onering\n");
        record(&mut img, SYMLINK, b"etc/name", b"hostname");
        record(&mut img, FILE, b"missing/dir/file", b"x"); // parent absent: skipped
        let img: &'static [u8] = Vec::leak(img);
        let mut v = Vfs::new();
        assert_eq!(load(&mut v, img), 3);
        let f = v.lookup(ROOT, b"/etc/name", true).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(v.read(f, 0, &mut buf), Ok(8));
        assert_eq!(&buf[..8], b"onering\n");
        // A truncated image stops cleanly.
        let cut: &'static [u8] = &img[..img.len() - 9];
        let mut v = Vfs::new();
        assert_eq!(load(&mut v, cut), 3, "the cut record is dropped");
    }
}
