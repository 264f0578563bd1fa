//! The container's cgroup (`linux.cgroupsPath` and `linux.resources`): `create`
//! puts the VMM process in it, as runc puts the container's first process, so
//! what reads the cgroup (`podman stats`, the kubelet, the shim's metrics) sees
//! the VM, and the host kernel enforces the CPU quota and memory limit on it.
//! The process waits at the start gate then, so the VM is built and the program
//! runs inside the cgroup from their first instruction; the vCPU and device
//! threads it makes later inherit it.
//!
//! Both layouts runc knows, chosen as runc does: cgroup v2 when
//! `/sys/fs/cgroup/cgroup.controllers` exists (one hierarchy: the controllers
//! the limits need are enabled in `cgroup.subtree_control` of every ancestor,
//! top down, then `memory.max`, `cpu.max`, `cpu.weight`), else v1 (each
//! hierarchy mounted under /sys/fs/cgroup, including a hybrid's empty
//! `unified` one: the same path made in each, then `memory.limit_in_bytes`,
//! `cpu.cfs_period_us`, `cpu.cfs_quota_us`, `cpu.shares` where the hierarchy
//! has them; a new cpuset cgroup first copies its parent's `cpuset.cpus` and
//! `cpuset.mems`, without which adding a process fails with ENOSPC). The pid
//! goes to `cgroup.procs` last, once the limits hold. A limit the bundle asks
//! for that no hierarchy can hold fails `create`, as a write that fails does.
//!
//! The path: absolute (podman's `/libpod_parent/libpod-ID`, containerd's
//! `/NAMESPACE/ID`) is below each hierarchy's root; relative is below the
//! runtime's own cgroup (on v2 its parent, whose controllers can be enabled for
//! children, as runc does). With `--systemd-cgroup` it is systemd's
//! `SLICE:PREFIX:NAME`: runc asks systemd over DBus for a unit `PREFIX-NAME.scope`
//! in SLICE; onering makes the directory systemd would,
//! `/SLICE-EXPANDED/PREFIX-NAME.scope` (`a-b.slice` is `a.slice/a-b.slice`, an
//! empty slice `system.slice`), itself: the accounting is the same, but systemd
//! does not know the unit.
//!
//! Memory: the bundle's limit is the guest's RAM (`--mem`), and the VMM needs a
//! little beyond what the guest touches (its own code and heap, the vCPU
//! threads' stacks, the host page cache of what it reads for the guest, which
//! the kernel charges to the cgroup). The cgroup's limit is the bundle's plus
//! `HEADROOM`, so the host never kills the VMM for its own overhead; the guest's
//! kernel is what enforces the limit on the program. Measured (docs/design.md):
//! an idle 64 MiB VM peaks at 40 MiB in its cgroup, a 256 MiB VM whose guest
//! filled its memory at 239 MiB, the VMM's own pages being 7 MiB of code and a
//! few MiB of heap; 64 MiB is several times that.
//!
//! Not applied: `pids.limit` (the VMM's threads are not the container's
//! processes: the guest counts those), swap, reservations, block I/O, huge
//! pages, devices rules. `delete` removes the cgroup `create` made (the
//! deepest directory, in each hierarchy; parents stay, as runc leaves them).

use oci_spec::runtime::{LinuxResources, Spec};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the cgroup file systems are mounted.
pub const ROOT: &str = "/sys/fs/cgroup";

/// What the VMM may use beyond the guest's RAM (see the module's note).
pub const HEADROOM: u64 = 64 << 20;

/// The v1 controllers whose files `place` writes, and v2's it enables.
const CONTROLLERS: &[&str] = &["cpu", "memory", "pids"];

/// Why the container's cgroup could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("linux.cgroupsPath {0:?}: {1}")]
    Path(String, String),
    #[error("cgroup {0}: {1}")]
    Io(String, std::io::Error),
    #[error("cgroup: {0}")]
    Missing(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |e| CgroupError::Io(path.display().to_string(), e)
}

/// The cgroup's path: `path` (relative, without `.` or `..`) below each
/// hierarchy's root, or below the runtime's own cgroup if `own`.
#[derive(Debug, PartialEq)]
pub struct Place {
    pub own: bool,
    pub path: PathBuf,
}

/// What is written in the cgroup; None leaves the file as it is.
#[derive(Debug, Default, PartialEq)]
pub struct Limits {
    /// Bytes: the bundle's limit and `HEADROOM`.
    pub memory: Option<u64>,
    /// Microseconds of CPU time a period (-1: none).
    pub quota: Option<i64>,
    pub period: Option<u64>,
    pub shares: Option<u64>,
}

impl Limits {
    /// The limits `res` asks for that the VMM's cgroup holds.
    pub fn of(res: Option<&LinuxResources>) -> Limits {
        let memory = res.and_then(|r| r.memory().as_ref()).and_then(|m| m.limit()).filter(|l| *l > 0);
        let cpu = res.and_then(|r| r.cpu().as_ref());
        Limits {
            memory: memory.map(|l| l as u64 + HEADROOM),
            quota: cpu.and_then(|c| c.quota()).filter(|q| *q > 0 || *q == -1),
            period: cpu.and_then(|c| c.period()).filter(|p| *p > 0),
            shares: cpu.and_then(|c| c.shares()).filter(|s| *s > 0),
        }
    }

    fn cpu(&self) -> bool {
        self.quota.is_some() || self.period.is_some() || self.shares.is_some()
    }
}

/// The place `cgroups_path` names: a cgroupfs path, or with `systemd` (runc's
/// `--systemd-cgroup`) `SLICE:PREFIX:NAME`, the directory of systemd's unit.
pub fn place_of(cgroups_path: &str, systemd: bool) -> Result<Place, CgroupError> {
    let bad = |why: &str| CgroupError::Path(cgroups_path.to_string(), why.to_string());
    if !systemd {
        let path = clean(cgroups_path);
        if path.as_os_str().is_empty() {
            return Err(bad("names no cgroup below the root"));
        }
        return Ok(Place { own: !cgroups_path.starts_with('/'), path });
    }
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    let [slice, prefix, name] = parts[..] else {
        return Err(bad("with --systemd-cgroup, it must be SLICE:PREFIX:NAME"));
    };
    if name.is_empty() || name.contains('/') || prefix.contains('/') {
        return Err(bad("the unit's name is empty or has a '/'"));
    }
    // (As runc: a NAME that is a slice is the unit itself.)
    let unit = if name.ends_with(".slice") { name.to_string() } else { format!("{prefix}-{name}.scope") };
    let slice = if slice.is_empty() { "system.slice" } else { slice };
    Ok(Place { own: false, path: expand_slice(slice).map_err(|why| bad(&why))?.join(unit) })
}

/// A systemd slice as the directories systemd makes for it: `a-b-c.slice` is
/// `a.slice/a-b.slice/a-b-c.slice`, and the root slice `-.slice` none.
fn expand_slice(slice: &str) -> Result<PathBuf, String> {
    let Some(stem) = slice.strip_suffix(".slice") else { return Err(format!("{slice} is not a slice")) };
    if stem == "-" {
        return Ok(PathBuf::new());
    }
    let words: Vec<&str> = stem.split('-').collect();
    if slice.contains('/') || words.iter().any(|w| w.is_empty()) {
        return Err(format!("{slice} is not a valid slice name"));
    }
    Ok((1..=words.len()).map(|n| format!("{}.slice", words[..n].join("-"))).collect())
}

/// `path` without its root, `.`, `..` (which cannot climb above the root) or
/// empty components.
fn clean(path: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// cgroup v2's `cpu.weight` (1 to 10000) for v1's `cpu.shares` (2 to 262144),
/// runc's conversion: the ends map to the ends, linearly between.
pub fn weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262144);
    1 + (shares - 2) * 9999 / 262142
}

/// The runtime's own cgroup in the hierarchy of controllers `names`
/// (`cpu,cpuacct`, `systemd` for `name=systemd`, empty for v2's) according to
/// `proc_cgroup`, the text of /proc/self/cgroup; relative, empty for the root.
fn own_cgroup(proc_cgroup: &str, names: &str) -> PathBuf {
    let set = |s: &str| {
        let mut v: Vec<String> = s.split(',').filter(|c| !c.is_empty()).map(|c| c.replace("name=", "")).collect();
        v.sort();
        v
    };
    let want = set(names);
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        if let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) {
            if set(ctrls) == want {
                return clean(path);
            }
        }
    }
    PathBuf::new()
}

/// Makes directory `dir` if it is not there: whether it was made.
fn mkdir(dir: &Path) -> Result<bool, CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io(dir)(e)),
    }
}

fn write(path: &Path, value: impl std::fmt::Display) -> Result<(), CgroupError> {
    std::fs::write(path, value.to_string()).map_err(io(path))
}

/// Puts process `pid` in the cgroup at `place` of the cgroup file systems
/// mounted at `root` (`ROOT`, or a tree made by a test) with `limits`;
/// `proc_cgroup` is the runtime's /proc/self/cgroup. The directories made for
/// the cgroup itself go to `made` as they are made, so that even a failure
/// leaves a record of what `remove` must take away.
pub fn place(
    root: &Path,
    proc_cgroup: &str,
    place: &Place,
    limits: &Limits,
    pid: i32,
    made: &mut Vec<PathBuf>,
) -> Result<(), CgroupError> {
    let t = Target { root, proc_cgroup, place, limits, pid };
    if root.join("cgroup.controllers").exists() {
        place_v2(&t, made)
    } else {
        place_v1(&t, made)
    }
}

/// What `place` was asked, for the layout that does it.
#[derive(Clone, Copy)]
struct Target<'a> {
    root: &'a Path,
    proc_cgroup: &'a str,
    place: &'a Place,
    limits: &'a Limits,
    pid: i32,
}

/// The path of the cgroup below a hierarchy's root, given the runtime's own
/// cgroup in it.
fn below_root(place: &Place, own: PathBuf) -> PathBuf {
    if place.own {
        own.join(&place.path)
    } else {
        place.path.clone()
    }
}

/// Makes `root/rel` a directory at a time, calling `before(parent, dir)` on
/// each level first (the root's child first); records the deepest in `made`
/// if it was not there.
fn make_path(
    root: &Path,
    rel: &Path,
    made: &mut Vec<PathBuf>,
    mut before: impl FnMut(&Path),
) -> Result<PathBuf, CgroupError> {
    let mut dir = root.to_path_buf();
    let n = rel.components().count();
    for (i, c) in rel.components().enumerate() {
        before(&dir);
        dir.push(c);
        if mkdir(&dir)? && i + 1 == n {
            made.push(dir.clone());
        }
    }
    Ok(dir)
}

/// cgroup v2: one hierarchy at `root`.
fn place_v2(t: &Target, made: &mut Vec<PathBuf>) -> Result<(), CgroupError> {
    let Target { root, proc_cgroup, place, limits, pid } = *t;
    let file = root.join("cgroup.controllers");
    let available = std::fs::read_to_string(&file).map_err(io(&file))?;
    let available: Vec<&str> = available.split_whitespace().collect();
    for (wanted, ctrl) in [(limits.memory.is_some(), "memory"), (limits.cpu(), "cpu")] {
        if wanted && !available.contains(&ctrl) {
            return Err(CgroupError::Missing(format!("the {ctrl} controller is not available for the limits")));
        }
    }
    // Relative: below the parent of the runtime's own cgroup, which (holding
    // no process, if the runtime's is a leaf) may enable controllers.
    let own = own_cgroup(proc_cgroup, "");
    let rel = below_root(place, own.parent().map(Path::to_path_buf).unwrap_or_default());
    let enable: Vec<&str> = CONTROLLERS.iter().copied().filter(|c| available.contains(c)).collect();
    let leaf = make_path(root, &rel, made, |parent| {
        // One at a time: a controller the parent cannot enable (a process in
        // it, a threaded subtree) leaves the others; the limits' writes then
        // fail if one they need is missing.
        for c in &enable {
            let _ = std::fs::write(parent.join("cgroup.subtree_control"), format!("+{c}"));
        }
    })?;
    if let Some(m) = limits.memory {
        write(&leaf.join("memory.max"), m)?;
    }
    if limits.quota.is_some() || limits.period.is_some() {
        let quota = limits.quota.filter(|q| *q > 0).map_or("max".to_string(), |q| q.to_string());
        write(&leaf.join("cpu.max"), format!("{quota} {}", limits.period.unwrap_or(100_000)))?;
    }
    if let Some(s) = limits.shares {
        write(&leaf.join("cpu.weight"), weight(s))?;
    }
    write(&leaf.join("cgroup.procs"), pid)
}

/// A v1 hierarchy: its directory and its controllers (as its directory is
/// named; empty for a hybrid's v2 hierarchy).
struct Hierarchy {
    dir: PathBuf,
    names: String,
}

/// The hierarchies mounted below `root`, each once (`cpu` and `cpuacct` may
/// be links to `cpu,cpuacct`).
fn hierarchies(root: &Path) -> Result<Vec<Hierarchy>, CgroupError> {
    let mut out: Vec<Hierarchy> = Vec::new();
    for e in std::fs::read_dir(root).map_err(io(root))? {
        let path = e.map_err(io(root))?.path();
        if !path.join("cgroup.procs").exists() {
            continue;
        }
        let dir = std::fs::canonicalize(&path).map_err(io(&path))?;
        if out.iter().any(|h| h.dir == dir) {
            continue;
        }
        let v2 = dir.join("cgroup.controllers").exists();
        let names = if v2 { String::new() } else { dir.file_name().unwrap_or_default().to_string_lossy().into_owned() };
        out.push(Hierarchy { dir, names });
    }
    out.sort_by(|a, b| a.dir.cmp(&b.dir));
    Ok(out)
}

/// cgroup v1: a hierarchy a directory below `root`.
fn place_v1(t: &Target, made: &mut Vec<PathBuf>) -> Result<(), CgroupError> {
    let Target { root, proc_cgroup, place, limits, pid } = *t;
    let hierarchies = hierarchies(root)?;
    let has = |file: &str| hierarchies.iter().any(|h| h.dir.join(file).exists());
    if limits.memory.is_some() && !has("memory.limit_in_bytes") {
        return Err(CgroupError::Missing("no memory hierarchy for the memory limit".into()));
    }
    if limits.cpu() && !has("cpu.cfs_quota_us") {
        return Err(CgroupError::Missing("no cpu hierarchy for the CPU limits".into()));
    }
    for h in &hierarchies {
        let rel = below_root(place, own_cgroup(proc_cgroup, &h.names));
        let cpuset = h.dir.join("cpuset.cpus").exists();
        let leaf = make_path(&h.dir, &rel, made, |_| {})?;
        if cpuset {
            inherit_cpuset(&h.dir, &rel)?;
        }
        if h.dir.join("memory.limit_in_bytes").exists() {
            if let Some(m) = limits.memory {
                write(&leaf.join("memory.limit_in_bytes"), m)?;
            }
        }
        if h.dir.join("cpu.cfs_quota_us").exists() {
            // The period first: the quota is checked against it.
            if let Some(p) = limits.period {
                write(&leaf.join("cpu.cfs_period_us"), p)?;
            }
            if let Some(q) = limits.quota {
                write(&leaf.join("cpu.cfs_quota_us"), q)?;
            }
            if let Some(s) = limits.shares {
                write(&leaf.join("cpu.shares"), s)?;
            }
        }
        write(&leaf.join("cgroup.procs"), pid)?;
    }
    Ok(())
}

/// Gives each cpuset cgroup from `root`'s child down to `root/rel` its parent's
/// CPUs and memory nodes where it has none (a new one has none, and takes no
/// process until it has).
fn inherit_cpuset(root: &Path, rel: &Path) -> Result<(), CgroupError> {
    let mut dir = root.to_path_buf();
    for c in rel.components() {
        let parent = dir.clone();
        dir.push(c);
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let mine = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            if mine.trim().is_empty() {
                let theirs = std::fs::read_to_string(parent.join(file)).map_err(io(&parent.join(file)))?;
                write(&dir.join(file), theirs.trim())?;
            }
        }
    }
    Ok(())
}

/// Puts process `pid` in the cgroup `spec` names (none: nothing is done),
/// recording the directories made in `made`. `systemd`: runc's
/// `--systemd-cgroup` was given.
pub fn apply(spec: &Spec, systemd: bool, pid: i32, made: &mut Vec<PathBuf>) -> Result<(), CgroupError> {
    let linux = spec.linux().as_ref();
    let Some(path) = linux.and_then(|l| l.cgroups_path().clone()) else { return Ok(()) };
    let path = path.to_string_lossy();
    if path.is_empty() {
        return Ok(());
    }
    let at = place_of(&path, systemd)?;
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(io(Path::new("/proc/self/cgroup")))?;
    let limits = Limits::of(linux.and_then(|l| l.resources().as_ref()));
    place(Path::new(ROOT), &own, &at, &limits, pid, made)
}

/// Removes the cgroup directories `dirs` (their processes gone), the last
/// first. A cgroup is busy for a moment after its last process exits: each
/// gets a second. One already gone is fine.
pub fn remove(dirs: &[PathBuf]) -> Result<(), CgroupError> {
    let mut first_error = None;
    for dir in dirs.iter().rev() {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => {
                    first_error.get_or_insert(io(dir)(e));
                    break;
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let p = place_of("/libpod_parent/libpod-abc", false).unwrap();
        assert_eq!(p, Place { own: false, path: "libpod_parent/libpod-abc".into() });
        let p = place_of("kube/../pod1//./c", false).unwrap();
        assert_eq!(p, Place { own: true, path: "pod1/c".into() });
        assert_eq!(place_of("/../../x", false).unwrap().path, PathBuf::from("x"), "nothing climbs above the root");
        assert!(place_of("/", false).is_err());
        let p = place_of("machine.slice:libpod:abc", true).unwrap();
        assert_eq!(p, Place { own: false, path: "machine.slice/libpod-abc.scope".into() });
        let p = place_of("kubepods-burstable-pod1.slice:cri-containerd:c1", true).unwrap();
        let want = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-c1.scope";
        assert_eq!(p.path, PathBuf::from(want));
        assert_eq!(place_of(":runc:c1", true).unwrap().path, PathBuf::from("system.slice/runc-c1.scope"));
        assert_eq!(place_of("-.slice:p:n", true).unwrap().path, PathBuf::from("p-n.scope"));
        assert_eq!(place_of("a.slice:p:b-c.slice", true).unwrap().path, PathBuf::from("a.slice/b-c.slice"));
        for bad in ["/libpod_parent/x", "a.slice:p", "notaslice:p:n", "a--b.slice:p:n", "a.slice:p:", "a.slice:p:x/y"] {
            assert!(matches!(place_of(bad, true), Err(CgroupError::Path(..))), "{bad}");
        }
    }

    #[test]
    fn shares_to_weight() {
        assert_eq!(weight(2), 1);
        assert_eq!(weight(262144), 10000);
        assert_eq!(weight(1024), 39);
        assert_eq!(weight(0), 1);
        assert_eq!(weight(1 << 30), 10000);
    }

    #[test]
    fn limits_from_resources() {
        let res: LinuxResources = serde_json::from_str(
            r#"{"memory":{"limit":209715200,"swap":419430400},"cpu":{"quota":150000,"period":100000,"shares":512},
                "pids":{"limit":100}}"#,
        )
        .unwrap();
        let want =
            Limits { memory: Some(209715200 + HEADROOM), quota: Some(150000), period: Some(100000), shares: Some(512) };
        assert_eq!(Limits::of(Some(&res)), want);
        let res: LinuxResources = serde_json::from_str(r#"{"memory":{"limit":-1},"cpu":{"quota":0}}"#).unwrap();
        assert_eq!(Limits::of(Some(&res)), Limits::default());
        assert!(!Limits::of(None).cpu());
    }

    #[test]
    fn own_cgroups() {
        let text = "9:name=systemd:/user.slice\n4:memory:/process_api/x\n2:cpu,cpuacct:/\n0::/init.scope\n";
        assert_eq!(own_cgroup(text, "memory"), PathBuf::from("process_api/x"));
        assert_eq!(own_cgroup(text, "cpuacct,cpu"), PathBuf::new());
        assert_eq!(own_cgroup(text, "systemd"), PathBuf::from("user.slice"));
        assert_eq!(own_cgroup(text, ""), PathBuf::from("init.scope"));
        assert_eq!(own_cgroup(text, "pids"), PathBuf::new(), "not listed: the root");
    }

    fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("onering-cgroup-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (file, text) in files {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn v1_layout() {
        let root = tree(
            "v1",
            &[
                ("memory/cgroup.procs", ""),
                ("memory/memory.limit_in_bytes", ""),
                ("cpu/cgroup.procs", ""),
                ("cpu/cpu.cfs_quota_us", ""),
                ("cpu/cpu.cfs_period_us", ""),
                ("cpu/cpu.shares", ""),
                ("cpuset/cgroup.procs", ""),
                ("cpuset/cpuset.cpus", "0-3\n"),
                ("cpuset/cpuset.mems", "0\n"),
                ("pids/cgroup.procs", ""),
                ("pids/pids.max", ""),
                ("systemd/cgroup.procs", ""),
                ("unified/cgroup.procs", ""),
                ("unified/cgroup.controllers", ""),
                ("unified/parent/cgroup.procs", ""),
                ("notmounted/readme", ""),
            ],
        );
        let limits = Limits { memory: Some(300 << 20), quota: Some(150000), period: Some(100000), shares: Some(512) };
        let at = place_of("/p/c1", false).unwrap();
        let mut made = vec![];
        place(&root, "", &at, &limits, 42, &mut made).unwrap();
        let ctrls = ["cpu", "cpuset", "memory", "pids", "systemd", "unified"];
        assert_eq!(made, ctrls.map(|c| root.join(c).join("p/c1")));
        for c in ctrls {
            assert_eq!(read(root.join(c).join("p/c1/cgroup.procs")), "42", "{c}");
        }
        assert_eq!(read(root.join("memory/p/c1/memory.limit_in_bytes")), (300u64 << 20).to_string());
        assert_eq!(read(root.join("cpu/p/c1/cpu.cfs_quota_us")), "150000");
        assert_eq!(read(root.join("cpu/p/c1/cpu.cfs_period_us")), "100000");
        assert_eq!(read(root.join("cpu/p/c1/cpu.shares")), "512");
        assert!(!root.join("memory/p/c1/cpu.shares").exists() && !root.join("pids/p/c1/pids.max").exists());
        // A new cpuset cgroup has its parent's CPUs and nodes, each level.
        assert_eq!(
            (read(root.join("cpuset/p/cpuset.cpus")), read(root.join("cpuset/p/c1/cpuset.mems"))),
            ("0-3".into(), "0".into())
        );
        assert!(!root.join("notmounted/p").exists());
        // Relative: below the runtime's own cgroup, in each hierarchy.
        let mut made = vec![];
        let own = "4:memory:/process_api/x\n0::/parent\n";
        place(&root, own, &place_of("c2", false).unwrap(), &Limits::default(), 7, &mut made).unwrap();
        assert!(
            made.contains(&root.join("memory/process_api/x/c2")) && made.contains(&root.join("cpu/c2")),
            "{made:?}"
        );
        assert!(made.contains(&root.join("unified/parent/c2")), "{made:?}");
        // Already there: not made, so not removed later.
        let mut made = vec![];
        place(&root, "", &at, &Limits::default(), 43, &mut made).unwrap();
        assert!(made.is_empty());
        assert_eq!(read(root.join("pids/p/c1/cgroup.procs")), "43");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v1_without_the_controller_a_limit_needs() {
        let root = tree("v1-nomem", &[("cpu/cgroup.procs", ""), ("cpu/cpu.cfs_quota_us", "")]);
        let limits = Limits { memory: Some(1 << 30), ..Limits::default() };
        let mut made = vec![];
        let e = place(&root, "", &place_of("/c", false).unwrap(), &limits, 1, &mut made).unwrap_err();
        assert!(e.to_string().contains("no memory hierarchy"), "{e}");
        assert!(made.is_empty() && !root.join("cpu/c").exists(), "nothing made");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn v2_layout() {
        let root = tree("v2", &[("cgroup.controllers", "cpuset cpu io memory pids\n"), ("cgroup.subtree_control", "")]);
        let limits = Limits { memory: Some(300 << 20), quota: Some(150000), period: Some(100000), shares: Some(1024) };
        let at = place_of("machine.slice:libpod:abc", true).unwrap();
        let mut made = vec![];
        place(&root, "0::/\n", &at, &limits, 42, &mut made).unwrap();
        let leaf = root.join("machine.slice/libpod-abc.scope");
        assert_eq!(made, std::slice::from_ref(&leaf));
        // Each ancestor enables the controllers for its children (the fake file
        // keeps the last write).
        assert_eq!(read(root.join("cgroup.subtree_control")), "+pids");
        assert_eq!(read(root.join("machine.slice/cgroup.subtree_control")), "+pids");
        assert!(!leaf.join("cgroup.subtree_control").exists());
        assert_eq!(read(leaf.join("memory.max")), (300u64 << 20).to_string());
        assert_eq!(read(leaf.join("cpu.max")), "150000 100000");
        assert_eq!(read(leaf.join("cpu.weight")), "39");
        assert_eq!(read(leaf.join("cgroup.procs")), "42");
        // A period alone: no quota.
        let limits = Limits { period: Some(50000), ..Limits::default() };
        place(&root, "", &place_of("/other", false).unwrap(), &limits, 1, &mut made).unwrap();
        assert_eq!(read(root.join("other/cpu.max")), "max 50000");
        // Relative: below the parent of the runtime's own cgroup.
        std::fs::create_dir_all(root.join("user.slice/session.scope")).unwrap();
        place(
            &root,
            "0::/user.slice/session.scope\n",
            &place_of("c3", false).unwrap(),
            &Limits::default(),
            3,
            &mut made,
        )
        .unwrap();
        assert_eq!(read(root.join("user.slice/c3/cgroup.procs")), "3");
        // A limit whose controller is not there.
        let root2 = tree("v2-nocpu", &[("cgroup.controllers", "memory pids\n")]);
        let limits = Limits { quota: Some(1000), period: Some(10000), ..Limits::default() };
        let e = place(&root2, "", &place_of("/x", false).unwrap(), &limits, 1, &mut vec![]).unwrap_err();
        assert!(e.to_string().contains("the cpu controller is not available"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_dir_all(&root2).unwrap();
    }

    #[test]
    fn removal() {
        let root = tree("rm", &[("keep/file", "")]);
        let dirs = [root.join("a"), root.join("a/b"), root.join("gone")];
        std::fs::create_dir_all(&dirs[1]).unwrap();
        // The deepest first; one that is not there is no error.
        remove(&dirs).unwrap();
        assert!(!root.join("a").exists());
        let e = remove(&[root.join("keep")]).unwrap_err();
        assert!(e.to_string().contains("keep"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
