//! `--trace`, `--stats`, `--stats-json` and `--perf` on a real VM, with
//! tests/guest/c/observe.c: its calls are known, so the trace's lines (names,
//! decoded flags, errno names: structure, not timestamps), the filter and the
//! counts can be checked exactly.
//!
//! These tests need /dev/kvm and musl-gcc; without them they fail, loudly.

mod common;
use common::{musl, onering, status, stderr, temp_dir};

/// A trace line without its thread, time and duration: `name(args) = result`.
fn call_of(line: &str) -> Option<String> {
    let rest = line.strip_prefix("[pid ")?;
    let (_, rest) = rest.split_once("] ")?;
    let (time, call) = rest.split_once(' ')?;
    assert!(time.len() == 15 && time.as_bytes()[2] == b':' && time.as_bytes()[8] == b'.', "time in {line}");
    Some(match call.rsplit_once(" <") {
        Some((c, d)) if d.ends_with('>') && d.trim_end_matches('>').parse::<f64>().is_ok() => c.to_string(),
        _ => call.to_string(),
    })
}

fn calls(text: &str) -> Vec<String> {
    text.lines().filter_map(call_of).collect()
}

#[test]
fn trace_prints_each_call_decoded() {
    let bin = musl("observe");
    let o = onering(&["run", "--trace", bin.to_str().unwrap()]);
    assert_eq!(status(&o), 3, "{}", stderr(&o));
    let got = calls(&stderr(&o));
    let want = [
        "openat(AT_FDCWD, \"/nonexistent/file\", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)",
        "openat(AT_FDCWD, \"/tmp/observe.txt\", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 3",
        "write(3, \"hello\\n\", 6) = 6",
        "close(3) = 0",
        "kill(0, 0) = 0",
        "close(99) = -1 EBADF (Bad file descriptor)",
        "exit_group(3) = ?",
    ];
    let rest: Vec<&String> = got.iter().filter(|c| !c.starts_with("mmap(")).collect();
    let tail = &rest[rest.len().saturating_sub(want.len())..];
    assert_eq!(tail, want, "all of it:\n{}", stderr(&o));
    let mmap = got.iter().find(|c| c.starts_with("mmap(")).expect("an mmap line");
    assert!(
        mmap.starts_with("mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x"),
        "{mmap}"
    );
}

#[test]
fn trace_set_filters_and_trace_out_writes_a_file() {
    let bin = musl("observe");
    let dir = temp_dir("observe-trace-out");
    let out = dir.join("t.log");
    let o = onering(&["run", "--trace=openat", "--trace-out", out.to_str().unwrap(), bin.to_str().unwrap()]);
    assert_eq!(status(&o), 3, "{}", stderr(&o));
    assert!(!stderr(&o).contains("openat("), "lines go to the file: {}", stderr(&o));
    let got = calls(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|c| c.starts_with("openat(")), "{got:?}");
    // A class: %memory has mmap, not openat.
    let o = onering(&["run", "--trace=%memory", bin.to_str().unwrap()]);
    let got = calls(&stderr(&o));
    assert!(got.iter().any(|c| c.starts_with("mmap(")) && !got.iter().any(|c| c.starts_with("openat(")), "{got:?}");
    // An unknown name is onering's error, before anything runs.
    let o = onering(&["run", "--trace=nosuchcall", bin.to_str().unwrap()]);
    assert_eq!(status(&o), 125);
    assert!(stderr(&o).contains("--trace: unknown system call 'nosuchcall'"), "{}", stderr(&o));
}

#[test]
fn stats_count_a_known_number_of_calls() {
    let bin = musl("observe");
    let o = onering(&["run", "--stats", bin.to_str().unwrap(), "getppid", "1000"]);
    assert_eq!(status(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("% time     seconds  usecs/call     calls    errors syscall"), "{err}");
    let row = err.lines().find(|l| l.ends_with(" getppid")).unwrap_or_else(|| panic!("no getppid row: {err}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[3], "1000", "{row}");
    // The first row is the most time; every section is there.
    for part in ["VM exits by reason: ", "hostcalls by kind: ", "Exit", "vCPU 0: ", " in the guest, ", "trapped"] {
        assert!(err.contains(part), "{part} in {err}");
    }
    // Errors are counted: the traced run's two failures.
    let o = onering(&["run", "--stats", bin.to_str().unwrap()]);
    let err = stderr(&o);
    let close = err.lines().find(|l| l.ends_with(" close")).unwrap_or_else(|| panic!("{err}"));
    let cols: Vec<&str> = close.split_whitespace().collect();
    assert_eq!((cols[3], cols[4]), ("2", "1"), "{close}");
}

#[test]
fn stats_json_parses() {
    let bin = musl("observe");
    let dir = temp_dir("observe-json");
    let path = dir.join("s.json");
    let o = onering(&["run", "--stats-json", path.to_str().unwrap(), bin.to_str().unwrap(), "getppid", "250"]);
    assert_eq!(status(&o), 3, "{}", stderr(&o));
    assert!(!stderr(&o).contains("% time"), "--stats-json alone prints no table");
    let text = std::fs::read_to_string(&path).unwrap();
    let v = json::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let calls = v.get("syscalls").and_then(json::Value::as_array).expect("syscalls");
    let getppid = calls.iter().find(|c| c.get("syscall").and_then(json::Value::as_str) == Some("getppid")).unwrap();
    assert_eq!(getppid.get("calls").and_then(json::Value::as_f64), Some(250.0));
    for key in ["counters", "exits", "hostcalls", "vcpus", "wall_seconds"] {
        assert!(v.get(key).is_some(), "{key}");
    }
}

#[test]
fn perf_says_there_are_no_counters_and_keeps_the_status() {
    let bin = musl("observe");
    let o = onering(&["run", "--perf", bin.to_str().unwrap(), "getppid", "10"]);
    assert_eq!(status(&o), 3, "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("onering: --perf: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    // This machine (PLATFORM.md) has no PMU; a host with one gets the counts.
    assert!(
        lines[0].contains("this host exposes no hardware performance counters")
            && lines[0].contains("TSC-based figures instead: wall ")
            || lines[0].contains(" guest cycles, "),
        "{err}"
    );
}

/// A small JSON reader for the test (the workspace has no JSON crate).
mod json {
    #[derive(Debug)]
    pub enum Value {
        Null,
        /// true or false (the summary has none).
        Bool,
        Num(f64),
        Str(String),
        Arr(Vec<Value>),
        Obj(Vec<(String, Value)>),
    }

    impl Value {
        pub fn get(&self, k: &str) -> Option<&Value> {
            match self {
                Value::Obj(m) => m.iter().find(|(n, _)| n == k).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn as_array(&self) -> Option<&Vec<Value>> {
            if let Value::Arr(a) = self {
                Some(a)
            } else {
                None
            }
        }
        pub fn as_str(&self) -> Option<&str> {
            if let Value::Str(s) = self {
                Some(s)
            } else {
                None
            }
        }
        pub fn as_f64(&self) -> Option<f64> {
            if let Value::Num(n) = self {
                Some(*n)
            } else {
                None
            }
        }
    }

    pub fn parse(s: &str) -> Result<Value, String> {
        let b = s.as_bytes();
        let mut i = 0;
        let v = value(b, &mut i)?;
        ws(b, &mut i);
        if i != b.len() {
            return Err(format!("trailing bytes at {i}"));
        }
        Ok(v)
    }

    fn ws(b: &[u8], i: &mut usize) {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    }

    fn expect(b: &[u8], i: &mut usize, c: u8) -> Result<(), String> {
        ws(b, i);
        if b.get(*i) == Some(&c) {
            *i += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at {i}", c as char))
        }
    }

    fn string(b: &[u8], i: &mut usize) -> Result<String, String> {
        expect(b, i, b'"')?;
        let mut out = String::new();
        while let Some(&c) = b.get(*i) {
            *i += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let e = *b.get(*i).ok_or("bad escape")?;
                    *i += 1;
                    match e {
                        b'u' => {
                            let hex =
                                std::str::from_utf8(b.get(*i..*i + 4).ok_or("bad \\u")?).map_err(|e| e.to_string())?;
                            out.push(
                                char::from_u32(u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?)
                                    .ok_or("bad \\u")?,
                            );
                            *i += 4;
                        }
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        other => out.push(other as char),
                    }
                }
                c => out.push(c as char),
            }
        }
        Err("unterminated string".into())
    }

    fn value(b: &[u8], i: &mut usize) -> Result<Value, String> {
        ws(b, i);
        match b.get(*i).ok_or("unexpected end")? {
            b'{' => {
                *i += 1;
                let mut m = Vec::new();
                ws(b, i);
                if b.get(*i) == Some(&b'}') {
                    *i += 1;
                    return Ok(Value::Obj(m));
                }
                loop {
                    let k = string(b, i)?;
                    expect(b, i, b':')?;
                    m.push((k, value(b, i)?));
                    ws(b, i);
                    match b.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b'}') => {
                            *i += 1;
                            return Ok(Value::Obj(m));
                        }
                        _ => return Err(format!("bad object at {i}")),
                    }
                }
            }
            b'[' => {
                *i += 1;
                let mut a = Vec::new();
                ws(b, i);
                if b.get(*i) == Some(&b']') {
                    *i += 1;
                    return Ok(Value::Arr(a));
                }
                loop {
                    a.push(value(b, i)?);
                    ws(b, i);
                    match b.get(*i) {
                        Some(b',') => *i += 1,
                        Some(b']') => {
                            *i += 1;
                            return Ok(Value::Arr(a));
                        }
                        _ => return Err(format!("bad array at {i}")),
                    }
                }
            }
            b'"' => string(b, i).map(Value::Str),
            b't' if b[*i..].starts_with(b"true") => {
                *i += 4;
                Ok(Value::Bool)
            }
            b'f' if b[*i..].starts_with(b"false") => {
                *i += 5;
                Ok(Value::Bool)
            }
            b'n' if b[*i..].starts_with(b"null") => {
                *i += 4;
                Ok(Value::Null)
            }
            _ => {
                let start = *i;
                while *i < b.len() && matches!(b[*i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    *i += 1;
                }
                std::str::from_utf8(&b[start..*i])
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .map(Value::Num)
                    .ok_or_else(|| format!("bad value at {start}"))
            }
        }
    }
}

/// A successful execve shows in the trace as strace shows it (`= 0`, decoded
/// from the old image before it goes), a failed one with its errno; `--stats`
/// counts both.
#[test]
fn trace_shows_a_successful_execve() {
    let bin = musl("traceexec");
    let b = bin.to_str().unwrap();
    let dir = bin.parent().unwrap().to_str().unwrap();
    let vol = format!("{dir}:{dir}");
    let o = onering(&["run", "--trace=execve,exit_group", "-v", &vol, b]);
    assert_eq!(status(&o), 5, "{}", stderr(&o));
    let want = [
        "execve(\"/nonexistent\", ".to_string(),
        // (Strings are cut at 32 bytes, as strace's -s 32.)
        format!("execve(\"{}", &b[..b.len().min(32)]),
        "exit_group(5) = ?".to_string(),
    ];
    let got = calls(&stderr(&o));
    assert_eq!(got.len(), 3, "{}", stderr(&o));
    for (g, w) in got.iter().zip(&want) {
        assert!(g.starts_with(w.as_str()), "{g} is not {w}...:\n{}", stderr(&o));
    }
    assert!(got[0].ends_with(" = -1 ENOENT (No such file or directory)"), "{}", got[0]);
    assert!(got[1].ends_with(" = 0"), "{}", got[1]);
    let o = onering(&["run", "--stats", "-v", &vol, b]);
    let row = stderr(&o).lines().find(|l| l.ends_with(" execve")).map(str::to_string).unwrap_or_default();
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((words.get(3), words.get(4)), (Some(&"2"), Some(&"1")), "2 calls, 1 error: {}", stderr(&o));
}
