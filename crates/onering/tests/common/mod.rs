//! Helpers shared by the guest-program tests: building the C programs in
//! tests/guest/c with musl-gcc (once per process), running onering (with the
//! `--smp` of ONERING_TEST_SMP for tests that do not choose), reading results.
//!
//! These tests need /dev/kvm and musl-gcc; without them they fail, loudly.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-c");
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn require_kvm() {
    assert!(Path::new("/dev/kvm").exists(), "these tests need /dev/kvm, and this machine has none");
}

/// A musl static build of tests/guest/c/NAME.c (with pthreads), once per process.
pub fn musl(name: &str) -> PathBuf {
    musl_with(name, &["-O2"], "-common")
}

/// tests/guest/c/NAME.c built static with musl-gcc and `flags`, as NAME`suffix`
/// in the output directory (once per process for each result).
pub fn musl_with(name: &str, flags: &[&str], suffix: &str) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    static BUILT: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = root().join("tests/guest/c").join(format!("{name}.c"));
    let bin = out_dir().join(format!("{name}{suffix}"));
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    if built.lock().unwrap().contains(&bin) {
        return bin;
    }
    let out = Command::new("musl-gcc")
        .arg("-static")
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .arg("-lpthread")
        .output()
        .unwrap_or_else(|e| panic!("cannot run musl-gcc (apt-get install musl-tools): {e}"));
    assert!(out.status.success(), "musl-gcc {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
    built.lock().unwrap().push(bin.clone());
    bin
}

/// The onering command with `args` (and `--smp` from ONERING_TEST_SMP).
pub fn cmd(args: &[&str]) -> Command {
    require_kvm();
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if let Ok(n) = std::env::var("ONERING_TEST_SMP") {
        if a.first().map(String::as_str) == Some("run") && !a.iter().any(|s| s == "--smp") {
            a.insert(1, format!("--smp={n}"));
        }
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_onering"));
    c.args(a);
    c
}

/// Runs onering with `args`, stdin empty, collecting the output.
pub fn onering(args: &[&str]) -> Output {
    cmd(args).stdin(Stdio::null()).output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stderr of a run, without the warning `--smp` above the host's CPU count
/// prints (ONERING_TEST_SMP=4 on a 2-CPU machine).
pub fn stderr(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stderr);
    s.split_inclusive('\n').filter(|l| !l.starts_with("onering: warning: --smp")).collect()
}

pub fn status(o: &Output) -> i32 {
    o.status.code().expect("onering itself was killed by a signal")
}

/// A fresh directory under the test's temporary directory.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The raw stderr of a run, without that warning (printed before the program runs).
pub fn stderr_bytes(o: &Output) -> &[u8] {
    let e = &o.stderr[..];
    match e.strip_prefix(b"onering: warning: --smp".as_slice()) {
        Some(rest) => rest.iter().position(|b| *b == b'\n').map_or(&[][..], |i| &rest[i + 1..]),
        None => e,
    }
}

/// The Go toolchain, for static binaries (CGO_ENABLED=0), found on PATH or in
/// /usr/local/go/bin.
pub fn go() -> Command {
    let mut c = Command::new("go");
    c.env("CGO_ENABLED", "0");
    if let Ok(path) = std::env::var("PATH") {
        c.env("PATH", format!("{path}:/usr/local/go/bin"));
    }
    c
}

/// Builds the Go guest program (tests/guest/go) to `bin`.
pub fn build_go_guest(bin: &Path) {
    let out = go()
        .args(["build", "-o"])
        .arg(bin)
        .arg(".")
        .current_dir(root().join("tests/guest/go"))
        .output()
        .expect("go (the Go toolchain must be installed)");
    assert!(out.status.success(), "go build: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn require_passt() {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).any(|d| d.join("passt").exists());
    assert!(found, "these tests need passt (apt-get install passt, or scripts/setup.sh)");
}

/// The pids of passt processes whose command line has `needle`.
pub fn passts_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("passt") && cmdline.contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// A network namespace for one test, removed when dropped.
pub struct Netns(pub String);

impl Netns {
    pub fn new(name: &str) -> Netns {
        let name = format!("{name}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).status();
        let ok = Command::new("ip").args(["netns", "add", &name]).status();
        assert!(ok.is_ok_and(|s| s.success()), "cannot make a network namespace (ip netns add; root needed)");
        Netns(name)
    }
    pub fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.0, "ip"]).args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}
