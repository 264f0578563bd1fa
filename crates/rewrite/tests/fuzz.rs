//! Fuzzing the parsers of the program file and the rewriter, as plain tests: each
//! runs a fixed number of seeded iterations (`ONERING_FUZZ_ITERS` for more, and
//! `ONERING_FUZZ_SEED` for another sequence) and prints how many inputs ran and how
//! many failed. Inputs are real binaries (a musl hello with and without symbols, a Go
//! hello, Debian's stripped busybox), hand-made ELF files and garbage, mutated where
//! the parsers look: the ELF and program headers, the section headers and names,
//! `.eh_frame` record lengths and CIE pointers, `.eh_frame_hdr`, the symbol table,
//! and code. A failure is a panic, a broken invariant (see `onering_rewrite::fuzz`)
//! or an input that takes more than `fuzz::SLOW`.

mod common;

use onering_rewrite::fuzz::{self, Rng};
use onering_rewrite::rewrite::Code;
use onering_rewrite::testing;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// A file to mutate and the byte ranges where its parsers look.
struct Seed {
    name: &'static str,
    bytes: Vec<u8>,
    hot: Vec<Range<usize>>,
    /// How often it is picked, relative to the others (big files cost more).
    weight: u64,
}

fn field(f: &[u8], at: usize, width: usize) -> usize {
    Rng::get(f, at, width) as usize
}

/// Where an ELF file's parsers look: the headers, every section header, the names,
/// the start of the symbol table, `.eh_frame`'s record headers and FDE fields, and
/// `.eh_frame_hdr`'s header and first entries.
fn hot_ranges(f: &[u8]) -> Vec<Range<usize>> {
    let mut hot = Vec::new();
    hot.push(0..64); // the ELF header
    let (phoff, phnum) = (field(f, 32, 8), field(f, 56, 2));
    hot.push(phoff..phoff.saturating_add(phnum * 56).min(f.len()));
    let (shoff, shnum, shstrndx) = (field(f, 40, 8), field(f, 60, 2), field(f, 62, 2));
    if shoff == 0 || shoff >= f.len() {
        return hot;
    }
    hot.push(shoff..shoff.saturating_add(shnum * 64).min(f.len()));
    let sh = |i: usize, at: usize, w: usize| field(f, shoff + i * 64 + at, w);
    let names = sh(shstrndx, 24, 8);
    for i in 0..shnum {
        let (name, kind, off, size) = (sh(i, 0, 4), sh(i, 4, 4), sh(i, 24, 8), sh(i, 32, 8));
        let sname: Vec<u8> = f.get(names + name..).unwrap_or(&[]).iter().take_while(|b| **b != 0).copied().collect();
        if let Some(start) = names.checked_add(name) {
            hot.push(start..(start + sname.len() + 1).min(f.len()));
        }
        if kind == 2 {
            hot.push(off..(off + 24 * 64).min(off + size).min(f.len()));
        }
        if sname == b".eh_frame_hdr" {
            hot.push(off..(off + 64).min(off + size).min(f.len()));
        }
        if sname == b".eh_frame" {
            // Each record's length and id (or CIE pointer) and an FDE's pc fields.
            let mut at = 0;
            while at + 8 <= size && off + at + 8 <= f.len() {
                let len = field(f, off + at, 4);
                hot.push(off + at..off + at + 16.min(size - at));
                if len == 0 || len == 0xffff_ffff {
                    break;
                }
                at += 4 + len;
            }
        }
    }
    hot.retain(|r| r.start < r.end && r.end <= f.len());
    hot
}

fn seed(name: &'static str, bytes: Vec<u8>, weight: u64) -> Seed {
    let hot = hot_ranges(&bytes);
    Seed { name, bytes, hot, weight }
}

/// The corpus: real binaries and hand-made files.
fn corpus() -> Arc<Vec<Seed>> {
    let read = |p: std::path::PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let eh = {
        // A CIE ("zR", pcrel|sdata4) and an FDE for the tiny program's code.
        let mut d = Vec::new();
        let cie = [0u8, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b, 0, 0, 0];
        d.extend((cie.len() as u32).to_le_bytes());
        d.extend(cie);
        let fde_at = d.len();
        let pc = (0x401000i64 - (0x500000 + fde_at as i64 + 8)) as i32;
        let mut fde = (fde_at as u32 + 4).to_le_bytes().to_vec();
        fde.extend(pc.to_le_bytes());
        fde.extend(0x40u32.to_le_bytes());
        fde.extend([0, 0, 0, 0]);
        d.extend((fde.len() as u32).to_le_bytes());
        d.extend(fde);
        d.extend([0, 0, 0, 0]);
        d
    };
    // mov $1,%eax ; syscall ; ret, and more sites.
    let code: Vec<u8> = [0xb8, 1, 0, 0, 0, 0x0f, 0x05, 0xc3].repeat(8);
    let tiny = testing::with_sections(&testing::tiny_elf(&code), &[(".eh_frame", 0x500000, &eh)]);
    Arc::new(vec![
        seed("tiny", tiny, 8),
        seed("tiny-bare", testing::tiny_elf(&code), 2),
        seed("musl hello", read(common::musl_hello()), 8),
        seed("musl hello stripped", read(common::musl_hello_stripped()), 8),
        seed("go hello", read(common::go_hello()), 1),
        seed("busybox", read(common::busybox()), 1),
    ])
}

/// A mutated copy of a weighted pick from the corpus (1 to 8 mutations, sometimes
/// truncated), or garbage.
fn input(corpus: &[Seed], rng: &mut Rng) -> (&'static str, Vec<u8>) {
    if rng.one_in(32) {
        let n = rng.index(4096);
        let mut v: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
        if rng.one_in(2) && v.len() >= 4 {
            v[..4].copy_from_slice(b"\x7fELF");
        }
        return ("garbage", v);
    }
    let total: u64 = corpus.iter().map(|s| s.weight).sum();
    let mut pick = rng.below(total);
    let s = corpus
        .iter()
        .find(|s| {
            let hit = pick < s.weight;
            pick = pick.saturating_sub(s.weight);
            hit
        })
        .unwrap_or(&corpus[0]);
    let mut bytes = s.bytes.clone();
    for _ in 0..1 + rng.below(8) {
        rng.mutate(&mut bytes, &s.hot);
    }
    if rng.one_in(16) {
        let hot = s.hot.get(rng.index(s.hot.len())).cloned();
        let cut = match hot {
            Some(r) if rng.one_in(2) => r.start + rng.index(r.end - r.start),
            _ => rng.index(bytes.len() + 1),
        };
        bytes.truncate(cut);
    }
    (s.name, bytes)
}

fn check(name: &str, default: u64, target: fn(&[u8]) -> Result<(), String>) {
    let corpus = corpus();
    let report = fuzz::run(name, fuzz::iterations(default), fuzz::seed(), Duration::from_secs(60), move |rng, _| {
        let (from, bytes) = input(&corpus, rng);
        target(&bytes).map_err(|e| format!("{e} (a mutated {from}, {} bytes)", bytes.len()))
    });
    assert_eq!(report.failures, 0, "fuzz {name}: {:?}", report.first);
}

#[test]
fn fuzz_elf_parser() {
    check("elf", 20_000, fuzz::elf);
}

#[test]
fn fuzz_function_discovery() {
    check("functions", 10_000, fuzz::function_discovery);
}

#[test]
fn fuzz_load_pipeline() {
    check("pipeline", 3_000, fuzz::pipeline);
}

/// The rewriter alone: windows of real code (with extra `syscall`s dropped in),
/// mutated, at addresses and with function ranges and a trampoline base chosen to
/// sit on edges (the top of the address space, ranges that overlap, wrap, or miss).
#[test]
fn fuzz_rewriter() {
    let corpus = corpus();
    let code: Arc<Vec<(Vec<u8>, u64)>> = Arc::new(
        corpus
            .iter()
            .filter_map(|s| onering_rewrite::elf::Program::parse(&s.bytes).ok().map(|p| (s, p)))
            .flat_map(|(s, p)| {
                p.segments
                    .iter()
                    .filter(|g| g.flags & onering_rewrite::elf::PF_X != 0)
                    .map(|g| (g.bytes(&s.bytes).to_vec(), g.vaddr))
                    .collect::<Vec<_>>()
            })
            .collect(),
    );
    let report =
        fuzz::run("rewriter", fuzz::iterations(20_000), fuzz::seed(), Duration::from_secs(60), move |rng, _| {
            let (text, vaddr) = &code[rng.index(code.len())];
            let len = 1 + rng.index(8192.min(text.len()));
            let from = rng.index(text.len() - len + 1);
            let mut bytes = text[from..from + len].to_vec();
            for _ in 0..rng.below(4) {
                let at = rng.index(bytes.len());
                Rng::put(&mut bytes, at, 2, 0x050f); // a `syscall`
            }
            for _ in 0..rng.below(6) {
                rng.mutate(&mut bytes, &[]);
            }
            let addr = match rng.below(4) {
                0 => vaddr + from as u64,
                1 => u64::MAX - rng.below(2 * len as u64),
                _ => rng.edge(0x40_1000),
            };
            let (first, second) = bytes.split_at(rng.index(bytes.len() + 1));
            let second_at = addr.wrapping_add(first.len() as u64).wrapping_add(rng.edge(16));
            let pieces = [Code { addr, bytes: first }, Code { addr: second_at, bytes: second }];
            let functions: Vec<(u64, u64)> = (0..rng.below(12))
                .map(|_| (addr.wrapping_add(rng.edge(0).min(rng.below(len as u64 + 32))), rng.edge(64)))
                .collect();
            let base = match rng.below(4) {
                0 => addr.wrapping_add(len as u64).wrapping_add(rng.below(4096)),
                1 => addr.wrapping_sub(rng.below(1 << 33)),
                _ => rng.edge(addr),
            };
            fuzz::check_plan(&pieces, &functions, base)
        });
    assert_eq!(report.failures, 0, "fuzz rewriter: {:?}", report.first);
}

/// The byte-level target cargo-fuzz uses, on random bytes.
#[test]
fn fuzz_rewriter_bytes() {
    let report =
        fuzz::run("rewriter-bytes", fuzz::iterations(5_000), fuzz::seed(), Duration::from_secs(60), |rng, _| {
            let n = 64 + rng.index(2048);
            let mut data: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            for _ in 0..rng.below(8) {
                let at = 64 + rng.index(n - 64);
                Rng::put(&mut data, at, 2, 0x050f);
            }
            fuzz::plan_bytes(&data)
        });
    assert_eq!(report.failures, 0, "fuzz rewriter-bytes: {:?}", report.first);
}
