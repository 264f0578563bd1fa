//! Guest programs run through `onering run`: the C programs in tests/guest/c are
//! built with `musl-gcc -static` (once per test run) and their output, stderr and exit
//! status checked, against the same binary on the host where that makes sense. Also
//! every exit status onering itself produces (125, 126, 127).
//!
//! These tests need /dev/kvm and musl-gcc; without them they fail, loudly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("guest-c");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn require_kvm() {
    assert!(Path::new("/dev/kvm").exists(), "these tests need /dev/kvm, and this machine has none");
}

/// Builds tests/guest/c/NAME.c with `compiler` and `flags`, once per process.
fn build(name: &str, compiler: &str, flags: &[&str], suffix: &str) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = root().join("tests/guest/c").join(format!("{name}.c"));
    let bin = out_dir().join(format!("{name}{suffix}"));
    static BUILT: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(Vec::new()));
    if built.lock().unwrap().contains(&bin) {
        return bin;
    }
    let out = Command::new(compiler)
        .args(flags)
        .arg("-O2")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} (apt-get install musl-tools): {e}"));
    assert!(out.status.success(), "{compiler} {name}.c failed:\n{}", String::from_utf8_lossy(&out.stderr));
    built.lock().unwrap().push(bin.clone());
    bin
}

/// A musl static build of a test program.
fn musl(name: &str) -> PathBuf {
    build(name, "musl-gcc", &["-static"], "")
}

fn onering(args: &[&str]) -> Output {
    require_kvm();
    cmd(args).stdin(Stdio::null()).output().unwrap()
}

/// The onering command with `args` (and `--smp` from ONERING_TEST_SMP).
fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_onering"));
    c.args(with_test_smp(args));
    c
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

fn run(bin: &Path, args: &[&str]) -> Output {
    let mut a = vec!["run", bin.to_str().unwrap()];
    a.extend_from_slice(args);
    onering(&a)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stderr of a run, without the warning `--smp` above the host's CPU count
/// prints (ONERING_TEST_SMP=4 on a 2-CPU machine).
fn stderr(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stderr);
    s.split_inclusive('\n').filter(|l| !l.starts_with("onering: warning: --smp")).collect()
}

fn status(o: &Output) -> i32 {
    o.status.code().expect("onering itself was killed by a signal")
}

#[test]
fn hello_with_arguments_environment_and_status() {
    let hello = musl("hello");
    let p = hello.to_str().unwrap();
    let o = onering(&["run", "-e", "GREETING=hi there", "-e", "EXIT_CODE=7", p, "a", "b c"]);
    assert_eq!(stdout(&o), format!("hello from onering\nargv[0]={p}\nargv[1]=a\nargv[2]=b c\nGREETING=hi there\n"));
    assert_eq!(stderr(&o), "");
    assert_eq!(status(&o), 7);
    // The host runs the same binary to the same output.
    let host = Command::new(&hello)
        .args(["a", "b c"])
        .env_clear()
        .env("GREETING", "hi there")
        .env("EXIT_CODE", "7")
        .output()
        .unwrap();
    assert_eq!(host.stdout, o.stdout);
    assert_eq!(host.status.code(), Some(7));
}

#[test]
fn environment_is_exactly_what_was_given() {
    let hello = musl("hello");
    let p = hello.to_str().unwrap();
    // No -e: nothing from the host leaks in.
    let o = cmd(&["run", p]).env("GREETING", "from host").output().unwrap();
    assert!(stdout(&o).contains("GREETING=(unset)\n"), "{}", stdout(&o));
    // -e KEY copies one variable; --env-host copies all; -e overrides.
    let o = cmd(&["run", "-e", "GREETING", p]).env("GREETING", "copied").output().unwrap();
    assert!(stdout(&o).contains("GREETING=copied\n"));
    let o = cmd(&["run", "--env-host", p]).env("GREETING", "all").output().unwrap();
    assert!(stdout(&o).contains("GREETING=all\n"));
    let o = cmd(&["run", "--env-host", "-e", "GREETING=mine", p]).env("GREETING", "all").output().unwrap();
    assert!(stdout(&o).contains("GREETING=mine\n"));
}

#[test]
fn arguments_that_look_like_options_go_to_the_program() {
    let hello = musl("hello");
    let p = hello.to_str().unwrap();
    let o = onering(&["run", "--mem", "64M", p, "--mem", "-e", "x"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("argv[1]=--mem\nargv[2]=-e\nargv[3]=x\n"), "{}", stdout(&o));
}

#[test]
fn null_dereference_is_sigsegv() {
    let o = run(&musl("segv"), &[]);
    assert_eq!(stdout(&o), "about to crash\n");
    assert!(stderr(&o).starts_with("onering: program killed by SIGSEGV at 0x"), "{}", stderr(&o));
    assert!(stderr(&o).contains("(fault address 0x0)"), "{}", stderr(&o));
    assert_eq!(status(&o), 139);
}

#[test]
fn invalid_instruction_is_sigill() {
    let o = run(&musl("ud2"), &[]);
    assert!(stderr(&o).starts_with("onering: program killed by SIGILL at 0x"), "{}", stderr(&o));
    assert_eq!(status(&o), 132);
}

#[test]
fn ten_megabytes_of_output_arrive_intact() {
    let bin = musl("bigout");
    let o = run(&bin, &[]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    let host = Command::new(&bin).output().unwrap();
    assert_eq!(host.stdout.len(), 10_000_000);
    assert!(
        o.stdout == host.stdout,
        "output differs from the host's ({} bytes vs {})",
        o.stdout.len(),
        host.stdout.len()
    );
}

#[test]
fn stdout_and_stderr_keep_program_order() {
    let bin = musl("order");
    require_kvm();
    // Both streams into one pipe, as `2>&1 | cat` would.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("'{}' run '{}' 2>&1", env!("CARGO_BIN_EXE_onering"), bin.display()))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "out\nerr\n".repeat(5) + "partial-then-err\n");
}

#[test]
fn unsupported_syscalls_fail_with_enosys_and_are_reported_once() {
    let bin = musl("unsupported");
    let o = run(&bin, &[]);
    assert_eq!(status(&o), 0);
    let expect = "acct: -1 errno=38\ngetcpu: -1 errno=38\n999: -1 errno=38\n";
    assert_eq!(stdout(&o), expect.repeat(2));
    assert_eq!(
        stderr(&o),
        "onering: unsupported syscall acct (163)\nonering: unsupported syscall getcpu (309)\nonering: unsupported syscall 999\n"
    );
    let q = onering(&["run", "--quiet", bin.to_str().unwrap()]);
    assert_eq!(stderr(&q), "");
    assert_eq!(stdout(&q), expect.repeat(2));
}

#[test]
fn memory_brk_mmap_munmap_mprotect() {
    // Also large mappings backed on first touch: more address space than memory,
    // 48 threads with 8 MiB stacks in a 256 MiB VM.
    for smp in ["1", "2"] {
        let o = onering(&["run", "--smp", smp, musl("memory").to_str().unwrap()]);
        assert_eq!(stdout(&o), "memory ok\n", "--smp {smp}: {}", stderr(&o));
        assert_eq!(status(&o), 0);
    }
}

#[test]
fn touching_more_memory_than_the_vm_has_is_an_oom_kill() {
    let o = onering(&["run", "--mem", "64M", musl("memory").to_str().unwrap(), "oom"]);
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("onering: out of memory"), "{}", stderr(&o));
    assert_eq!(status(&o), 137, "{}", stderr(&o));
}

#[test]
fn glibc_static_pie_runs() {
    let bin = build("hello", "gcc", &["-static-pie"], "-glibc-pie");
    let o = onering(&["run", "--quiet", bin.to_str().unwrap(), "pie"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("hello from onering\n"), "{}", stdout(&o));
    assert!(stdout(&o).contains("argv[1]=pie\n"));
}

// ---- onering's own exit statuses -------------------------------------------------

fn temp_file(name: &str, bytes: &[u8], mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = out_dir().join(name);
    std::fs::write(&p, bytes).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn expect_failure(o: &Output, code: i32, text: &str) {
    assert_eq!(status(o), code, "stderr: {}", stderr(o));
    assert!(stderr(o).starts_with("onering: "), "{}", stderr(o));
    assert!(stderr(o).contains(text), "expected {text:?} in {}", stderr(o));
    assert_eq!(stdout(o), "");
}

#[test]
fn missing_program_is_127() {
    expect_failure(&onering(&["run", "/no/such/program"]), 127, "/no/such/program: no such file");
}

#[test]
fn unrunnable_files_are_126() {
    let text = temp_file("text", b"echo hi\n", 0o755);
    expect_failure(&run(&text, &[]), 126, "not an ELF executable");
    let empty = temp_file("empty-shebang.sh", b"#!\necho hi\n", 0o755);
    expect_failure(&run(&empty, &[]), 126, "a #! line without a program");
    let noexec = temp_file("noexec", &std::fs::read(musl("hello")).unwrap(), 0o644);
    expect_failure(&run(&noexec, &[]), 126, "permission denied");
    expect_failure(&run(&out_dir(), &[]), 126, "is a directory");

    // A dynamically linked program runs (its loader from the host's tree).
    let dynamic = build("hello", "musl-gcc", &[], "-dynamic");
    let o = run(&dynamic, &[]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("hello from onering\n"), "{}", stdout(&o));

    let mut elf = std::fs::read(musl("hello")).unwrap();
    elf[4] = 1; // ELFCLASS32
    expect_failure(&run(&temp_file("elf32", &elf, 0o755), &[]), 126, "32-bit");
    let mut elf = std::fs::read(musl("hello")).unwrap();
    elf[18] = 183; // EM_AARCH64
    elf[19] = 0;
    expect_failure(&run(&temp_file("aarch64", &elf, 0o755), &[]), 126, "aarch64");
    let elf = std::fs::read(musl("hello")).unwrap();
    expect_failure(&run(&temp_file("truncated", &elf[..200], 0o755), &[]), 126, "malformed");

    let big = musl("bigbss");
    expect_failure(&onering(&["run", "--mem", "64M", big.to_str().unwrap()]), 126, "too large for --mem 64 MiB");
    // With enough memory it runs.
    let o = onering(&["run", "--mem", "256M", big.to_str().unwrap()]);
    assert_eq!((status(&o), stdout(&o).as_str()), (0, "1\n"));
}

#[test]
fn onering_failures_are_125() {
    let hello = musl("hello");
    let p = hello.to_str().unwrap();
    expect_failure(&onering(&["run", "--mem", "8M", p]), 125, "too small");
    expect_failure(&onering(&["run", "--mem", "lots", p]), 125, "not a size");
    expect_failure(&onering(&["run", "--mem", "100G", p]), 125, "more than");
    expect_failure(&onering(&["run", "--smp", "0", p]), 125, "--smp 0 is out of range");
    expect_failure(&onering(&["run", "--bogus", p]), 125, "");
    expect_failure(&onering(&["run"]), 125, "");
    let o = cmd(&["run", p]).env("ONERING_KVM_DEVICE", "/nonexistent/kvm").output().unwrap();
    expect_failure(&o, 125, "does not offer KVM");
    // A device that is not KVM (as an unusual or broken host might have): one line.
    let o = cmd(&["run", p]).env("ONERING_KVM_DEVICE", "/dev/null").output().unwrap();
    expect_failure(&o, 125, "does not answer as KVM");
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn hostile_arguments_get_errors_not_crashes() {
    let o = onering(&["run", "--quiet", musl("hostile").to_str().unwrap()]);
    assert_eq!(stdout(&o), "hostile ok\n", "{}", stderr(&o));
    assert_eq!(status(&o), 0);
}

/// The `.eh_frame` section's file offset in a 64-bit ELF file (a test helper; the
/// file is our own build).
fn eh_frame_offset(elf: &[u8]) -> usize {
    let word = |at: usize, n: usize| {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(&elf[at..at + n]);
        u64::from_le_bytes(v) as usize
    };
    let (shoff, shnum, shstrndx) = (word(40, 8), word(60, 2), word(62, 2));
    let names = word(shoff + shstrndx * 64 + 24, 8);
    (0..shnum)
        .map(|i| shoff + i * 64)
        .find(|h| elf[names + word(*h, 4)..].starts_with(b".eh_frame\0"))
        .map(|h| word(h + 24, 8))
        .expect("an .eh_frame section")
}

/// The crash of the "Foundations" issue: a stripped static program whose first
/// `.eh_frame` record has length 1 made the rewriter's function discovery slice out
/// of bounds, and onering aborted (status 134). Linux runs such a file (the unwind
/// tables matter only to an unwinder), so onering must run it too, rewritten: the
/// damaged table is ignored and the functions come from `.eh_frame_hdr`.
#[test]
fn a_damaged_eh_frame_does_not_stop_the_program() {
    let mut elf = std::fs::read(build("hello", "musl-gcc", &["-static", "-s"], "-stripped")).unwrap();
    let at = eh_frame_offset(&elf);
    elf[at..at + 4].copy_from_slice(&1u32.to_le_bytes());
    let bad = temp_file("bad-eh-frame", &elf, 0o755);
    let host = Command::new(&bad).output().unwrap();
    assert_eq!(host.status.code(), Some(0), "the host runs it");
    for extra in [&["--stats"][..], &["--no-rewrite"]] {
        let mut args = vec!["run"];
        args.extend_from_slice(extra);
        args.push(bad.to_str().unwrap());
        let o = onering(&args);
        assert_eq!(status(&o), 0, "{extra:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&host), "{extra:?}");
    }
    every_site_rewritten(&bad, "syscall", ", 0 left");
}

/// `--stats` of `bin` counts some `kind` sites (syscall or cpuid), and as many
/// rewritten, `then` following the count.
fn every_site_rewritten(bin: &Path, kind: &str, then: &str) {
    let o = onering(&["run", "--stats", bin.to_str().unwrap()]);
    let e = stderr(&o);
    let label = format!(" {kind} sites, ");
    let n = e.split(&label).next().and_then(|s| s.rsplit(' ').next()).unwrap_or("?");
    assert!(n != "0" && e.contains(&format!("{label}{n} rewritten{then}")), "{e}");
}

#[test]
fn a_wild_jump_is_the_programs_fault() {
    let o = run(&musl("wildjump"), &[]);
    assert!(stderr(&o).starts_with("onering: program killed by SIGSEGV at 0xffff900000000000"), "{}", stderr(&o));
    assert_eq!(status(&o), 139);
    // Into the kernel's own image, its entry point, the last page, a non-canonical
    // address: the program's SIGSEGV each time, never a kernel panic.
    let start = format!("{:#x}", 0xffff_ffff_8000_0000u64 + onering_abi::layout::KERNEL_PHYS);
    for to in ["0xffffffff80001000", &start, "0xffffffff80400000", "0xfffffffffffff000", "0x8000000000000000"] {
        let o = run(&musl("wildjump"), &[to]);
        assert!(stderr(&o).starts_with("onering: program killed by SIGSEGV"), "{to}: {}", stderr(&o));
        assert_eq!(status(&o), 139, "{to}");
    }
}

#[test]
fn a_kernel_panic_reports_its_message_system_call_and_named_backtrace() {
    let bin = musl("panic");
    let o = cmd(&["run", bin.to_str().unwrap()]).env("ONERING_TEST_PANIC", "1").output().unwrap();
    let err = stderr(&o);
    assert_eq!(status(&o), 125, "{err}");
    assert!(err.starts_with("onering: kernel panic: panicked at crates/kernel/src/syscall/mod.rs:"), "{err}");
    assert!(err.contains("the panic a test asked for"), "{err}");
    assert!(err.contains("thread 1 of process 1, system call 1869479937, unknown)"), "{err}");
    assert!(err.contains("\nkernel backtrace:\n  #0  0xffffffff"), "{err}");
    assert!(err.contains(" core::panicking::panic_fmt+0x"), "{err}");
    assert!(err.contains(" onering_kernel::boot::syscall_hook+0x"), "{err}");
    assert!(err.contains(" syscall_entry+0x"), "{err}");
    // Without the variable the number is unknown, as on the host.
    let o = onering(&["run", "--quiet", bin.to_str().unwrap()]);
    assert_eq!((status(&o), stdout(&o)), (0, "-1 ENOSYS\n".to_string()), "{}", stderr(&o));
}

/// Runs a test program on the host and in onering: the same output, status 0.
fn same_as_host(name: &str) {
    let bin = musl(name);
    let host = Command::new(&bin).output().unwrap();
    assert_eq!(host.status.code(), Some(0), "on the host:\n{}", stdout(&host));
    let o = run(&bin, &[]);
    assert_eq!(stdout(&o), stdout(&host), "onering's output differs from the host's; stderr: {}", stderr(&o));
    assert_eq!(status(&o), 0);
}

#[test]
fn file_system_calls_match_the_host() {
    same_as_host("files");
}

#[test]
fn devices_and_pipes_match_the_host() {
    same_as_host("devices");
}

#[test]
fn clocks_limits_and_signal_state_match_the_host() {
    same_as_host("timemisc");
}

/// Runs `name` on the host and in onering, also with every system call trapping
/// (`--no-rewrite`): the same output each time.
fn same_as_host_both_paths(name: &str) {
    same_as_host(name);
    let bin = musl(name);
    let host = Command::new(&bin).output().unwrap();
    let o = onering(&["run", "--no-rewrite", bin.to_str().unwrap()]);
    assert_eq!(stdout(&o), stdout(&host), "--no-rewrite: stderr: {}", stderr(&o));
    assert_eq!(status(&o), 0);
}

#[test]
fn threads_match_the_host() {
    // clone onto new stacks, futexes, every pthread primitive, TLS, sleeps.
    same_as_host_both_paths("threads");
}

/// A musl static build of a test program that makes threads.
fn musl_pthread(name: &str) -> PathBuf {
    build(name, "musl-gcc", &["-static", "-pthread"], "")
}

/// A glibc static build of a test program (glibc makes threads with clone3, 8 MiB
/// stacks, futexes without spinning).
fn glibc(name: &str) -> PathBuf {
    build(name, "gcc", &["-static", "-pthread"], "-glibc")
}

/// The host's output for `bin`, and onering's with `--smp N` for N = 1, 2, 4,
/// rewritten and trapped.
fn same_as_host_on_1_2_4_vcpus(bin: &Path) {
    let name = bin.display();
    let host = Command::new(bin).output().unwrap();
    assert!(host.status.success(), "{name} fails on the host: {}", stdout(&host));
    for smp in ["1", "2", "4"] {
        for rewrite in [true, false] {
            let mut a = vec!["run", "--smp", smp];
            if !rewrite {
                a.push("--no-rewrite");
            }
            a.push(bin.to_str().unwrap());
            let o = onering(&a);
            assert_eq!(stdout(&o), stdout(&host), "--smp {smp}, rewrite {rewrite}: stderr: {}", stderr(&o));
            assert_eq!(status(&o), 0, "--smp {smp}, rewrite {rewrite}");
        }
    }
}

#[test]
fn threads_match_the_host_on_1_2_4_vcpus() {
    same_as_host_on_1_2_4_vcpus(&musl("threads"));
    same_as_host_on_1_2_4_vcpus(&glibc("threads"));
}

/// `--hostname`: uname's nodename, /proc/sys/kernel/hostname and, in a root file
/// system without them, /etc/hostname and /etc/hosts; root in the VM changes it
/// with sethostname. A name that is empty or longer than 64 bytes is refused.
#[test]
fn hostname_is_what_was_given() {
    let busybox = "/bin/busybox";
    assert!(Path::new(busybox).exists(), "this test needs /bin/busybox (busybox-static)");
    let root = out_dir().join("hostname-root");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    let r = root.to_str().unwrap();
    let script = "busybox uname -n; busybox cat /proc/sys/kernel/hostname /etc/hostname; \
                  busybox grep -c box1 /etc/hosts; busybox hostname second && busybox uname -n";
    let o = onering(&["run", "--hostname", "box1", "--rootfs", r, "/bin/busybox", "sh", "-c", script]);
    // The VM's uid is the host's: root may rename it (sethostname).
    let uid = Command::new("id").arg("-u").output().unwrap();
    let root_in_vm = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    let expected = if root_in_vm { "box1\nbox1\nbox1\n1\nsecond\n" } else { "box1\nbox1\nbox1\n1\n" };
    assert_eq!(stdout(&o), expected, "{}", stderr(&o));
    let o = onering(&["run", "--rootfs", r, "/bin/busybox", "uname", "-n"]);
    assert_eq!(stdout(&o), "onering\n", "the default");
    for bad in ["", &"x".repeat(65)] {
        let o = onering(&["run", "--hostname", bad, "--rootfs", r, "/bin/busybox", "true"]);
        assert_eq!(status(&o), 125, "{bad:?}");
        assert!(stderr(&o).contains("host name is 1 to 64 bytes"), "{}", stderr(&o));
    }
}

/// Started under a real-time host policy (as `chrt -f` starts it: the kernel
/// then halts idle vCPUs instead of spinning, `onering_abi::flags::REALTIME`),
/// threads, timers and hand-offs still give the host's output.
#[test]
fn threads_match_the_host_under_a_real_time_policy() {
    require_kvm();
    let bin = glibc("threads");
    let host = Command::new(&bin).output().unwrap();
    for smp in ["1", "2"] {
        let o = Command::new("chrt")
            .args(["-f", "10", env!("CARGO_BIN_EXE_onering"), "run", "--smp", smp, bin.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!stderr(&o).contains("chrt:"), "this test needs SCHED_FIFO (root or CAP_SYS_NICE): {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&host), "--smp {smp}: stderr: {}", stderr(&o));
        assert_eq!(status(&o), 0, "--smp {smp}");
    }
}

#[test]
fn thread_stress_matches_the_host_on_1_2_4_vcpus() {
    // Many more threads than vCPUs on every primitive, busy loops that must not
    // starve the others (the APIC preemption tick), a signal for a spinning thread
    // (the reschedule IPI), sleeps on time, CPU affinity.
    same_as_host_on_1_2_4_vcpus(&musl("stress"));
    same_as_host_on_1_2_4_vcpus(&glibc("stress"));
}

#[test]
fn inotify_events_match_the_host() {
    // Watches on directories and files in /tmp: create, write (merged), close,
    // read, chmod, utimensat, truncate, renames within and across watched
    // directories (cookies matching), mkdir and rmdir, link and unlink, a buffer
    // too small, FIONREAD, epoll, rm_watch, one-shot, MASK_ADD, DONT_FOLLOW, a
    // blocking read, the queue's overflow; Linux's errors.
    same_as_host_on_1_2_4_vcpus(&musl("inotify"));
}

#[test]
fn file_mappings_match_the_host() {
    // Private and shared file mappings in /tmp: msync, munmap write-back, read()
    // after, MAP_POPULATE, mprotect, MADV_DONTNEED, mremap, past the end of the
    // file, a closed descriptor, Linux's errors.
    same_as_host_on_1_2_4_vcpus(&musl("mmapfile"));
    same_as_host_on_1_2_4_vcpus(&glibc("mmapfile"));
}

#[test]
fn the_vdso_clocks_agree_with_the_system_call() {
    // musl and glibc both find it; --no-vdso leaves it out; interleaved vDSO and
    // system-call reads never go backwards.
    for bin in [musl("vdso"), glibc("vdso")] {
        for (flags, seen) in [(&[][..], "yes"), (&["--no-vdso"][..], "no"), (&["--smp", "2"][..], "yes")] {
            let mut a = vec!["run"];
            a.extend_from_slice(flags);
            a.push(bin.to_str().unwrap());
            let o = onering(&a);
            assert_eq!(stdout(&o), format!("vdso {seen}\nclocks ok\n"), "{flags:?}: {}", stderr(&o));
            assert_eq!(status(&o), 0);
        }
    }
}

#[test]
fn named_pipes_match_the_host() {
    same_as_host_on_1_2_4_vcpus(&musl("fifo"));
}

#[test]
fn file_locks_match_the_host() {
    // OFD, POSIX and flock locks between descriptions and threads, F_GETLK, ranges
    // split and merged, l_whence, the errors, waits that end on an unlock, EINTR and
    // SA_RESTART, EDEADLK, the releases on close, dup2, last close and exit.
    same_as_host_on_1_2_4_vcpus(&musl("locks"));
    same_as_host_on_1_2_4_vcpus(&glibc("locks"));
}

#[test]
fn unix_sockets_match_the_host() {
    // socketpair of each type, a path listener, abstract names, datagrams,
    // SCM_RIGHTS and SCM_CREDENTIALS, peeking, waiting for all, shutdown, poll and
    // epoll, options, a megabyte between threads, and the errors.
    same_as_host_on_1_2_4_vcpus(&musl("unix"));
    same_as_host_on_1_2_4_vcpus(&glibc("unix"));
}

#[test]
fn inet_sockets_match_the_host() {
    // TCP and UDP echo over 127.0.0.1 and ::1, a dual-stack listener, non-blocking
    // connect with epoll, edge-triggered epoll, half-close, resets, refusals, 1000
    // concurrent connects to one listener, options and the errors.
    same_as_host_on_1_2_4_vcpus(&musl("inet"));
    same_as_host_on_1_2_4_vcpus(&glibc("inet"));
}

#[test]
fn tcp_connection_churn_matches_the_host() {
    // 24,000 loopback connections from 8 threads, served by 4 that echo or not,
    // shut down first or not, and close with bytes unread or not (in onering the
    // connections are fused): each one ends, none hangs.
    same_as_host_on_1_2_4_vcpus(&musl("tcpchurn"));
}

#[test]
fn hostile_socket_arguments_match_the_host() {
    // Bad pointers, lengths, families, option values, msghdr and cmsghdr contents,
    // socket calls on other files: the host's errno for each, never a crash.
    same_as_host_on_1_2_4_vcpus(&musl("hostile_net"));
}

#[test]
fn network_interfaces_match_the_host() {
    // lo as getifaddrs, if_nametoindex and if_nameindex see it (netlink and the
    // SIOCGIF* ioctls underneath), the ioctls themselves, and NETLINK_ROUTE: dumps,
    // single requests, acknowledgements, port ids, truncation, errors.
    same_as_host_on_1_2_4_vcpus(&musl("ifaces"));
    same_as_host_on_1_2_4_vcpus(&glibc("ifaces"));
}

#[test]
fn epoll_eventfd_and_poll_match_the_host() {
    // Level- and edge-triggered, one-shot, hang-up, errors, timeouts, and waits
    // ended by another thread (on another vCPU, too).
    same_as_host_on_1_2_4_vcpus(&musl("poll"));
}

#[test]
fn exit_from_a_thread_ends_the_program_on_any_vcpu_count() {
    let bin = musl("stress");
    for smp in ["1", "2", "4"] {
        let o = onering(&["run", "--smp", smp, bin.to_str().unwrap(), "exit"]);
        assert_eq!(stdout(&o), "thread calls exit(7)\n", "--smp {smp}: {}", stderr(&o));
        assert_eq!(status(&o), 7, "--smp {smp}");
    }
}

#[test]
fn a_glibc_program_started_by_a_relative_path() {
    // glibc's start-up asserts that /proc/self/exe is absolute.
    let bin = glibc("threads");
    let o = cmd(&["run", "--smp", "2", "./threads-glibc"]).current_dir(bin.parent().unwrap()).output().unwrap();
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("ok "), "{}", stdout(&o));
}

#[test]
fn smp_out_of_range_is_refused() {
    let hello = musl("hello");
    for bad in ["0", "65"] {
        let o = onering(&["run", "--smp", bad, hello.to_str().unwrap()]);
        assert_eq!(status(&o), 125);
        assert!(stderr(&o).contains("out of range"), "{}", stderr(&o));
    }
    let o = onering(&["run", "--smp", "64", hello.to_str().unwrap()]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    let raw = String::from_utf8_lossy(&o.stderr);
    assert!(raw.contains("warning: --smp 64"), "{raw}");
}

/// `--ulimit NAME=SOFT[:HARD]`, `--no-new-privileges` and the capability sets
/// as the program reads them.
#[test]
fn ulimit_privileges_and_capabilities_are_the_programs() {
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    let script = "ulimit -n; ulimit -Hn; while read -r l; do case $l in CapEff*|NoNewPrivs*) echo \"$l\";; esac; \
                  done </proc/self/status";
    let o = onering(&["run", "--ulimit", "nofile=100:200", "/bin/busybox", "sh", "-c", script]);
    assert_eq!(stdout(&o), "100\n200\nCapEff:\t000001ffffffffff\nNoNewPrivs:\t0\n", "{}", stderr(&o));
    let o = onering(&["run", "--ulimit", "nofile=64", "--no-new-privileges", "/bin/busybox", "sh", "-c", script]);
    assert_eq!(stdout(&o), "64\n64\nCapEff:\t000001ffffffffff\nNoNewPrivs:\t1\n", "{}", stderr(&o));
    // Every resource; RLIMIT_NPROC does not bind root (these tests run as root),
    // as on Linux: four children beside the shell under a limit of 3.
    let script =
        "ulimit -c; ulimit -Hc; ulimit -u; ulimit -s; for i in 1 2 3 4; do sleep 0.1 & done; wait; echo forked";
    let o = onering(&[
        "run",
        "--ulimit",
        "core=0:-1",
        "--ulimit",
        "nproc=3",
        "--ulimit",
        "stack=unlimited",
        "/bin/busybox",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(stdout(&o), "0\nunlimited\n3\nunlimited\nforked\n", "{}", stderr(&o));
    for (bad, why) in [
        ("nofile=9:8", "nofile: the soft limit is above the hard one"),
        ("nofile=2000000", "nofile: at most 1048576"),
        ("procs=5", "unknown resource \"procs\""),
        ("core", "expected NAME=SOFT[:HARD]"),
        ("core=x", "\"x\" is not a number, -1 or unlimited"),
    ] {
        expect_failure(&onering(&["run", "--ulimit", bad, "/bin/busybox", "true"]), 125, why);
    }
}

#[test]
fn signals_match_the_host() {
    // Handlers, rt_sigreturn with every register restored, the alternate stack,
    // masks, faults caught by handlers, EINTR.
    same_as_host_both_paths("signals");
}

#[test]
fn unhandled_signals_end_the_program_as_on_the_host() {
    let bin = musl("signals");
    let o = run(&bin, &["term"]);
    assert_eq!(status(&o), 143, "{}", stderr(&o));
    assert!(stderr(&o).contains("killed by SIGTERM"), "{}", stderr(&o));
    let o = run(&bin, &["segv"]);
    assert_eq!(status(&o), 139, "{}", stderr(&o));
    assert!(stderr(&o).contains("killed by SIGSEGV") && stderr(&o).contains("fault address 0x10"), "{}", stderr(&o));
}

#[test]
fn splice_and_tee_match_the_host() {
    same_as_host_both_paths("splice");
}

#[test]
fn sendfile_matches_the_host() {
    same_as_host_both_paths("sendfile");
}

#[test]
fn interval_timers_match_the_host() {
    same_as_host_both_paths("itimer");
}

#[test]
fn vfork_and_posix_spawn_match_the_host() {
    same_as_host_both_paths("spawn");
}

#[test]
fn fork_matches_the_host() {
    // 200 children with copies of the parent's globals, heap and stack, fork from
    // a threaded parent, a pipe to a child (on another vCPU), MAP_SHARED memory,
    // a crashing child (WIFSIGNALED, SIGCHLD), an orphan given to pid 1: musl's
    // fork (57) and glibc's (clone with CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID),
    // on 1, 2 and 4 vCPUs, rewritten and trapped.
    same_as_host_on_1_2_4_vcpus(&musl("fork"));
    same_as_host_on_1_2_4_vcpus(&glibc("fork"));
}

#[test]
fn copy_on_write_after_fork_matches_the_host() {
    // Parent and child writing the same pages in either order (a few pages,
    // copied one at a time, and most of a block, copied whole), the kernel
    // writing into a child's copy, a grandchild of a child that wrote part of a
    // block, munmap/MADV_DONTNEED/mremap in the child: each sees its own memory.
    same_as_host_on_1_2_4_vcpus(&musl("cow"));
    same_as_host_on_1_2_4_vcpus(&glibc("cow"));
}

#[test]
fn process_shared_futexes_reach_across_fork() {
    // A pshared semaphore and a pshared mutex/condvar in MAP_SHARED memory, a
    // parent and its forked child each blocking on what the other wakes.
    same_as_host_on_1_2_4_vcpus(&musl("pshared"));
    same_as_host_on_1_2_4_vcpus(&glibc("pshared"));
}

#[test]
fn rootfs_and_workdir() {
    let dir = out_dir().join("rootfs-tree");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("greeting.txt"), b"hello\n").unwrap();
    std::os::unix::fs::symlink("greeting.txt", dir.join("link")).unwrap();
    let bin = musl("rootfs");
    let root = dir.to_str().unwrap();
    let o = onering(&["run", "--read-only", "--rootfs", root, "-w", "/sub", bin.to_str().unwrap()]);
    assert!(!stdout(&o).contains("FAIL"), "{}", stdout(&o));
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    // Without --read-only the rootfs changes, in the VM only.
    let o = onering(&["run", "--rootfs", root, "-w", "/sub", bin.to_str().unwrap(), "rw"]);
    assert!(!stdout(&o).contains("FAIL"), "{}", stdout(&o));
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(std::fs::read(dir.join("greeting.txt")).unwrap(), b"hello\n", "the host's file is as it was");
    assert!(dir.join("link").symlink_metadata().is_ok() && !dir.join("new").exists() && !dir.join("sub/d").exists());
    rootfs_written_through(bin.to_str().unwrap());
    // The same tree as a tar archive, served in place, gives the same answers;
    // gzip- and zstd-compressed too (tar -z, tar --zstd).
    for (name, z) in
        [("rootfs-tree.tar", None), ("rootfs-tree.tar.gz", Some("-z")), ("rootfs-tree.tar.zst", Some("--zstd"))]
    {
        let tarball = out_dir().join(name);
        let t = Command::new("tar").arg("-C").arg(&dir).args(z).arg("-cf").arg(&tarball).arg(".").output().unwrap();
        assert!(t.status.success(), "tar (apt-get install tar gzip zstd): {}", stderr(&t));
        let tar = tarball.to_str().unwrap();
        for extra in [&["--read-only"][..], &[]] {
            let mut a = vec!["run"];
            a.extend(extra);
            a.extend(["--rootfs", tar, "-w", "/sub", bin.to_str().unwrap()]);
            if extra.is_empty() {
                a.push("rw");
            }
            let o = onering(&a);
            assert!(!stdout(&o).contains("FAIL"), "{a:?}: {}", stdout(&o));
            assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
        }
    }
    expect_failure(&onering(&["run", "-w", "/nowhere", bin.to_str().unwrap()]), 125, "-w /nowhere: no such directory");
    expect_failure(&onering(&["run", "--rootfs", "/no/such/dir", bin.to_str().unwrap()]), 125, "not a directory");
    // The rootfs is not copied: a tree with a 3 GiB file (sparse) larger than guest
    // memory starts at once.
    let big = out_dir().join("rootfs-big");
    let _ = std::fs::remove_dir_all(&big);
    std::fs::create_dir_all(big.join("sub")).unwrap();
    std::fs::write(big.join("greeting.txt"), b"hello\n").unwrap();
    std::os::unix::fs::symlink("greeting.txt", big.join("link")).unwrap();
    std::fs::File::create(big.join("sparse")).unwrap().set_len(3 << 30).unwrap();
    let t = std::time::Instant::now();
    let o = onering(&[
        "run",
        "--mem",
        "64M",
        "--read-only",
        "--rootfs",
        big.to_str().unwrap(),
        "-w",
        "/sub",
        bin.to_str().unwrap(),
    ]);
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(t.elapsed() < std::time::Duration::from_secs(2), "{:?}", t.elapsed());
    std::fs::remove_dir_all(&big).unwrap();
}

/// `--rootfs-rw` (the OCI runtime's default): the same changes reach the host's
/// directory, while the VM's own /dev, /proc and /tmp hide what the host tree has
/// at those names, and the /etc files onering adds stay in the VM.
fn rootfs_written_through(bin: &str) {
    let dir = out_dir().join("rootfs-rw-tree");
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["sub", "dev", "proc", "tmp", "etc", "bin"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("greeting.txt"), b"hello\n").unwrap();
    std::os::unix::fs::symlink("greeting.txt", dir.join("link")).unwrap();
    let root = dir.to_str().unwrap();
    let o = onering(&["run", "--rootfs", root, "--rootfs-rw", "-w", "/sub", bin, "rw"]);
    assert!(!stdout(&o).contains("FAIL"), "{}", stdout(&o));
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(std::fs::read(dir.join("sub/d/g")).unwrap(), b"hello\nmore\n", "written, then renamed, on the host");
    assert_eq!(std::fs::read(dir.join("new")).unwrap(), b"n");
    assert!(!dir.join("greeting.txt").exists() && dir.join("link").symlink_metadata().is_err());
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join("sub")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "chmod reached the host");
    assert!(!dir.join("tmp/scratch").exists(), "/tmp is the VM's");
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).unwrap();
    let script = "cat /etc/hostname; ls /proc/self/fd >/dev/null && echo proc; echo made >/etc/added";
    let o = onering(&["run", "--rootfs", root, "--rootfs-rw", "/bin/busybox", "sh", "-c", script]);
    assert_eq!(stdout(&o), "onering\nproc\n", "{}", stderr(&o));
    assert_eq!(std::fs::read(dir.join("etc/added")).unwrap(), b"made\n");
    assert!(!dir.join("etc/hostname").exists(), "onering's /etc/hostname is the VM's");
    // With --read-only nothing changes; an archive cannot take the changes.
    let o = onering(&["run", "--rootfs", root, "--rootfs-rw", "--read-only", "/bin/busybox", "touch", "/x"]);
    assert_eq!(status(&o), 1, "{}", stderr(&o));
    assert!(!dir.join("x").exists());
    let tar = out_dir().join("rootfs-tree.tar");
    let t = Command::new("tar").arg("-C").arg(&dir).arg("-cf").arg(&tar).arg("new").output().unwrap();
    assert!(t.status.success(), "{}", stderr(&t));
    expect_failure(&onering(&["run", "--rootfs", tar.to_str().unwrap(), "--rootfs-rw", bin]), 125, "is an archive");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--tmpfs`: in-memory directories over a root written through (nothing
/// reaches the host), empty or with a copy of what was there, read-only or
/// not; /proc/mounts and statfs say tmpfs; /dev/shm is one; bad options are
/// refused before the VM starts.
#[test]
fn tmpfs_mounts_stay_in_the_vm() {
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    let dir = out_dir().join("rootfs-tmpfs-tree");
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["bin", "run/sub", "cache"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("run/sub/pid"), b"42\n").unwrap();
    std::os::unix::fs::symlink("sub/pid", dir.join("run/link")).unwrap();
    std::fs::write(dir.join("cache/old"), b"old\n").unwrap();
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).unwrap();
    let root = dir.to_str().unwrap();
    let script = "cat /run/link; echo 7 > /run/sub/pid; echo n > /run/new; cat /run/sub/pid; \
        ls -a /cache; echo c > /cache/c; stat -c %a /cache; stat -f -c %T /cache; \
        touch /ro/x 2>/dev/null || echo ro refused; stat -c %a /ro; \
        echo s > /dev/shm/seg && cat /dev/shm/seg; grep -E ' (/run|/cache|/ro|/dev/shm) ' /proc/mounts";
    let o = onering(&[
        "run",
        "--rootfs",
        root,
        "--rootfs-rw",
        "--tmpfs",
        "/run:rw,nosuid,nodev,tmpcopyup",
        "--tmpfs",
        "/cache:mode=700,size=64m",
        "--tmpfs",
        "/ro:ro,mode=555",
        "/bin/busybox",
        "sh",
        "-c",
        script,
    ]);
    let want = "42\n7\n.\n..\n700\ntmpfs\nro refused\n555\ns\nshm /dev/shm tmpfs rw,relatime 0 0\n\
        tmpfs /run tmpfs rw,relatime 0 0\ntmpfs /cache tmpfs rw,relatime 0 0\ntmpfs /ro tmpfs ro,relatime 0 0\n";
    assert_eq!(stdout(&o), want, "{}", stderr(&o));
    assert_eq!(status(&o), 0);
    // Nothing reached the host: the copy was changed, the empty one written.
    assert_eq!(std::fs::read(dir.join("run/sub/pid")).unwrap(), b"42\n");
    assert!(!dir.join("run/new").exists() && !dir.join("cache/c").exists() && !dir.join("ro").exists());
    assert_eq!(std::fs::read(dir.join("cache/old")).unwrap(), b"old\n");
    for (bad, why) in [
        ("run", "PATH must be an absolute path"),
        ("/proc/x", "PATH cannot be /, /proc, /sys or below them"),
        ("/x:uid=5", "unknown or malformed option \"uid=5\""),
        ("/x:mode=99", "unknown or malformed option \"mode=99\""),
    ] {
        expect_failure(&onering(&["run", "--tmpfs", bad, "/bin/busybox", "true"]), 125, why);
    }
    let o = onering(&["run", "--tmpfs", "/x", "-v", &format!("{root}:/x"), "/bin/busybox", "true"]);
    expect_failure(&o, 125, "--tmpfs /x: another mount has the same path");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_program_is_found_in_the_rootfs_as_docker_finds_it() {
    let dir = out_dir().join("rootfs-programs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("opt/app")).unwrap();
    std::fs::copy(musl("hello"), dir.join("bin/hello-real")).unwrap();
    std::os::unix::fs::symlink("/bin/hello-real", dir.join("bin/hello")).unwrap();
    std::fs::copy(musl("hello"), dir.join("opt/app/tool")).unwrap();
    let root = dir.to_str().unwrap();
    for (args, argv0) in [
        (vec!["/bin/hello"], "/bin/hello"),
        (vec!["hello"], "hello"),
        (vec!["-w", "/opt/app", "./tool"], "./tool"),
        (vec!["-e", "PATH=/opt/app", "tool"], "tool"),
    ] {
        let mut a = vec!["run", "--rootfs", root];
        a.extend(&args);
        let o = onering(&a);
        assert_eq!(status(&o), 0, "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).contains(&format!("argv[0]={argv0}\n")), "{args:?}: {}", stdout(&o));
    }
    expect_failure(&onering(&["run", "--rootfs", root, "tool"]), 127, "tool: no such file");
    expect_failure(&onering(&["run", "--rootfs", root, "/bin"]), 126, "is a directory");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stdin_is_empty_unless_forwarded_with_i() {
    use std::io::Write;
    let bin = musl("echo_stdin");
    require_kvm();
    let o = cmd(&["run", bin.to_str().unwrap()]).stdin(Stdio::piped()).output().unwrap();
    assert_eq!(stdout(&o), "0 bytes\n");
    let mut child =
        cmd(&["run", "-i", bin.to_str().unwrap()]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut input = child.stdin.take().unwrap();
    let writer = {
        let data = data.clone();
        std::thread::spawn(move || input.write_all(&data))
    };
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(&o.stdout[..data.len()], &data[..]);
    assert_eq!(&o.stdout[data.len()..], b"200000 bytes\n");
}

/// A thread blocked reading stdin (`-i`, nothing written, stdin kept open) holds up
/// nobody: another thread keeps making system calls at full speed, whatever the
/// number of vCPUs (stdin is a request to the VMM and a wait in the scheduler).
#[test]
fn a_thread_blocked_on_stdin_holds_up_nobody() {
    let bin = build_many("stdin_block", &["stdin_block.c"]);
    require_kvm();
    for smp in ["1", "2", "4"] {
        let mut child = cmd(&["run", "-i", "--smp", smp, bin.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _keep_open = child.stdin.take();
        let o = child.wait_with_output().unwrap();
        assert_eq!(status(&o), 0, "--smp {smp}: {}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("blocked reader: calls"), "--smp {smp}: {}", stdout(&o));
    }
}

/// Stdin that epoll cannot watch (a regular file, /dev/null) is read at once.
#[test]
fn stdin_from_a_file_or_dev_null() {
    let bin = musl("echo_stdin");
    require_kvm();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    let path = temp_file("stdin-data", &data, 0o644);
    let o = cmd(&["run", "-i", bin.to_str().unwrap()]).stdin(std::fs::File::open(&path).unwrap()).output().unwrap();
    assert_eq!(&o.stdout[..data.len()], &data[..]);
    assert_eq!(&o.stdout[data.len()..], b"100000 bytes\n");
    let o = cmd(&["run", "-i", bin.to_str().unwrap()]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(stdout(&o), "0 bytes\n");
}

#[test]
fn syscall_sites_are_rewritten_and_stats_tell() {
    let o = onering(&["run", "--stats", musl("hello").to_str().unwrap()]);
    let e = stderr(&o);
    assert!(e.contains(" 0 left on the trap path; ") && e.contains("; 0 system calls trapped"), "{e}");
    let o = onering(&["run", "--stats", "--no-rewrite", musl("hello").to_str().unwrap()]);
    assert!(stderr(&o).contains("0 syscall sites, 0 rewritten"), "{}", stderr(&o));
    assert_eq!(status(&o), 0);
}

#[test]
fn a_woken_sleeper_waits_for_the_minimum_run_time_on_a_busy_cpu() {
    let o = onering(&["run", "--stats", "--smp", "1", musl("minrun").to_str().unwrap()]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    let wakes: u64 = stdout(&o).trim().strip_prefix("wakes ").and_then(|n| n.parse().ok()).expect("wakes N");
    // 200 ms at one wake-up per millisecond at most (some slack for the start);
    // at least a few, whatever the host's load.
    assert!((5..=260).contains(&wakes), "{wakes} wake-ups of a 20 us sleeper in 200 ms");
    let e = stderr(&o);
    assert!(e.contains(" interrupts, ") && e.contains(" thread switches;"), "{e}");
}

#[test]
fn rewritten_sites_behave_like_native_syscalls() {
    // Three site shapes (tests/guest/c/sites.S): registers, flags and the red zone
    // must come out as a native `syscall` leaves them, rewritten or trapped.
    let bin = build_many("sites", &["sites.c", "sites.S"]);
    let host = Command::new(&bin).output().unwrap();
    let rewritten = onering(&["run", "--stats", bin.to_str().unwrap()]);
    let trapped = onering(&["run", "--no-rewrite", bin.to_str().unwrap()]);
    assert!(!stdout(&host).contains("changed"), "{}", stdout(&host));
    assert_eq!(stdout(&rewritten), stdout(&host));
    assert_eq!(stdout(&trapped), stdout(&host));
    let e = stderr(&rewritten);
    assert!(e.contains(" 0 left on the trap path; ") && e.contains("; 0 system calls trapped"), "{e}");
}

/// A musl static build of several sources in tests/guest/c.
fn build_many(name: &str, sources: &[&str]) -> PathBuf {
    let dir = root().join("tests/guest/c");
    let bin = out_dir().join(name);
    let out = Command::new("musl-gcc")
        .arg("-static")
        .arg("-O2")
        .args(sources.iter().map(|s| dir.join(s)))
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("musl-gcc");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    bin
}

#[test]
fn exhausting_kernel_memory_gives_errors_not_panics() {
    let o = onering(&["run", "--mem", "64M", musl("exhaust").to_str().unwrap()]);
    assert!(stdout(&o).ends_with("exhaust ok\n"), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(status(&o), 0);
}

#[test]
fn exhausting_threads_gives_eagain_at_any_memory_size() {
    let bin = musl("manythreads");
    for (mem, smp) in [("128M", "1"), ("512M", "2"), ("2G", "4")] {
        let o = onering(&["run", "--mem", mem, "--smp", smp, bin.to_str().unwrap()]);
        assert!(stdout(&o).starts_with("manythreads ok"), "--mem {mem}: {}{}", stdout(&o), stderr(&o));
        assert_eq!(status(&o), 0, "--mem {mem}");
    }
}

/// What fuzzing found (wrapping ranges, vfork of a thread, copies into read-only
/// segments, mincore, mlock, PR_SET_KEEPCAPS, /dev/full), compared with the host.
#[test]
fn fuzzing_regressions_match_the_host_on_1_2_4_vcpus() {
    same_as_host_on_1_2_4_vcpus(&musl("regress"));
}

#[test]
fn a_program_that_wrecks_its_vm_gets_a_clear_message() {
    let o = run(&musl("wreck"), &[]);
    expect_failure(&o, 125, "the VM stopped: triple fault");
}

#[test]
fn a_broken_gs_base_is_an_unrecoverable_exception() {
    let bin = musl("badgs");
    expect_failure(&onering(&["run", "--no-rewrite", bin.to_str().unwrap()]), 125, "unrecoverable exception");
    expect_failure(&run(&bin, &[]), 125, "unrecoverable exception");
}

#[test]
fn a_closed_pipe_ends_the_program_with_sigpipe_as_on_linux() {
    let bin = musl("bigout");
    require_kvm();
    // onering's stdout is a pipe whose reader goes away after 100 bytes.
    let mut child = cmd(&["run", bin.to_str().unwrap()]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut first = [0u8; 100];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(141), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stderr(&o), "", "no message for a broken pipe");
}

/// The profiler (`--profile`, `--profile-top`): a C program that spends most of
/// its time in one function of its own and the rest writing to /dev/null is
/// profiled; the table names that function first, the folded stacks hold the
/// kernel's write path under the program's calls and parse (`frames count`, vCPU
/// at the root), and the flame graph is an SVG document. The program's output and status are untouched.
/// Stacks are read at the host's tick, each counting for the 1 ms periods of CPU
/// time it covers: at least one stack, no more samples than milliseconds passed.
#[test]
fn the_profiler_names_the_hot_function_and_the_kernel_path() {
    let bin = musl("hot");
    let dir = out_dir().join("profile");
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("hot.svg");
    let o = run_args(&["--profile", svg.to_str().unwrap(), "--profile-top", "10"], &bin);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("hot "), "{}", stdout(&o));
    let err = stderr(&o);
    let table: Vec<&str> = err.lines().skip_while(|l| !l.contains("self%")).skip(1).collect();
    assert!(table.first().is_some_and(|l| l.ends_with("burn_cycles")), "{err}");
    // "onering: profile: N samples at 1000 Hz a vCPU over T s (K stacks read ..."
    let line = err.lines().find(|l| l.contains(" samples at 1000 Hz")).unwrap_or_else(|| panic!("{err}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let samples: u64 = words[2].parse().unwrap();
    let secs: f64 = words[10].parse().unwrap();
    let stacks: u64 = words[12].trim_start_matches('(').parse().unwrap();
    assert!(stacks >= 1 && stacks <= samples && samples as f64 <= secs * 1000.0 + 2.0, "{line}");
    let folded = std::fs::read_to_string(dir.join("hot.folded")).unwrap();
    // (The kernel's write path under the program's write calls, wherever sampled.)
    assert!(folded.lines().any(|l| l.contains(";onering_kernel::syscall::fs::write")), "{folded}");
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        assert!(count.parse::<u64>().is_ok() && stack.starts_with("vcpu"), "{line}");
    }
    assert!(folded.lines().any(|l| l.contains(";burn_cycles ")), "{folded}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>") && svg.contains("burn_cycles"));
}

/// The profiler in a forked child: its stacks are walked through its own address
/// space (the vCPU's root), so its frames chain up to its start.
#[test]
fn the_profiler_walks_a_forked_childs_stacks() {
    let bin = build("hot", "musl-gcc", &["-static", "-fno-omit-frame-pointer"], "-fp");
    let dir = out_dir().join("profile");
    std::fs::create_dir_all(&dir).unwrap();
    let folded = dir.join("hot-fork.folded");
    let o = onering(&["run", "--profile", folded.to_str().unwrap(), bin.to_str().unwrap(), "fork"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("hot "), "{}", stdout(&o));
    let folded = std::fs::read_to_string(&folded).unwrap();
    // (Through the parent's tables, which the build before this walked, the
    // chain broke above `main`: the parent's stack there holds other frames.)
    assert!(folded.lines().any(|l| l.contains(";libc_start_main_stage2;main;burn_cycles ")), "{folded}");
}

/// `onering run ARGS... BIN`.
fn run_args(args: &[&str], bin: &Path) -> Output {
    let mut a = vec!["run"];
    a.extend_from_slice(args);
    a.push(bin.to_str().unwrap());
    onering(&a)
}

/// /tmp is bounded by --mem, not by a fixed heap: 600 MB go in at --mem 1G; at
/// --mem 256M writing stops with ENOSPC (or a short write), what went in reads
/// back, and the VM keeps working (deleting the file makes room again).
#[test]
fn tmp_holds_what_memory_holds_and_a_full_one_is_enospc() {
    let bin = musl("tmpfill");
    require_kvm();
    let o = onering(&["run", "--mem", "1G", bin.to_str().unwrap(), "600"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), "wrote all\nread back: ok\nsmall file while full: opened\nafter unlink: written\n");
    let o = onering(&["run", "--mem", "256M", bin.to_str().unwrap(), "600"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("stopped: "), "{out}");
    assert!(
        out.ends_with("wrote part\nread back: ok\nsmall file while full: opened\nafter unlink: written\n"),
        "{out}"
    );
}

#[test]
fn proc_and_sys_match_the_host() {
    // /proc/self/{exe, maps, stat, status, fd/, fdinfo/, cmdline, ...}, the
    // system-wide files, /sys's CPU lists: the properties programs rely on.
    same_as_host_on_1_2_4_vcpus(&musl("procfs"));
    let bin = musl("procfs");
    let o = run(&bin, &["an argument", "", "another"]);
    assert!(!stdout(&o).contains("FAIL"), "{}", stdout(&o));
    assert_eq!(status(&o), 0, "{}", stderr(&o));
}

/// The VM's own values where the host's legitimately differ: the cgroup limits
/// follow `--smp` and `--mem`, with and without a rootfs (whose empty /proc and
/// /sys the VM's hide).
#[test]
fn cgroup_and_cpu_files_follow_smp_and_mem() {
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    let files = [
        "/sys/fs/cgroup/cpu.max",
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/cpuset.cpus.effective",
        "/sys/devices/system/cpu/online",
        "/proc/self/cgroup",
        "/proc/sys/kernel/ostype",
    ];
    let dir = out_dir().join("proc-rootfs");
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["bin", "proc", "sys"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", dir.join("bin/busybox")).unwrap();
    let tarball = out_dir().join("proc-rootfs.tar");
    let t = Command::new("tar").arg("-C").arg(&dir).arg("-cf").arg(&tarball).arg(".").output().unwrap();
    assert!(t.status.success(), "tar: {}", stderr(&t));
    for (smp, mem, want) in [
        ("1", "256M", "100000 100000\n268435456\n0\n0\n0::/\nLinux\n"),
        ("2", "512M", "200000 100000\n536870912\n0-1\n0-1\n0::/\nLinux\n"),
    ] {
        for root in [None, Some(&dir), Some(&tarball)] {
            let mut a = vec!["run", "--smp", smp, "--mem", mem];
            if let Some(r) = root {
                a.extend(["--rootfs", r.to_str().unwrap()]);
            }
            a.extend(["/bin/busybox", "cat"]);
            a.extend(files);
            let o = onering(&a);
            assert_eq!((stdout(&o).as_str(), status(&o)), (want, 0), "{a:?}: {}", stderr(&o));
        }
    }
    let o = onering(&["run", "--mem", "512M", "/bin/busybox", "grep", "MemTotal", "/proc/meminfo"]);
    assert_eq!(stdout(&o), "MemTotal:         524288 kB\n", "{}", stderr(&o));
    // A volume is a mount.
    let vol = format!("{}:/data:ro", dir.display());
    let o = onering(&["run", "-v", &vol, "/bin/busybox", "grep", "/data", "/proc/mounts"]);
    assert_eq!(stdout(&o), "onering /data onering ro,relatime 0 0\n", "{}", stderr(&o));
}

/// execve and execveat (issue 17): descriptors, signals, argv, AT_EXECFN, /proc
/// after an exec, `#!` scripts, AT_EMPTY_PATH and the errors of a bad exec, the
/// same as on the host: a static program (its directory shared at the same path,
/// so it finds itself) and a dynamically linked one (glibc, from the host's own
/// tree), rewritten (nothing trapping, in whatever it execs) and trapping, on 1
/// and 2 vCPUs.
#[test]
fn execve_matches_the_host() {
    let musl_bin = musl("exec");
    let glibc_bin = build("exec", "gcc", &[], "-glibc");
    for bin in [&musl_bin, &glibc_bin] {
        let host = Command::new(bin).output().unwrap();
        assert!(host.status.success(), "{}", stdout(&host));
        assert!(stdout(&host).ends_with("stage 4: done\n"), "{}", stdout(&host));
        let dir = bin.parent().unwrap().to_str().unwrap();
        let vol = format!("{dir}:{dir}");
        for smp in ["1", "2"] {
            for rewrite in [true, false] {
                let mut a = vec!["run", "--smp", smp, "-v", &vol];
                a.push(if rewrite { "--stats" } else { "--no-rewrite" });
                a.push(bin.to_str().unwrap());
                let o = onering(&a);
                assert_eq!(stdout(&o), stdout(&host), "{bin:?} --smp {smp}, rewrite {rewrite}: {}", stderr(&o));
                assert_eq!(status(&o), 0, "{bin:?} --smp {smp}, rewrite {rewrite}");
                // Every program it execs is rewritten too (a host file is planned
                // by the VMM from the file itself: `hostfs::PLAN`).
                if rewrite {
                    assert!(stderr(&o).contains(" 0 system calls trapped"), "{bin:?}: {}", stderr(&o));
                }
            }
        }
    }
}

/// Dynamically linked programs of the host run as they are: their loader and
/// libraries come from the host's tree (read-only to them) when there is no
/// --rootfs, and their library code is rewritten as it is mapped (no system call
/// traps). A `#!` script runs its interpreter.
#[test]
fn dynamic_programs_and_scripts_run() {
    let o = onering(&["run", "--stats", "/bin/dash", "-c", "echo $((6*7)); exec /bin/echo exec done"]);
    assert_eq!(stdout(&o), "42\nexec done\n", "{}", stderr(&o));
    assert_eq!(status(&o), 0);
    assert!(stderr(&o).contains(" 0 system calls trapped"), "{}", stderr(&o));
    let o = onering(&["run", "/usr/bin/python3", "-c", "import os, sys; print(sum(range(10)), os.getpid())"]);
    assert_eq!(stdout(&o), "45 1\n", "{}", stderr(&o));
    let script = out_dir().join("hello-script.sh");
    std::fs::write(&script, "#!/bin/dash -e\necho script \"$0\" \"$@\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let s = script.to_str().unwrap();
    let o = onering(&["run", s, "a b", "c"]);
    assert_eq!(stdout(&o), format!("script {s} a b c\n"), "{}", stderr(&o));
    // A dynamic program whose interpreter is not in the VM's tree: 126, and why.
    let dir = out_dir().join("no-interp-root");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy("/bin/true", dir.join("true")).unwrap();
    let o = onering(&["run", "--rootfs", dir.to_str().unwrap(), "/true"]);
    assert_eq!(status(&o), 126, "{}", stderr(&o));
    assert!(stderr(&o).contains("interpreter /lib64/ld-linux-x86-64.so.2"), "{}", stderr(&o));
}

/// Rewrite plans on disk (issue 18): a run from a cached plan is the run from a
/// fresh one, and a damaged entry is ignored and replaced. Busybox (1.5 MiB of
/// code) as the first program, glibc's libc.so.6 as a library `dash` maps.
#[test]
fn cached_rewrite_plans_give_the_same_runs() {
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    let dir = out_dir().join("plan-cache");
    let _ = std::fs::remove_dir_all(&dir);
    let run_cached = |args: &[&str]| {
        let mut c = cmd(args);
        c.env("ONERING_CACHE_DIR", &dir).stdin(Stdio::null()).output().unwrap()
    };
    let busybox = ["run", "--stats", "/bin/busybox", "sh", "-c", "echo $((1+2))"];
    let dash = ["run", "--stats", "/bin/dash", "-c", "echo dash"];
    let first = (run_cached(&busybox), run_cached(&dash));
    let entries = || std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    assert!(entries() >= 2, "busybox's and libc's plans are stored");
    let sites = |o: &Output| {
        let line = stderr(o).lines().find(|l| l.contains("left on the trap path")).unwrap_or("").to_string();
        line.split(';').next().unwrap_or("").to_string()
    };
    let contents = || {
        let mut v: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| (p.clone(), std::fs::read(p).unwrap()))
            .collect();
        v.sort();
        v
    };
    let stored = contents();
    for round in ["cached", "damaged"] {
        if round == "damaged" {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let mut b = std::fs::read(&p).unwrap();
                let n = b.len();
                b[n - 3] ^= 0x55;
                std::fs::write(&p, &b).unwrap();
            }
        }
        let again = (run_cached(&busybox), run_cached(&dash));
        assert_eq!(stdout(&again.0), "3\n", "{round}: {}", stderr(&again.0));
        assert_eq!(status(&again.0), 0);
        assert_eq!(stdout(&again.1), "dash\n", "{round}: {}", stderr(&again.1));
        assert_eq!(sites(&again.0), sites(&first.0), "{round}");
        assert!(stderr(&again.1).contains(" 0 system calls trapped"), "{round}: {}", stderr(&again.1));
    }
    assert!(contents() == stored, "the damaged entries were planned again and replaced");
}

/// A dynamically linked program from a `--rootfs` made of the host's files: its
/// loader and libc come from the rootfs, not the host; one missing library is
/// the loader's own error, exit 127, as on Linux.
#[test]
fn dynamic_programs_run_from_a_rootfs() {
    let root = out_dir().join("dyn-rootfs");
    let _ = std::fs::remove_dir_all(&root);
    let put = |host: &str, guest: &str| {
        let to = root.join(guest.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(std::fs::canonicalize(host).unwrap(), &to).unwrap();
    };
    put("/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2");
    put("/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6");
    put("/bin/dash", "/bin/sh");
    let hello = build("hello", "gcc", &[], "-glibc");
    put(hello.to_str().unwrap(), "/hello");
    let r = root.to_str().unwrap();
    let o = onering(&["run", "--rootfs", r, "/bin/sh", "-c", "echo from the rootfs; exec /hello x"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("from the rootfs\nhello from onering\nargv[0]=/hello\n"), "{}", stdout(&o));
    std::fs::remove_file(root.join("lib/x86_64-linux-gnu/libc.so.6")).unwrap();
    let o = onering(&["run", "--rootfs", r, "/hello"]);
    assert_eq!(status(&o), 127, "{}", stderr(&o));
    assert!(stderr(&o).contains("libc.so.6: cannot open shared object file"), "{}", stderr(&o));
}

/// Runs `bin` on the host (it must succeed and end with "done") and in onering
/// on 1 and 2 vCPUs with its own directory as a volume at the same path (a
/// program that execs itself finds itself there): the same output, status 0.
fn same_as_host_from_its_directory(bin: &Path) {
    let host = Command::new(bin).output().unwrap();
    assert!(host.status.success() && stdout(&host).ends_with("done\n"), "{}", stdout(&host));
    let dir = bin.parent().unwrap().to_str().unwrap();
    let vol = format!("{dir}:{dir}");
    for smp in ["1", "2"] {
        let o = onering(&["run", "--smp", smp, "-v", &vol, bin.to_str().unwrap()]);
        assert_eq!(stdout(&o), stdout(&host), "{bin:?} --smp {smp}: {}", stderr(&o));
        assert_eq!(status(&o), 0);
    }
}

/// Rewritten `cpuid` instructions (answered in ring 3 from the VMM's table) say
/// exactly what a trapped one says, for every leaf and sub-leaf, on each of 1, 2
/// and 4 vCPUs (the APIC ids differ), rewritten and not; and the program's
/// `cpuid`s are all rewritten.
#[test]
fn rewritten_cpuid_answers_as_the_cpu() {
    let bin = musl("cpuid");
    same_as_host_on_1_2_4_vcpus(&bin);
    every_site_rewritten(&bin, "cpuid", ";");
}

/// Page tables handed out again whole (issue 17's speed work) never let a process
/// see an earlier one's memory: writers of 8 and 160 MiB at a fixed address end,
/// then forked and exec'd readers find nothing mapped there, and zeros once they
/// map it, on 1 and 2 vCPUs.
#[test]
fn no_process_sees_what_an_earlier_one_mapped() {
    same_as_host_from_its_directory(&musl("tables"));
}

/// fork + exec + wait, posix_spawn, a failed exec and a pipe from an exec'd child
/// (issue 17), the same as on the host: static (its directory shared at the same
/// path) and dynamic, on 1 and 2 vCPUs.
#[test]
fn fork_and_exec_match_the_host() {
    same_as_host_from_its_directory(&musl("forkexec"));
    same_as_host_from_its_directory(&build("forkexec", "gcc", &[], "-glibc"));
}

/// Process groups and sessions (setpgid from both sides, setsid, kill of a group)
/// as on the host, on 1, 2 and 4 vCPUs, rewritten and trapping.
#[test]
fn process_groups_and_sessions_match_the_host() {
    same_as_host_on_1_2_4_vcpus(&musl("pgroup"));
}

/// `prctl(PR_SET_PDEATHSIG)` as on the host: sent when the creating thread ends
/// (the process living on), not when another thread does; cleared by fork, kept by
/// execve (the program execs itself from its directory, a volume), on 1 and 2 vCPUs.
#[test]
fn parent_death_signal_matches_the_host() {
    same_as_host_from_its_directory(&musl_pthread("pdeath"));
}

/// pidfds as on the host: pidfd_open, pidfd_send_signal (its flags and errors),
/// waitid(P_PIDFD) (blocking and not), poll and epoll readiness (POLLIN at exit,
/// POLLHUP once reaped), clone and clone3 with CLONE_PIDFD; wait4 of a non-child
/// is ECHILD. On 1, 2 and 4 vCPUs, rewritten and trapping.
#[test]
fn pidfds_match_the_host() {
    same_as_host_on_1_2_4_vcpus(&musl_pthread("pidfd"));
}

/// A thread killed while it waits on a futex (its process exits) leaves nothing
/// in the futex queues: a later process's waiter at the same address gets its
/// wake-up (a dead thread's entry took it, and Go children hung in `notesleep`).
#[test]
fn futex_waiters_that_die_waiting_take_no_later_wake_up() {
    same_as_host_on_1_2_4_vcpus(&musl_pthread("futexkill"));
}

/// Writes of at most PIPE_BUF bytes to a pipe are atomic, `writev`'s too (musl's
/// stdio writes a line as two iovecs): four writers' lines arrive whole, and no
/// read ends inside one.
#[test]
fn small_pipe_writes_are_atomic_as_on_the_host() {
    same_as_host_on_1_2_4_vcpus(&musl("pipeatomic"));
}

/// Job-control stops as on the host (issue 17): SIGSTOP, SIGTSTP (handled, at its
/// default, blocked then let through, to an orphaned group) and SIGCONT of child
/// processes, a stopped child's threads standing still and its blocked read()
/// waiting for SIGCONT, waitpid WUNTRACED/WCONTINUED, waitid WSTOPPED/WCONTINUED
/// with WNOWAIT, SIGCHLD's CLD_STOPPED/CLD_CONTINUED and SA_NOCLDSTOP, SIGKILL
/// of a stopped child, /proc/PID/stat's 'T'. On 1, 2 and 4 vCPUs, rewritten and
/// trapping.
#[test]
fn job_control_stops_match_the_host() {
    same_as_host_on_1_2_4_vcpus(&musl_pthread("jobstop"));
}

/// Job control on a terminal (a pty from `script`, the program its session's
/// leader on the host as in the VM, onering with -i so stdin is the terminal too):
/// /dev/tty, tcgetpgrp/tcsetpgrp and their errors, TIOCGSID, TIOCSCTTY,
/// TIOCNOTTY, a background group's reads (SIGTTIN) and changes (SIGTTOU) ignored,
/// blocked, handled and at their default (the group stops), as on the host, on 1 and 2 vCPUs; without any terminal
/// /dev/tty is ENXIO.
#[test]
fn terminal_job_control_matches_the_host() {
    let bin = musl("tty");
    let b = bin.to_str().unwrap();
    let pty = |cmd: String| {
        // `exec`: script runs the command through $SHELL (or /bin/sh), which
        // need not exec a lone command itself; the program must be the leader.
        let o = Command::new("script")
            .args(["-qec", &format!("exec {cmd}"), "/dev/null"])
            .env("SHELL", "/bin/sh")
            .stdin(Stdio::null())
            .output()
            .expect("script (util-linux) runs a command on a pseudo-terminal");
        String::from_utf8_lossy(&o.stdout).replace('\r', "")
    };
    let host = pty(b.to_string());
    assert!(host.ends_with("done\n") && !host.contains("FAIL"), "{host}");
    let ring = env!("CARGO_BIN_EXE_onering");
    require_kvm();
    for smp in ["1", "2"] {
        assert_eq!(pty(format!("{ring} run --smp {smp} -i {b}")), host, "--smp {smp}");
    }
    let host = Command::new("setsid").args(["-w", b, "none"]).output().unwrap();
    assert!(host.status.success(), "{}", stdout(&host));
    let o = onering(&["run", b, "none"]);
    assert_eq!(stdout(&o), stdout(&host), "{}", stderr(&o));
    assert_eq!(status(&o), 0);
}

/// Resource limits survive fork and execve (and still bound descriptors), the FPU
/// state does not survive execve (MXCSR, the x87 control word, xmm registers), as
/// on the host; the program execs itself from its directory, a volume.
#[test]
fn execve_resets_the_fpu_and_keeps_limits_as_the_host() {
    same_as_host_from_its_directory(&musl("execstate"));
}

/// The set*id calls keep the ids (and say so), getrusage's arguments, as on the
/// host (which runs the tests as the same user).
#[test]
fn ids_and_rusage_match_the_host() {
    same_as_host_on_1_2_4_vcpus(&musl("ids"));
}

/// GNU make -j2 with the host's gcc (its jobserver uses pselect6, its
/// posix_spawn setresuid): a small C project builds in a volume, and the program
/// it links prints what the host's build prints.
#[test]
fn make_j2_with_the_hosts_gcc_builds_a_project() {
    let dir = out_dir().join("make-project");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut main = String::from("#include <stdio.h>\n");
    for i in 1..=4 {
        let f = format!("int f{i}(int x) {{ return x * {i} + 1; }}\n");
        std::fs::write(dir.join(format!("f{i}.c")), f).unwrap();
        main += &format!("int f{i}(int);\n");
    }
    main += "int main(void) { printf(\"%d\\n\", f1(1) + f2(2) + f3(3) + f4(4)); return 0; }\n";
    std::fs::write(dir.join("main.c"), main).unwrap();
    let mk = "OBJS = $(patsubst %.c,%.o,$(wildcard *.c))\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%.o: %.c\n\t$(CC) -O2 -c $< -o $@\n";
    std::fs::write(dir.join("Makefile"), mk).unwrap();
    let d = dir.to_str().unwrap();
    let vol = format!("{d}:{d}");
    let o = onering(&[
        "run",
        "--smp",
        "2",
        "--mem",
        "1G",
        "-e",
        "PATH=/usr/bin:/bin",
        "-v",
        &vol,
        "-w",
        d,
        "/usr/bin/make",
        "CC=gcc",
        "-j2",
    ]);
    assert_eq!(status(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = Command::new(dir.join("prog")).output().unwrap();
    assert_eq!(stdout(&out), "34\n");
}

/// What shells, xargs, find, tar and Python do with processes, through Debian's
/// own dynamic programs (from the host's tree): the same output as on the host,
/// no system call left trapping in the shell.
#[test]
fn shell_pipelines_and_subprocesses_match_the_host() {
    let scripts = [
        "seq 1 100000 | sort -n | uniq -c | wc -l",
        "x=$(echo inner | tr a-z A-Z); echo \"got $x\"; (echo sub; exit 3); echo \"status $?\"",
        "seq 1 20 | xargs -n 5 echo",
        "d=$(mktemp -d) && mkdir $d/a && echo hi > $d/a/f && find $d -type f -exec cat {} \\; && rm -r $d",
        "d=$(mktemp -d) && mkdir $d/z && seq 1 1000 > $d/z/n && tar -C $d -czf $d/z.tgz z && tar -tzf $d/z.tgz | sort && rm -r $d",
        "echo a b c | while read x y z; do echo \"$z $y $x\"; done | cat -n",
    ];
    for s in scripts {
        let host = Command::new("/bin/dash").args(["-c", s]).output().unwrap();
        let o = onering(&["run", "--smp", "2", "/bin/dash", "-c", s]);
        assert_eq!(stdout(&o), stdout(&host), "{s}: {}", stderr(&o));
        assert_eq!(status(&o), 0, "{s}");
    }
    let py = "import subprocess, sys; r = subprocess.run(['ls', '/'], capture_output=True); \
              print(r.returncode, 'bin' in r.stdout.decode().split()); \
              print(subprocess.check_output([sys.executable, '-c', 'print(6*7)']).decode().strip())";
    let o = onering(&["run", "/usr/bin/python3", "-c", py]);
    assert_eq!(stdout(&o), "0 True\n42\n", "{}", stderr(&o));
}
