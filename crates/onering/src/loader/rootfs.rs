//! `--rootfs DIR`: flattens a host directory into the image format of
//! `onering_abi::rootfs`, which the guest kernel turns into the read-only part of its
//! file tree. Directories, regular files and symbolic links are copied (links are not
//! followed); sockets, devices and FIFOs are skipped. Also resolves `-w DIR`, which
//! must name a directory of that tree (or `/`, `/dev`, `/tmp`).

use onering_abi::rootfs::{Header, DIR, FILE, SYMLINK};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RootfsError {
    #[error("--rootfs {0}: not a directory")]
    NotADirectory(String),
    #[error("--rootfs: cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("--rootfs: path too long: {0}")]
    PathTooLong(String),
    #[error("-w {0}: no such directory in the VM")]
    NoWorkdir(String),
}

fn push(out: &mut Vec<u8>, kind: u32, mode: u32, mtime_ns: u64, path: &[u8], data: &[u8]) {
    let h = Header { kind, mode, mtime_ns, path_len: path.len() as u32, data_len: data.len() as u64 };
    out.extend(h.to_bytes());
    out.extend(path);
    out.extend(data);
    out.resize(out.len().next_multiple_of(8), 0);
}

fn mtime(m: &std::fs::Metadata) -> u64 {
    (m.mtime().max(0) as u64).saturating_mul(1_000_000_000).saturating_add(m.mtime_nsec().max(0) as u64)
}

/// The image of `root`: every entry below it, parents before children.
pub fn build(root: &Path) -> Result<Vec<u8>, RootfsError> {
    let shown = |p: &Path| p.display().to_string();
    if !root.is_dir() {
        return Err(RootfsError::NotADirectory(shown(root)));
    }
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| RootfsError::Read(shown(&dir), e))?
            .collect::<Result<_, _>>()
            .map_err(|e| RootfsError::Read(shown(&dir), e))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let rel = rel.as_os_str().as_bytes();
            if rel.len() >= onering_abi::layout::PAGE_SIZE as usize {
                return Err(RootfsError::PathTooLong(shown(&path)));
            }
            let meta = std::fs::symlink_metadata(&path).map_err(|e| RootfsError::Read(shown(&path), e))?;
            let mode = meta.permissions().mode() & 0o7777;
            let ft = meta.file_type();
            if ft.is_dir() {
                push(&mut out, DIR, mode, mtime(&meta), rel, b"");
                stack.push(path);
            } else if ft.is_file() {
                let data = std::fs::read(&path).map_err(|e| RootfsError::Read(shown(&path), e))?;
                push(&mut out, FILE, mode, mtime(&meta), rel, &data);
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| RootfsError::Read(shown(&path), e))?;
                push(&mut out, SYMLINK, 0o777, mtime(&meta), rel, target.as_os_str().as_bytes());
            }
        }
    }
    Ok(out)
}

/// The `-w` directory as an absolute guest path (empty for none); it must exist in the
/// VM: in the rootfs, or /, /dev or /tmp.
pub fn workdir(workdir: Option<&OsStr>, rootfs: Option<&Path>) -> Result<Vec<u8>, RootfsError> {
    let Some(w) = workdir else {
        return Ok(Vec::new());
    };
    let mut path = w.as_bytes().to_vec();
    if path.first() != Some(&b'/') {
        path.insert(0, b'/');
    }
    let builtin =
        [&b"/"[..], b"/dev", b"/tmp"].iter().any(|b| path.strip_suffix(b"/").unwrap_or(&path) == *b || path == *b);
    let in_rootfs =
        rootfs.is_some_and(|r| r.join(OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(&path))).is_dir());
    if !builtin && !in_rootfs {
        return Err(RootfsError::NoWorkdir(w.to_string_lossy().into_owned()));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattens_a_tree() {
        let dir = std::env::temp_dir().join(format!("onering-rootfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etc/sub")).unwrap();
        std::fs::write(dir.join("etc/hostname"), b"vm\n").unwrap();
        std::os::unix::fs::symlink("hostname", dir.join("etc/name")).unwrap();
        let img = build(&dir).unwrap();
        let mut at = 0;
        let mut seen = Vec::new();
        while at < img.len() {
            let h = Header::from_bytes(&img[at..]).unwrap();
            let path = &img[at + 32..at + 32 + h.path_len as usize];
            seen.push((h.kind, String::from_utf8_lossy(path).into_owned()));
            at += h.record_len().unwrap();
        }
        assert_eq!(
            seen,
            [(DIR, "etc".into()), (FILE, "etc/hostname".into()), (SYMLINK, "etc/name".into()), (DIR, "etc/sub".into())]
        );
        assert!(matches!(build(&dir.join("etc/hostname")), Err(RootfsError::NotADirectory(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
