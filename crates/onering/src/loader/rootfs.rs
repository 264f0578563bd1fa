//! `--rootfs DIR` on the VMM's side: the guest reads DIR through the host file
//! server (`hostfs`), nothing is copied; what is here is the small image
//! (format `onering_abi::rootfs`) of the `/etc` files onering adds when DIR lacks
//! them (hosts, hostname, resolv.conf), finding the program in DIR as docker does,
//! and `-w DIR`, which must name a directory of that tree (or `/`, `/dev`, `/tmp`),
//! and the `--tmpfs` mounts the kernel makes in it.

use onering_abi::rootfs::{Header, DIR, FILE};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum RootfsError {
    #[error("--rootfs {0}: not a directory")]
    NotADirectory(String),
    #[error("--rootfs: cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("--rootfs-rw: {0} is an archive; changes can only be written to a directory")]
    ArchiveNotWritable(String),
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

/// `path` as an absolute path with `.`, `..` and repeated slashes resolved
/// lexically, no trailing slash; None if it is not absolute.
pub fn normal_path(path: &[u8]) -> Option<Vec<u8>> {
    (path.first() == Some(&b'/')).then(|| onering_abi::path::absolute(b"/", path))
}

pub fn add_etc(image: &mut Vec<u8>, root: Option<&Path>, dns: Option<[u8; 4]>, hostname: &[u8]) {
    let name = String::from_utf8_lossy(hostname);
    let hosts = format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{name}\n");
    let has = |rel: &str| root.and_then(|r| std::fs::symlink_metadata(r.join(rel)).ok());
    match has("etc") {
        Some(m) if !m.is_dir() => return,
        Some(_) => {}
        None => push(image, DIR, 0o755, 0, b"etc", b""),
    }
    // Without a network device a resolver asks 127.0.0.1 (refused at once), as
    // glibc, musl and Go would without the file; names come from /etc/hosts. With
    // one, the back end's resolver (`--net user`: passt forwards it to the host's).
    let resolv = match dns {
        Some([a, b, c, d]) => format!("# onering: the network back end's resolver\nnameserver {a}.{b}.{c}.{d}\n"),
        None => "# onering: this VM has loopback only; names resolve from /etc/hosts\nnameserver 127.0.0.1\n".into(),
    };
    let hostname = [hostname, b"\n"].concat();
    for (name, data) in
        [("etc/hosts", hosts.as_bytes()), ("etc/hostname", &hostname[..]), ("etc/resolv.conf", resolv.as_bytes())]
    {
        if has(name).is_none() {
            push(image, FILE, 0o644, 0, name.as_bytes(), data);
        }
    }
}

/// The `-w` directory as an absolute guest path (empty for none); it must exist in the
/// VM: in the rootfs, in one of the `volumes` (guest path, host directory), or /,
/// /dev or /tmp.
pub fn workdir(
    workdir: Option<&OsStr>,
    rootfs: Option<&Path>,
    volumes: &[(&[u8], &Path)],
) -> Result<Vec<u8>, RootfsError> {
    let Some(w) = workdir else {
        return Ok(Vec::new());
    };
    let mut path = w.as_bytes().to_vec();
    if path.first() != Some(&b'/') {
        path.insert(0, b'/');
    }
    let builtin =
        [&b"/"[..], b"/dev", b"/tmp"].iter().any(|b| path.strip_suffix(b"/").unwrap_or(&path) == *b || path == *b);
    // (In a tar archive the kernel looks: a missing one is the root.)
    let in_rootfs = rootfs
        .is_some_and(|r| r.is_file() || r.join(OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(&path))).is_dir());
    let bare = path.strip_suffix(b"/").unwrap_or(&path);
    let in_volume = volumes.iter().any(|(guest, host)| {
        let rest = bare.strip_prefix(guest.strip_suffix(b"/").unwrap_or(guest));
        let rest = rest.filter(|r| r.is_empty() || r.starts_with(b"/")).map(|r| r.strip_prefix(b"/").unwrap_or(r));
        rest.is_some_and(|r| host.join(OsStr::from_bytes(r)).is_dir())
    });
    if !builtin && !in_rootfs && !in_volume {
        return Err(RootfsError::NoWorkdir(w.to_string_lossy().into_owned()));
    }
    Ok(path)
}

/// Where the guest path `path` leads in the tree at `root` (on the host), following
/// symbolic links as the guest would see them: an absolute target starts again at
/// `root`, and `..` never leaves it. `None` if it leads nowhere (or loops).
pub fn resolve(root: &Path, path: &[u8]) -> Option<std::path::PathBuf> {
    let mut todo: Vec<Vec<u8>> = path.split(|b| *b == b'/').rev().map(<[u8]>::to_vec).collect();
    let mut at: Vec<Vec<u8>> = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        match &name[..] {
            b"" | b"." => continue,
            b".." => {
                at.pop();
                continue;
            }
            _ => {}
        }
        at.push(name);
        let host = at.iter().fold(root.to_path_buf(), |p, n| p.join(OsStr::from_bytes(n)));
        let meta = std::fs::symlink_metadata(&host).ok()?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > 40 {
                return None;
            }
            let target = std::fs::read_link(&host).ok()?;
            let target = target.as_os_str().as_bytes();
            at.pop();
            if target.first() == Some(&b'/') {
                at.clear();
            }
            todo.extend(target.split(|b| *b == b'/').rev().map(<[u8]>::to_vec));
        }
    }
    Some(at.iter().fold(root.to_path_buf(), |p, n| p.join(OsStr::from_bytes(n))))
}

/// The program named `name` in the tree at `root`, as `docker run IMAGE name` finds
/// it: a name with a `/` is a path in the tree (relative ones from the working
/// directory `workdir`), a bare name is looked for in each directory of `path` (the
/// guest's `PATH`). The host path of a regular file, or `None`.
pub fn find_program(root: &Path, name: &[u8], workdir: &[u8], path: &[u8]) -> Option<std::path::PathBuf> {
    let is_file = |p: &std::path::PathBuf| std::fs::metadata(p).is_ok_and(|m| m.is_file());
    if name.contains(&b'/') {
        let full = if name.first() == Some(&b'/') { name.to_vec() } else { [workdir, b"/", name].concat() };
        return resolve(root, &full).filter(is_file);
    }
    if name.is_empty() {
        return None;
    }
    path.split(|b| *b == b':')
        .filter(|d| !d.is_empty())
        .find_map(|d| resolve(root, &[d, b"/", name].concat()).filter(is_file))
}

/// Parses `--tmpfs PATH[:OPTIONS]`: PATH absolute, not `/` nor in /proc or /sys.
pub fn parse_tmpfs(s: &str) -> Result<onering_abi::tmpfs::Tmpfs, String> {
    use onering_abi::tmpfs::{Tmpfs, COPYUP, RO};
    let (path, options) = s.split_once(':').unwrap_or((s, ""));
    let path = normal_path(path.as_bytes()).ok_or("PATH must be an absolute path")?;
    let under = |t: &[u8]| path == t || path.starts_with(&[t, b"/"].concat());
    if path == b"/" || under(b"/proc") || under(b"/sys") {
        return Err("PATH cannot be /, /proc, /sys or below them".into());
    }
    let mut m = Tmpfs { flags: 0, mode: 0o1777, size: 0, path };
    const IGNORED: &[&str] = &[
        "nosuid",
        "suid",
        "nodev",
        "dev",
        "noexec",
        "exec",
        "private",
        "rprivate",
        "shared",
        "rshared",
        "slave",
        "rslave",
        "unbindable",
        "runbindable",
        "notmpcopyup",
        "atime",
        "noatime",
        "relatime",
        "strictatime",
    ];
    for o in options.split(',').filter(|o| !o.is_empty()) {
        let bad = || format!("unknown or malformed option {o:?}");
        match o.split_once('=') {
            None if o == "ro" => m.flags |= RO,
            None if o == "rw" => m.flags &= !RO,
            None if o == "tmpcopyup" => m.flags |= COPYUP,
            None if IGNORED.contains(&o) => {}
            Some(("mode", v)) => m.mode = u32::from_str_radix(v, 8).ok().filter(|v| *v <= 0o7777).ok_or_else(bad)?,
            Some(("size", v)) => {
                let (digits, unit) = match v.as_bytes().last() {
                    Some(b'k' | b'K') => (&v[..v.len() - 1], 1 << 10),
                    Some(b'm' | b'M') => (&v[..v.len() - 1], 1 << 20),
                    Some(b'g' | b'G') => (&v[..v.len() - 1], 1 << 30),
                    _ => (v, 1),
                };
                m.size = digits.parse::<u64>().ok().and_then(|n| n.checked_mul(unit)).ok_or_else(bad)?;
            }
            Some(("nr_inodes", v)) if v.parse::<u64>().is_ok() => {}
            _ => return Err(bad()),
        }
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_in_the_tree_as_docker_finds_them() {
        let dir = std::env::temp_dir().join(format!("onering-find-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::create_dir_all(dir.join("usr/bin")).unwrap();
        std::fs::create_dir_all(dir.join("app")).unwrap();
        std::fs::write(dir.join("bin/busybox"), b"x").unwrap();
        std::os::unix::fs::symlink("/bin/busybox", dir.join("bin/sh")).unwrap();
        std::os::unix::fs::symlink("../../bin/busybox", dir.join("usr/bin/env")).unwrap();
        std::os::unix::fs::symlink("../../../../../etc/passwd", dir.join("usr/bin/escape")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("bin/loop")).unwrap();
        std::fs::write(dir.join("app/run"), b"x").unwrap();
        let busybox = Some(dir.join("bin/busybox"));
        let path = b"/usr/local/bin:/usr/bin:/bin";
        assert_eq!(find_program(&dir, b"/bin/sh", b"/", path), busybox);
        assert_eq!(find_program(&dir, b"sh", b"/", path), busybox);
        assert_eq!(find_program(&dir, b"env", b"/", path), busybox);
        assert_eq!(find_program(&dir, b"./run", b"/app", path), Some(dir.join("app/run")));
        assert_eq!(find_program(&dir, b"run", b"/app", path), None, "a bare name is not looked for in the workdir");
        assert_eq!(find_program(&dir, b"escape", b"/", path), None, "links stay in the tree");
        assert_eq!(find_program(&dir, b"/bin/loop", b"/", path), None);
        assert_eq!(find_program(&dir, b"/bin", b"/", path), None);
        assert_eq!(find_program(&dir, b"", b"/", path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `-w` may name a directory inside a volume (docker's `-v $PWD:/src -w /src`),
    /// with no rootfs: the volume's mount point and what is below it on the host.
    #[test]
    fn the_workdir_may_lie_in_a_volume() {
        let dir = std::env::temp_dir().join(format!("onering-workdir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let vols: &[(&[u8], &Path)] = &[(b"/data/src", &dir)];
        let w = |p: &str| workdir(Some(OsStr::new(p)), None, vols).map_err(|e| e.to_string());
        assert_eq!(w("/data/src"), Ok(b"/data/src".to_vec()));
        assert_eq!(w("/data/src/"), Ok(b"/data/src/".to_vec()));
        assert_eq!(w("/data/src/sub"), Ok(b"/data/src/sub".to_vec()));
        assert_eq!(w("data/src/sub"), Ok(b"/data/src/sub".to_vec()));
        assert!(w("/data/src/none").is_err());
        assert!(w("/data/srcx").is_err());
        assert!(w("/data").is_err(), "the mount point's parent is not a directory the user made");
        assert_eq!(w("/tmp"), Ok(b"/tmp".to_vec()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
