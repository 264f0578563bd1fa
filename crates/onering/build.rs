//! Builds the guest kernel (crates/kernel) for x86_64-unknown-none and embeds it: the
//! image is flattened to the bytes the VMM copies to guest-physical `KERNEL_PHYS`, and
//! the addresses the VMM needs (entry, trap stubs) become constants. So
//! `target/release/onering` needs no other file at run time.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::path::PathBuf;
use std::process::Command;

const KERNEL_VBASE: u64 = 0xffff_ffff_8000_0000;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    for dep in [
        "crates/kernel/src",
        "crates/arch/src",
        "crates/arch/Cargo.toml",
        "crates/kernel/link.ld",
        "crates/kernel/Cargo.toml",
        "crates/abi/src",
        "crates/ipfrag/src",
        "crates/onering/vdso",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dep).display());
    }

    ensure_target();
    let target_dir = out.join("kernel-target");
    let link_script = root.join("crates/kernel/link.ld");
    let flags = [
        "-Crelocation-model=static".to_string(),
        "-Ccode-model=kernel".to_string(),
        // For the backtrace of a kernel panic (arch's panic handler walks the chain).
        "-Cforce-frame-pointers=yes".to_string(),
        "-Clink-arg=--undefined=_start".to_string(),
        format!("-Clink-arg=-T{}", link_script.display()),
    ]
    .join("\x1f");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "onering-kernel",
            "--bin",
            "onering-kernel",
            "--features",
            "guest",
            "--target",
            "x86_64-unknown-none",
            "--target-dir",
        ])
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", flags);
    // The outer build's settings are not the kernel's.
    for var in [
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy().into_owned();
        if k.starts_with("CARGO_FEATURE_") || k.starts_with("CARGO_CFG_") || k.starts_with("CARGO_PROFILE_") {
            cmd.env_remove(k);
        }
    }
    let status = cmd.status().expect("running cargo to build the guest kernel");
    if !status.success() {
        panic!("building the guest kernel failed (its errors are above; is the target installed? rustup target add x86_64-unknown-none)");
    }

    let elf_path = target_dir.join("x86_64-unknown-none/release/onering-kernel");
    let data = std::fs::read(&elf_path).expect("reading the kernel ELF");
    let elf = object::File::parse(&*data).expect("parsing the kernel ELF");
    let segs: Vec<_> = elf.segments().collect();
    let start = segs.iter().map(|s| s.address()).min().expect("kernel has segments");
    let file_end = segs.iter().map(|s| s.address() + s.file_range().1).max().unwrap();
    let mem_end = segs.iter().map(|s| s.address() + s.size()).max().unwrap();
    assert_eq!(start, KERNEL_VBASE + 0x20_0000, "kernel must be linked at KERNEL_VBASE + KERNEL_PHYS");
    let mut image = vec![0u8; (file_end - start) as usize];
    for s in &segs {
        let bytes = s.data().expect("segment data");
        let off = (s.address() - start) as usize;
        image[off..off + bytes.len()].copy_from_slice(bytes);
    }
    std::fs::write(out.join("kernel.bin"), &image).unwrap();

    let sym = |name: &str| -> u64 {
        elf.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("kernel symbol {name} missing")).address()
    };
    let consts = format!(
        "/// Page-aligned bytes (so that the image's pages are the executable file's).\n\
         #[repr(C, align(4096))]\n\
         pub struct Aligned<B: ?Sized>(pub B);\n\
         static ALIGNED: &Aligned<[u8]> = &Aligned(*include_bytes!(concat!(env!(\"OUT_DIR\"), \"/kernel.bin\")));\n\
         /// The kernel image, flattened from its first to its last loaded byte; it starts\n\
         /// on a page of its own (`loader` maps it from the executable file).\n\
         pub static IMAGE: &[u8] = &ALIGNED.0;\n\
         /// Virtual address of IMAGE[0].\npub const START: u64 = {start:#x};\n\
         /// End of the image in memory, .bss included.\npub const MEM_END: u64 = {mem_end:#x};\n\
         pub const ENTRY: u64 = {entry:#x};\n\
         pub const SYSCALL_TRAP_ENTRY: u64 = {trap:#x};\n\
         pub const SYSCALL_ENTRY: u64 = {sys:#x};\n\
         pub const SYSCALL_TRAP_ENTRY_OBSERVED: u64 = {trap_obs:#x};\n\
         pub const SYSCALL_ENTRY_OBSERVED: u64 = {sys_obs:#x};\n\
         pub const CPUID_ENTRY: u64 = {cpuid:#x};\n\
         pub const EXCEPTION_STUBS: u64 = {exc:#x};\n\
         pub const INTERRUPT_STUB: u64 = {irq:#x};\n\
         pub const PREEMPT_STUB: u64 = {preempt:#x};\n\
         pub const EXCEPTION_LANDING: u64 = {exc_landing:#x};\n",
        entry = elf.entry(),
        trap = sym("syscall_trap_entry"),
        sys = sym("syscall_entry"),
        trap_obs = sym("syscall_trap_entry_observed"),
        sys_obs = sym("syscall_entry_observed"),
        cpuid = sym("cpuid_entry"),
        exc = sym("exception_stubs"),
        irq = sym("interrupt_stub"),
        preempt = sym("preempt_stub"),
        exc_landing = sym("exception_landing"),
    );
    std::fs::write(out.join("kernel_image.rs"), consts).unwrap();
    std::fs::write(out.join("kernel_symbols.bin"), symbol_table(&elf)).unwrap();
    build_vdso(&manifest.join("vdso"), &out);
}

/// The kernel's function symbols, for naming the addresses of a kernel panic's
/// backtrace: a count (u32), then per function, by address, its start (u64), size
/// (u32) and the offset of its demangled name (u32) in the names that follow, each
/// ending in a NUL; all little-endian.
fn symbol_table(elf: &object::File) -> Vec<u8> {
    // Functions, and the assembly's global labels (no type, no size: each then
    // reaches to the next symbol).
    let text = elf.section_by_name(".text").map(|t| (t.address(), t.address() + t.size()));
    let in_text = |a: u64| text.is_some_and(|(lo, hi)| a >= lo && a < hi);
    let mut funcs: Vec<(u64, u32, String)> = elf
        .symbols()
        .filter(|s| {
            (s.kind() == object::SymbolKind::Text && s.size() > 0)
                || (s.kind() == object::SymbolKind::Unknown && s.is_global() && in_text(s.address()))
        })
        .filter_map(|s| Some((s.address(), s.size() as u32, format!("{:#}", rustc_demangle::demangle(s.name().ok()?)))))
        .collect();
    funcs.sort_by_key(|f| (f.0, std::cmp::Reverse(f.1)));
    funcs.dedup_by_key(|f| f.0);
    for i in 0..funcs.len() {
        if funcs[i].1 == 0 {
            let next = funcs.get(i + 1).map_or(funcs[i].0 + 1, |f| f.0);
            funcs[i].1 = (next - funcs[i].0) as u32;
        }
    }
    let mut table = (funcs.len() as u32).to_le_bytes().to_vec();
    let mut names = Vec::new();
    for (addr, size, name) in &funcs {
        table.extend(addr.to_le_bytes());
        table.extend(size.to_le_bytes());
        table.extend((names.len() as u32).to_le_bytes());
        names.extend(name.as_bytes());
        names.push(0);
    }
    table.extend(names);
    table
}

/// The guest kernel needs the `x86_64-unknown-none` target. rust-toolchain.toml lists
/// it, and rustup installs it with a toolchain it installs, but not into a toolchain
/// that is already there: then add it now (once), so that `cargo build --release`
/// works on a fresh machine as the README says.
fn ensure_target() {
    const TARGET: &str = "x86_64-unknown-none";
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output();
    let Ok(sysroot) = sysroot else { return };
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    if sysroot.join("lib/rustlib").join(TARGET).exists() {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target for the guest kernel (rustup target add {TARGET})");
    // The toolchain of this build: rustup tells the proxies which one through
    // RUSTUP_TOOLCHAIN.
    let mut add = Command::new("rustup");
    add.args(["target", "add", TARGET]);
    if let Some(tc) = std::env::var_os("RUSTUP_TOOLCHAIN") {
        add.arg("--toolchain").arg(tc);
    }
    match add.status() {
        Ok(s) if s.success() => {}
        _ => println!("cargo:warning=could not install {TARGET}: run `rustup target add {TARGET}`"),
    }
}

/// Compiles the vDSO (vdso/vdso.c: clock_gettime and friends from the TSC) into a
/// one-segment shared object whose file bytes are its memory image.
fn build_vdso(dir: &std::path::Path, out: &std::path::Path) {
    let so = out.join("vdso.so");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = Command::new(cc)
        .args([
            "-O2",
            "-fPIC",
            "-shared",
            "-nostdlib",
            "-fno-stack-protector",
            "-fno-asynchronous-unwind-tables",
            "-fvisibility=hidden",
            "-Wl,-Bsymbolic",
            "-Wl,--hash-style=both",
            "-Wl,-soname=linux-vdso.so.1",
            "-Wl,--no-undefined",
            "-Wl,--build-id=none",
            "-Wl,-s",
        ])
        .arg(format!("-Wl,--version-script={}", dir.join("vdso.lds").display()))
        .arg(format!("-Wl,-T,{}", dir.join("layout.lds").display()))
        .arg(dir.join("vdso.c"))
        .arg("-o")
        .arg(&so)
        .status()
        .expect("running cc to build the vDSO (apt-get install gcc)");
    assert!(status.success(), "building the vDSO failed");
    let bytes = std::fs::read(&so).unwrap();
    let elf = object::File::parse(&*bytes).expect("parsing the vDSO");
    assert!(elf.segments().count() == 1, "the vDSO must be one segment");
    assert!(elf.segments().all(|s| s.file_range().0 == s.address()), "vDSO offsets must equal addresses");
    assert!(bytes.len() <= 4096, "the vDSO must fit in a page");
    std::fs::write(
        out.join("vdso.rs"),
        "/// The vDSO image (an ELF shared object; its file bytes are its memory image).\n\
         pub static IMAGE: &[u8] = include_bytes!(concat!(env!(\"OUT_DIR\"), \"/vdso.so\"));\n",
    )
    .unwrap();
}
