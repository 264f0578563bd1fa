//! Go programs run through `onering run`, unmodified (CGO_ENABLED=0, the Go on this
//! machine): the guest program in tests/guest/go (one binary, a mode per feature)
//! against the host's output, and Go's own standard-library tests built with
//! `go test -c` and run in a rootfs holding the package's source directory (at its
//! host path, the working directory) and the system files they read, skipping only
//! what tests/guest/go-std/skips.txt lists (with its reason): the core packages in
//! one test, the network ones (net, net/http...) in another, each printing per
//! package how many tests (subtests included) ran, passed and skipped themselves,
//! in onering and on the host.
//!
//! These tests need /dev/kvm and the Go toolchain; without them they fail, loudly.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-go");
    std::fs::create_dir_all(&d).unwrap();
    d
}

use common::go;

/// The guest program, built once.
fn guest() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = out_dir().join("guest");
        common::build_go_guest(&bin);
        bin
    })
}

fn onering(args: &[&str]) -> Output {
    assert!(Path::new("/dev/kvm").exists(), "these tests need /dev/kvm, and this machine has none");
    Command::new(env!("CARGO_BIN_EXE_onering")).args(with_test_smp(args)).stdin(Stdio::null()).output().unwrap()
}

/// `ONERING_TEST_SMP=N` runs every test that does not choose its vCPUs with
/// `--smp N` (scripts/test.sh runs the suite with 1, 2 and 4).
fn with_test_smp(args: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    if let Ok(n) = std::env::var("ONERING_TEST_SMP") {
        if a.first().map(String::as_str) == Some("run") && !a.iter().any(|s| s == "--smp") {
            a.insert(1, format!("--smp={n}"));
        }
    }
    a
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Mode `mode` on the host (in /) and in onering with --smp 1 and 2: same output,
/// same status.
fn same_as_host(mode: &str) {
    let bin = guest();
    let host = Command::new(bin).arg(mode).current_dir("/").output().unwrap();
    assert!(host.status.success(), "{mode} fails on the host: {}", text(&host.stderr));
    for smp in ["1", "2"] {
        let o = onering(&["run", "--smp", smp, bin.to_str().unwrap(), mode]);
        assert_eq!(text(&o.stdout), text(&host.stdout), "{mode} --smp {smp}; stderr: {}", text(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{mode} --smp {smp}: {}", text(&o.stderr));
        assert_eq!(text(&o.stderr), "", "{mode} --smp {smp}: nothing reported");
    }
}

#[test]
fn go_hello() {
    same_as_host("hello");
}

#[test]
fn go_goroutines_channels_mutexes_select() {
    same_as_host("chan");
}

#[test]
fn go_timers_tickers_and_sleep() {
    same_as_host("timers");
    same_as_host("sleepers");
}

#[test]
fn go_tight_loop_is_preempted() {
    // sysmon's SIGURG reaches the spinning thread (an IPI when it is on another
    // vCPU, the preemption tick on the same one).
    same_as_host("preempt");
}

/// The runtime sizes itself to the VM: the CPUs and the cgroup's cpu.max (which
/// follows --smp) agree. The guest's go.mod says 1.22, so the cgroup-aware
/// GOMAXPROCS of Go 1.25 (the default for modules of 1.25 on) is asked for with
/// GODEBUG too: it reads /proc/self/cgroup, /proc/self/mountinfo and
/// /sys/fs/cgroup/cpu.max.
#[test]
fn go_sizes_itself_to_the_vcpus() {
    let bin = guest();
    for smp in ["1", "2"] {
        for env in [&[][..], &["-e", "GODEBUG=containermaxprocs=1"]] {
            let mut a = vec!["run", "--smp", smp];
            a.extend(env);
            a.extend([bin.to_str().unwrap(), "cpus"]);
            let o = onering(&a);
            assert_eq!(text(&o.stdout), format!("NumCPU {smp} GOMAXPROCS {smp}\n"), "{a:?}: {}", text(&o.stderr));
            assert_eq!(o.status.code(), Some(0));
        }
    }
}

#[test]
fn go_panic_and_recover() {
    same_as_host("panic");
}

#[test]
fn go_nil_dereference_is_a_go_panic_with_status_2() {
    for smp in ["1", "2"] {
        let o = onering(&["run", "--smp", smp, guest().to_str().unwrap(), "nil"]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert_eq!(text(&o.stdout), "about to dereference nil\n");
        assert!(err.starts_with("panic: runtime error: invalid memory address or nil pointer dereference\n"), "{err}");
        assert!(err.contains("[signal SIGSEGV: segmentation violation code=0x1 addr=0x0"), "{err}");
        assert!(err.contains("main.nilDeref()"), "{err}");
    }
}

#[test]
fn too_little_memory_for_go_is_refused_naming_the_minimum() {
    let o = onering(&["run", "--mem", "32M", guest().to_str().unwrap(), "hello"]);
    let err = text(&o.stderr);
    // Too small for the image (126, "it needs N MiB") or for the Go runtime past it
    // (125, "needs at least N MiB"): either way one line naming the minimum.
    assert!(matches!(o.status.code(), Some(125 | 126)), "{err}");
    assert_eq!(err.lines().filter(|l| !l.contains("warning: --smp")).count(), 1, "{err}");
    let need = ["needs at least ", "it needs "]
        .iter()
        .find_map(|p| err.split(p).nth(1))
        .and_then(|r| r.split(' ').next())
        .expect(&err);
    assert!(err.contains("--mem 32 MiB"), "{err}");
    // At the minimum it names, the program runs.
    let o = onering(&["run", "--mem", &format!("{need}M"), guest().to_str().unwrap(), "hello"]);
    assert_eq!(o.status.code(), Some(0), "at --mem {need}M: {}", text(&o.stderr));
    assert!(text(&o.stdout).starts_with("hello from go"));
}

#[test]
fn go_net_http_tcp_udp_and_localhost() {
    // httptest with 50 goroutines of keep-alive clients, a TCP echo (io.Copy
    // splices), UDP, localhost from the VM's /etc/hosts, a refused dial.
    same_as_host("net");
}

#[test]
fn go_ten_thousand_loopback_connections() {
    // Held open at once (idle), then a round trip on every one, then an orderly
    // close; --mem 2G: each connection's two sockets have ~96 KiB of buffers.
    let o = onering(&["run", "--mem", "2G", guest().to_str().unwrap(), "conns", "10000"]);
    assert_eq!(
        text(&o.stdout),
        "open connections: 10000 10000\nround trips: 10000\nclosed by the peer: 10000\n",
        "{}",
        text(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn go_files_in_tmp() {
    same_as_host("files");
}

#[test]
fn go_files_in_a_rootfs() {
    let dir = out_dir().join("rootfs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/a.txt"), "alpha\n").unwrap();
    std::fs::write(dir.join("data/b.txt"), "beta\n").unwrap();
    let o = onering(&["run", "--read-only", "--rootfs", dir.to_str().unwrap(), guest().to_str().unwrap(), "rootfs"]);
    assert_eq!(
        text(&o.stdout),
        "a.txt: \"alpha\\n\"\nb.txt: \"beta\\n\"\nrootfs is read-only: true\n",
        "{}",
        text(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn go_exec_fails_with_a_clear_error() {
    let o = onering(&["run", "--quiet", guest().to_str().unwrap(), "exec"]);
    assert_eq!(
        text(&o.stdout),
        "exec fails with an error: true\nerror: fork/exec /bin/true: no such file or directory\n"
    );
    assert_eq!(o.status.code(), Some(0));
}

/// With a tree that has /bin/true (the host's own, as --rootfs /), os/exec runs
/// it: fork/exec of a dynamic program from a static Go one (issue 17).
#[test]
fn go_os_exec_runs_a_program_from_the_rootfs() {
    let o = onering(&["run", "--quiet", "--rootfs", "/", guest().to_str().unwrap(), "exec"]);
    assert_eq!(text(&o.stdout), "exec fails with an error: false\n", "{}", text(&o.stderr));
    assert_eq!(o.status.code(), Some(0));
}

/// The core packages issue 10 names.
const PACKAGES: &[&str] = &[
    "os",
    "io",
    "bufio",
    "bytes",
    "strings",
    "strconv",
    "time",
    "sync",
    "sync/atomic",
    "context",
    "fmt",
    "errors",
    "math",
    "path/filepath",
];

/// The network packages issue 14 names.
const NET_PACKAGES: &[&str] =
    &["net", "net/http", "net/http/httptest", "net/rpc", "net/textproto", "net/url", "net/netip", "log/syslog"];

/// The tests skips.txt skips in `pkg`: a name, or a subtest path whose parts
/// (split at `/`) are each a regular expression for one level.
fn skips(pkg: &str) -> Vec<String> {
    let list = std::fs::read_to_string(root().join("tests/guest/go-std/skips.txt")).unwrap();
    list.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(pkg)).then(|| w.next().unwrap().to_string())
        })
        .collect()
}

/// `-test.skip`'s pattern for these skips: one alternative per skip, each level
/// anchored (Go matches a pattern with `/` level by level, and `|` outside
/// parentheses separates alternatives).
fn skip_pattern(skips: &[String]) -> String {
    let one = |s: &String| s.split('/').map(|p| format!("^{p}$")).collect::<Vec<_>>().join("/");
    skips.iter().map(one).collect::<Vec<_>>().join("|")
}

/// Copies the tree at `from` to `to` (files, directories and symbolic links).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ty = e.file_type().unwrap();
        if ty.is_symlink() {
            let _ = std::fs::remove_file(&dst);
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// What else of GOROOT a package's tests read.
fn goroot_extras(pkg: &str) -> &'static [&'static str] {
    match pkg {
        "path/filepath" => &["src/unicode"], // TestBug3486 walks it
        "time" => &["lib/time"],             // the zone database
        "net" => &["src/testdata"],          // the sendfile tests send ../testdata/Isaac.Newton-Opticks.txt
        _ => &[],
    }
}

/// The file tree a package's tests run in: its source directory at the same path
/// as on the host (the working directory: `go test` runs tests there), what else of
/// GOROOT it reads, the system files Go's tests look at on Linux (/etc/group,
/// /etc/hosts, /etc/passwd, /etc/services, and a populated /usr/bin), and the test
/// binary itself at its host path.
fn std_rootfs(pkg: &str, goroot: &Path, test_bin: &Path) -> PathBuf {
    let root = out_dir().join("std-root").join(pkg.replace('/', "_"));
    let _ = std::fs::remove_dir_all(&root);
    let inside = |p: &Path| root.join(p.strip_prefix("/").unwrap());
    // The test binary at its host path: tests that run it again (os/exec of
    // os.Executable(), as on the host) find it.
    std::fs::create_dir_all(inside(test_bin.parent().unwrap())).unwrap();
    std::fs::copy(test_bin, inside(test_bin)).unwrap();
    let src = goroot.join("src").join(pkg);
    copy_tree(&src, &inside(&src));
    for extra in goroot_extras(pkg) {
        let from = goroot.join(extra);
        copy_tree(&from, &inside(&from));
    }
    std::fs::create_dir_all(root.join("etc")).unwrap();
    for (name, fallback) in [
        ("group", "root:x:0:\n"),
        ("hosts", "127.0.0.1 localhost\n"),
        ("passwd", "root:x:0:0:root:/root:/bin/sh\n"),
        ("services", "echo 7/tcp\necho 7/udp\nhttp 80/tcp www\n"),
    ] {
        let text = std::fs::read_to_string(Path::new("/etc").join(name)).unwrap_or_else(|_| fallback.into());
        std::fs::write(root.join("etc").join(name), text).unwrap();
    }
    let bin = root.join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    for i in 0..300 {
        std::fs::write(bin.join(format!("tool{i:03}")), "").unwrap();
    }
    root
}

/// What one package's `-test.v` output says: tests (and subtests) run, passed,
/// skipped, failed.
#[derive(Default, Debug)]
struct Counts {
    run: usize,
    pass: usize,
    skip: usize,
    fail: usize,
}

fn counts(out: &str) -> Counts {
    let mut c = Counts::default();
    for l in out.lines() {
        let l = l.trim_start();
        if l.starts_with("=== RUN ") {
            c.run += 1;
        } else if l.starts_with("--- PASS: ") {
            c.pass += 1;
        } else if l.starts_with("--- SKIP: ") {
            c.skip += 1;
        } else if l.starts_with("--- FAIL: ") {
            c.fail += 1;
        }
    }
    c
}

/// Builds the tests of `packages` with `go test -c` into `dir`, runs each in
/// onering (`--smp 2`, its rootfs, `-test.short -test.v`, skipping what skips.txt
/// lists) and on the host (in its source directory, nothing skipped), prints the
/// counts of both, and fails naming every package that did not pass in onering.
fn run_standard_library_tests(dir: &str, packages: &[&str]) {
    let dir = out_dir().join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    // One `go test -c` for all.
    let out = go()
        .args(["test", "-c", "-o"])
        .arg(&dir)
        .args(packages)
        .output()
        .expect("go (the Go toolchain must be installed)");
    assert!(out.status.success(), "go test -c: {}", text(&out.stderr));
    let goroot = text(&go().args(["env", "GOROOT"]).output().unwrap().stdout).trim().to_string();
    let mut failed = Vec::new();
    for pkg in packages {
        let name = pkg.rsplit('/').next().unwrap();
        let bin = dir.join(format!("{name}.test"));
        let src = Path::new(&goroot).join("src").join(pkg);
        // (A hang is a failure with every goroutine's stack, not a stuck test.)
        let common = ["-test.short", "-test.v", "-test.timeout=240s"];
        let mut args = vec![
            "run".to_string(),
            "--smp".into(),
            "2".into(),
            "--mem".into(),
            "1G".into(),
            "--quiet".into(),
            "--rootfs".into(),
            std_rootfs(pkg, Path::new(&goroot), &bin).to_str().unwrap().into(),
            "-w".into(),
            src.to_str().unwrap().into(),
            bin.to_str().unwrap().into(),
        ];
        args.extend(common.iter().map(|a| a.to_string()));
        let skip = skips(pkg);
        if !skip.is_empty() {
            args.push(format!("-test.skip={}", skip_pattern(&skip)));
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = std::time::Instant::now();
        let o = onering(&a);
        let took = started.elapsed();
        let stdout = text(&o.stdout);
        let host = Command::new(&bin).args(common).current_dir(&src).stdin(Stdio::null()).output().unwrap();
        let (c, h) = (counts(&stdout), counts(&text(&host.stdout)));
        eprintln!(
            "{pkg}: onering ran {} passed {} skipped {} failed {} (skip list: {}) in {:.1} s; host ran {} passed {} skipped {} failed {}",
            c.run,
            c.pass,
            c.skip,
            c.fail,
            skip.len(),
            took.as_secs_f64(),
            h.run,
            h.pass,
            h.skip,
            h.fail
        );
        if o.status.code() != Some(0) || !stdout.ends_with("PASS\n") || c.fail > 0 {
            let fails: Vec<&str> = stdout.lines().filter(|l| l.trim_start().starts_with("--- FAIL")).collect();
            failed.push(format!(
                "{pkg} (status {:?}), failed: {fails:?}\n{stdout}\n{}",
                o.status.code(),
                text(&o.stderr)
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn go_standard_library_tests_pass() {
    run_standard_library_tests("std", PACKAGES);
}

#[test]
fn go_network_standard_library_tests_pass() {
    run_standard_library_tests("std-net", NET_PACKAGES);
}
