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
