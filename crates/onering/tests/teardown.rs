//! onering exits as soon as the program's status is known and leaves the VM's
//! teardown to a helper task (sys::exit_leaving_teardown): the helper must end
//! within milliseconds of onering, never linger. This test makes itself a child
//! subreaper, so the helper, orphaned when onering exits, becomes its child and its
//! end can be waited for. A file of its own: a subreaper collects every orphan of
//! the process, which would confuse tests running beside it.

mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn the_teardown_helper_ends_within_milliseconds_of_onering() {
    // SAFETY: prctl with integer arguments; changes only this process's reaping.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }, 0);
    let hello = musl("hello");
    let mut worst = Duration::ZERO;
    for mem in ["64M", "1G"] {
        for _ in 0..5 {
            let mut child = cmd(&["run", "--mem", mem, hello.to_str().unwrap()])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            assert!(child.wait().unwrap().success());
            let exited = Instant::now();
            let mut helpers = 0;
            loop {
                let mut status = 0;
                // SAFETY: waitpid with a valid pointer to a local.
                let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if pid > 0 {
                    helpers += 1;
                    continue;
                }
                if pid < 0 {
                    break; // no children left
                }
                assert!(exited.elapsed() < Duration::from_secs(2), "the helper outlived onering by 2 s");
                std::thread::sleep(Duration::from_micros(200));
            }
            assert!(helpers <= 1, "{helpers} processes left behind");
            worst = worst.max(exited.elapsed());
        }
    }
    eprintln!("the teardown helper ended at most {:.1} ms after onering", worst.as_secs_f64() * 1e3);
    // Measured ~5-20 ms here (the VM's memory is released as the helper exits); a
    // loaded machine may be slower, so the bound is loose.
    assert!(worst < Duration::from_millis(500), "{worst:?}");
}
