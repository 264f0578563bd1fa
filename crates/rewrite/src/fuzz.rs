//! Fuzzing without a fuzz engine: a seeded generator biased towards edge values, a
//! driver that runs a target a fixed number of times and counts failures (panics,
//! broken invariants, inputs that take too long), and the targets themselves, each
//! a function of plain bytes so that a coverage-guided engine (`fuzz/`, cargo-fuzz)
//! can call the same code. The `#[test]`s in `tests/fuzz.rs` (and the VMM's
//! `tests/fuzz_exit.rs`) feed them mutated real binaries and garbage.
//!
//! Every iteration draws from its own generator, seeded from the run's seed and the
//! iteration's number, so a failure is reproduced by its number alone. The run's
//! size and seed come from `ONERING_FUZZ_ITERS` and `ONERING_FUZZ_SEED`.

use crate::elf::{Program, PF_X};
use crate::functions;
use crate::rewrite::{self, Code, Plan, Target};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// xorshift64* (Vigna): small, fast, good enough to pick mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, so nearby seeds give unrelated streams (and 0 works).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (0 if `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// An index into a slice of `len` (0 if empty).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn pick<T: Copy>(&mut self, from: &[T]) -> Option<T> {
        from.get(self.index(from.len())).copied()
    }

    /// A value that often sits on an edge: 0, 1, small, powers of two and their
    /// neighbours, the top of each integer width, `near` and its neighbours; else
    /// random.
    pub fn edge(&mut self, near: u64) -> u64 {
        match self.below(10) {
            0 => self.below(9),
            1 => [0xff, 0xffff, 0x7fff_ffff, 0xffff_ffff, i64::MAX as u64, u64::MAX][self.index(6)],
            2 => 1u64 << self.below(64),
            3 => (1u64 << self.below(64)).wrapping_sub(1),
            4 => (1u64 << self.below(64)).wrapping_add(1),
            5 | 6 => near.wrapping_add(self.below(17)).wrapping_sub(8),
            7 => u64::MAX - self.below(16),
            8 => self.below(0x1_0000),
            _ => self.next_u64(),
        }
    }

    /// Writes `v`'s low `width` bytes (1, 2, 4 or 8) at `at`, if they fit.
    pub fn put(data: &mut [u8], at: usize, width: usize, v: u64) {
        if let Some(d) = at.checked_add(width).and_then(|end| data.get_mut(at..end)) {
            d.copy_from_slice(&v.to_le_bytes()[..width]);
        }
    }

    /// Reads a little-endian field of `width` bytes at `at` (0 past the end).
    pub fn get(data: &[u8], at: usize, width: usize) -> u64 {
        let mut v = [0u8; 8];
        if let Some(d) = at.checked_add(width).and_then(|end| data.get(at..end)) {
            v[..width].copy_from_slice(d);
        }
        u64::from_le_bytes(v)
    }

    /// One mutation of `data`, aimed at `hot` (byte ranges where fields live) with
    /// probability 3/4: a field of 1, 2, 4 or 8 bytes set to an edge value near what
    /// it holds, a byte flipped, a run of bytes overwritten or copied from elsewhere.
    pub fn mutate(&mut self, data: &mut [u8], hot: &[std::ops::Range<usize>]) {
        if data.is_empty() {
            return;
        }
        let hot = hot.get(self.index(hot.len())).filter(|r| r.start < r.end).cloned();
        let at = match hot {
            Some(r) if !self.one_in(4) => r.start + self.index(r.end - r.start),
            _ => self.index(data.len()),
        };
        match self.below(6) {
            0..=2 => {
                let width = [1, 2, 4, 8][self.index(4)];
                let at = at & !(width - 1);
                let old = Self::get(data, at, width);
                Self::put(data, at, width, self.edge(old));
            }
            3 => {
                if let Some(b) = data.get_mut(at) {
                    *b ^= 1 << self.below(8);
                }
            }
            4 => {
                let n = 1 + self.index(16);
                for i in at..(at + n).min(data.len()) {
                    data[i] = self.next_u64() as u8;
                }
            }
            _ => {
                let n = 1 + self.index(64);
                let from = self.index(data.len());
                if from + n <= data.len() && at + n <= data.len() {
                    data.copy_within(from..from + n, at);
                }
            }
        }
    }
}

/// What a fuzz run found.
#[derive(Debug, Default)]
pub struct Report {
    pub inputs: u64,
    pub failures: u64,
    /// The first few failures: (iteration, what went wrong).
    pub first: Vec<(u64, String)>,
    /// The slowest input and how long it took.
    pub slowest: (u64, Duration),
}

/// The run's size: `ONERING_FUZZ_ITERS` if set, else `default`.
pub fn iterations(default: u64) -> u64 {
    std::env::var("ONERING_FUZZ_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The run's seed: `ONERING_FUZZ_SEED` if set, else a fixed one (CI runs are
/// reproducible).
pub fn seed() -> u64 {
    std::env::var("ONERING_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x0e1e_5eed)
}

/// An input slower than this counts as a failure (a hang, or work the input's size
/// does not justify).
pub const SLOW: Duration = Duration::from_secs(2);

/// Runs `target` `iters` times on a thread of its own, each time with a generator
/// seeded from `seed` and the iteration's number; catches panics; prints
/// `fuzz NAME: N inputs, F failures` on stderr (uncaptured, so it shows in test
/// logs). If one input runs longer than `hang` (a hang), gives up on the run and
/// reports it as a failure.
pub fn run<F>(name: &str, iters: u64, seed: u64, hang: Duration, target: F) -> Report
where
    F: Fn(&mut Rng, u64) -> Result<(), String> + Send + Sync + 'static,
{
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let progress = current.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new().name(format!("fuzz-{name}")).stack_size(16 << 20).spawn(move || {
        let mut report = Report::default();
        for i in 0..iters {
            progress.store(i, Ordering::Relaxed);
            let mut rng = Rng::new(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let t = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| target(&mut rng, i)));
            let took = t.elapsed();
            report.inputs += 1;
            if took > report.slowest.1 {
                report.slowest = (i, took);
            }
            let failure = match result {
                Ok(Ok(())) if took <= SLOW => None,
                Ok(Ok(())) => Some(format!("took {took:?}")),
                Ok(Err(e)) => Some(e),
                Err(p) => Some(format!(
                    "panicked: {}",
                    p.downcast_ref::<String>().map(String::as_str).or(p.downcast_ref::<&str>().copied()).unwrap_or("?")
                )),
            };
            if let Some(f) = failure {
                report.failures += 1;
                if report.first.len() < 5 {
                    report.first.push((i, f));
                }
            }
        }
        let _ = tx.send(report);
    });
    let mut last = u64::MAX;
    let report = match worker {
        Ok(_) => loop {
            match rx.recv_timeout(hang) {
                Ok(r) => break r,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    let i = current.load(Ordering::Relaxed);
                    // Still going: a slow run is fine, an input stuck since the last
                    // look is not.
                    if std::mem::replace(&mut last, i) == i {
                        break Report {
                            inputs: i,
                            failures: 1,
                            first: vec![(i, format!("hung for more than {hang:?}"))],
                            slowest: (i, hang),
                        };
                    }
                }
                Err(_) => {
                    break Report { failures: 1, first: vec![(0, "the fuzz thread died".into())], ..Report::default() }
                }
            }
        },
        Err(e) => {
            Report { failures: 1, first: vec![(0, format!("cannot start the fuzz thread: {e}"))], ..Report::default() }
        }
    };
    // Straight to stderr, not through eprintln!: the test harness captures that for
    // passing tests, and CI's log should show every run's counts.
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "fuzz {name}: {} inputs, {} failures (seed {seed:#x}; slowest input #{} {:?})",
        report.inputs, report.failures, report.slowest.0, report.slowest.1
    );
    for (i, f) in &report.first {
        let _ = writeln!(err, "fuzz {name}: input #{i}: {f}");
    }
    report
}

/// Target: the ELF parser. Whatever it accepts is consistent: segments sorted,
/// disjoint, in the file, not wrapping.
pub fn elf(data: &[u8]) -> Result<(), String> {
    let Ok(p) = Program::parse(data) else {
        return Ok(());
    };
    if p.segments.is_empty() {
        return Err("accepted without segments".into());
    }
    for s in &p.segments {
        if s.filesz > s.memsz || s.vaddr.checked_add(s.memsz).is_none() {
            return Err(format!("bad segment {s:?}"));
        }
        if s.bytes(data).len() as u64 != s.filesz {
            return Err(format!("segment {s:?} not in the file"));
        }
    }
    if p.segments.windows(2).any(|w| w[0].end() > w[1].vaddr) {
        return Err("overlapping or unsorted segments".into());
    }
    let (lo, hi) = p.span();
    if lo > hi {
        return Err(format!("span {lo:#x}..{hi:#x}"));
    }
    let _ = p.phdr_addr();
    Ok(())
}

fn sorted_unique(v: &[(u64, u64)], what: &str) -> Result<(), String> {
    if v.windows(2).all(|w| w[0].0 < w[1].0) {
        Ok(())
    } else {
        Err(format!("{what}: not sorted by start, or duplicated"))
    }
}

/// Target: function discovery (symbols, `.eh_frame`, `.eh_frame_hdr`). Results are
/// sorted and unique; ranges are not empty.
pub fn function_discovery(data: &[u8]) -> Result<(), String> {
    sorted_unique(&functions::functions(data), "symbols")?;
    sorted_unique(&functions::eh_frame_functions(data), ".eh_frame")?;
    let _ = functions::section(data, b".eh_frame_hdr");
    if let Ok(p) = Program::parse(data) {
        let starts = functions::unwind_function_starts(data, &p);
        if !starts.windows(2).all(|w| w[0] < w[1]) {
            return Err(".eh_frame_hdr starts not sorted".into());
        }
        for bias in [0, 0x5555_5540_0000, u64::MAX - 0xfff] {
            if functions::ranges(&p, data, bias).iter().any(|r| r.1 == 0) {
                return Err("an empty function range".into());
            }
        }
    }
    Ok(())
}

/// The kernel side the rewriter is given in the fuzz targets.
pub const TARGET: Target =
    Target { entry: 0xffff_ffff_8020_0030, user_rsp: 32, kstack_top: 16, cpuid: 0xffff_ffff_8020_0040 };

/// Target: what the loader does with a program file: parse, find functions, plan
/// the rewrite of its executable segments, at the static-pie base or its link
/// address; the plan must keep its invariants ([`check_plan`]).
pub fn pipeline(data: &[u8]) -> Result<(), String> {
    let Ok(p) = Program::parse(data) else {
        return Ok(());
    };
    let bias = if p.pie { 0x5555_5540_0000u64.wrapping_sub(p.span().0 & !0x1f_ffff) } else { 0 };
    let code = rewrite::program_code(&p, data, bias);
    let functions = functions::ranges(&p, data, bias);
    let Some(base) = p.span().1.wrapping_add(bias).checked_next_multiple_of(64) else {
        return Ok(());
    };
    if p.segments.iter().filter(|s| s.flags & PF_X != 0).count() != code.len() {
        return Err("program_code lost a segment".into());
    }
    check_plan(&code, &functions, base)
}

/// Plans the rewrite of `code` and checks the plan: every patch lies inside one
/// piece of the code it was given (and, the pieces being disjoint, patches do not
/// overlap), is a `jmp rel32` into the trampolines followed by `int3`s, and the counts
/// add up.
pub fn check_plan(code: &[Code], functions: &[(u64, u64)], base: u64) -> Result<(), String> {
    let plan: Plan = rewrite::plan(code, functions, base, &TARGET);
    if plan.rewritten > plan.sites
        || plan.cpuid_rewritten > plan.cpuid_sites
        || plan.patches.len() != plan.rewritten + plan.cpuid_rewritten
    {
        return Err(format!(
            "{} sites, {} rewritten, {} cpuid sites, {} rewritten, {} patches",
            plan.sites,
            plan.rewritten,
            plan.cpuid_sites,
            plan.cpuid_rewritten,
            plan.patches.len()
        ));
    }
    let disjoint = {
        let mut spans: Vec<(u64, u64)> =
            code.iter().map(|c| (c.addr, c.addr.saturating_add(c.bytes.len() as u64))).collect();
        spans.sort_unstable();
        spans.windows(2).all(|w| w[0].1 <= w[1].0)
    };
    let mut patched: Vec<(u64, u64)> = Vec::new();
    for p in &plan.patches {
        let end = p.addr.checked_add(p.bytes.len() as u64).ok_or("a patch wraps around")?;
        if !code.iter().any(|c| p.addr >= c.addr && end - c.addr <= c.bytes.len() as u64) {
            return Err(format!("patch at {:#x}+{} outside the code", p.addr, p.bytes.len()));
        }
        if p.bytes.len() < 5 || p.bytes[0] != 0xe9 || p.bytes[5..].iter().any(|b| *b != 0xcc) {
            return Err(format!("patch at {:#x} is not jmp rel32 + int3: {:02x?}", p.addr, p.bytes));
        }
        let rel = i32::from_le_bytes([p.bytes[1], p.bytes[2], p.bytes[3], p.bytes[4]]);
        let to = (p.addr + 5).wrapping_add(rel as i64 as u64);
        if to < base || to - base >= plan.trampolines.len() as u64 {
            return Err(format!("patch at {:#x} jumps to {to:#x}, not into the trampolines", p.addr));
        }
        patched.push((p.addr, end));
    }
    if disjoint {
        patched.sort_unstable();
        if patched.windows(2).any(|w| w[0].1 > w[1].0) {
            return Err("patches overlap".into());
        }
    }
    Ok(())
}

/// Target: the rewriter on bytes. The first bytes choose where the code sits, the
/// trampoline base and a few function ranges; the rest is the code.
pub fn plan_bytes(data: &[u8]) -> Result<(), String> {
    let word = |i: usize| Rng::get(data, i * 8, 8);
    let header = 8 * 8;
    let code_bytes = data.get(header..).unwrap_or(&[]);
    let addr = word(0);
    let base = match word(1) % 4 {
        0 => addr.wrapping_add(code_bytes.len() as u64).wrapping_add(word(2) % 4096),
        1 => addr.wrapping_sub(word(2) % (1 << 32)),
        _ => word(2),
    };
    let functions: Vec<(u64, u64)> = (3..8).map(|i| (addr.wrapping_add(word(i) % 4096), word(i) >> 52)).collect();
    // Two pieces, as two executable segments would be.
    let split = (word(1) >> 8) as usize % (code_bytes.len() + 1);
    let (a, b) = code_bytes.split_at(split);
    let gap = 16 + (word(1) >> 32) % 4096;
    let code = [Code { addr, bytes: a }, Code { addr: addr.wrapping_add(a.len() as u64).wrapping_add(gap), bytes: b }];
    check_plan(&code, &functions, base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_deterministic_and_spread() {
        let (mut a, mut b) = (Rng::new(1), Rng::new(1));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut r = Rng::new(0);
        let edges = (0..1000).map(|_| r.edge(100)).filter(|v| *v <= 8 || *v >= u64::MAX - 16).count();
        assert!(edges > 150, "{edges} edge values in 1000");
    }

    #[test]
    fn the_driver_counts_panics_errors_and_hangs() {
        let r = run("driver-self-test (2 failures expected)", 10, 7, Duration::from_secs(60), |_, i| match i {
            3 => Err("three".into()),
            5 => panic!("five"),
            _ => Ok(()),
        });
        assert_eq!((r.inputs, r.failures), (10, 2));
        assert_eq!(r.first[0], (3, "three".into()));
        assert_eq!(r.first[1], (5, "panicked: five".into()));
        let r = run("driver-self-test (1 hang expected)", 3, 7, Duration::from_millis(100), |_, i| {
            if i == 1 {
                std::thread::sleep(Duration::from_secs(1));
            }
            Ok(())
        });
        assert_eq!(r.failures, 1);
        assert!(r.first[0].1.contains("hung"));
    }

    #[test]
    fn byte_targets_take_anything() {
        let mut r = Rng::new(5);
        for n in [0usize, 1, 7, 64, 65, 200, 4096] {
            let data: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
            elf(&data).unwrap();
            function_discovery(&data).unwrap();
            pipeline(&data).unwrap();
            plan_bytes(&data).unwrap();
        }
    }
}
