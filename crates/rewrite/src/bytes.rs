//! Total reads from the untrusted file: every multi-byte field onering reads out of a
//! program's ELF file goes through these, which answer `None` when the field does not
//! lie wholly inside the slice (offsets and lengths straight from the file may be
//! anything, so all arithmetic on them is checked too). A parser built on them cannot
//! index out of bounds, whatever the file says.

/// `len` bytes at `at`, if they lie inside `b`. Offsets and sizes are `u64`s as the
/// file gives them.
pub fn slice(b: &[u8], at: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(at).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    b.get(start..end)
}

fn array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..)?.first_chunk::<N>().copied()
}

pub fn u8_at(b: &[u8], at: usize) -> Option<u8> {
    b.get(at).copied()
}

pub fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    array(b, at).map(u16::from_le_bytes)
}

pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    array(b, at).map(u32::from_le_bytes)
}

pub fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    array(b, at).map(u64::from_le_bytes)
}

pub fn i16_at(b: &[u8], at: usize) -> Option<i16> {
    array(b, at).map(i16::from_le_bytes)
}

pub fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    array(b, at).map(i32::from_le_bytes)
}

pub fn i64_at(b: &[u8], at: usize) -> Option<i64> {
    array(b, at).map(i64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_inside_and_refuses_outside() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(u16_at(&b, 0), Some(0x0201));
        assert_eq!(u32_at(&b, 5), Some(0x0908_0706));
        assert_eq!(u32_at(&b, 6), None);
        assert_eq!(u64_at(&b, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(u64_at(&b, usize::MAX), None);
        assert_eq!(slice(&b, 8, 1), Some(&b[8..]));
        assert_eq!(slice(&b, 8, 2), None);
        assert_eq!(slice(&b, u64::MAX, 2), None);
        assert_eq!(slice(&b, 1, u64::MAX), None);
        assert_eq!(slice(&b, 9, 0), Some(&[][..]));
    }
}

/// Untrusted bytes (a string from the ELF file, a message from the guest) made safe
/// to print on the user's terminal: invalid UTF-8 replaced, control characters other
/// than newline escaped (`\u{1b}`, so no escape sequence reaches the terminal), and
/// at most `max` characters kept (`...` marks the cut).
pub fn printable(b: &[u8], max: usize) -> alloc::string::String {
    use alloc::string::String;
    let text = String::from_utf8_lossy(b);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        if c == '\n' || !c.is_control() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

#[cfg(test)]
mod printable_tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped_and_length_capped() {
        assert_eq!(printable(b"/lib/ld.so", 100), "/lib/ld.so");
        assert_eq!(printable(b"a\x1b[2Jb\r\x07\nc", 100), "a\\u{1b}[2Jb\\r\\u{7}\nc");
        assert_eq!(printable(b"\xff\xc2\x9b1m", 100), "\u{fffd}\\u{9b}1m");
        assert_eq!(printable(b"abcdef", 3), "abc...");
    }
}
