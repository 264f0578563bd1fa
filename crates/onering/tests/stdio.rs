//! The program's standard streams against the host's: every byte written to fd 1
//! and 2 arrives in the order written, whatever the sizes, threads and vCPUs
//! (checked against the same program on the host), and real tools that stream
//! binary data through a pipe (tar, gzip) round-trip.
//!
//! These tests need /dev/kvm, musl-gcc and /bin/busybox (busybox-static); without
//! them they fail, loudly.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

/// One thread writing a random mix of sizes (1 B to 1 MiB) to stdout and stderr:
/// each stream equals the host's byte for byte.
#[test]
fn a_random_mix_of_write_sizes_arrives_in_order() {
    let bin = musl("outmix");
    for seed in ["1", "2", "3"] {
        let host = Command::new(&bin).args([seed, "0", "24"]).output().unwrap();
        assert!(host.status.success());
        let o = onering(&["run", bin.to_str().unwrap(), seed, "0", "24"]);
        assert_eq!(status(&o), 0, "{}", stderr(&o));
        assert!(o.stdout.len() > 10 << 20, "seed {seed}: {} bytes", o.stdout.len());
        assert!(
            o.stdout == host.stdout,
            "seed {seed}: stdout differs ({} vs {} bytes)",
            o.stdout.len(),
            host.stdout.len()
        );
        let err = stderr_bytes(&o);
        assert!(err == host.stderr, "seed {seed}: stderr differs ({} vs {} bytes)", err.len(), host.stderr.len());
    }
}

/// Records (`@`, thread, seq, len, payload) per thread, in the order they came.
fn records(out: &[u8]) -> BTreeMap<u8, Vec<(u32, &[u8])>> {
    let mut by_thread: BTreeMap<u8, Vec<(u32, &[u8])>> = BTreeMap::new();
    let mut at = 0;
    while at < out.len() {
        assert!(out.len() - at >= 10 && out[at] == b'@', "not a record at byte {at} of {}", out.len());
        let thread = out[at + 1];
        let seq = u32::from_le_bytes(out[at + 2..at + 6].try_into().unwrap());
        let len = u32::from_le_bytes(out[at + 6..at + 10].try_into().unwrap()) as usize;
        assert!(at + 10 + len <= out.len(), "record cut short at byte {at}");
        by_thread.entry(thread).or_default().push((seq, &out[at + 10..at + 10 + len]));
        at += 10 + len;
    }
    by_thread
}

/// Several threads writing records of random sizes, one write(2) each: every
/// thread's records come out whole and in its order, the same as on the host
/// (whose stdout is a file here, where such writes do not interleave).
#[test]
fn records_from_many_threads_arrive_whole_and_in_order() {
    let bin = musl("outmix");
    let dir = temp_dir("outmix-threads");
    let file = dir.join("host-out");
    let st = Command::new(&bin).args(["7", "4", "6"]).stdout(std::fs::File::create(&file).unwrap()).status().unwrap();
    assert!(st.success());
    let host = std::fs::read(&file).unwrap();
    let want = records(&host);
    assert_eq!(want.len(), 4);
    for smp in ["1", "2", "4"] {
        let o = onering(&["run", "--smp", smp, bin.to_str().unwrap(), "7", "4", "6"]);
        assert_eq!(status(&o), 0, "{}", stderr(&o));
        let got = records(&o.stdout);
        for (t, recs) in &want {
            let g = &got[t];
            assert_eq!(g.len(), recs.len(), "--smp {smp}: thread {t}: record count");
            for (i, (a, b)) in g.iter().zip(recs).enumerate() {
                assert!(
                    a.0 == b.0 && a.1 == b.1,
                    "--smp {smp}: thread {t}: record {i} differs (seq {} vs {})",
                    a.0,
                    b.0
                );
            }
        }
    }
}

/// A directory of files of assorted sizes (some larger than the console buffer).
fn data_tree(dir: &Path) {
    let mut s = 0x1234_5678_u64;
    let mut rand = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for (i, size) in [0usize, 1, 100, 4095, 4096, 65_535, 65_536, 100_000, 300_000, 1_500_000].iter().enumerate() {
        let sub = dir.join(format!("d{}", i % 3));
        std::fs::create_dir_all(&sub).unwrap();
        // Compressible and not: text-like runs and random bytes.
        let bytes: Vec<u8> =
            (0..*size).map(|j| if (j / 4096) % 2 == 0 { b'a' + (j % 26) as u8 } else { rand() as u8 }).collect();
        std::fs::write(sub.join(format!("f{i}")), bytes).unwrap();
    }
}

/// `busybox tar cf - DIR` in onering, piped into the host's tar: the files come
/// back identical. And `busybox gzip -c` to a pipe, unpacked on the host.
#[test]
fn tar_and_gzip_stream_through_a_pipe_intact() {
    assert!(Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (apt-get install busybox-static)");
    let rootfs = temp_dir("tar-rootfs");
    data_tree(&rootfs.join("data"));
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    let out = temp_dir("tar-out");
    let root = rootfs.to_str().unwrap();
    let mut tar = cmd(&["run", "--rootfs", root, "/bin/busybox", "tar", "cf", "-", "-C", "/", "data"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let x =
        Command::new("tar").arg("xf").arg("-").arg("-C").arg(&out).stdin(tar.stdout.take().unwrap()).output().unwrap();
    assert!(tar.wait().unwrap().success());
    assert!(x.status.success(), "host tar: {}", String::from_utf8_lossy(&x.stderr));
    let diff = Command::new("diff").arg("-r").arg(rootfs.join("data")).arg(out.join("data")).output().unwrap();
    assert!(diff.status.success(), "{}", String::from_utf8_lossy(&diff.stdout));

    let big = "/data/d0/f9";
    let mut gz = cmd(&["run", "--rootfs", root, "/bin/busybox", "gzip", "-c", big])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let un = Command::new("gzip").arg("-dc").stdin(gz.stdout.take().unwrap()).output().unwrap();
    assert!(gz.wait().unwrap().success());
    assert!(un.status.success(), "host gunzip: {}", String::from_utf8_lossy(&un.stderr));
    assert!(un.stdout == std::fs::read(rootfs.join("data/d0/f9")).unwrap(), "gzip round trip differs");
}

/// Everything written before the program ends reaches the host before onering
/// reports its status, however it ends: death by a signal, or `exit_group` from
/// another thread.
#[test]
fn output_is_complete_however_the_program_ends() {
    let bin = musl("outmix");
    for (end, code) in [("abort", 134), ("segv", 139), ("thread", 7)] {
        let host = Command::new(&bin).args(["5", "0", "8", end]).output().unwrap();
        let o = onering(&["run", bin.to_str().unwrap(), "5", "0", "8", end]);
        assert_eq!(status(&o), code, "{end}: {}", stderr(&o));
        assert!(o.stdout == host.stdout, "{end}: stdout differs ({} vs {} bytes)", o.stdout.len(), host.stdout.len());
        // (Less onering's report of the signal, as a shell reports it after the host run.)
        let err = stderr_bytes(&o);
        let err = match err.windows(26).rposition(|w| w == b"onering: program killed by") {
            Some(i) if end != "thread" => &err[..i],
            _ => err,
        };
        assert!(err == host.stderr, "{end}: stderr differs ({} vs {} bytes)", err.len(), host.stderr.len());
    }
}

/// Runs tests/guest/c/stdio_kinds on the host and in onering with the same
/// redirections (`sh -c` with `redirect` after the command; `-i` for onering when
/// stdin is given) and returns (host, onering) outputs, stdout and stderr together.
fn kinds(mode: &str, redirect: &str, interactive: bool) -> (String, String) {
    let bin = musl("stdio_kinds");
    let b = bin.to_str().unwrap();
    let ring = env!("CARGO_BIN_EXE_onering");
    let i = if interactive { "-i " } else { "" };
    // onering's own warning about more vCPUs than host CPUs would land in a
    // redirected stderr file and change its size: no --smp when stderr is a file.
    let smp = match std::env::var("ONERING_TEST_SMP") {
        Ok(n) if !redirect.contains("2>") => format!("--smp={n} "),
        _ => String::new(),
    };
    let sh = |cmd: String| {
        let o = Command::new("sh").arg("-c").arg(&cmd).stdin(Stdio::null()).output().unwrap();
        assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        text.lines().filter(|l| !l.starts_with("onering: warning: --smp")).map(|l| format!("{l}\n")).collect()
    };
    // Without -i the host run gets /dev/null for stdin, as onering gives the program.
    let host_in = if interactive { "" } else { " </dev/null" };
    (sh(format!("{b} {mode} {redirect}{host_in}")), sh(format!("{ring} run {smp}{i}{b} {mode} {redirect}")))
}

/// Pipes are FIFOs (ESPIPE), stdin without `-i` is /dev/null, nothing is a
/// terminal: as the host shows the same descriptors.
#[test]
fn standard_streams_are_what_the_host_gave_pipes() {
    let (host, ring) = kinds("x", "", false);
    assert!(host.contains("fd 1: fifo"), "{host}");
    assert_eq!(ring, host);
}

/// A regular file as stdout: S_IFREG with its size and offset after what was
/// written; stderr as a file the same; stdin from a file with `-i`, read, seeked
/// back and read again.
#[test]
fn standard_streams_are_what_the_host_gave_files() {
    let dir = temp_dir("stdio-files");
    let (h, r) = (dir.join("host"), dir.join("ring"));
    let (host, ring) = kinds("write", &format!(">{}", h.display()), false);
    let (_, ring2) = kinds("write", &format!(">{}", r.display()), false);
    assert!(host.contains("fd 1: file size 110, isatty 0, lseek 110"), "{host}");
    assert_eq!(ring, ring2);
    assert_eq!(ring, host);
    assert_eq!(std::fs::read(&h).unwrap(), std::fs::read(&r).unwrap());
    let (host, ring) = kinds("x report-out", &format!("2>{}", h.display()), false);
    assert!(host.contains("fd 2: file size 0"), "{host}");
    assert_eq!(ring, host);
    let input = dir.join("input");
    std::fs::write(&input, "abcdefghijklmnop").unwrap();
    let (host, ring) = kinds("seek", &format!("<{}", input.display()), true);
    assert!(host.contains("stdin: read 'abcde' (at 5), rewound, read 'abcde'"), "{host}");
    assert_eq!(ring, host);
    let (host, ring) = kinds("x", &format!("<{} | cat", input.display()), true);
    assert!(host.contains("fd 0: file size 16"), "{host}");
    assert_eq!(ring, host);
}

/// A terminal (a pty from `script`): isatty, the window size and the modes, on
/// stdout and stderr, and on stdin with `-i` (without it stdin is /dev/null).
#[test]
fn standard_streams_are_what_the_host_gave_terminals() {
    let bin = musl("stdio_kinds");
    let ring = env!("CARGO_BIN_EXE_onering");
    let smp = std::env::var("ONERING_TEST_SMP").map(|n| format!("--smp={n} ")).unwrap_or_default();
    let pty = |cmd: String| {
        let o = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .expect("script (util-linux) runs a command on a pseudo-terminal");
        assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stdout));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.contains("warning: --smp"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let b = bin.to_str().unwrap();
    let host = pty(format!("{b} x </dev/null"));
    assert!(host.contains("fd 1: chardev, isatty 1, lseek -1 Invalid seek, winsize ok, tcgetattr ok"), "{host}");
    assert_eq!(pty(format!("{ring} run {smp}{b} x")), host);
    let host = pty(format!("{b} x"));
    assert!(host.contains("fd 0: chardev, isatty 1"), "{host}");
    assert_eq!(pty(format!("{ring} run {smp}-i {b} x")), host);
}

/// A program that leaves the terminal raw (ending normally or by a crash): the
/// user's terminal gets its modes back when onering ends.
#[test]
fn terminal_modes_are_restored_when_the_program_ends() {
    let bin = musl("setraw");
    let ring = env!("CARGO_BIN_EXE_onering");
    for how in ["", "crash"] {
        let cmd = format!("stty -g; {ring} run -i {} {how}; stty -g", bin.display());
        let o = Command::new("script").args(["-qc", &cmd, "/dev/null"]).stdin(Stdio::null()).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).replace('\r', "");
        let lines: Vec<&str> = out.lines().filter(|l| l.contains(':') && !l.contains(' ')).collect();
        assert!(out.contains("raw: 1"), "{out}");
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0], lines[1], "the modes before and after ({how})");
    }
}

/// Output to a pipe goes in whole buffers, not an exit per line (`--stats` counts
/// the output writes), and arrives complete.
#[test]
fn output_to_a_pipe_is_batched() {
    assert!(std::path::Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (busybox-static)");
    let o = onering(&["run", "--stats", "/bin/busybox", "seq", "1", "200000"]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    let want: String = (1..=200000).map(|i| format!("{i}\n")).collect();
    assert!(stdout(&o) == want, "seq's output differs");
    let e = stderr(&o);
    let writes: u64 = e
        .split("hostcalls, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no output writes in {e}"));
    // 1.3 MB in 64 KiB buffers is ~20; one per line would be 200,000.
    assert!(writes < 200, "{writes} output writes for 200,000 lines");
}

/// A line written to a pipe reaches the reader while the program waits: blocked
/// reading stdin, or computing without a system call (the batch's deadline).
#[test]
fn batched_output_is_not_held_while_the_program_waits() {
    use std::io::{BufRead, BufReader};
    let bin = musl("flushwait");
    for mode in ["read", "spin"] {
        let mut child = cmd(&["run", "-i", bin.to_str().unwrap(), mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let waited = start.elapsed();
        assert_eq!(line, "ready\n", "{mode}");
        // The program still waits (for input, or 3 s of computing).
        assert!(waited < std::time::Duration::from_millis(2500), "{mode}: the line took {waited:?}");
        drop(child.stdin.take());
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "done\n", "{mode}");
        assert!(child.wait().unwrap().success());
    }
}

/// poll on stdin (with `-i`, a pipe) waits for input without taking it, and the
/// read after it gets it; end of input is readable too.
#[test]
fn polling_stdin_waits_for_input() {
    use std::io::{BufRead, BufReader, Write};
    let bin = musl("pollstdin");
    let mut child = cmd(&["run", "-i", bin.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    for word in ["one\n", "two\n"] {
        std::thread::sleep(std::time::Duration::from_millis(200));
        input.write_all(word.as_bytes()).unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, format!("got 4 bytes: {word}"));
    }
    drop(input);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "end of input (0)\n");
    assert!(child.wait().unwrap().success());
}

/// The terminal's signals reach the VM's foreground job, as a shell's terminal
/// sends them (busybox sh with `-i` under a pty, job control on): Ctrl-Z stops
/// the running `sleep` (the shell reports it stopped, status 148), Ctrl-C ends the
/// next one (status 130), and the shell, which took neither, goes on. Before,
/// Ctrl-Z stopped onering itself and Ctrl-C went to the shell, leaving the sleep
/// running. (`exec`: no shell of `script`'s between the terminal and onering, to
/// take the terminal's signals too.)
#[test]
fn terminal_signals_reach_the_foreground_job() {
    let ring = env!("CARGO_BIN_EXE_onering");
    let start = std::time::Instant::now();
    let steps: [&[u8]; 7] = [
        b"busybox sleep 30\n",
        b"\x1a",
        b"echo after-stop $?; jobs\n",
        b"busybox sleep 30\n",
        b"\x03",
        b"echo after-int $?\n",
        b"kill -9 %1; exit 4\n",
    ];
    let o =
        busybox_sh_on_a_pty(&format!("exec {ring} run -i --rootfs / -e PATH=/bin:/usr/bin /bin/busybox sh"), &steps);
    let out = String::from_utf8_lossy(&o.stdout).replace('\r', "");
    assert!(out.contains("after-stop 148"), "{out}");
    assert!(out.contains("Stopped") && out.contains("busybox sleep 30"), "{out}");
    assert!(out.contains("after-int 130"), "{out}");
    assert_eq!(o.status.code(), Some(4), "{out}");
    assert!(start.elapsed() < std::time::Duration::from_secs(25), "a sleep ran on: {out}");
}

/// Runs `cmd` (a busybox sh in onering) under `script`'s pseudo-terminal, typing
/// each of `steps` after a pause, then the end of input.
fn busybox_sh_on_a_pty(cmd: &str, steps: &[&[u8]]) -> std::process::Output {
    use std::io::Write;
    assert!(std::path::Path::new("/bin/busybox").exists(), "this test needs /bin/busybox (busybox-static)");
    let mut child = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    for step in steps {
        std::thread::sleep(std::time::Duration::from_millis(700));
        input.write_all(step).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// An interactive shell on a terminal (busybox sh with `-i`, under a pty): its
/// line editor polls stdin and puts the terminal in raw mode; commands run.
#[test]
fn an_interactive_shell_on_a_terminal() {
    let ring = env!("CARGO_BIN_EXE_onering");
    let o = busybox_sh_on_a_pty(&format!("{ring} run -i /bin/busybox sh"), &[b"echo hello-from-sh\n", b"exit 3\n"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\nhello-from-sh"), "{out}");
    assert_eq!(o.status.code(), Some(3), "{out}");
}
