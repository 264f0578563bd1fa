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
