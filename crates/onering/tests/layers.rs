//! The VMM's structure, checked: its modules form layers, each using only modules of
//! lower layers (so there are no cycles, and a reader can take them bottom-up); every
//! source file opens with a note on its design; `unsafe` appears only under
//! `src/sys/`. Reads the sources, so a change that breaks the rule fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers, bottom first. A module may use any module of a lower layer, none of
/// its own or a higher one.
#[rustfmt::skip]
const LAYERS: &[&[&str]] = &[
    &["sys", "embedded", "trace"],
    &["layout", "profile", "plancache", "observe"],
    &["arch", "devices", "event_loop"],
    &["loader", "exit", "hostfs"],
    &["vstate"],
    &["builder", "oci"],
    &["cli"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`vstate/vm.rs` -> `vstate`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The crate modules a source file names: `crate::x` and `use crate::{x, y::z}`.
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    out.insert(name);
                }
            } else {
                out.insert(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
            }
        }
    }
    out.retain(|n| !n.is_empty());
    out
}

fn layer(module: &str) -> usize {
    LAYERS.iter().position(|l| l.contains(&module)).unwrap_or_else(|| panic!("module {module} has no layer in LAYERS"))
}

#[test]
fn modules_use_only_lower_layers() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let m = module_of(f);
        if m == "lib" || m == "main" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        // Tests may reach across (a test of the exit handler builds page tables).
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for used in uses(code) {
            if used != m && layer(&used) >= layer(&m) {
                bad.push(format!("{} (layer {}) uses {used} (layer {})", f.display(), layer(&m), layer(&used)));
            }
        }
    }
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

#[test]
fn every_module_has_a_layer_and_every_layer_a_module() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: BTreeSet<String> =
        lib.lines().filter_map(|l| l.strip_prefix("pub mod ")).map(|l| l.trim_end_matches(';').to_string()).collect();
    let layered: BTreeSet<String> = LAYERS.iter().flat_map(|l| l.iter().map(|s| s.to_string())).collect();
    assert_eq!(declared, layered);
}

#[test]
fn every_file_opens_with_a_design_note() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.starts_with("//! "), "{} does not open with a //! note", f.display());
    }
}

#[test]
fn unsafe_code_lives_in_sys_only() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for f in files {
        if f.starts_with(src().join("sys")) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            // The keyword, not `unsafe_code` in a lint attribute.
            let keyword = code.match_indices("unsafe").any(|(i, _)| {
                !code[i + 6..].starts_with(|c: char| c == '_' || c.is_alphanumeric())
                    && !code[..i].ends_with(|c: char| c == '_' || c.is_alphanumeric())
            });
            assert!(!keyword, "{}:{}: unsafe outside src/sys/: {line}", f.display(), n + 1);
        }
    }
}
