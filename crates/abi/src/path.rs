//! Path arithmetic both sides need: the guest resolves `/proc/self/exe` and the
//! working directory this way, the VMM the guest paths of `-v` mounts.

use alloc::vec::Vec;

/// `path` made absolute against the directory `cwd` (itself absolute), with `.`,
/// `..` and repeated slashes resolved lexically. /proc/self/exe is such a path on
/// Linux even when the program was started by a relative name (glibc's static
/// start-up asserts it begins with '/').
pub fn absolute(cwd: &[u8], path: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let start: &[&[u8]] = if path.first() == Some(&b'/') { &[] } else { &[cwd] };
    for piece in start.iter().chain(core::iter::once(&path)) {
        for c in piece.split(|b| *b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => {
                    parts.pop();
                }
                c => parts.push(c),
            }
        }
    }
    let mut out = Vec::new();
    for p in &parts {
        out.push(b'/');
        out.extend_from_slice(p);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::absolute;

    #[test]
    fn absolute_paths() {
        assert_eq!(absolute(b"/", b"./prog"), b"/prog");
        assert_eq!(absolute(b"/work", b"target/bench/x"), b"/work/target/bench/x");
        assert_eq!(absolute(b"/work/a", b"../b//c/./d"), b"/work/b/c/d");
        assert_eq!(absolute(b"/w", b"/abs/../p"), b"/p");
        assert_eq!(absolute(b"/", b"../../.."), b"/");
        assert_eq!(absolute(b"/", b""), b"/");
    }
}
