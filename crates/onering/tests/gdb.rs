//! `--gdb` on a real VM, driven by the real gdb in batch mode: onering waits for
//! gdb (on a port the system picks, read from its "waiting for gdb on" line), gdb
//! loads tests/guest/c/gdb.c's symbols from the program file, stops at a
//! breakpoint in `main`, reads a variable, stops in a function and reads its
//! argument, lists both threads, single-steps, finishes the function, goes on
//! line by line with `next`, and continues to the exit status;
//! single-steps through a rewritten system call, across the kernel; and stops a
//! spinning program with Ctrl-C.
//!
//! These tests need /dev/kvm, musl-gcc and gdb; without them they fail, loudly.

mod common;
use common::{cmd, musl_with, out_dir};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

/// tests/guest/c/gdb.c, static, with debugging information and no optimisation
/// (once per process: the tests run in parallel).
fn build() -> std::path::PathBuf {
    musl_with("gdb", &["-g", "-O0"], "-debug")
}

/// One debugging session: `onering run --gdb 127.0.0.1:0 EXTRA PROG ARGS` and gdb
/// with `commands`, then the command file `script`; Ctrl-C to gdb after
/// `interrupt`.
#[derive(Default)]
struct Session<'a> {
    extra: &'a [&'a str],
    args: &'a [&'a str],
    commands: &'a [&'a str],
    script: Option<&'a str>,
    interrupt: Option<Duration>,
}

/// Runs `s`: gdb's output, onering's exit status, and its stderr and stdout.
fn debug(s: Session) -> (String, i32, String) {
    let bin = build();
    let mut args = vec!["run", "--gdb", "127.0.0.1:0"];
    args.extend_from_slice(s.extra);
    args.push(bin.to_str().unwrap());
    args.extend_from_slice(s.args);
    let mut vm = cmd(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(vm.stderr.take().unwrap());
    // Lines before it (a warning about --smp) are kept for the messages.
    let mut first = String::new();
    let addr = loop {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap() == 0 {
            panic!("no 'waiting for gdb' line: {first:?}");
        }
        first += &line;
        if let Some(rest) = line.split("waiting for gdb on ").nth(1) {
            break rest.split_whitespace().next().unwrap_or_default().to_string();
        }
    };
    let mut g = Command::new("gdb");
    g.args(["-batch", "-nx", "-ex", "set pagination off", "-ex", &format!("target remote {addr}")]);
    for c in s.commands {
        g.args(["-ex", c]);
    }
    if let Some(text) = s.script {
        // (One file per session: the tests run at once in one process.)
        static SESSIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = out_dir().join(format!("gdb-script-{}-{n}", std::process::id()));
        std::fs::write(&file, text).unwrap();
        g.arg("-x").arg(file);
    }
    let gdb = g
        .arg(&bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run gdb (apt-get install gdb): {e}"));
    // Neither may hang the test: both are killed after a minute.
    let (gdb_pid, vm_pid) = (gdb.id(), vm.id());
    if let Some(after) = s.interrupt {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            let _ = Command::new("kill").args(["-INT", &gdb_pid.to_string()]).status();
        });
    }
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = Command::new("kill").args(["-9", &gdb_pid.to_string(), &vm_pid.to_string()]).status();
    });
    let out = gdb.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let status = vm.wait().unwrap().code().unwrap_or(-1);
    let mut rest = String::new();
    let _ = err.read_to_string(&mut rest);
    let _ = vm.stdout.take().unwrap().read_to_string(&mut rest);
    (text, status, first + &rest)
}

#[test]
fn gdb_stops_in_main_reads_variables_lists_threads_and_sees_the_exit() {
    let (out, status, err) = debug(Session {
        commands: &[
            "break main",
            "continue",
            "print magic",
            "break compute",
            "continue",
            "print x",
            "info threads",
            "backtrace",
            "stepi",
            "stepi",
            "print $pc > compute",
            "finish",
            "next",
            "next",
            "next",
            "continue",
        ],
        ..Session::default()
    });
    let all = format!("gdb said:\n{out}\nonering said:\n{err}");
    assert!(out.contains("Breakpoint 1, main (argc=1"), "{all}");
    assert!(out.contains("$1 = 24301"), "{all}");
    assert!(out.contains("Breakpoint 2, compute (x=7)"), "{all}");
    assert!(out.contains("$2 = 7"), "{all}");
    // Two threads: main and the one blocked in read().
    let threads = out.lines().filter(|l| l.contains("Thread ") && (l.starts_with('*') || l.starts_with("  "))).count();
    assert!(threads >= 2, "two threads listed: {all}");
    assert!(out.contains("#1  ") && out.contains(" in main (argc=1"), "a backtrace into main: {all}");
    assert!(out.contains("$3 = 1"), "stepped inside compute: {all}");
    assert!(out.contains("Value returned is $4 = 43"), "finish returns compute's value: {all}");
    // `next` over write() and over pthread_join(), which waits for the other
    // thread: every vCPU runs on while gdb waits for the line's end.
    assert!(out.contains("54\t    pthread_join") && out.contains("55\t    printf"), "next, line by line: {all}");
    assert!(out.contains("exited with code 07"), "{all}");
    assert_eq!(status, 7, "{all}");
    assert!(err.contains("answer 43 pid 1"), "the program ran on: {all}");
}

/// Breaks in `func`, steps (`stepi`) out into the trampoline of its rewritten
/// site and on until back in `func`: gdb's output, its "steps N, back at
/// func+M, REG V" line (N the steps of the way back, V register `reg`), N,
/// onering's exit status, and everything said, for messages.
fn step_across_the_kernel(func: &str, reg: &str) -> (String, String, u32, i32, String) {
    let script = format!(
        "\
break {func}
continue
set $k = 0
while $pc >= (long)&{func} && $pc < (long)&{func} + 64 && $k < 10
  stepi
  set $k = $k + 1
end
set $n = 0
while ($pc < (long)&{func} || $pc >= (long)&{func} + 64) && $n < 40
  stepi
  set $n = $n + 1
end
printf \"steps %d, back at {func}+%d, {reg} %d\\n\", $n, $pc - (long)&{func}, ${reg}
continue
"
    );
    let (out, status, err) = debug(Session { script: Some(&script), ..Session::default() });
    let all = format!("gdb said:\n{out}\nonering said:\n{err}");
    let line = out.lines().find(|l| l.starts_with("steps ")).unwrap_or_else(|| panic!("no steps line: {all}"));
    let n: u32 = line["steps ".len()..].split(',').next().unwrap().parse().unwrap();
    (out.clone(), line.to_string(), n, status, all)
}

/// `stepi` from a rewritten `syscall` site (now a jump) goes through the
/// trampoline, and the step that enters the kernel ends where the call returns,
/// with its result in rax; a few more steps are back in the function.
#[test]
fn stepping_through_a_rewritten_system_call_crosses_the_kernel() {
    let (out, line, n, status, all) = step_across_the_kernel("raw_getpid", "rax");
    assert!(out.contains("Breakpoint 1, ") && out.contains("raw_getpid ()"), "{all}");
    assert!((3..40).contains(&n), "through the trampoline in a few steps, not run away: {all}");
    assert!(line.ends_with("rax 1"), "getpid's result after the step over the kernel: {all}");
    assert!(out.contains("exited with code 07"), "{all}");
    assert_eq!(status, 7, "{all}");
}

/// The same through a rewritten `cpuid`: the step that enters the kernel's CPUID
/// entry ends where its call returns, EAX holding the answer (leaf 0: the highest
/// basic leaf, not 0).
#[test]
fn stepping_through_a_rewritten_cpuid_crosses_the_kernel() {
    let (_, line, n, status, all) = step_across_the_kernel("raw_cpuid", "eax");
    assert!((3..40).contains(&n), "through the trampoline in a few steps, not run away: {all}");
    assert!(!line.ends_with("eax 0"), "cpuid's answer after the step over the kernel: {all}");
    assert_eq!(status, 7, "{all}");
}

/// Ctrl-C in gdb stops a program that never traps (on two vCPUs): gdb reads its
/// variables there, and `kill` ends the VM as SIGKILL.
#[test]
fn ctrl_c_stops_a_spinning_program_and_kill_ends_it() {
    let (out, status, err) = debug(Session {
        extra: &["--smp", "2"],
        args: &["spin"],
        commands: &["continue", "print counter > 0", "backtrace", "kill"],
        interrupt: Some(Duration::from_secs(2)),
        ..Session::default()
    });
    let all = format!("gdb said:\n{out}\nonering said:\n{err}");
    assert!(out.contains("received signal SIGINT"), "{all}");
    assert!(out.contains("$1 = 1"), "{all}");
    assert!(out.contains("#0  ") && out.contains("main (argc=2"), "{all}");
    assert_eq!(status, 137, "{all}");
}
