//! A bundle's `config.json` (OCI runtime spec 1.x, parsed by the `oci-spec` crate)
//! turned into the arguments of `onering run`: the container's VMM is that same
//! command, so whatever the bundle asks is either one of run's options or refused
//! here, before anything starts, with a message naming the field.
//!
//! What maps: process.args/env/cwd (the program, `-e`, `-w`), root.path and
//! root.readonly (`--rootfs` with `--rootfs-rw`, or `--read-only`), bind mounts of directories (`-v`),
//! linux.resources.memory.limit (`--mem`), cpu quota/period (`--smp`, rounded
//! up), process.capabilities (`--oci-caps`: what `capget` and /proc report),
//! process.noNewPrivileges, process.rlimits (`--ulimit` each), and the `onering.*` annotations (our own options; they win over the
//! resources). What the VM already provides is accepted without an option: the
//! kernel file systems podman and containerd always mount (proc, sysfs, tmpfs
//! on /dev and /dev/shm, devpts, mqueue, cgroup: the guest kernel has its own;
//! a tmpfs elsewhere is `--tmpfs`), the files podman binds
//! over /etc/hosts, /etc/hostname, /etc/resolv.conf, /run/.containerenv and
//! /dev/shm (the program sees the image's /etc files, or onering's; the guest's
//! /dev is its own), namespaces, seccomp, masked and read-only
//! paths, pids and device rules: a VM already isolates the
//! program, and the host-side process is only the VMM. linux.cgroupsPath, with
//! the memory and cpu resources, is not an option of run: `create` puts the VMM
//! process in that cgroup (`cgroup.rs`). Everything else (another
//! user, an rlimit with soft above hard, other mount types, sysctls outside net.*, block I/O and
//! huge-page limits, a startContainer hook, an ociVersion other than 1.x) is
//! refused.

use oci_spec::runtime::Spec;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Why a bundle cannot run as an onering VM.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    /// The bundle asks for something onering does not do.
    #[error("config.json: {0} is not supported by onering")]
    Unsupported(String),
    /// The bundle is incomplete or malformed.
    #[error("config.json: {0}")]
    Invalid(String),
}

/// What `create` needs from a bundle: the `onering run` arguments (options, `--`,
/// the program and its arguments) and whether the program gets a terminal.
#[derive(Debug, PartialEq)]
pub struct Plan {
    pub run_args: Vec<OsString>,
    pub terminal: bool,
}

/// What podman bind-mounts into every container and onering has of its own: the
/// /etc files it writes, and the guest's in-memory /dev/shm.
const OWN_FILES: &[&str] = &["/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run/.containerenv", "/dev/shm"];

/// The tmpfs mounts the VM has of its own (its /dev, and the /dev/shm in it);
/// one anywhere else becomes a `--tmpfs`.
const OWN_TMPFS: &[&str] = &["/dev", "/dev/shm"];

/// Mount types the guest kernel provides on its own.
const OWN_TYPES: &[&str] = &["proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "shm"];

/// Plans the run of `spec`, whose bundle is the directory `bundle`.
pub fn plan(spec: &Spec, bundle: &Path) -> Result<Plan, SpecError> {
    let unsupported = |what: String| Err(SpecError::Unsupported(what));
    let version = spec.version();
    let mut parts = version.split(['.', '-', '+']);
    let numeric = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if parts.next() != Some("1") || !numeric(parts.next()) || !numeric(parts.next()) {
        return unsupported(format!("ociVersion {version:?} (onering reads 1.x)"));
    }
    let process = spec.process().as_ref().ok_or_else(|| SpecError::Invalid("no process".into()))?;
    let args = process.args().as_deref().unwrap_or_default();
    if args.is_empty() {
        return Err(SpecError::Invalid("process.args is empty".into()));
    }
    let user = process.user();
    if user.uid() != 0 || user.gid() != 0 {
        return unsupported(format!(
            "process.user {}:{} (the program runs as root inside its VM)",
            user.uid(),
            user.gid()
        ));
    }
    let mut ulimits = Vec::new();
    for r in process.rlimits().as_deref().unwrap_or_default() {
        // (RLIMIT_NOFILE -> nofile: docker's names are Linux's without the prefix.)
        let name = r.typ().to_string().to_lowercase();
        let name = name.strip_prefix("rlimit_").unwrap_or(&name);
        let nofile_ok = name != "nofile" || r.hard() <= onering_abi::NR_OPEN;
        if onering_abi::rlimit::number(name).is_none() || r.soft() > r.hard() || !nofile_ok {
            return unsupported(format!("process.rlimits {:?} {}:{}", r.typ(), r.soft(), r.hard()));
        }
        ulimits.push(format!("{name}={}:{}", r.soft(), r.hard()));
    }
    let mut out: Vec<OsString> = vec!["run".into(), "-i".into()];
    let mut opt = |name: &str, value: OsString| {
        out.push(name.into());
        out.push(value);
    };
    for e in process.env().as_deref().unwrap_or_default() {
        if !e.contains('=') {
            return Err(SpecError::Invalid(format!("process.env entry {e:?} has no '='")));
        }
        opt("-e", e.into());
    }
    opt("-w", process.cwd().clone().into_os_string());
    if let Some(c) = process.capabilities() {
        opt("--oci-caps", capability_masks(c)?.into());
    }
    for u in ulimits {
        opt("--ulimit", u.into());
    }
    if let Some(h) = spec.hostname().as_deref().filter(|h| !h.is_empty()) {
        if !onering_abi::hostname_ok(h.as_bytes()) {
            return Err(SpecError::Invalid(format!("hostname {h:?}: 1 to 64 bytes without NUL or newline")));
        }
        opt("--hostname", h.into());
    }
    let root = spec.root().as_ref().ok_or_else(|| SpecError::Invalid("no root".into()))?;
    let rootfs = if root.path().is_absolute() { root.path().clone() } else { bundle.join(root.path()) };
    opt("--rootfs", rootfs.into_os_string());
    for m in spec.mounts().as_deref().unwrap_or_default() {
        if let Some((option, value)) = mount(m)? {
            opt(option, value);
        }
    }
    let (mut mem, mut smp) = (None, None);
    if let Some(linux) = spec.linux() {
        if let Some(maps) = linux.uid_mappings().as_ref().filter(|m| !m.is_empty()) {
            return unsupported(format!("linux.uidMappings ({} entries: a user namespace)", maps.len()));
        }
        for key in linux.sysctl().iter().flat_map(|s| s.keys()) {
            if !key.starts_with("net.") {
                return unsupported(format!("linux.sysctl {key}"));
            }
        }
        if let Some(res) = linux.resources() {
            if let Some(limit) = res.memory().as_ref().and_then(|m| m.limit()).filter(|l| *l > 0) {
                mem = Some(limit.to_string());
            }
            if let Some(cpu) = res.cpu() {
                if let (Some(q), Some(p)) = (cpu.quota().filter(|q| *q > 0), cpu.period().filter(|p| *p > 0)) {
                    smp = Some((q as u64).div_ceil(p).max(1).to_string());
                }
            }
            if res.block_io().is_some() {
                return unsupported("linux.resources.blockIO".into());
            }
            if res.hugepage_limits().as_ref().is_some_and(|h| !h.is_empty()) {
                return unsupported("linux.resources.hugepageLimits".into());
            }
        }
    }
    if let Some(hooks) = spec.hooks() {
        if hooks.start_container().as_ref().is_some_and(|h| !h.is_empty()) {
            return unsupported("hooks.startContainer (nothing of the host runs inside the VM)".into());
        }
    }
    let mut extra = Vec::new();
    let mut notes: Vec<(&String, &String)> = spec.annotations().iter().flatten().collect();
    notes.sort();
    for (key, value) in notes {
        let Some(name) = key.strip_prefix("onering.") else { continue };
        match name {
            "mem" => mem = Some(value.clone()),
            "smp" => smp = Some(value.clone()),
            "net" => extra.extend(["--net".into(), value.into()]),
            "quiet" if value == "true" => extra.push("-q".into()),
            "quiet" if value == "false" => {}
            _ => return unsupported(format!("annotation {key}={value:?} (known: onering.mem, .smp, .net, .quiet)")),
        }
    }
    let mut opt = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            out.push(name.into());
            out.push(v.into());
        }
    };
    opt("--mem", mem);
    opt("--smp", smp);
    // The program's changes go to the bundle's rootfs (the container's layer), as
    // runc's do, unless it is read-only.
    out.push(if root.readonly() == Some(true) { "--read-only" } else { "--rootfs-rw" }.into());
    if process.no_new_privileges() == Some(true) {
        out.push("--no-new-privileges".into());
    }
    out.extend(extra);
    out.push("--".into());
    out.extend(args.iter().map(OsString::from));
    Ok(Plan { run_args: out, terminal: process.terminal() == Some(true) })
}

/// One of `mounts` as an option of run and its value: a volume (`-v
/// HOST:GUEST[:ro]`) for a bind mount of a directory, `--tmpfs DEST:OPTIONS`
/// for a tmpfs; None for what the VM has of its own; an error for the rest.
fn mount(m: &oci_spec::runtime::Mount) -> Result<Option<(&'static str, OsString)>, SpecError> {
    let dest = m.destination();
    let options = m.options().as_deref().unwrap_or_default();
    let bind = options.iter().any(|o| o == "bind" || o == "rbind");
    let typ = m.typ().as_deref().unwrap_or(if bind { "bind" } else { "" });
    let shown = || format!("mount of {} on {}", typ, dest.display());
    if typ == "tmpfs" && !OWN_TMPFS.iter().any(|d| Path::new(d) == dest) {
        // (`--tmpfs` checks the destination and the options.)
        let mut v = dest.as_os_str().to_owned();
        v.push(":");
        v.push(options.join(","));
        return match crate::loader::rootfs::parse_tmpfs(&v.to_string_lossy()) {
            Ok(_) => Ok(Some(("--tmpfs", v))),
            Err(why) => Err(SpecError::Unsupported(format!("{} ({why})", shown()))),
        };
    }
    if typ != "bind" && !(bind && typ == "none") {
        return if OWN_TYPES.contains(&typ) { Ok(None) } else { Err(SpecError::Unsupported(shown())) };
    }
    if OWN_FILES.iter().any(|f| Path::new(f) == dest) {
        return Ok(None);
    }
    let source: PathBuf = m.source().clone().ok_or_else(|| SpecError::Invalid(format!("{}: no source", shown())))?;
    if !source.is_dir() {
        return Err(SpecError::Unsupported(format!(
            "{} from {} (only directories are shared)",
            shown(),
            source.display()
        )));
    }
    let reserved = ["/dev", "/tmp"].iter().any(|r| dest.starts_with(r)) || dest == Path::new("/");
    if reserved || !dest.is_absolute() {
        return Err(SpecError::Unsupported(format!("{} (/, /dev and /tmp are the VM's own)", shown())));
    }
    let mut v = source.into_os_string();
    v.push(":");
    v.push(dest);
    if options.iter().any(|o| o == "ro") {
        v.push(":ro");
    }
    Ok(Some(("-v", v)))
}

/// process.capabilities as `--oci-caps`' five masks (bounding, permitted,
/// effective, inheritable, ambient); an absent set is empty, as runc makes it.
fn capability_masks(c: &oci_spec::runtime::LinuxCapabilities) -> Result<String, SpecError> {
    let sets = [c.bounding(), c.permitted(), c.effective(), c.inheritable(), c.ambient()];
    let mut masks = Vec::new();
    for set in sets {
        let mut m = 0u64;
        for cap in set.iter().flatten() {
            let name = cap.to_string();
            let n = onering_abi::caps::number(&name)
                .ok_or_else(|| SpecError::Unsupported(format!("process.capabilities {name} (unknown to onering)")))?;
            m |= 1 << n;
        }
        masks.push(format!("{m:x}"));
    }
    Ok(masks.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).unwrap()
    }

    fn base(extra: &str) -> String {
        format!(
            r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},
              "process":{{"args":["sh","-c","echo hi"],"env":["PATH=/bin","A=1"],"cwd":"/work",
                          "user":{{"uid":0,"gid":0}}}}{extra}}}"#
        )
    }

    fn args(p: &Plan) -> Vec<String> {
        p.run_args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn process_and_root() {
        let p = plan(&spec(&base("")), Path::new("/b")).unwrap();
        assert_eq!(
            args(&p),
            [
                "run",
                "-i",
                "-e",
                "PATH=/bin",
                "-e",
                "A=1",
                "-w",
                "/work",
                "--rootfs",
                "/b/rootfs",
                "--rootfs-rw",
                "--",
                "sh",
                "-c",
                "echo hi"
            ]
        );
        assert!(!p.terminal);
    }

    #[test]
    fn resources_annotations_and_readonly() {
        let s = base(r#","linux":{"resources":{"memory":{"limit":134217728},"cpu":{"quota":150000,"period":100000}}}"#)
            .replace(r#""path":"rootfs""#, r#""path":"/abs","readonly":true"#);
        let a = args(&plan(&spec(&s), Path::new("/b")).unwrap());
        let tail = ["--rootfs", "/abs", "--mem", "134217728", "--smp", "2", "--read-only", "--"];
        assert!(a.windows(tail.len()).any(|w| w == tail), "{a:?}");
        let s = base(r#","hostname":"box1""#);
        let a = args(&plan(&spec(&s), Path::new("/b")).unwrap());
        assert!(a.windows(2).any(|w| w == ["--hostname", "box1"]), "{a:?}");
        let s = base(r#","annotations":{"onering.mem":"1G","onering.quiet":"true","other":"x"}"#);
        let a = args(&plan(&spec(&s), Path::new("/b")).unwrap());
        assert!(a.windows(4).any(|w| w == ["--mem", "1G", "--rootfs-rw", "-q"]), "{a:?}");
        let s = base(r#","annotations":{"onering.bogus":"1"}"#);
        assert!(
            matches!(plan(&spec(&s), Path::new("/b")), Err(SpecError::Unsupported(m)) if m.contains("onering.bogus"))
        );
    }

    #[test]
    fn capabilities() {
        let s = base("").replace(
            r#""user":{"uid":0,"gid":0}"#,
            r#""user":{"uid":0,"gid":0},
               "capabilities":{"bounding":["CAP_KILL","CAP_NET_ADMIN"],"permitted":["CAP_KILL"],
                               "effective":["CAP_KILL"],"ambient":[]},"noNewPrivileges":true,
               "rlimits":[{"type":"RLIMIT_NOFILE","soft":1024,"hard":4096},
                          {"type":"RLIMIT_NPROC","soft":100,"hard":200},
                          {"type":"RLIMIT_MSGQUEUE","soft":0,"hard":819200}]"#,
        );
        let a = args(&plan(&spec(&s), Path::new("/b")).unwrap());
        assert!(a.windows(2).any(|w| w == ["--oci-caps", "1020:20:20:0:0"]), "{a:?}");
        assert!(a.iter().any(|x| x == "--no-new-privileges"), "{a:?}");
        assert!(a.windows(2).any(|w| w == ["--ulimit", "nofile=1024:4096"]), "{a:?}");
        assert!(a.windows(2).any(|w| w == ["--ulimit", "nproc=100:200"]), "{a:?}");
        assert!(a.windows(2).any(|w| w == ["--ulimit", "msgqueue=0:819200"]), "{a:?}");
        // No capabilities object: no option (root keeps every capability).
        let a = args(&plan(&spec(&base("")), Path::new("/b")).unwrap());
        assert!(!a.iter().any(|x| x == "--oci-caps"), "{a:?}");
    }

    #[test]
    fn mounts() {
        let dir = std::env::temp_dir();
        let d = dir.display();
        let s = base(&format!(
            r#","mounts":[{{"destination":"/proc","type":"proc","source":"proc"}},
                {{"destination":"/dev/pts","type":"devpts","source":"devpts"}},
                {{"destination":"/etc/hosts","type":"bind","source":"/etc/hosts","options":["rbind"]}},
                {{"destination":"/data","type":"bind","source":"{d}","options":["rbind","ro"]}},
                {{"destination":"/data2","source":"{d}","options":["bind"]}},
                {{"destination":"/dev","type":"tmpfs","source":"tmpfs","options":["nosuid","mode=755"]}},
                {{"destination":"/dev/shm","type":"tmpfs","source":"shm","options":["size=65536k"]}},
                {{"destination":"/run","type":"tmpfs","source":"tmpfs","options":["rw","rprivate","nosuid","nodev","tmpcopyup"]}}]"#
        ));
        let a = args(&plan(&spec(&s), Path::new("/b")).unwrap());
        assert!(a.contains(&format!("{d}:/data:ro")) && a.contains(&format!("{d}:/data2")), "{a:?}");
        assert_eq!(a.iter().filter(|x| *x == "-v").count(), 2);
        let t = a.iter().position(|x| x == "--tmpfs").unwrap();
        assert_eq!(a[t + 1], "/run:rw,rprivate,nosuid,nodev,tmpcopyup");
        assert_eq!(a.iter().filter(|x| *x == "--tmpfs").count(), 1, "/dev and /dev/shm are the VM's own");
        for bad in [
            r#"{"destination":"/x","type":"nfs","source":"srv:/x"}"#.to_string(),
            r#"{"destination":"/x","type":"bind","source":"/etc/passwd","options":["bind"]}"#.to_string(),
            format!(r#"{{"destination":"/tmp/x","type":"bind","source":"{d}","options":["bind"]}}"#),
            r#"{"destination":"/x","type":"tmpfs","source":"tmpfs","options":["uid=1000"]}"#.to_string(),
            r#"{"destination":"/proc/x","type":"tmpfs","source":"tmpfs"}"#.to_string(),
        ] {
            let s = base(&format!(r#","mounts":[{bad}]"#));
            assert!(matches!(plan(&spec(&s), Path::new("/b")), Err(SpecError::Unsupported(_))), "{bad}");
        }
    }

    #[test]
    fn refusals() {
        for (extra, word) in [
            (r#","linux":{"sysctl":{"kernel.shmmax":"1"}}"#, "kernel.shmmax"),
            (r#","linux":{"uidMappings":[{"containerID":0,"hostID":1000,"size":1}]}"#, "uidMappings"),
            (r#","hooks":{"startContainer":[{"path":"/bin/true"}]}"#, "startContainer"),
        ] {
            match plan(&spec(&base(extra)), Path::new("/b")) {
                Err(e @ SpecError::Unsupported(_)) => assert!(e.to_string().contains(word), "{e}"),
                other => panic!("{extra}: {other:?}"),
            }
        }
        let s = base("").replace("1.0.2", "invalid");
        assert!(matches!(plan(&spec(&s), Path::new("/b")), Err(SpecError::Unsupported(m)) if m.contains("ociVersion")));
        assert!(plan(&spec(&base("").replace("1.0.2", "1.1.0-rc.1")), Path::new("/b")).is_ok());
        let s = base("").replace(r#""uid":0"#, r#""uid":1000"#);
        assert!(matches!(plan(&spec(&s), Path::new("/b")), Err(SpecError::Unsupported(_))));
        let s = base("").replace(r#""user""#, r#""rlimits":[{"type":"RLIMIT_CORE","hard":0,"soft":1}],"user""#);
        assert!(matches!(plan(&spec(&s), Path::new("/b")), Err(SpecError::Unsupported(_))), "soft above hard");
        let s = base(r#","linux":{"sysctl":{"net.ipv4.ping_group_range":"0 0"}}"#)
            .replace(r#""user""#, r#""terminal":true,"rlimits":[{"type":"RLIMIT_NOFILE","hard":1,"soft":1}],"user""#);
        assert!(plan(&spec(&s), Path::new("/b")).unwrap().terminal);
    }
}
