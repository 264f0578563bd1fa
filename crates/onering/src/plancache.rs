//! Rewrite plans kept on disk, so a program (or a library the guest loads) is
//! planned once per content, not at every start: `$ONERING_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/onering/plans`, else `~/.cache/onering/plans`.
//!
//! An entry is named by a BLAKE3 hash of everything the plan depends on: the
//! file's bytes, the load bias and trampoline address, the kernel's entry point
//! and per-CPU offsets, this format. Content, not path or inode: files the guest
//! hands over (`Hostcall::Rewrite`) are as untrusted as the guest, and a guest must
//! not be able to plant a plan that another VM then applies to a different file.
//! The entry holds a checksum of its body and the body is checked against the file
//! before use (every patch inside an executable segment, counts consistent); a
//! damaged, truncated or tampered entry is ignored and replaced. Entries are
//! written to a temporary name and renamed, so concurrent VMs never read half of
//! one. Nothing here is required: any I/O error just means planning afresh.

use crate::embedded::{cpuid_entry, plan_at, syscall_entry};
use onering_abi::rewrite::{WirePatch, WirePlan};
use onering_rewrite::elf::{Program, PF_X};
use onering_rewrite::rewrite::{Patch, Plan};
use std::path::PathBuf;

/// The entry format and planner generation: bump it whenever the planner changes
/// what it plans (old entries are then never found).
const MAGIC: &[u8; 8] = b"ORPLAN03";
/// Smaller files are planned faster than an entry is found.
const MIN_FILE: usize = 256 * 1024;

fn dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("ONERING_CACHE_DIR") {
        return (!d.is_empty()).then(|| PathBuf::from(d));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("onering/plans"))
}

/// The entry's name: a hash of the file and of everything else the plan depends on.
fn key(file: &[u8], bias: u64, base: u64) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    h.update(MAGIC);
    h.update(blake3::hash(file).as_bytes());
    for w in [
        bias,
        base,
        syscall_entry(),
        cpuid_entry(),
        onering_abi::percpu_offsets::USER_RSP as u64,
        onering_abi::percpu_offsets::KSTACK_TOP as u64,
    ] {
        h.update(&w.to_le_bytes());
    }
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    h.finalize()
}

/// The plan for `prog` (parsed from `file`) at `bias`, trampolines at `base`: from
/// the cache when a sound entry is there, else made (and stored).
pub fn plan(prog: &Program, file: &[u8], bias: u64, base: u64) -> Plan {
    let Some(dir) = dir().filter(|_| file.len() >= MIN_FILE) else { return plan_at(prog, file, bias, base) };
    let k = key(file, bias, base);
    let path = dir.join(k.to_hex().as_str());
    if let Some(p) = std::fs::read(&path).ok().and_then(|e| decode(&e, &k)).filter(|p| sound(p, prog, file, bias)) {
        return p;
    }
    let p = plan_at(prog, file, bias, base);
    let _ = store(&dir, &path, &k, &p);
    p
}

/// The plan of ELF file `file` at `bias`, trampolines at `base`, as the guest
/// receives it (`onering_abi::rewrite`, patch addresses at `bias`): -ENOEXEC if
/// the file is not an x86-64 executable or shared object, -ENOSPC if the plan is
/// longer than `room` (the guest asks again with more). The file is as untrusted
/// as the guest: the same total parser and planner read it.
pub fn wire_plan(file: &[u8], bias: u64, base: u64, room: u64) -> Result<Vec<u8>, i64> {
    const ENOEXEC: i64 = 8;
    const ENOSPC: i64 = 28;
    let prog = Program::parse(file).map_err(|_| -ENOEXEC)?;
    let p = plan(&prog, file, bias, base);
    let wire = WirePlan {
        sites: p.sites as u64,
        rewritten: p.rewritten as u64,
        cpuid_sites: p.cpuid_sites as u64,
        cpuid_rewritten: p.cpuid_rewritten as u64,
        patches: p.patches.into_iter().map(|x| WirePatch { addr: x.addr, bytes: x.bytes }).collect(),
        trampolines: p.trampolines,
    }
    .encode();
    if wire.len() as u64 > room {
        return Err(-ENOSPC);
    }
    Ok(wire)
}

fn encode(k: &blake3::Hash, p: &Plan) -> Vec<u8> {
    let body = WirePlan {
        sites: p.sites as u64,
        rewritten: p.rewritten as u64,
        cpuid_sites: p.cpuid_sites as u64,
        cpuid_rewritten: p.cpuid_rewritten as u64,
        patches: p.patches.iter().map(|x| WirePatch { addr: x.addr, bytes: x.bytes.clone() }).collect(),
        trampolines: p.trampolines.clone(),
    }
    .encode();
    let mut out = Vec::with_capacity(72 + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(blake3::hash(&body).as_bytes());
    out.extend_from_slice(&body);
    out
}

/// The plan in entry `e`, if it is whole and is the one for key `k`.
fn decode(e: &[u8], k: &blake3::Hash) -> Option<Plan> {
    let (magic, rest) = e.split_at_checked(8)?;
    let (key, rest) = rest.split_at_checked(32)?;
    let (sum, body) = rest.split_at_checked(32)?;
    if magic != MAGIC || key != k.as_bytes() || sum != blake3::hash(body).as_bytes() {
        return None;
    }
    let w = WirePlan::decode(body)?;
    Some(Plan {
        sites: usize::try_from(w.sites).ok()?,
        rewritten: usize::try_from(w.rewritten).ok()?,
        cpuid_sites: usize::try_from(w.cpuid_sites).ok()?,
        cpuid_rewritten: usize::try_from(w.cpuid_rewritten).ok()?,
        patches: w.patches.into_iter().map(|x| Patch { addr: x.addr, bytes: x.bytes }).collect(),
        trampolines: w.trampolines,
    })
}

/// Whether `p` could be the plan for `prog` at `bias`: no more rewritten sites
/// than sites (of each kind), one patch per rewritten site at most, each inside an executable
/// segment's bytes.
fn sound(p: &Plan, prog: &Program, file: &[u8], bias: u64) -> bool {
    let code: Vec<(u64, u64)> = prog
        .segments
        .iter()
        .filter(|s| s.flags & PF_X != 0)
        .map(|s| (s.vaddr.wrapping_add(bias), s.bytes(file).len() as u64))
        .collect();
    let inside = |x: &Patch| {
        code.iter().any(|(at, len)| {
            x.addr.checked_sub(*at).is_some_and(|off| off.checked_add(x.bytes.len() as u64).is_some_and(|e| e <= *len))
        })
    };
    p.rewritten <= p.sites
        && p.cpuid_rewritten <= p.cpuid_sites
        && p.patches.len() <= p.rewritten + p.cpuid_rewritten
        && p.patches.iter().all(inside)
}

fn store(dir: &std::path::Path, path: &std::path::Path, k: &blake3::Hash, p: &Plan) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{}.{}", k.to_hex(), std::process::id()));
    std::fs::write(&tmp, encode(k, p))?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use onering_rewrite::testing::tiny_elf;

    fn sample() -> (Vec<u8>, Program, Plan) {
        // mov $39, %eax; syscall; ret
        let file = tiny_elf(&[0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xc3]);
        let prog = Program::parse(&file).unwrap();
        let plan = plan_at(&prog, &file, 0, 0x402000);
        assert_eq!(plan.rewritten, 1);
        (file, prog, plan)
    }

    #[test]
    fn entries_round_trip_and_damage_is_refused() {
        let (file, prog, plan) = sample();
        let k = key(&file, 0, 0x402000);
        let e = encode(&k, &plan);
        let back = decode(&e, &k).expect("a whole entry");
        assert_eq!((back.patches.clone(), back.trampolines.clone()), (plan.patches.clone(), plan.trampolines.clone()));
        assert!(sound(&back, &prog, &file, 0));
        for cut in [0, 7, 40, 72, e.len() - 1] {
            assert!(decode(&e[..cut], &k).is_none(), "cut at {cut}");
        }
        let mut bad = e.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(decode(&bad, &k).is_none(), "a flipped body bit fails the checksum");
        assert!(decode(&e, &key(&file, 0x1000, 0x402000)).is_none(), "another key");
    }

    #[test]
    fn a_plan_that_patches_outside_the_code_is_not_sound() {
        let (file, prog, mut plan) = sample();
        plan.patches[0].addr = 0x500000;
        assert!(!sound(&plan, &prog, &file, 0));
        let (file, prog, mut plan) = sample();
        plan.rewritten = plan.sites + 1;
        assert!(!sound(&plan, &prog, &file, 0));
    }

    #[test]
    fn the_key_follows_content_and_placement() {
        let (file, ..) = sample();
        let mut other = file.clone();
        other[0x1000] ^= 1;
        assert_ne!(key(&file, 0, 0), key(&other, 0, 0));
        assert_ne!(key(&file, 0, 0), key(&file, 0, 64));
        assert_eq!(key(&file, 0, 0), key(&file.clone(), 0, 0));
    }
}
