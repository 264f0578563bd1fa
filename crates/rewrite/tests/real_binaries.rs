//! The rewriter on real programs: a musl static binary, glibc's (Debian's
//! busybox-static), and a Go binary. Every site must be rewritten, each patch must be
//! a jump to a trampoline that re-executes exactly the instructions it displaced, and
//! rewriting must be fast. The length decoder is checked against iced-x86 on every
//! instruction of those binaries and of this test's own executable.

mod common;

use iced_x86::{Code as Op, FlowControl, Instruction, Mnemonic};
use onering_rewrite::elf::{self, Program};
use onering_rewrite::functions;
use onering_rewrite::rewrite::{plan, program_code, Plan, Target};
use onering_rewrite::x86len::{self, Flow};
use std::path::Path;

const T: Target = Target { entry: 0xffff_ffff_8020_0030, user_rsp: 32, kstack_top: 16, cpuid: 0xffff_ffff_8020_0040 };

/// Plans the rewrite of `path` as the loader would, and checks every patch.
fn check(path: &Path) -> Plan {
    let file = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let prog = Program::parse(&file).unwrap();
    let bias = if prog.pie { common::PIE_BASE } else { 0 };
    let code = program_code(&prog, &file, bias);
    let functions = functions::ranges(&prog, &file, bias);
    let base = (prog.span().1 + bias).next_multiple_of(64);
    let start = std::time::Instant::now();
    let plan = plan(&code, &functions, base, &T);
    let took = start.elapsed();
    let text: usize = code.iter().map(|c| c.bytes.len()).sum();
    eprintln!(
        "{}: {} KiB of code, {} sites, {} rewritten, {} cpuid sites, {} rewritten, in {:?}",
        path.display(),
        text / 1024,
        plan.sites,
        plan.rewritten,
        plan.cpuid_sites,
        plan.cpuid_rewritten,
        took
    );
    assert!(plan.sites > 0);
    assert_eq!(plan.rewritten, plan.sites, "every site rewritten");
    assert_eq!(plan.cpuid_rewritten, plan.cpuid_sites, "every cpuid rewritten");
    assert!(took.as_millis() < 200, "rewriting took {took:?}");

    let bytes_at = |addr: u64, len: usize| -> &[u8] {
        let c = code
            .iter()
            .find(|c| addr >= c.addr && addr + len as u64 <= c.addr + c.bytes.len() as u64)
            .expect("in code");
        &c.bytes[(addr - c.addr) as usize..(addr - c.addr) as usize + len]
    };
    let mut last_end = 0;
    for p in &plan.patches {
        assert!(p.addr >= last_end, "patches overlap");
        last_end = p.addr + p.bytes.len() as u64;
        assert_eq!(p.bytes[0], 0xe9);
        let rel = i32::from_le_bytes(p.bytes[1..5].try_into().unwrap());
        let tramp = (p.addr + 5).wrapping_add(rel as i64 as u64);
        assert!(tramp >= base && tramp < base + plan.trampolines.len() as u64);
        // The displaced instructions, and what the trampoline runs.
        let original = common::iced(p.addr, bytes_at(p.addr, p.bytes.len()));
        let sys = original
            .iter()
            .position(|i| matches!(i.mnemonic(), Mnemonic::Syscall | Mnemonic::Cpuid))
            .expect("a syscall or cpuid in the window");
        let moved = common::iced(tramp, &plan.trampolines[(tramp - base) as usize..]);
        let ops = |v: &[Instruction]| v.iter().map(|i| i.code()).collect::<Vec<_>>();
        assert_eq!(ops(&moved[..sys]), ops(&original[..sys]), "instructions before the site at {:#x}", p.addr);
        let glue: &[Op] = if original[sys].mnemonic() == Mnemonic::Cpuid {
            &[Op::Mov_rm64_r64, Op::Mov_r64_rm64, Op::Push_r64, Op::Call_rm64, Op::Pop_r64]
        } else {
            &[
                Op::Mov_rm64_r64,
                Op::Mov_r64_rm64,
                Op::Mov_rm64_r64,
                Op::Pushfq,
                Op::Pop_r64,
                Op::Lea_r64_m,
                Op::Jmp_rm64,
            ]
        };
        assert_eq!(ops(&moved[sys..sys + glue.len()]), glue, "entry sequence at {:#x}", p.addr);
        let post = &original[sys + 1..];
        let after = &moved[sys + glue.len()..sys + glue.len() + post.len() + 1];
        assert_eq!(ops(&after[..post.len()]), ops(post), "instructions after the site at {:#x}", p.addr);
        assert!(
            post.last().is_some_and(|i| i.flow_control() == FlowControl::Return)
                || after[post.len()].code() == Op::Jmp_rel32_64
        );
    }
    plan
}

/// The executable PT_LOAD segments of any 64-bit ELF file, dynamically linked ones
/// included (this test's own executable is one).
fn executable_segments(file: &[u8]) -> Vec<elf::Segment> {
    let word = |o: usize| u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
    let (phoff, phnum) = (word(32) as usize, u16::from_le_bytes([file[56], file[57]]) as usize);
    (0..phnum)
        .map(|i| phoff + i * 56)
        .filter(|&p| file[p..p + 4] == elf::PT_LOAD.to_le_bytes() && file[p + 4] & elf::PF_X as u8 != 0)
        .map(|p| elf::Segment {
            vaddr: word(p + 16),
            offset: word(p + 8),
            filesz: word(p + 32),
            memsz: word(p + 40),
            flags: 1,
        })
        .collect()
}

/// The length decoder of pass 1 agrees with iced-x86 on every instruction of
/// the binary's executable segments (a linear sweep), in length, in which are
/// `syscall`s and `cpuid`s and in where direct branches go.
fn lengths_agree(path: &Path) {
    let file = std::fs::read(path).unwrap();
    let mut checked = 0usize;
    for s in executable_segments(&file) {
        let bytes = &file[s.offset as usize..(s.offset + s.filesz) as usize];
        let mut dec = iced_x86::Decoder::with_ip(64, bytes, s.vaddr, iced_x86::DecoderOptions::NONE);
        let mut ins = Instruction::default();
        while dec.can_decode() {
            let pos = dec.position();
            dec.decode_out(&mut ins);
            let ours = x86len::decode(&bytes[pos..], ins.ip());
            if ins.is_invalid() {
                continue;
            }
            let flow = if ins.mnemonic() == Mnemonic::Syscall {
                Flow::Syscall
            } else if ins.mnemonic() == Mnemonic::Cpuid {
                Flow::Cpuid
            } else if ins.is_jmp_short_or_near()
                || ins.is_jcc_short_or_near()
                || ins.is_call_near()
                || ins.is_loop()
                || ins.is_loopcc()
                || ins.is_jcx_short()
            {
                Flow::Branch(ins.near_branch_target())
            } else {
                Flow::Other
            };
            assert_eq!(
                ours,
                Some((ins.len(), flow)),
                "{} at {:#x}: {:?} {:02x?}",
                path.display(),
                ins.ip(),
                ins.code(),
                &bytes[pos..pos + ins.len()]
            );
            checked += 1;
        }
    }
    eprintln!("{}: {checked} instructions agree", path.display());
}

#[test]
fn length_decoder_agrees_with_iced() {
    lengths_agree(&common::musl_hello());
    lengths_agree(Path::new("/bin/busybox"));
    lengths_agree(&common::go_hello());
    lengths_agree(&std::env::current_exe().unwrap());
}

#[test]
fn musl_static() {
    check(&common::musl_hello());
}

#[test]
fn unwind_ranges_agree_with_symbols() {
    // In a binary with both, every function the unwind information names starts
    // where a symbol does: the stripped-binary path finds real boundaries.
    let file = std::fs::read(common::musl_hello()).unwrap();
    let symbols: std::collections::HashSet<u64> = functions::functions(&file).into_iter().map(|f| f.0).collect();
    let fdes = functions::eh_frame_functions(&file);
    assert!(!fdes.is_empty(), "no .eh_frame FDEs found");
    for (start, size) in &fdes {
        assert!(symbols.contains(start), "FDE at {start:#x} (+{size:#x}) has no symbol");
    }
}

#[test]
fn glibc_static_busybox() {
    let bb = Path::new("/bin/busybox");
    assert!(bb.exists(), "/bin/busybox missing (apt-get install busybox-static)");
    let plan = check(bb);
    // glibc reads the CPU's features with `cpuid` at start-up.
    assert!(plan.cpuid_sites > 0, "no cpuid in a static glibc program");
}

#[test]
fn glibc_dynamic_loader() {
    // The loader of every dynamic program: its `cpuid`s (~70 run per process) are
    // rewritten like its system calls.
    let plan = check(Path::new("/lib64/ld-linux-x86-64.so.2"));
    assert!(plan.cpuid_sites > 0);
}

#[test]
fn go_static() {
    check(&common::go_hello());
}

#[test]
fn stripped_binaries_keep_their_unwind_ranges() {
    // Debian's busybox is stripped: its functions come from .eh_frame, which must
    // parse in full (a record the parser took for broken would discard them all).
    let file = std::fs::read(common::busybox()).unwrap();
    assert!(functions::functions(&file).is_empty(), "busybox has no symbols");
    let fdes = functions::eh_frame_functions(&file);
    assert!(fdes.len() > 1000, "{} FDEs", fdes.len());
    let file = std::fs::read(common::musl_hello_stripped()).unwrap();
    assert!(functions::functions(&file).is_empty());
    let with_symbols = functions::eh_frame_functions(&std::fs::read(common::musl_hello()).unwrap());
    assert_eq!(functions::eh_frame_functions(&file), with_symbols);
}
