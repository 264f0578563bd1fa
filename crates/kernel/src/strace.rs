//! The `--trace` decoder: one system call as `strace` prints it, `name(args) =
//! result`. Pure: it gets the number, the arguments, the result and a way to read
//! the program's memory (which may fail: a bad pointer prints as a number), and
//! writes text; `observe` adds the thread, the time and the duration. Host-tested.
//!
//! Each decoded call has a shape, one letter per argument (see [`shape`]); calls
//! without one print three arguments in hex. Strings are quoted and escaped as
//! strace does (octal escapes) and cut at [`MAX_STR`] bytes with `...`; flags are
//! named (open, mmap, clone, ...) with any unknown bits left in hex; structs are
//! shown as pointers. Everything it prints is printable ASCII.

use alloc::string::String;
use core::fmt::Write;

/// Most bytes of a string or buffer printed (strace's default `-s 32`).
pub const MAX_STR: usize = 32;

/// Reads program memory: fills the buffer and says whether it could.
pub type Peek<'a> = &'a dyn Fn(u64, &mut [u8]) -> bool;

/// The argument letters of a call (see [`arg`]):
/// `d` int, `u` unsigned, `x` hex, `p` pointer (NULL or hex), `D` directory fd
/// (AT_FDCWD), `s` path string, `W` buffer in (length: next argument), `R` buffer
/// out (length: the result), `o` open flags, `m` mode (octal), `P` mmap prot, `F`
/// mmap flags, `C` clone flags, `S` signal, `w` lseek whence, `a` access mode,
/// `f` fcntl command, `h` sigprocmask how, `t` futex op, `A` AT_ flags, `c`
/// arch_prctl code.
pub fn shape(name: &str) -> Option<&'static str> {
    Some(match name {
        "read" => "dRu",
        "write" => "dWu",
        "open" => "som",
        "close" | "fsync" | "fdatasync" | "fchdir" | "dup" | "syncfs" => "d",
        "stat" | "lstat" | "statfs" => "sp",
        "fstat" | "fstatfs" => "dp",
        "poll" => "pud",
        "lseek" => "ddw",
        "mmap" => "puPFdx",
        "mprotect" => "puP",
        "munmap" => "pu",
        "brk" | "set_tid_address" | "uname" | "pipe" | "sysinfo" => "p",
        "rt_sigaction" => "Sppu",
        "rt_sigprocmask" => "hppu",
        "ioctl" => "dxp",
        "pread64" => "dRud",
        "pwrite64" => "dWud",
        "readv" | "writev" => "dpd",
        "access" => "sa",
        "sched_yield" | "getpid" | "getppid" | "gettid" | "getuid" | "geteuid" | "getgid" | "getegid" | "fork"
        | "vfork" | "pause" | "rt_sigreturn" | "sync" | "inotify_init" => "",
        "dup2" => "dd",
        "dup3" => "ddo",
        "nanosleep" => "pp",
        "socket" | "socketpair" => "ddd",
        "connect" | "bind" => "dpu",
        "accept" => "dpp",
        "accept4" => "dppx",
        "sendto" => "dWuxpu",
        "recvfrom" => "dRuxpp",
        "sendmsg" | "recvmsg" => "dpx",
        "shutdown" | "listen" => "dd",
        "clone" => "Cpppx",
        "execve" => "spp",
        "exit" | "exit_group" => "d",
        "wait4" => "dpxp",
        "kill" => "dS",
        "tkill" => "dS",
        "tgkill" => "ddS",
        "fcntl" => "dfx",
        "flock" => "dd",
        "truncate" => "sd",
        "ftruncate" => "dd",
        "getcwd" => "pu",
        "chdir" | "rmdir" | "unlink" => "s",
        "mkdir" | "chmod" => "sm",
        "rename" | "link" | "symlink" => "ss",
        "readlink" => "spu",
        "umask" => "m",
        "getdents64" => "dpu",
        "openat" => "Dsom",
        "mkdirat" => "Dsm",
        "newfstatat" => "DspA",
        "unlinkat" => "DsA",
        "renameat" | "renameat2" => "DsDs",
        "readlinkat" => "Dspu",
        "faccessat" | "faccessat2" => "DsaA",
        "fchmodat" => "Dsm",
        "statx" => "DsAxp",
        "futex" => "ptdppd",
        "arch_prctl" => "cp",
        "clock_gettime" | "clock_getres" => "dp",
        "gettimeofday" => "pp",
        "getrandom" => "pux",
        "prlimit64" => "ddpp",
        "set_robust_list" => "pu",
        "rseq" => "puxx",
        "madvise" => "pud",
        "pipe2" => "po",
        "eventfd2" => "ux",
        "epoll_create1" => "x",
        "epoll_ctl" => "dddp",
        "epoll_wait" | "epoll_pwait" => "dpdd",
        "sendfile" => "ddpu",
        "clock_nanosleep" => "dxpp",
        "sched_getaffinity" | "sched_setaffinity" => "dup",
        "prctl" => "dxxxx",
        "mremap" => "puuxp",
        _ => return None,
    })
}

/// Writes `name(args) = result` for system call `nr` with `args` that returned
/// `ret` (None: it does not return, `= ?`).
pub fn format_call(out: &mut String, nr: u64, args: &[u64; 6], ret: Option<u64>, peek: Peek) {
    let name = crate::sysnames::name(nr);
    match name {
        Some(n) => out.push_str(n),
        None => {
            let _ = write!(out, "syscall_{nr:#x}");
        }
    }
    out.push('(');
    let result = ret.map(|r| r as i64);
    match name.and_then(shape) {
        Some(letters) => {
            for (i, c) in letters.chars().enumerate() {
                // A mode only matters, and strace only shows it, when the flags create.
                if c == 'm' && i > 0 && letters.as_bytes()[i - 1] == b'o' && args[i - 1] & 0o20000100 == 0 {
                    continue;
                }
                if i > 0 {
                    out.push_str(", ");
                }
                let next = args.get(i + 1).copied().unwrap_or(0);
                arg(out, c, args[i], next, args[1], result, peek);
            }
        }
        None => {
            for (i, a) in args.iter().take(3).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "{a:#x}");
            }
        }
    }
    out.push_str(") = ");
    match result {
        None => out.push('?'),
        Some(r) if (-4095..0).contains(&r) => {
            let e = (-r) as usize;
            match (ERRNO_NAMES.get(e), ERRNO_TEXT.get(e)) {
                (Some(n), Some(t)) if !n.is_empty() => {
                    let _ = write!(out, "-1 {n} ({t})");
                }
                _ => {
                    let _ = write!(out, "-1 errno {e}");
                }
            }
        }
        Some(r) if matches!(name, Some("mmap" | "brk" | "mremap")) => {
            let _ = write!(out, "{:#x}", r as u64);
        }
        Some(r) => {
            let _ = write!(out, "{r}");
        }
    }
}

/// One argument: `v` by letter `c` (`next` is the following argument, `second`
/// the call's second, for the flags that depend on it; `ret` the result).
fn arg(out: &mut String, c: char, v: u64, next: u64, second: u64, ret: Option<i64>, peek: Peek) {
    match c {
        'd' => {
            let _ = write!(out, "{}", v as i64 as i32);
        }
        'u' => {
            let _ = write!(out, "{v}");
        }
        'x' if v == 0 => out.push('0'),
        'x' => {
            let _ = write!(out, "{v:#x}");
        }
        'p' => pointer(out, v),
        'D' if v as i32 == -100 => out.push_str("AT_FDCWD"),
        'D' => {
            let _ = write!(out, "{}", v as i32);
        }
        's' => path(out, v, peek),
        'W' => buffer(out, v, next as usize, peek),
        'R' => match ret {
            Some(n) if n >= 0 => buffer(out, v, n as usize, peek),
            _ => pointer(out, v),
        },
        'o' => open_flags(out, v),
        'm' => {
            let _ = write!(out, "0{:o}", v & 0o7777);
        }
        'P' => flags(out, v, PROT, "PROT_NONE"),
        'F' => mmap_flags(out, v),
        'C' => clone_flags(out, v),
        'S' => signal(out, v),
        'w' => named(out, v, &[(0, "SEEK_SET"), (1, "SEEK_CUR"), (2, "SEEK_END"), (3, "SEEK_DATA"), (4, "SEEK_HOLE")]),
        'a' => flags(out, v, &[(4, "R_OK"), (2, "W_OK"), (1, "X_OK")], "F_OK"),
        'f' => named(out, v, FCNTL),
        'h' => named(out, v, &[(0, "SIG_BLOCK"), (1, "SIG_UNBLOCK"), (2, "SIG_SETMASK")]),
        't' => futex_op(out, v),
        'c' => named(
            out,
            v,
            &[(0x1001, "ARCH_SET_GS"), (0x1002, "ARCH_SET_FS"), (0x1003, "ARCH_GET_FS"), (0x1004, "ARCH_GET_GS")],
        ),
        'A' => flags(out, v, AT, "0"),
        _ => {
            let _ = (second, write!(out, "{v:#x}"));
        }
    }
}

fn pointer(out: &mut String, v: u64) {
    if v == 0 {
        out.push_str("NULL");
    } else {
        let _ = write!(out, "{v:#x}");
    }
}

/// A NUL-terminated string at `addr`: quoted, cut at MAX_STR bytes; unreadable
/// memory prints the pointer.
fn path(out: &mut String, addr: u64, peek: Peek) {
    let mut bytes = [0u8; MAX_STR + 1];
    let mut got = 0;
    // A page at a time, so that a string at the end of a mapping reads.
    while got < bytes.len() {
        let at = addr.wrapping_add(got as u64);
        let n = ((4096 - at % 4096) as usize).min(bytes.len() - got);
        if !peek(at, &mut bytes[got..got + n]) {
            break;
        }
        if bytes[got..got + n].contains(&0) {
            got += n;
            break;
        }
        got += n;
    }
    if got == 0 {
        return pointer(out, addr);
    }
    match bytes[..got].iter().position(|&b| b == 0) {
        Some(end) => quote(out, &bytes[..end], false),
        None => quote(out, &bytes[..got.min(MAX_STR)], got > MAX_STR),
    }
}

/// `len` bytes at `addr` as a quoted string (MAX_STR of them, then `...`).
fn buffer(out: &mut String, addr: u64, len: usize, peek: Peek) {
    let mut bytes = [0u8; MAX_STR];
    let n = len.min(MAX_STR);
    if !peek(addr, &mut bytes[..n]) {
        return pointer(out, addr);
    }
    quote(out, &bytes[..n], len > MAX_STR);
}

/// Quotes `b` as strace does: C escapes, other unprintable bytes in octal.
pub fn quote(out: &mut String, b: &[u8], more: bool) {
    out.push('"');
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            0x20..=0x7e => out.push(c as char),
            _ => {
                // Short octal unless a digit follows (it would be read as part of it).
                if b.get(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                    let _ = write!(out, "\\{c:03o}");
                } else {
                    let _ = write!(out, "\\{c:o}");
                }
            }
        }
    }
    out.push('"');
    if more {
        out.push_str("...");
    }
}

/// `v` as `A|B|0x..` by the bit table (`zero` when it is 0).
fn flags(out: &mut String, v: u64, table: &[(u64, &str)], zero: &str) {
    if v == 0 {
        out.push_str(zero);
        return;
    }
    let mut rest = v;
    let mut first = true;
    for &(bits, name) in table {
        if bits != 0 && rest & bits == bits {
            if !first {
                out.push('|');
            }
            out.push_str(name);
            rest &= !bits;
            first = false;
        }
    }
    if rest != 0 {
        if !first {
            out.push('|');
        }
        let _ = write!(out, "{rest:#x}");
    }
}

/// One value of a table, else its number.
fn named(out: &mut String, v: u64, table: &[(u64, &str)]) {
    match table.iter().find(|(n, _)| *n == v) {
        Some((_, name)) => out.push_str(name),
        None => {
            let _ = write!(out, "{v:#x}");
        }
    }
}

fn open_flags(out: &mut String, v: u64) {
    out.push_str(match v & 3 {
        0 => "O_RDONLY",
        1 => "O_WRONLY",
        2 => "O_RDWR",
        _ => "O_ACCMODE",
    });
    if v & !3 != 0 {
        out.push('|');
        flags(out, v & !3, OPEN, "");
    }
}

fn mmap_flags(out: &mut String, v: u64) {
    out.push_str(match v & 3 {
        1 => "MAP_SHARED",
        2 => "MAP_PRIVATE",
        3 => "MAP_SHARED_VALIDATE",
        _ => "0",
    });
    if v & !3 != 0 {
        out.push('|');
        flags(out, v & !3, MAP, "");
    }
}

fn clone_flags(out: &mut String, v: u64) {
    let sig = v & 0xff;
    flags(out, v & !0xff, CLONE, "");
    if sig != 0 {
        if v & !0xff != 0 {
            out.push('|');
        }
        signal(out, sig);
    } else if v == 0 {
        out.push('0');
    }
}

fn signal(out: &mut String, v: u64) {
    match onering_abi::sysnames::SIGNALS.get(v as usize) {
        Some(n) if !n.is_empty() => out.push_str(n),
        _ if (34..=64).contains(&v) => {
            let _ = write!(out, "SIGRTMIN+{}", v - 34);
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

fn futex_op(out: &mut String, v: u64) {
    named(out, v & 0x7f, FUTEX);
    if v & 128 != 0 {
        out.push_str("|FUTEX_PRIVATE_FLAG");
    }
    if v & 256 != 0 {
        out.push_str("|FUTEX_CLOCK_REALTIME");
    }
}

const PROT: &[(u64, &str)] = &[(1, "PROT_READ"), (2, "PROT_WRITE"), (4, "PROT_EXEC")];
const OPEN: &[(u64, &str)] = &[
    (0o20200000, "O_TMPFILE"),
    (0o4010000, "O_SYNC"),
    (0o100, "O_CREAT"),
    (0o200, "O_EXCL"),
    (0o400, "O_NOCTTY"),
    (0o1000, "O_TRUNC"),
    (0o2000, "O_APPEND"),
    (0o4000, "O_NONBLOCK"),
    (0o10000, "O_DSYNC"),
    (0o20000, "O_ASYNC"),
    (0o40000, "O_DIRECT"),
    (0o100000, "O_LARGEFILE"),
    (0o200000, "O_DIRECTORY"),
    (0o400000, "O_NOFOLLOW"),
    (0o1000000, "O_NOATIME"),
    (0o2000000, "O_CLOEXEC"),
    (0o10000000, "O_PATH"),
];
const MAP: &[(u64, &str)] = &[
    (0x10, "MAP_FIXED"),
    (0x20, "MAP_ANONYMOUS"),
    (0x40, "MAP_32BIT"),
    (0x100, "MAP_GROWSDOWN"),
    (0x800, "MAP_DENYWRITE"),
    (0x1000, "MAP_EXECUTABLE"),
    (0x2000, "MAP_LOCKED"),
    (0x4000, "MAP_NORESERVE"),
    (0x8000, "MAP_POPULATE"),
    (0x10000, "MAP_NONBLOCK"),
    (0x20000, "MAP_STACK"),
    (0x40000, "MAP_HUGETLB"),
    (0x100000, "MAP_FIXED_NOREPLACE"),
];
const CLONE: &[(u64, &str)] = &[
    (0x100, "CLONE_VM"),
    (0x200, "CLONE_FS"),
    (0x400, "CLONE_FILES"),
    (0x800, "CLONE_SIGHAND"),
    (0x1000, "CLONE_PIDFD"),
    (0x2000, "CLONE_PTRACE"),
    (0x4000, "CLONE_VFORK"),
    (0x8000, "CLONE_PARENT"),
    (0x10000, "CLONE_THREAD"),
    (0x20000, "CLONE_NEWNS"),
    (0x40000, "CLONE_SYSVSEM"),
    (0x80000, "CLONE_SETTLS"),
    (0x100000, "CLONE_PARENT_SETTID"),
    (0x200000, "CLONE_CHILD_CLEARTID"),
    (0x400000, "CLONE_DETACHED"),
    (0x800000, "CLONE_UNTRACED"),
    (0x1000000, "CLONE_CHILD_SETTID"),
    (0x2000000, "CLONE_NEWCGROUP"),
    (0x4000000, "CLONE_NEWUTS"),
    (0x8000000, "CLONE_NEWIPC"),
    (0x10000000, "CLONE_NEWUSER"),
    (0x20000000, "CLONE_NEWPID"),
    (0x40000000, "CLONE_NEWNET"),
    (0x80000000, "CLONE_IO"),
];
const AT: &[(u64, &str)] = &[
    (0x100, "AT_SYMLINK_NOFOLLOW"),
    (0x200, "AT_REMOVEDIR"),
    (0x400, "AT_SYMLINK_FOLLOW"),
    (0x800, "AT_NO_AUTOMOUNT"),
    (0x1000, "AT_EMPTY_PATH"),
];
const FCNTL: &[(u64, &str)] = &[
    (0, "F_DUPFD"),
    (1, "F_GETFD"),
    (2, "F_SETFD"),
    (3, "F_GETFL"),
    (4, "F_SETFL"),
    (5, "F_GETLK"),
    (6, "F_SETLK"),
    (7, "F_SETLKW"),
    (1030, "F_DUPFD_CLOEXEC"),
];
const FUTEX: &[(u64, &str)] = &[
    (0, "FUTEX_WAIT"),
    (1, "FUTEX_WAKE"),
    (3, "FUTEX_REQUEUE"),
    (4, "FUTEX_CMP_REQUEUE"),
    (5, "FUTEX_WAKE_OP"),
    (9, "FUTEX_WAIT_BITSET"),
    (10, "FUTEX_WAKE_BITSET"),
];

/// Errno names and messages as glibc's (`-1 ENOENT (No such file or directory)`).
const ERRNO_NAMES: [&str; 134] = [
    "",
    "EPERM",
    "ENOENT",
    "ESRCH",
    "EINTR",
    "EIO",
    "ENXIO",
    "E2BIG",
    "ENOEXEC",
    "EBADF",
    "ECHILD",
    "EAGAIN",
    "ENOMEM",
    "EACCES",
    "EFAULT",
    "ENOTBLK",
    "EBUSY",
    "EEXIST",
    "EXDEV",
    "ENODEV",
    "ENOTDIR",
    "EISDIR",
    "EINVAL",
    "ENFILE",
    "EMFILE",
    "ENOTTY",
    "ETXTBSY",
    "EFBIG",
    "ENOSPC",
    "ESPIPE",
    "EROFS",
    "EMLINK",
    "EPIPE",
    "EDOM",
    "ERANGE",
    "EDEADLOCK",
    "ENAMETOOLONG",
    "ENOLCK",
    "ENOSYS",
    "ENOTEMPTY",
    "ELOOP",
    "",
    "ENOMSG",
    "EIDRM",
    "ECHRNG",
    "EL2NSYNC",
    "EL3HLT",
    "EL3RST",
    "ELNRNG",
    "EUNATCH",
    "ENOCSI",
    "EL2HLT",
    "EBADE",
    "EBADR",
    "EXFULL",
    "ENOANO",
    "EBADRQC",
    "EBADSLT",
    "",
    "EBFONT",
    "ENOSTR",
    "ENODATA",
    "ETIME",
    "ENOSR",
    "ENONET",
    "ENOPKG",
    "EREMOTE",
    "ENOLINK",
    "EADV",
    "ESRMNT",
    "ECOMM",
    "EPROTO",
    "EMULTIHOP",
    "EDOTDOT",
    "EBADMSG",
    "EOVERFLOW",
    "ENOTUNIQ",
    "EBADFD",
    "EREMCHG",
    "ELIBACC",
    "ELIBBAD",
    "ELIBSCN",
    "ELIBMAX",
    "ELIBEXEC",
    "EILSEQ",
    "ERESTART",
    "ESTRPIPE",
    "EUSERS",
    "ENOTSOCK",
    "EDESTADDRREQ",
    "EMSGSIZE",
    "EPROTOTYPE",
    "ENOPROTOOPT",
    "EPROTONOSUPPORT",
    "ESOCKTNOSUPPORT",
    "EOPNOTSUPP",
    "EPFNOSUPPORT",
    "EAFNOSUPPORT",
    "EADDRINUSE",
    "EADDRNOTAVAIL",
    "ENETDOWN",
    "ENETUNREACH",
    "ENETRESET",
    "ECONNABORTED",
    "ECONNRESET",
    "ENOBUFS",
    "EISCONN",
    "ENOTCONN",
    "ESHUTDOWN",
    "ETOOMANYREFS",
    "ETIMEDOUT",
    "ECONNREFUSED",
    "EHOSTDOWN",
    "EHOSTUNREACH",
    "EALREADY",
    "EINPROGRESS",
    "ESTALE",
    "EUCLEAN",
    "ENOTNAM",
    "ENAVAIL",
    "EISNAM",
    "EREMOTEIO",
    "EDQUOT",
    "ENOMEDIUM",
    "EMEDIUMTYPE",
    "ECANCELED",
    "ENOKEY",
    "EKEYEXPIRED",
    "EKEYREVOKED",
    "EKEYREJECTED",
    "EOWNERDEAD",
    "ENOTRECOVERABLE",
    "ERFKILL",
    "",
];
const ERRNO_TEXT: [&str; 134] = [
    "",
    "Operation not permitted",
    "No such file or directory",
    "No such process",
    "Interrupted system call",
    "Input/output error",
    "No such device or address",
    "Argument list too long",
    "Exec format error",
    "Bad file descriptor",
    "No child processes",
    "Resource temporarily unavailable",
    "Cannot allocate memory",
    "Permission denied",
    "Bad address",
    "Block device required",
    "Device or resource busy",
    "File exists",
    "Invalid cross-device link",
    "No such device",
    "Not a directory",
    "Is a directory",
    "Invalid argument",
    "Too many open files in system",
    "Too many open files",
    "Inappropriate ioctl for device",
    "Text file busy",
    "File too large",
    "No space left on device",
    "Illegal seek",
    "Read-only file system",
    "Too many links",
    "Broken pipe",
    "Numerical argument out of domain",
    "Numerical result out of range",
    "Resource deadlock avoided",
    "File name too long",
    "No locks available",
    "Function not implemented",
    "Directory not empty",
    "Too many levels of symbolic links",
    "",
    "No message of desired type",
    "Identifier removed",
    "Channel number out of range",
    "Level 2 not synchronized",
    "Level 3 halted",
    "Level 3 reset",
    "Link number out of range",
    "Protocol driver not attached",
    "No CSI structure available",
    "Level 2 halted",
    "Invalid exchange",
    "Invalid request descriptor",
    "Exchange full",
    "No anode",
    "Invalid request code",
    "Invalid slot",
    "",
    "Bad font file format",
    "Device not a stream",
    "No data available",
    "Timer expired",
    "Out of streams resources",
    "Machine is not on the network",
    "Package not installed",
    "Object is remote",
    "Link has been severed",
    "Advertise error",
    "Srmount error",
    "Communication error on send",
    "Protocol error",
    "Multihop attempted",
    "RFS specific error",
    "Bad message",
    "Value too large for defined data type",
    "Name not unique on network",
    "File descriptor in bad state",
    "Remote address changed",
    "Can not access a needed shared library",
    "Accessing a corrupted shared library",
    ".lib section in a.out corrupted",
    "Attempting to link in too many shared libraries",
    "Cannot exec a shared library directly",
    "Invalid or incomplete multibyte or wide character",
    "Interrupted system call should be restarted",
    "Streams pipe error",
    "Too many users",
    "Socket operation on non-socket",
    "Destination address required",
    "Message too long",
    "Protocol wrong type for socket",
    "Protocol not available",
    "Protocol not supported",
    "Socket type not supported",
    "Operation not supported",
    "Protocol family not supported",
    "Address family not supported by protocol",
    "Address already in use",
    "Cannot assign requested address",
    "Network is down",
    "Network is unreachable",
    "Network dropped connection on reset",
    "Software caused connection abort",
    "Connection reset by peer",
    "No buffer space available",
    "Transport endpoint is already connected",
    "Transport endpoint is not connected",
    "Cannot send after transport endpoint shutdown",
    "Too many references: cannot splice",
    "Connection timed out",
    "Connection refused",
    "Host is down",
    "No route to host",
    "Operation already in progress",
    "Operation now in progress",
    "Stale file handle",
    "Structure needs cleaning",
    "Not a XENIX named type file",
    "No XENIX semaphores available",
    "Is a named type file",
    "Remote I/O error",
    "Disk quota exceeded",
    "No medium found",
    "Wrong medium type",
    "Operation canceled",
    "Required key not available",
    "Key has expired",
    "Key has been revoked",
    "Key was rejected by service",
    "Owner died",
    "State not recoverable",
    "Operation not possible due to RF-kill",
    "",
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory of one page at 0x1000 holding `data`.
    fn line(nr: u64, args: [u64; 6], ret: Option<u64>, data: &[u8]) -> String {
        let mut data = data.to_vec();
        data.resize(4096, 0);
        let peek = |addr: u64, buf: &mut [u8]| -> bool {
            let Some(off) = addr.checked_sub(0x1000) else { return false };
            match data.get(off as usize..off as usize + buf.len()) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    true
                }
                None => false,
            }
        };
        let mut s = String::new();
        format_call(&mut s, nr, &args, ret, &peek);
        s
    }

    fn neg(e: u64) -> Option<u64> {
        Some(e.wrapping_neg())
    }

    #[test]
    fn openat_names_flags_and_errno() {
        let page = b"/etc/passwd\0".to_vec();
        assert_eq!(
            line(257, [(-100i64) as u64, 0x1000, 0o2000000, 0, 0, 0], neg(2), &page),
            "openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY|O_CLOEXEC) = -1 ENOENT (No such file or directory)"
        );
        assert_eq!(
            line(257, [3, 0x1000, 0o101 | 0o1000, 0o644, 0, 0], Some(4), &page),
            "openat(3, \"/etc/passwd\", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 4"
        );
    }

    #[test]
    fn strings_are_escaped_and_capped() {
        let mut data = b"hi\n\"q\"\x1b[0m\x007".to_vec();
        data.push(0xff);
        data.resize(100, b'a');
        assert_eq!(
            line(1, [1, 0x1000, 13, 0, 0, 0], Some(13), &data),
            "write(1, \"hi\\n\\\"q\\\"\\33[0m\\0007\\377\", 13) = 13"
        );
        let s = line(1, [1, 0x1000, 100, 0, 0, 0], Some(100), &data);
        assert!(s.starts_with("write(1, \"hi") && s.ends_with("\"..., 100) = 100"), "{s}");
        // A read shows what it read (the result's length), a failed one the pointer.
        assert_eq!(line(0, [0, 0x1000, 64, 0, 0, 0], Some(2), &data), "read(0, \"hi\", 64) = 2");
        assert_eq!(
            line(0, [0, 0x1000, 64, 0, 0, 0], neg(11), &data),
            "read(0, 0x1000, 64) = -1 EAGAIN (Resource temporarily unavailable)"
        );
        // Unreadable memory: the pointer.
        assert_eq!(
            line(2, [0x9000, 0, 0, 0, 0, 0], neg(14), &data),
            "open(0x9000, O_RDONLY) = -1 EFAULT (Bad address)"
        );
    }

    #[test]
    fn mmap_and_clone_flags() {
        assert_eq!(
            line(9, [0, 8192, 3, 0x22, u64::MAX, 0], Some(0x7f00_0000_0000), &[]),
            "mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0000000000"
        );
        assert_eq!(line(10, [0x1000, 4096, 0, 0, 0, 0], Some(0), &[]), "mprotect(0x1000, 4096, PROT_NONE) = 0");
        assert_eq!(
            line(56, [0x7d0f00 | 17, 0x5000, 0, 0, 0, 0], Some(7), &[]),
            "clone(CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS|\
             CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID|CLONE_DETACHED|SIGCHLD, 0x5000, NULL, NULL, 0) = 7"
        );
        assert_eq!(
            line(9, [0, 1, 1, 0x80000001, 0, 0], Some(0x1000), &[]),
            "mmap(NULL, 1, PROT_READ, MAP_SHARED|0x80000000, 0, 0) = 0x1000"
        );
    }

    #[test]
    fn others_and_no_return() {
        assert_eq!(line(110, [0; 6], Some(1), &[]), "getppid() = 1");
        assert_eq!(line(231, [3, 0, 0, 0, 0, 0], None, &[]), "exit_group(3) = ?");
        assert_eq!(line(62, [5, 15, 0, 0, 0, 0], neg(3), &[]), "kill(5, SIGTERM) = -1 ESRCH (No such process)");
        assert_eq!(
            line(1000, [1, 2, 3, 4, 5, 6], neg(38), &[]),
            "syscall_0x3e8(0x1, 0x2, 0x3) = -1 ENOSYS (Function not implemented)"
        );
        assert_eq!(line(14, [0, 0x1000, 0, 8, 0, 0], Some(0), &[]), "rt_sigprocmask(SIG_BLOCK, 0x1000, NULL, 8) = 0");
    }
}
