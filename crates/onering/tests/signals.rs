//! Signals through `onering run`: waiting for them (pause, sigsuspend,
//! sigtimedwait) as on the host, and the host's signals sent to onering forwarded
//! to the program.
//!
//! These tests need /dev/kvm and musl-gcc; without them they fail, loudly.

mod common;
use common::*;
use std::process::Command;

#[test]
fn waiting_for_signals_matches_the_host() {
    let bin = musl("sigwait");
    let host = Command::new(&bin).output().unwrap();
    assert!(host.status.success());
    let o = onering(&["run", bin.to_str().unwrap()]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), String::from_utf8_lossy(&host.stdout));
}

/// A child process (a vfork-style clone) dying of SIGSEGV, then faults caught by
/// the parent's handler: the exception machinery keeps working after a thread
/// ends in the middle of one (it used to end the VM with "unrecoverable
/// exception").
#[test]
fn a_child_dying_of_a_fault_leaves_exceptions_working() {
    let bin = musl("childfault");
    let host = Command::new(&bin).output().unwrap();
    assert!(host.status.success());
    let o = onering(&["run", bin.to_str().unwrap()]);
    assert_eq!(status(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), String::from_utf8_lossy(&host.stdout));
}

/// A sleep until the end of time blocks (it used to spin in the kernel, starving
/// the other threads on its vCPU).
#[test]
fn sleeping_forever_blocks_instead_of_spinning() {
    let bin = musl("sleepmax");
    for smp in ["1", "2"] {
        let start = std::time::Instant::now();
        let o = onering(&["run", "--smp", smp, bin.to_str().unwrap()]);
        assert_eq!(status(&o), 0, "{}", stderr(&o));
        assert_eq!(stdout(&o), "main ran\n");
        assert!(start.elapsed() < std::time::Duration::from_secs(20));
    }
}

/// Starts onering on tests/guest/c/sigserver in `mode` and waits for "ready".
fn server(mode: &str) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead;
    let bin = musl("sigserver");
    let mut child = cmd(&["run", bin.to_str().unwrap(), mode])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n", "{mode}");
    (child, out)
}

fn kill(child: &std::process::Child, sig: i32) {
    let st = Command::new("kill").arg(format!("-{sig}")).arg(child.id().to_string()).status().unwrap();
    assert!(st.success());
}

fn next_line(out: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    line
}

/// Signals sent to onering reach the program's handlers, whatever it is doing
/// (paused, sleeping, computing without system calls, waiting for a thread that
/// computes), and SIGTERM shuts a server down gracefully.
#[test]
fn host_signals_reach_the_programs_handlers() {
    for mode in ["pause", "sleep", "spin", "thread"] {
        let (child, mut out) = server(mode);
        for (sig, name) in [(10, "SIGUSR1"), (12, "SIGUSR2"), (1, "SIGHUP"), (28, "SIGWINCH"), (2, "SIGINT")] {
            kill(&child, sig);
            assert_eq!(next_line(&mut out), format!("got {name}\n"), "{mode}");
        }
        kill(&child, 15);
        assert_eq!(next_line(&mut out), "got SIGTERM, shutting down\n", "{mode}");
        assert_eq!(next_line(&mut out), "clean exit\n", "{mode}");
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// Without handlers the program dies of the signal: 128 + n, as on the host; a
/// line says so, as a shell's "Terminated" would (none for Ctrl-C).
#[test]
fn host_signals_end_a_program_without_handlers() {
    for (sig, code, says) in [
        (15, 143, "onering: program killed by SIGTERM\n"),
        (2, 130, ""),
        (1, 129, "onering: program killed by SIGHUP\n"),
    ] {
        let (mut child, _out) = server("plain");
        kill(&child, sig);
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(code), "signal {sig}");
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        let err: String = err.split_inclusive('\n').filter(|l| !l.contains("warning: --smp")).collect();
        assert_eq!(err, says);
    }
}

/// A program that ignores SIGTERM and SIGINT: a second one after the grace
/// period stops the VM at once; SIGKILL ends onering at once anyway.
#[test]
fn a_second_signal_after_the_grace_period_stops_the_vm() {
    let (mut child, _out) = server("stubborn");
    kill(&child, 15);
    std::thread::sleep(std::time::Duration::from_millis(300));
    kill(&child, 15);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "still within the grace period: still running");
    std::thread::sleep(std::time::Duration::from_millis(3000));
    let start = std::time::Instant::now();
    kill(&child, 15);
    let st = child.wait().unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(st.code(), Some(143));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("did not end within 3 s of SIGTERM: stopped"), "{err}");

    let (mut child, _out) = server("stubborn");
    kill(&child, 9);
    let st = child.wait().unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9));
}
