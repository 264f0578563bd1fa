//! Test support shared by the integration tests: real binaries to work on (a musl
//! static hello built from tests/guest/c/hello.c, a Go hello, Debian's stripped
//! busybox-static) and iced-x86 as a second decoder.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where static-pie programs are loaded (as onering_abi::layout::PIE_BASE).
pub const PIE_BASE: u64 = 0x5555_5540_0000;

fn tmp() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("onering-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A musl static hello world with its symbol table, built once per test process.
pub fn musl_hello() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = tmp().join("hello-musl");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/guest/c/hello.c");
            let st = Command::new("musl-gcc").args(["-static", "-O2"]).arg(src).arg("-o").arg(&out).status();
            assert!(st.expect("musl-gcc (apt-get install musl-tools)").success());
            out
        })
        .clone()
}

/// The same hello, stripped: its functions come from the unwind information.
pub fn musl_hello_stripped() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = tmp().join("hello-musl-stripped");
            let st = Command::new("strip").arg("-o").arg(&out).arg(musl_hello()).status();
            assert!(st.expect("strip (apt-get install binutils)").success());
            out
        })
        .clone()
}

/// A Go hello world (Go binaries are static, with symbols), built once per process.
pub fn go_hello() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = tmp().join("gohello");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("main.go"),
                "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tfmt.Println(\"hello\", len(os.Args))\n}\n",
            )
            .unwrap();
            std::fs::write(dir.join("go.mod"), "module gohello\n\ngo 1.21\n").unwrap();
            let out = dir.join("gohello");
            let st = Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .current_dir(&dir)
                .env("CGO_ENABLED", "0")
                .status()
                .expect("go (the Go toolchain must be installed)");
            assert!(st.success());
            out
        })
        .clone()
}

/// Debian's busybox-static: glibc, stripped.
pub fn busybox() -> PathBuf {
    let bb = PathBuf::from("/bin/busybox");
    assert!(bb.exists(), "/bin/busybox missing (apt-get install busybox-static)");
    bb
}

/// Decodes with iced-x86, as a second opinion.
pub fn iced(addr: u64, bytes: &[u8]) -> Vec<iced_x86::Instruction> {
    let mut d = iced_x86::Decoder::with_ip(64, bytes, addr, iced_x86::DecoderOptions::NONE);
    let mut out = Vec::new();
    while d.can_decode() {
        out.push(d.decode());
    }
    out
}
