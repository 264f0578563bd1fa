//! onering as an OCI runtime: runc's command line driven directly (create, state,
//! start, kill, delete, ps, features, exec, hooks, a crash's leftovers),
//! then real clients: podman (Debian's 4.3, rootful, vfs storage, cgroupfs) and
//! containerd's `ctr` with the runc shim (a containerd of the test's own), each
//! given onering as the runtime, on a root file system of busybox and a static C
//! program.
//!
//! Needs /dev/kvm, /bin/busybox, musl-gcc, podman and containerd (scripts/setup.sh
//! installs them); without them these tests fail, loudly.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_onering");

/// A root file system: static busybox (with its applets as links) and the static
/// C program `hello` in /bin.
/// (Made once per process: the tests share it.)
fn rootfs() -> PathBuf {
    static ROOTFS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOTFS.get_or_init(make_rootfs).clone()
}

fn make_rootfs() -> PathBuf {
    require_kvm();
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    let dir = temp_dir(&format!("oci-rootfs-{}", std::process::id()));
    for d in ["bin", "proc", "sys", "data", "etc"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).unwrap();
    for applet in ["sh", "cat", "echo", "grep", "sleep", "test", "true", "ls", "mkdir"] {
        std::os::unix::fs::symlink("busybox", dir.join("bin").join(applet)).unwrap();
    }
    std::fs::copy(musl("hello"), dir.join("bin/hello")).unwrap();
    dir
}

/// The mounts every bundle has (unless `extra` gives its own).
const DEFAULT_MOUNTS: &str = r#""mounts":[{"destination":"/proc","type":"proc","source":"proc"},
    {"destination":"/dev/pts","type":"devpts","source":"devpts"}],"#;

/// A bundle in a fresh directory NAME: config.json with `args`, and `extra`
/// (JSON members after the process) spliced in.
fn bundle(name: &str, rootfs: &Path, args: &[&str], extra: &str) -> PathBuf {
    let dir = temp_dir(name);
    let config = format!(
        r#"{{"ociVersion":"1.0.2","root":{{"path":"{}"}},
            "process":{{"args":{},"env":["PATH=/bin","A=oci"],"cwd":"/","user":{{"uid":0,"gid":0}},
                        "rlimits":[{{"type":"RLIMIT_NOFILE","hard":1024,"soft":1024}}]}},
            {mounts}"linux":{{"namespaces":[{{"type":"pid"}},{{"type":"mount"}},{{"type":"network"}}],
                      "maskedPaths":["/proc/kcore"],"readonlyPaths":["/proc/sys"]}}{extra}}}"#,
        rootfs.display(),
        serde_json::to_string(args).unwrap(),
        mounts = if extra.contains(r#""mounts""#) { "" } else { DEFAULT_MOUNTS },
    );
    std::fs::write(dir.join("config.json"), config).unwrap();
    dir
}

/// `onering --root ROOT ARGS`, its output collected (not for `create`, whose
/// VMM keeps the pipes).
fn runc(root: &Path, args: &[&str]) -> Output {
    Command::new(BIN).arg("--root").arg(root).args(args).stdin(Stdio::null()).output().unwrap()
}

/// Runs `c` with `input` on its stdin, piece by piece with a pause between
/// (a reader must wait for what comes later), closed after the last.
fn with_input(mut c: Command, input: &[&[u8]]) -> Output {
    use std::io::Write;
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut to = child.stdin.take().unwrap();
    let pieces: Vec<Vec<u8>> = input.iter().map(|p| p.to_vec()).collect();
    let writer = std::thread::spawn(move || {
        for (i, p) in pieces.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            if to.write_all(p).is_err() {
                return;
            }
        }
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    o
}

/// `onering --root ROOT exec ARGS`, with `input` on its stdin (see `with_input`).
fn runc_with_input(root: &Path, args: &[&str], input: &[&[u8]]) -> Output {
    let mut c = Command::new(BIN);
    c.arg("--root").arg(root).arg("exec").args(args);
    with_input(c, input)
}

/// `create` of bundle B as ID, the container's stdout and stderr going to
/// B/out; returns create's status and stderr.
fn create(root: &Path, b: &Path, id: &str, log: &Path) -> (i32, String) {
    create_with(root, b, id, log, &["--systemd-cgroup"])
}

/// `create` as `create` does it, with the global flags `globals`.
fn create_with(root: &Path, b: &Path, id: &str, log: &Path, globals: &[&str]) -> (i32, String) {
    let out = std::fs::File::create(b.join("out")).unwrap();
    let err = std::fs::File::create(b.join("create.err")).unwrap();
    let s = Command::new(BIN)
        .arg("--root")
        .arg(root)
        .arg("--log")
        .arg(log)
        .args(["--log-format", "json"])
        .args(globals)
        .args(["create", "--bundle"])
        .arg(b)
        .arg("--pid-file")
        .arg(b.join("pid"))
        .arg(id)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(err)
        .status()
        .unwrap();
    (s.code().unwrap(), std::fs::read_to_string(b.join("create.err")).unwrap())
}

fn state(root: &Path, id: &str) -> serde_json::Value {
    let o = runc(root, &["state", id]);
    assert_eq!(status(&o), 0, "state {id}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Waits (10 s at most) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn runc_lifecycle_hooks_and_signals() {
    let root = temp_dir("oci-state-lifecycle");
    let rf = rootfs();
    let script = "echo hello $A; trap 'echo got TERM; exit 7' TERM; echo ready; while true; do sleep 0.05; done";
    let b = temp_dir("oci-bundle-lifecycle");
    let hooks = format!(
        r#","hooks":{{"prestart":[{{"path":"/bin/sh","args":["sh","-c","cat > {0}/prestart.json"]}}],
                     "poststop":[{{"path":"/bin/false"}},
                                 {{"path":"/bin/sh","args":["sh","-c","cat > {0}/poststop.json"]}}]}}"#,
        b.display()
    );
    let b = bundle("oci-bundle-lifecycle", &rf, &["sh", "-c", script], &hooks);
    let (code, err) = create(&root, &b, "life", &b.join("log.json"));
    assert_eq!(code, 0, "create: {err}");
    let pid: i64 = std::fs::read_to_string(b.join("pid")).unwrap().parse().unwrap();
    let s = state(&root, "life");
    assert_eq!((s["status"].as_str(), s["pid"].as_i64(), s["id"].as_str()), (Some("created"), Some(pid), Some("life")));
    assert_eq!(s["bundle"].as_str(), b.to_str());
    // The prestart hook ran on the host with the state on its stdin.
    let hook: serde_json::Value = serde_json::from_slice(&std::fs::read(b.join("prestart.json")).unwrap()).unwrap();
    assert_eq!((hook["pid"].as_i64(), hook["status"].as_str()), (Some(pid), Some("created")));
    // Created: the process waits at the gate; the program has not run.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(std::fs::read_to_string(b.join("out")).unwrap(), "");
    let ps = runc(&root, &["ps", "--format", "json", "life"]);
    assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), format!("[{pid}]"));
    let o = runc(&root, &["start", "life"]);
    assert_eq!(status(&o), 0, "start: {}", stderr(&o));
    eventually("the program's output", || std::fs::read_to_string(b.join("out")).unwrap().contains("ready"));
    assert_eq!(state(&root, "life")["status"], "running");
    // The container's pid is the VMM's, running onering run.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(cmdline.starts_with(b"onering\0run\0"), "{}", String::from_utf8_lossy(&cmdline));
    let o = runc(&root, &["start", "life"]);
    assert_eq!(status(&o), 1, "a second start fails");
    let o = runc(&root, &["delete", "life"]);
    assert!(status(&o) == 1 && stderr(&o).contains("onering: cannot delete container life that is not stopped"));
    // SIGTERM reaches the program, whose trap runs.
    let o = runc(&root, &["kill", "life", "TERM"]);
    assert_eq!(status(&o), 0, "kill: {}", stderr(&o));
    eventually("the container to stop", || state(&root, "life")["status"] == "stopped");
    assert_eq!(state(&root, "life")["pid"], 0);
    assert_eq!(std::fs::read_to_string(b.join("out")).unwrap(), "hello oci\nready\ngot TERM\n");
    let o = runc(&root, &["kill", "life", "KILL"]);
    assert!(status(&o) == 1 && stderr(&o).contains("not running"));
    // A poststop hook that fails is a warning; the next one still runs.
    let o = runc(&root, &["delete", "life"]);
    assert_eq!(status(&o), 0, "delete: {}", stderr(&o));
    assert!(stderr(&o).contains("warning: poststop hook /bin/false"), "{}", stderr(&o));
    let hook: serde_json::Value = serde_json::from_slice(&std::fs::read(b.join("poststop.json")).unwrap()).unwrap();
    assert_eq!(hook["status"], "stopped");
    assert!(!root.join("life").exists());
    let o = runc(&root, &["state", "life"]);
    assert!(status(&o) == 1 && stderr(&o).contains("onering: container life does not exist"));
}

#[test]
fn runc_exec_starts_processes_in_the_running_vm() {
    let root = temp_dir("oci-state-exec");
    let rf = rootfs();
    let b = bundle("oci-bundle-exec", &rf, &["sh", "-c", "echo main; while true; do sleep 0.05; done"], "");
    let (code, err) = create(&root, &b, "ex", &b.join("log.json"));
    assert_eq!(code, 0, "create: {err}");
    let o = runc(&root, &["exec", "ex", "true"]);
    assert!(status(&o) == 1 && stderr(&o).contains("onering: cannot exec in a container that is created"));
    assert_eq!(status(&runc(&root, &["start", "ex"])), 0);
    eventually("the program's output", || std::fs::read_to_string(b.join("out")).unwrap().contains("main"));
    // Output, the container's environment with --env added, the exit status.
    // /dev/stdout and /dev/stderr are the exec'd process's own streams, and the
    // bundle's RLIMIT_NOFILE its limit, as the container's program's.
    let script = "echo hi $A $B; pwd; echo err >&2; echo out >/dev/stdout; echo e2 >/dev/stderr; ulimit -Hn; exit 3";
    let o = runc(&root, &["exec", "--env", "B=x", "ex", "sh", "-c", script]);
    assert_eq!((status(&o), stdout(&o).as_str(), stderr(&o).as_str()), (3, "hi oci x\n/\nout\n1024\n", "err\ne2\n"));
    // A signal that kills it: 128 + N, as runc.
    let o = runc(&root, &["exec", "ex", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(status(&o), 143, "{}", stderr(&o));
    // --process (what the shim and conmon give), its cwd and env.
    let p = b.join("process.json");
    std::fs::write(&p, r#"{"args":["sh","-c","echo $P; pwd"],"env":["P=proc"],"cwd":"/bin","user":{"uid":0,"gid":0}}"#)
        .unwrap();
    let o = runc(&root, &["exec", "--process", p.to_str().unwrap(), "ex"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "proc\n/bin\n"), "{}", stderr(&o));
    // Bad requests.
    let o = runc(&root, &["exec", "ex", "nothere"]);
    assert_eq!(status(&o), 127);
    assert!(stderr(&o).contains("onering: exec: nothere: No such file or directory"), "{}", stderr(&o));
    let o = runc(&root, &["exec", "--user", "1000", "ex", "true"]);
    assert!(status(&o) == 1 && stderr(&o).contains("onering: exec: --user 1000 is not supported"));
    let o = runc(&root, &["exec", "--cwd", "/nowhere", "ex", "true"]);
    assert_ne!(status(&o), 0);
    let o = runc(&root, &["exec", "--tty", "ex", "true"]);
    assert!(status(&o) == 1 && stderr(&o).contains("needs --console-socket"), "{}", stderr(&o));
    // Stdin (`exec -i`): the client's reaches the process; it waits for what
    // comes later, and reads end of file when the client's ends.
    let o = runc_with_input(&root, &["ex", "cat"], &[b"hello\n", b"from the host\n"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "hello\nfrom the host\n"), "{}", stderr(&o));
    let script = "read a; echo got $a; read b; echo then $b; read c || echo end; exit 4";
    let o = runc_with_input(&root, &["ex", "sh", "-c", script], &[b"one\n", b"two\n"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (4, "got one\nthen two\nend\n"), "{}", stderr(&o));
    let big: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let o = runc_with_input(&root, &["ex", "busybox", "wc", "-c"], &[&big[..100_000], &big[100_000..]]);
    assert_eq!((status(&o), stdout(&o).trim()), (0, "300000"), "{}", stderr(&o));
    // poll: a read with a timeout waits for input that comes later, and sees the end.
    let script = "read -t 10 x && echo got $x; read -t 10 y || echo end";
    let o = runc_with_input(&root, &["ex", "sh", "-c", script], &[b"", b"later\n"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "got later\nend\n"), "{}", stderr(&o));
    let o = runc(&root, &["exec", "ex", "sh", "-c", "cat; echo eof"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "eof\n"), "an empty stdin: {}", stderr(&o));
    // Two at once: each reads its own client's stdin.
    let two: Vec<_> = ["first", "second"]
        .into_iter()
        .map(|w| {
            let root = root.clone();
            std::thread::spawn(move || {
                let line = format!("{w}\n");
                runc_with_input(&root, &["ex", "sh", "-c", "read x; sleep 0.2; echo $x"], &[line.as_bytes()])
            })
        })
        .collect();
    for (t, w) in two.into_iter().zip(["first\n", "second\n"]) {
        let o = t.join().unwrap();
        assert_eq!((status(&o), stdout(&o).as_str()), (0, w), "{}", stderr(&o));
    }
    // A process gone with a read outstanding: the next one in its slot gets
    // its own input, not an end of file meant for the old one.
    let o = runc_with_input(&root, &["ex", "sh", "-c", "(cat >/dev/null &); sleep 0.1; exit 2"], &[b"", b"x\n"]);
    assert_eq!(status(&o), 2, "{}", stderr(&o));
    let o = runc_with_input(&root, &["ex", "cat"], &[b"", b"mine\n"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "mine\n"), "{}", stderr(&o));
    // Detached, as the shim and conmon run it: the stand-in's pid in the pid
    // file; a signal to it reaches the process. (Its streams are files: the
    // process keeps them, as runc's would.)
    let eout = std::fs::File::create(b.join("eout")).unwrap();
    let script = "trap 'echo got TERM; exit 5' TERM; echo ready; while true; do sleep 0.05; done";
    let s = Command::new(BIN)
        .arg("--root")
        .arg(&root)
        .args(["exec", "--detach", "--pid-file"])
        .arg(b.join("epid"))
        .args(["ex", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(eout.try_clone().unwrap())
        .stderr(eout)
        .status()
        .unwrap();
    assert_eq!(s.code(), Some(0), "exec --detach: {}", std::fs::read_to_string(b.join("eout")).unwrap());
    let pid: i32 = std::fs::read_to_string(b.join("epid")).unwrap().parse().unwrap();
    eventually("the exec'd process's output", || std::fs::read_to_string(b.join("eout")).unwrap() == "ready\n");
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    eventually("the signal to reach it", || std::fs::read_to_string(b.join("eout")).unwrap() == "ready\ngot TERM\n");
    let gone = || std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "));
    eventually("the stand-in to end", gone);
    // The container's own program ran on all along.
    assert_eq!(state(&root, "ex")["status"], "running");
    assert_eq!(status(&runc(&root, &["delete", "--force", "ex"])), 0);
    let o = runc(&root, &["exec", "ex", "true"]);
    assert!(status(&o) == 1 && stderr(&o).contains("does not exist"));
}

/// Sets `linux.KEY` of bundle B's config.json to `value`.
fn set_linux(b: &Path, key: &str, value: serde_json::Value) {
    let path = b.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    config["linux"][key] = value;
    std::fs::write(&path, config.to_string()).unwrap();
}

/// Whether the host has cgroup v2 alone (else v1, maybe with an empty v2
/// hierarchy beside).
fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The directories of cgroup PATH (absolute, as in /proc/PID/cgroup): one in
/// each hierarchy.
fn cgroup_dirs(path: &str) -> Vec<PathBuf> {
    let rel = path.trim_start_matches('/');
    if cgroup_v2() {
        return vec![Path::new("/sys/fs/cgroup").join(rel)];
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|h| h.join("cgroup.procs").exists())
        .map(|h| h.join(rel))
        .collect();
    dirs.sort();
    dirs
}

/// The file NAME of cgroup PATH for the controller that has it (v1: the
/// hierarchy named by the file's prefix, as `memory` for `memory.max_usage_in_bytes`).
fn cgroup_file(path: &str, name: &str) -> String {
    let rel = path.trim_start_matches('/');
    let dir = match cgroup_v2() {
        true => Path::new("/sys/fs/cgroup").join(rel),
        false => Path::new("/sys/fs/cgroup").join(name.split('.').next().unwrap()).join(rel),
    };
    let file = dir.join(name);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display())).trim().to_string()
}

/// Checks that process PID is in cgroup PATH with memory limit MEM (bytes)
/// and CPU quota QUOTA of PERIOD.
fn assert_in_cgroup(pid: i32, path: &str, mem: u64, quota: u64, period: u64) {
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let lines: Vec<&str> = listed.lines().filter(|l| l.ends_with(&format!(":{path}"))).collect();
    let in_ctrl = |c: &str| lines.iter().any(|l| l.split(':').nth(1).unwrap().split(',').any(|x| x == c));
    if cgroup_v2() {
        assert_eq!(lines, [format!("0::{path}")], "{listed}");
        assert_eq!(cgroup_file(path, "memory.max"), mem.to_string());
        assert_eq!(cgroup_file(path, "cpu.max"), format!("{quota} {period}"));
    } else {
        assert!(in_ctrl("memory") && in_ctrl("cpu") && in_ctrl("cpuacct") && in_ctrl("pids"), "{listed}");
        assert_eq!(cgroup_file(path, "memory.limit_in_bytes"), mem.to_string());
        assert_eq!(cgroup_file(path, "cpu.cfs_quota_us"), quota.to_string());
        assert_eq!(cgroup_file(path, "cpu.cfs_period_us"), period.to_string());
    }
}

/// What onering adds to a container's memory limit for the VMM's own needs.
const HEADROOM: u64 = 64 << 20;

#[test]
fn runc_places_the_vmm_in_the_bundles_cgroup() {
    let root = temp_dir("oci-state-cgroup");
    let rf = rootfs();
    let me = std::process::id();
    let b = bundle("oci-bundle-cgroup", &rf, &["sh", "-c", "echo ready; while true; do sleep 0.05; done"], "");
    let resources = serde_json::json!({"memory": {"limit": 134217728}, "cpu": {"quota": 50000, "period": 100000},
                                       "pids": {"limit": 10}});
    set_linux(&b, "resources", resources);
    let log = b.join("log.json");
    // cgroupfs: an absolute path below each hierarchy's root.
    let path = format!("/onering-test-{me}");
    set_linux(&b, "cgroupsPath", path.clone().into());
    let (code, err) = create_with(&root, &b, "cg", &log, &[]);
    assert_eq!(code, 0, "create: {err}");
    let pid: i32 = std::fs::read_to_string(b.join("pid")).unwrap().parse().unwrap();
    // Placed while it waits at the gate, with the bundle's limits (the memory
    // one with the VMM's headroom); pids.limit is the guest's to enforce.
    assert_in_cgroup(pid, &path, 134217728 + HEADROOM, 50000, 100000);
    if !cgroup_v2() {
        assert_eq!(cgroup_file(&path, "pids.max"), "max");
    }
    assert_eq!(status(&runc(&root, &["start", "cg"])), 0);
    eventually("the program's output", || std::fs::read_to_string(b.join("out")).unwrap().contains("ready"));
    // The VM's work is the cgroup's: its threads are in it, and charged.
    let threads: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().map(|t| t.unwrap().path()).collect();
    assert!(threads.len() > 1);
    for t in threads {
        let listed = std::fs::read_to_string(t.join("cgroup")).unwrap();
        assert!(listed.lines().any(|l| l.ends_with(&format!(":{path}"))), "{}: {listed}", t.display());
    }
    let usage: u64 = match cgroup_v2() {
        true => cgroup_file(&path, "memory.current").parse().unwrap(),
        false => cgroup_file(&path, "memory.usage_in_bytes").parse().unwrap(),
    };
    assert!(usage > 4 << 20, "the VM's memory is charged to the cgroup: {usage}");
    if !cgroup_v2() {
        let cpu: u64 = cgroup_file(&path, "cpuacct.usage").parse().unwrap();
        assert!(cpu > 0);
    }
    let o = runc(&root, &["delete", "--force", "cg"]);
    assert_eq!((status(&o), stderr(&o).as_str()), (0, ""));
    for d in cgroup_dirs(&path) {
        assert!(!d.exists(), "{} is left", d.display());
    }
    // --systemd-cgroup: SLICE:PREFIX:NAME is the directory systemd would make
    // for the scope unit.
    set_linux(&b, "cgroupsPath", format!("oneringtest.slice:onering:{me}").into());
    let (code, err) = create_with(&root, &b, "cgs", &log, &["--systemd-cgroup"]);
    assert_eq!(code, 0, "create: {err}");
    let pid: i32 = std::fs::read_to_string(b.join("pid")).unwrap().parse().unwrap();
    let scope = format!("/oneringtest.slice/onering-{me}.scope");
    assert_in_cgroup(pid, &scope, 134217728 + HEADROOM, 50000, 100000);
    assert_eq!(status(&runc(&root, &["delete", "cgs"])), 0);
    for d in cgroup_dirs(&scope) {
        assert!(!d.exists(), "{} is left", d.display());
        // (The slice stays, as systemd's would; it goes here.)
        let _ = std::fs::remove_dir(d.parent().unwrap());
    }
    set_linux(&b, "cgroupsPath", path.clone().into());
    let (code, err) = create_with(&root, &b, "cgbad", &log, &["--systemd-cgroup"]);
    assert!(code == 1 && err.contains("must be SLICE:PREFIX:NAME"), "a cgroupfs path with --systemd-cgroup: {err}");
    assert!(!root.join("cgbad").exists());
    // A limit the kernel refuses (a quota below its 1 ms minimum): create
    // fails, the VMM is killed, its cgroup and record go.
    set_linux(&b, "resources", serde_json::json!({"cpu": {"quota": 500, "period": 100000}}));
    let (code, err) = create_with(&root, &b, "cgfail", &log, &[]);
    assert!(code == 1 && err.contains("onering: cgroup /sys/fs/cgroup/"), "{err}");
    assert!(!root.join("cgfail").exists());
    for d in cgroup_dirs(&path) {
        assert!(!d.exists(), "{} is left", d.display());
    }
    // No cgroupsPath: the VMM stays where create ran.
    let b = bundle("oci-bundle-nocgroup", &rf, &["true"], "");
    assert_eq!(create_with(&root, &b, "nocg", &log, &[]).0, 0);
    let pid: i32 = std::fs::read_to_string(b.join("pid")).unwrap().parse().unwrap();
    let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap(), mine);
    assert_eq!(status(&runc(&root, &["delete", "nocg"])), 0);
}

/// `oci::cgroup::place` on a real cgroup v2 file system, as a pure v2 host
/// has at /sys/fs/cgroup (the runc test covers that); on a v1 host, the
/// hybrid's empty v2 hierarchy, which has no controllers to enable.
#[test]
fn cgroup_v2_placement_on_the_kernels_file_system() {
    use onering::oci::cgroup::{place, place_of, remove, Limits};
    let unified = Path::new("/sys/fs/cgroup/unified");
    let root = if cgroup_v2() { Path::new("/sys/fs/cgroup") } else { unified };
    assert!(root.join("cgroup.controllers").exists(), "no cgroup v2 file system at {}", root.display());
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id() as i32;
    let path = format!("/onering-unit-{}", std::process::id());
    let mut made = vec![];
    let at = place_of(&path, false).unwrap();
    place(root, "", &at, &Limits::default(), pid, &mut made).unwrap();
    assert_eq!(made, [root.join(&path[1..])]);
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(listed.lines().any(|l| l == format!("0::{path}")), "{listed}");
    if !cgroup_v2() {
        // No controllers here: a limit cannot be held.
        let limits = Limits { memory: Some(1 << 30), ..Limits::default() };
        let e = place(root, "", &place_of("/onering-unit-x", false).unwrap(), &limits, pid, &mut vec![]).unwrap_err();
        assert!(e.to_string().contains("the memory controller is not available"), "{e}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    remove(&made).unwrap();
    assert!(!made[0].exists());
}

#[test]
fn runc_refusals_force_and_leftovers() {
    let root = temp_dir("oci-state-refusals");
    let rf = rootfs();
    // A mount onering cannot honour: refused by create, with a JSON log line,
    // and nothing left behind.
    let b =
        bundle("oci-bundle-nfs", &rf, &["true"], r#","mounts":[{"destination":"/x","type":"nfs","source":"s:/x"}]"#);
    let log = b.join("log.json");
    let (code, err) = create(&root, &b, "nfs", &log);
    assert_eq!(code, 1);
    assert!(err.contains("onering: config.json: mount of nfs on /x is not supported by onering"), "{err}");
    let line: serde_json::Value = serde_json::from_str(std::fs::read_to_string(&log).unwrap().trim()).unwrap();
    assert_eq!(line["level"], "error");
    assert!(line["msg"].as_str().unwrap().starts_with("onering: config.json"));
    assert!(!root.join("nfs").exists());
    // A created container goes with delete (its gate process killed); a running
    // one with delete --force.
    let b = bundle("oci-bundle-force", &rf, &["sleep", "100"], "");
    for (id, start) in [("gated", false), ("forced", true)] {
        assert_eq!(create(&root, &b, id, &log).0, 0);
        let pid: i32 = std::fs::read_to_string(b.join("pid")).unwrap().parse().unwrap();
        if start {
            assert_eq!(status(&runc(&root, &["start", id])), 0);
            assert_eq!(state(&root, id)["status"], "running");
        }
        let o = runc(&root, &["delete", "--force", id]);
        assert_eq!(status(&o), 0, "delete --force {id}: {}", stderr(&o));
        assert!(!root.join(id).exists());
        let dead = || std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "));
        eventually("the VMM process to end", dead);
    }
    // What a crash half-way through create leaves: a directory without a
    // record, and a gate process waiting on it. delete removes both.
    std::fs::create_dir_all(root.join("half")).unwrap();
    let o = runc(&root, &["delete", "half"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(!root.join("half").exists());
    let o = runc(&root, &["delete", "half"]);
    assert!(status(&o) == 1 && stderr(&o).contains("does not exist"));
    assert_eq!(status(&runc(&root, &["delete", "--force", "half"])), 0, "as runc: --force deletes what is not there");
    let f = runc(&root, &["features"]);
    let f: serde_json::Value = serde_json::from_slice(&f.stdout).unwrap();
    assert_eq!(f["ociVersionMax"], "1.1.0");
    assert_eq!((&f["linux"]["cgroup"]["v1"], &f["linux"]["cgroup"]["v2"]), (&true.into(), &true.into()));
    assert_eq!(
        (&f["annotations"]["org.onering.exec"], &f["annotations"]["org.onering.exec.stdin"]),
        (&"true".into(), &"true".into())
    );
    let o = runc(&root, &["pause", "x"]);
    assert!(status(&o) == 1 && stderr(&o).contains("onering: pause is not supported"));
    // onering's own `run` is untouched by the OCI commands.
    let o = onering(&["run", rf.join("bin/hello").to_str().unwrap()]);
    assert!(stdout(&o).starts_with("hello from onering"), "{}", stderr(&o));
}

/// GET / from `addr` (HTTP/1.0): the whole response.
fn http_get(addr: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
    let mut page = String::new();
    c.read_to_string(&mut page)?;
    Ok(page)
}

/// podman with onering as its runtime, on its own storage under the test's
/// temporary directory.
struct Podman {
    base: PathBuf,
}

impl Podman {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        c.arg("--root")
            .arg(self.base.join("storage"))
            .arg("--runroot")
            .arg(self.base.join("run"))
            .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file"])
            .args(["--runtime", BIN])
            .args(args)
            .stdin(Stdio::null());
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap_or_else(|e| panic!("podman (apt-get install podman): {e}"))
    }
}

#[test]
fn podman_runs_containers_as_onering_vms() {
    let rf = rootfs();
    let base = temp_dir("oci-podman");
    let p = Podman { base: base.clone() };
    let tarball = base.join("image.tar");
    let t = Command::new("tar").arg("-C").arg(&rf).arg("-cf").arg(&tarball).arg(".").output().unwrap();
    assert!(t.status.success());
    let o = p.run(&["import", tarball.to_str().unwrap(), "localhost/onering-test:1"]);
    assert_eq!(status(&o), 0, "podman import: {}", stderr(&o));
    let image = "localhost/onering-test:1";
    let run = |args: &[&str]| {
        let mut a = vec!["run", "--rm", "--network", "none"];
        a.extend(args);
        p.run(&a)
    };
    // Output, arguments, the exit status.
    let o = run(&[image, "hello", "a b"]);
    assert_eq!((status(&o), stdout(&o).lines().nth(2)), (0, Some("argv[1]=a b")), "{}", stderr(&o));
    let o = run(&[image, "sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!((status(&o), stdout(&o).as_str(), stderr(&o).as_str()), (3, "out\n", "err\n"));
    // -e, -v (read-write and :ro), --memory.
    let vol = base.join("vol");
    std::fs::create_dir_all(&vol).unwrap();
    std::fs::write(vol.join("in"), "from the host\n").unwrap();
    let v = format!("{}:/data", vol.display());
    let v_ro = format!("{}:/ro:ro", vol.display());
    let o = run(&[
        "-e",
        "GREETING=podman",
        "-v",
        &v,
        "-v",
        &v_ro,
        "--memory",
        "192m",
        image,
        "sh",
        "-c",
        "echo $GREETING; cat /data/in; echo back > /data/out; cat /sys/fs/cgroup/memory.max; echo x > /ro/no || echo ro",
    ]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), "podman\nfrom the host\n201326592\nro\n", "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(vol.join("out")).unwrap(), "back\n");
    // --read-only and --cpus.
    let o = run(&["--read-only", "--cpus", "2", image, "sh", "-c", "cat /sys/devices/system/cpu/online; echo x > /f"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (1, "0-1\n"), "{}", stderr(&o));
    assert!(stderr(&o).contains("Read-only file system"), "{}", stderr(&o));
    // The bundle's capabilities are the program's (capget, /proc, prctl).
    let o = run(&["--cap-drop", "all", "--cap-add", "net_admin", image, "grep", "^Cap", "/proc/self/status"]);
    let want = "CapInh:\t0000000000000000\nCapPrm:\t0000000000001000\nCapEff:\t0000000000001000\n\
                CapBnd:\t0000000000001000\nCapAmb:\t0000000000000000\n";
    assert_eq!((status(&o), stdout(&o).as_str()), (0, want), "{}", stderr(&o));
    // -t: the program's stdio is the terminal onering sent over the console socket.
    let o = run(&["-t", image, "sh", "-c", "test -t 0 && test -t 1 && echo tty; exit 2"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (2, "tty\r\n"), "{}", stderr(&o));
    // A program that is not in the image: the runtime's failure, as podman reports it.
    let o = run(&[image, "/bin/nothere"]);
    assert_ne!(status(&o), 0);
    // Detached: logs, stop (SIGTERM reaches the program's trap), the exit status, rm.
    let script = "echo started; trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.05; done";
    let o = p.run(&["run", "-d", "--network", "none", "--tmpfs", "/scratch", image, "sh", "-c", script]);
    assert_eq!(status(&o), 0, "run -d: {}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    eventually("podman logs", || stdout(&p.run(&["logs", &id])).contains("started"));
    // exec: a second process in the running VM, its output and status.
    let o = p.run(&["exec", &id, "sh", "-c", "echo hi from exec; exit 6"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (6, "hi from exec\n"), "{}", stderr(&o));
    let o = p.run(&["exec", "-e", "E=podman", &id, "sh", "-c", "echo $E"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "podman\n"), "{}", stderr(&o));
    let o = p.run(&["exec", "-t", &id, "sh", "-c", "test -t 1 && echo tty; kill -KILL $$"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (137, "tty\r\n"), "{}", stderr(&o));
    // Changes to the root file system go to the container's layer; those to a
    // tmpfs (--tmpfs) stay in the VM.
    let o = p.run(&["exec", &id, "sh", "-c", "echo kept > /made && rm /bin/hello && echo t > /scratch/t"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    let o = p.run(&["exec", &id, "grep", " /scratch ", "/proc/mounts"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "tmpfs /scratch tmpfs rw,relatime 0 0\n"), "{}", stderr(&o));
    // exec -i: piped input reaches the process, and its end ends it.
    let o = with_input(p.cmd(&["exec", "-i", &id, "cat"]), &[b"piped to exec\n", b"and more\n"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "piped to exec\nand more\n"), "{}", stderr(&o));
    // exec -i -t: the input goes through the terminal (which echoes it).
    let o = with_input(p.cmd(&["exec", "-i", "-t", &id, "sh", "-c", "read x; echo got $x"]), &[b"typed\n"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("got typed\r\n"), "{:?} {}", stdout(&o), stderr(&o));
    let started = Instant::now();
    let o = p.run(&["stop", "-t", "20", &id]);
    assert_eq!(status(&o), 0, "stop: {}", stderr(&o));
    assert!(started.elapsed() < Duration::from_secs(10), "stop took {:?}: SIGTERM was not handled", started.elapsed());
    assert_eq!(stdout(&p.run(&["logs", &id])), "started\ngot TERM\n");
    let o = p.run(&["inspect", &id, "--format", "{{.State.ExitCode}}"]);
    assert_eq!(stdout(&o).trim(), "0");
    let o = p.run(&["diff", &id]);
    let diff = stdout(&o);
    let diff: Vec<&str> = diff.lines().collect();
    assert!(diff.contains(&"A /made") && diff.contains(&"D /bin/hello"), "podman diff: {diff:?} {}", stderr(&o));
    assert!(!diff.contains(&"A /scratch/t"), "podman diff: {diff:?}");
    let o = p.run(&["rm", &id]);
    assert_eq!(status(&o), 0, "rm: {}", stderr(&o));
    // The VMM is in the container's cgroup (podman's cgroupfs path), with the
    // memory limit and the headroom, and the CPU quota; podman stats reads it.
    let o = p.run(&["run", "-d", "--network", "none", "--memory", "200m", "--cpus", "1.5", image, "sleep", "100"]);
    assert_eq!(status(&o), 0, "run -d --memory --cpus: {}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    let pid: i32 = stdout(&p.run(&["inspect", &id, "--format", "{{.State.Pid}}"])).trim().parse().unwrap();
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mark = if cgroup_v2() { "0::" } else { ":memory:" };
    let path = listed.lines().find_map(|l| l.split_once(mark).map(|(_, p)| p.to_string())).unwrap();
    assert!(path.contains(&format!("libpod-{id}")), "{listed}");
    assert_in_cgroup(pid, &path, (200 << 20) + HEADROOM, 150000, 100000);
    let o = p.run(&["stats", "--no-stream", "--format", "{{.MemUsage}}", &id]);
    assert_eq!(status(&o), 0, "podman stats: {}", stderr(&o));
    // (Its limit is the bundle's; the usage is the VM's, more than nothing.)
    let (used, limit) = stdout(&o).trim().split_once(" / ").map(|(u, l)| (u.to_string(), l.to_string())).unwrap();
    assert!(limit == "209.7MB" && !used.starts_with("0B") && used.ends_with("B"), "podman stats: {}", stdout(&o));
    assert_eq!(status(&p.run(&["rm", "-f", "-t", "0", &id])), 0);
    for d in cgroup_dirs(&path) {
        assert!(!d.exists(), "{} is left", d.display());
    }
    // Pod networking: the default (netavark bridge) network's address is the
    // VM's; the pod IP and a published port reach a server in the VM.
    let server = "mkdir -p /www; echo pod says hi > /www/index.html; exec busybox httpd -f -p 8080 -h /www";
    let o = p.run(&["run", "-d", "-p", "127.0.0.1:18089:8080", image, "sh", "-c", server]);
    assert_eq!(status(&o), 0, "run -d -p: {}", stderr(&o));
    let id = stdout(&o).trim().to_string();
    let ip = stdout(&p.run(&["inspect", &id, "--format", "{{.NetworkSettings.IPAddress}}"])).trim().to_string();
    for addr in [format!("{ip}:8080"), "127.0.0.1:18089".to_string()] {
        let mut page = String::new();
        eventually(&format!("a page from {addr}"), || {
            page = http_get(&addr).unwrap_or_default();
            page.ends_with("pod says hi\n")
        });
        assert!(page.starts_with("HTTP/1.") && page.contains(" 200 "), "{page}");
    }
    assert_eq!(status(&p.run(&["rm", "-f", "-t", "5", &id])), 0);
    // A bundle onering refuses: podman says why.
    let o = run(&["--user", "1000", image, "true"]);
    assert!(status(&o) != 0 && stderr(&o).contains("onering: config.json: process.user 1000:"), "{}", stderr(&o));
    let o = p.run(&["ps", "-a", "-q"]);
    assert_eq!(stdout(&o), "", "no containers left");
}

/// A containerd of the test's own (its root, state and sockets in `dir`),
/// stopped when dropped.
struct Containerd {
    dir: PathBuf,
    daemon: std::process::Child,
}

impl Containerd {
    fn start(dir: PathBuf) -> Containerd {
        let d = dir.display();
        let config = format!(
            "version = 2\nroot = \"{d}/root\"\nstate = \"{d}/state\"\n[grpc]\n  address = \"{d}/sock\"\n\
             [ttrpc]\n  address = \"{d}/sock.ttrpc\"\n[debug]\n  address = \"{d}/debug.sock\"\n\
             [metrics]\n  address = \"\"\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_tcp_service = true\n"
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        let daemon = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("containerd.log")).unwrap())
            .stderr(std::fs::File::create(dir.join("containerd.err")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("containerd (apt-get install containerd): {e}"));
        let c = Containerd { dir, daemon };
        eventually("containerd to answer", || c.ctr(&["version"]).status.success());
        c
    }
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ctr");
        c.arg("--address").arg(self.dir.join("sock")).args(args).stdin(Stdio::null());
        c
    }
    fn ctr(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

#[test]
fn containerd_runs_containers_as_onering_vms() {
    let rf = rootfs();
    let c = Containerd::start(temp_dir("oci-containerd"));
    let rootfs = rf.to_str().unwrap();
    let ctr_run = |extra: &[&str], id: &str, args: &[&str]| {
        let mut a = vec!["run", "--runtime", "io.containerd.runc.v2", "--runc-binary", BIN];
        a.extend(extra);
        a.extend(["--rootfs", rootfs, id]);
        a.extend(args);
        c.ctr(&a)
    };
    // ctr run: output, --env, the exit status.
    let o = ctr_run(&["--rm", "--env", "GREETING=ctr"], "c1", &["sh", "-c", "echo hi $GREETING; exit 4"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (4, "hi ctr\n"), "{}", stderr(&o));
    // Detached: ctr task exec runs a second process; ctr task kill's SIGTERM
    // reaches the program.
    let log = c.dir.join("c2.log");
    let uri = format!("file://{}", log.display());
    let script = "echo started; trap 'echo got TERM; exit 5' TERM; while true; do sleep 0.05; done";
    let o = ctr_run(&["-d", "--log-uri", &uri], "c2", &["sh", "-c", script]);
    assert_eq!(status(&o), 0, "ctr run -d: {}", stderr(&o));
    eventually("the task's output", || std::fs::read_to_string(&log).is_ok_and(|s| s.contains("started")));
    assert!(stdout(&c.ctr(&["task", "ls"])).contains("RUNNING"));
    let o = c.ctr(&["task", "exec", "--exec-id", "e1", "c2", "sh", "-c", "echo hi from exec; exit 9"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (9, "hi from exec\n"), "{}", stderr(&o));
    // Its stdin: ctr's, through the shim's FIFO, to the end.
    let o = with_input(c.cmd(&["task", "exec", "--exec-id", "e2", "c2", "cat"]), &[b"to ctr exec\n", b"done\n"]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "to ctr exec\ndone\n"), "{}", stderr(&o));
    let o = c.ctr(&["task", "kill", "c2"]);
    assert_eq!(status(&o), 0, "ctr task kill: {}", stderr(&o));
    eventually("the task to stop", || stdout(&c.ctr(&["task", "ls"])).contains("STOPPED"));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "started\ngot TERM\n");
    for args in [&["task", "rm", "c2"][..], &["container", "rm", "c2"]] {
        let o = c.ctr(args);
        assert_eq!(status(&o), 0, "ctr {args:?}: {}", stderr(&o));
    }
}
