//! Whole-VM fuzzing, a short fixed run (bench/fuzz.sh runs the long one):
//!
//! - tests/guest/c/fuzz.c makes seeded random system calls (edge values, real
//!   descriptors and buffers, sequences that build state) on 1, 2 and 4 vCPUs, with
//!   one and several threads: the program must finish (status 0, its count
//!   printed): a kernel panic is 125, a hang the time limit;
//! - real programs with mutated bytes (headers, program headers, anywhere): the
//!   kernel must never panic and the VMM never die of a signal (a mutant may
//!   well spin: that is counted, not failed);
//! - the fuzzer's scribble mode writes garbage into its hostcall block and rings
//!   the doorbell: the VMM must stop the VM with a message or serve the call, and
//!   never crash or hang.
//!
//! `ONERING_FUZZ_CALLS` (per VM, default 100000) and `ONERING_FUZZ_SEED` change
//! the run. These tests need /dev/kvm and musl-gcc, and fail without them.

mod common;
use common::*;
use onering_rewrite::fuzz::Rng;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

struct Run {
    /// None: killed by a signal (or by the time limit).
    status: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
}

/// Runs onering with `args` (no --smp added), output to files, for at most `limit`.
fn run_limited(args: &[String], limit: Duration, tag: &str) -> Run {
    require_kvm();
    let dir = out_dir();
    let (out, err) = (dir.join(format!("{tag}.out")), dir.join(format!("{tag}.err")));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_onering"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let (status, timed_out) = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break (st.code(), false);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Run { status, stdout: read(&out), stderr: read(&err), timed_out }
}

fn seed() -> u64 {
    std::env::var("ONERING_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed)
}

fn calls() -> u64 {
    std::env::var("ONERING_FUZZ_CALLS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000)
}

#[test]
fn random_system_calls_never_panic_or_hang_the_vm() {
    let bin = musl("fuzz");
    let (mut vms, mut made) = (0, 0u64);
    for smp in [1, 2, 4] {
        for (i, threads) in [1, 4].into_iter().enumerate() {
            let seed = seed() + smp * 10 + i as u64;
            let args: Vec<String> = ["run", "--quiet", "--mem", "1G", "--smp", &smp.to_string()]
                .into_iter()
                .map(String::from)
                .chain([bin.display().to_string(), seed.to_string(), calls().to_string(), threads.to_string()])
                .collect();
            let r = run_limited(&args, Duration::from_secs(120), "fuzz-calls");
            let what = format!("seed {seed}, --smp {smp}, {threads} threads");
            assert!(!r.timed_out, "{what}: hung (no end within 120 s); stderr: {}", r.stderr);
            assert!(!r.stderr.contains("kernel panic"), "{what}: {}", r.stderr);
            assert_eq!(r.status, Some(0), "{what}: stderr: {}", r.stderr);
            let line =
                r.stdout.lines().rfind(|l| l.starts_with("fuzz: ")).unwrap_or_else(|| panic!("{what}: {}", r.stdout));
            made += line.split(' ').nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            vms += 1;
        }
    }
    eprintln!("fuzz: {made} system calls in {vms} VMs, no panic, no hang");
}

#[test]
fn mutated_programs_never_panic_the_kernel_or_crash_the_vmm() {
    let mut rng = Rng::new(seed());
    let (mut runs, mut spins, mut refused) = (0, 0, 0);
    for name in ["hello", "threads"] {
        let original = std::fs::read(musl(name)).unwrap();
        // The ELF header and program headers, where a flipped byte matters most.
        let hot = [0..64, 64..64 + 56 * 8];
        for i in 0..40 {
            let mut data = original.clone();
            rng.mutate(&mut data, &hot);
            let path = out_dir().join(format!("mutant-{name}-{i}"));
            std::fs::write(&path, &data).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let args = ["run", "--quiet", "--mem", "128M", path.to_str().unwrap()].map(String::from).to_vec();
            let r = run_limited(&args, Duration::from_secs(10), "fuzz-elf");
            runs += 1;
            if r.timed_out {
                spins += 1; // a mutant that loops: its right
                continue;
            }
            let what = format!("{name} mutant {i} ({})", path.display());
            assert!(!r.stderr.contains("kernel panic"), "{what}: {}", r.stderr);
            assert!(r.status.is_some(), "{what}: the VMM died of a signal; stderr: {}", r.stderr);
            if r.status == Some(126) {
                refused += 1;
            }
            let _ = std::fs::remove_file(&path);
        }
    }
    eprintln!("fuzz: {runs} mutated programs run: {refused} refused (126), {spins} still running after 10 s");
}

#[test]
fn scribbled_hostcalls_never_crash_or_hang_the_vmm() {
    let bin = musl("fuzz");
    let mut ended = std::collections::BTreeMap::new();
    for smp in [1, 2] {
        for n in 1..=10 {
            let args: Vec<String> = ["run", "--quiet", "--smp", &smp.to_string()]
                .into_iter()
                .map(String::from)
                .chain([bin.display().to_string(), (seed() + n).to_string(), "100000".into(), "1".into()])
                .chain(["scribble".to_string()])
                .collect();
            let r = run_limited(&args, Duration::from_secs(60), "fuzz-scribble");
            let what = format!("seed {}, --smp {smp}", seed() + n);
            assert!(!r.timed_out, "{what}: hung; stderr: {}", r.stderr);
            assert!(r.status.is_some(), "{what}: the VMM died of a signal; stderr: {}", r.stderr);
            assert!(
                r.stderr.lines().all(|l| l.starts_with("onering: ")) || r.status == Some(0),
                "{what}: {}",
                r.stderr
            );
            *ended.entry(r.status.unwrap_or(-1)).or_insert(0) += 1;
        }
    }
    eprintln!("fuzz: VMs with scribbled hostcalls ended with statuses {ended:?}");
}
