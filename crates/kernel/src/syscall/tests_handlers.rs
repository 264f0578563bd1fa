//! Host tests of the handler families, through the dispatcher, with a context
//! built around a test kernel and a fake user memory (`task::testing`). Calls
//! that would block or return to the program (sleeps, signal delivery, clone)
//! need the guest; the guest programs in tests/guest cover them against the host.

use super::testing::{TestEnv, USER_BASE};
use crate::mm::user::{UserMem, UserMemExt};

const B: u64 = USER_BASE;
const EPERM: i64 = -1;
const ENOENT: i64 = -2;
const EBADF: i64 = -9;
const EAGAIN: i64 = -11;
const EFAULT: i64 = -14;
const EEXIST: i64 = -17;
const ENOTDIR: i64 = -20;
const EISDIR: i64 = -21;
const EINVAL: i64 = -22;
const ENOSPC: i64 = -28;
const ESPIPE: i64 = -29;
const EROFS: i64 = -30;
const ENOSYS: i64 = -38;
const ENOTEMPTY: i64 = -39;

const O_WRONLY: u64 = 1;
const O_RDWR: u64 = 2;
const O_CREAT: u64 = 0o100;
const O_EXCL: u64 = 0o200;
const O_TRUNC: u64 = 0o1000;
const O_APPEND: u64 = 0o2000;
const O_NONBLOCK: u64 = 0o4000;
const O_DIRECTORY: u64 = 0o200000;
const AT_FDCWD: u64 = -100i64 as u64;

/// A bad pointer: far outside the fake memory.
const BAD: u64 = 0xdead_0000;

/// The names one getdents64 of directory `dfd` gives.
fn list(e: &TestEnv, dfd: u64) -> alloc::vec::Vec<alloc::string::String> {
    let n = e.call(217, &[dfd, B + 0x1000, 4096]);
    assert!(n > 0);
    let buf = e.bytes(B + 0x1000, n as usize);
    let mut names = alloc::vec::Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let reclen = u16::from_le_bytes([buf[at + 16], buf[at + 17]]) as usize;
        let name: alloc::vec::Vec<u8> = buf[at + 19..at + reclen].iter().copied().take_while(|b| *b != 0).collect();
        names.push(alloc::string::String::from_utf8(name).unwrap());
        at += reclen;
    }
    names
}

#[test]
fn files_in_tmp_are_created_written_read_and_removed() {
    let e = TestEnv::new();
    let path = e.str(B, "/tmp/a");
    let fd = e.call(2, &[path, O_CREAT | O_RDWR, 0o644]);
    assert!(fd >= 3, "open: {fd}");
    e.user.write(B + 0x100, b"hello world").unwrap();
    assert_eq!(e.call(1, &[fd as u64, B + 0x100, 11]), 11);
    assert_eq!(e.call(8, &[fd as u64, 6, 0]), 6, "lseek SET");
    assert_eq!(e.call(0, &[fd as u64, B + 0x200, 100]), 5);
    assert_eq!(e.bytes(B + 0x200, 5), b"world");
    assert_eq!(e.call(17, &[fd as u64, B + 0x200, 5, 0]), 5, "pread");
    assert_eq!(e.bytes(B + 0x200, 5), b"hello");
    assert_eq!(e.call(8, &[fd as u64, 0, 2]), 11, "lseek END");
    // fstat: a regular file of 11 bytes, mode 0644 less the umask.
    assert_eq!(e.call(5, &[fd as u64, B + 0x300]), 0);
    let st = e.bytes(B + 0x300, 144);
    let mode = u32::from_le_bytes(st[24..28].try_into().unwrap());
    assert_eq!(mode, 0o100644);
    assert_eq!(u64::from_le_bytes(st[48..56].try_into().unwrap()), 11);
    assert_eq!(u32::from_le_bytes(st[28..32].try_into().unwrap()), 1000, "owned by the user");
    // Bad pointers are EFAULT, and change nothing.
    assert_eq!(e.call(1, &[fd as u64, BAD, 4]), EFAULT);
    assert_eq!(e.call(0, &[fd as u64, BAD, 4]), 0, "at the end: nothing to copy");
    assert_eq!(e.call(8, &[fd as u64, 0, 0]), 0);
    assert_eq!(e.call(0, &[fd as u64, BAD, 4]), EFAULT);
    assert_eq!(e.call(5, &[fd as u64, BAD]), EFAULT);
    assert_eq!(e.call(2, &[BAD, 0, 0]), EFAULT);
    assert_eq!(e.call(3, &[fd as u64]), 0);
    assert_eq!(e.call(3, &[fd as u64]), EBADF);
    assert_eq!(e.call(2, &[path, O_CREAT | O_EXCL | O_RDWR, 0o644]), EEXIST);
    assert_eq!(e.call(87, &[path]), 0, "unlink");
    assert_eq!(e.call(2, &[path, 0, 0]), ENOENT);
}

#[test]
fn append_truncate_and_access_modes() {
    let e = TestEnv::new();
    let path = e.str(B, "/tmp/f");
    let fd = e.call(2, &[path, O_CREAT | O_WRONLY | O_APPEND, 0o600]) as u64;
    e.user.write(B + 0x100, b"abc").unwrap();
    assert_eq!(e.call(1, &[fd, B + 0x100, 3]), 3);
    assert_eq!(e.call(8, &[fd, 0, 0]), 0);
    assert_eq!(e.call(1, &[fd, B + 0x100, 3]), 3, "O_APPEND writes at the end");
    assert_eq!(e.call(0, &[fd, B + 0x200, 3]), EBADF, "write-only");
    assert_eq!(e.call(77, &[fd, 2]), 0, "ftruncate");
    let fd2 = e.call(2, &[path, O_TRUNC | O_RDWR, 0]) as u64;
    assert_eq!(e.call(8, &[fd2, 0, 2]), 0, "O_TRUNC emptied it");
    assert_eq!(e.call(72, &[fd2, 3, 0]) as u64 & 3, O_RDWR, "F_GETFL");
    assert_eq!(e.call(72, &[fd2, 4, O_NONBLOCK | O_APPEND]), 0, "F_SETFL");
    assert_eq!(e.call(72, &[fd2, 3, 0]) as u64 & (O_NONBLOCK | O_APPEND), O_NONBLOCK | O_APPEND);
    assert_eq!(e.call(2, &[e.str(B + 0x400, "/dev"), O_RDWR, 0]), EISDIR);
    assert_eq!(e.call(2, &[e.str(B + 0x400, "/tmp/f"), O_DIRECTORY, 0]), ENOTDIR);
}

#[test]
fn directories_names_and_the_working_directory() {
    let e = TestEnv::new();
    assert_eq!(e.call(83, &[e.str(B, "/tmp/d"), 0o755]), 0, "mkdir");
    assert_eq!(e.call(83, &[e.str(B, "/tmp/d"), 0o755]), EEXIST);
    assert_eq!(e.call(83, &[e.str(B, "/x"), 0o755]), EROFS, "/ is the read-only rootfs");
    assert_eq!(e.call(80, &[e.str(B, "/tmp/d")]), 0, "chdir");
    assert_eq!(e.call(79, &[B + 0x100, 64]), 7, "getcwd");
    assert_eq!(e.bytes(B + 0x100, 7), b"/tmp/d\0");
    assert_eq!(e.call(79, &[B + 0x100, 3]), -34, "ERANGE");
    // Relative names now start in /tmp/d.
    let fd = e.call(257, &[AT_FDCWD, e.str(B, "f"), O_CREAT | O_RDWR, 0o644]);
    assert!(fd >= 0);
    assert_eq!(e.call(82, &[e.str(B, "f"), e.str(B + 0x80, "g")]), 0, "rename");
    assert_eq!(e.call(84, &[e.str(B, "/tmp/d")]), ENOTEMPTY);
    // getdents64 of /tmp/d: ".", "..", "g".
    let dfd = e.call(2, &[e.str(B, "/tmp/d"), O_DIRECTORY, 0]) as u64;
    assert_eq!(list(&e, dfd), [".", "..", "g"]);
    assert_eq!(e.call(217, &[dfd, B + 0x1000, 4096]), 0, "at the end");
    assert_eq!(e.call(263, &[AT_FDCWD, e.str(B, "g"), 0]), 0, "unlinkat");
    assert_eq!(e.call(80, &[e.str(B, "/")]), 0);
    assert_eq!(e.call(84, &[e.str(B, "/tmp/d")]), 0, "rmdir");
}

#[test]
fn links_modes_times_and_readlink() {
    let e = TestEnv::new();
    let a = e.str(B, "/tmp/a");
    assert!(e.call(2, &[a, O_CREAT | O_RDWR, 0o600]) >= 0);
    assert_eq!(e.call(86, &[a, e.str(B + 0x80, "/tmp/b")]), 0, "link");
    assert_eq!(e.call(88, &[e.str(B + 0x100, "a"), e.str(B + 0x180, "/tmp/s")]), 0, "symlink");
    assert_eq!(e.call(89, &[e.str(B + 0x180, "/tmp/s"), B + 0x200, 64]), 1, "readlink");
    assert_eq!(e.bytes(B + 0x200, 1), b"a");
    assert_eq!(e.call(89, &[e.str(B + 0x180, "/proc/self/exe"), B + 0x200, 64]), 5);
    assert_eq!(e.bytes(B + 0x200, 5), b"/test");
    assert_eq!(e.call(90, &[a, 0o4711]), 0, "chmod");
    assert_eq!(e.call(4, &[e.str(B + 0x80, "/tmp/b"), B + 0x300]), 0, "stat through the other name");
    assert_eq!(u32::from_le_bytes(e.bytes(B + 0x318, 4).try_into().unwrap()), 0o104711);
    assert_eq!(u64::from_le_bytes(e.bytes(B + 0x310, 8).try_into().unwrap()), 2, "two links");
    // utimensat with explicit times.
    e.user
        .write(B + 0x400, &[5u64.to_le_bytes(), 0u64.to_le_bytes(), 7u64.to_le_bytes(), 0u64.to_le_bytes()].concat())
        .unwrap();
    assert_eq!(e.call(280, &[AT_FDCWD, a, B + 0x400, 0]), 0);
    assert_eq!(e.call(4, &[a, B + 0x300]), 0);
    assert_eq!(u64::from_le_bytes(e.bytes(B + 0x300 + 72, 8).try_into().unwrap()), 5, "atime");
    assert_eq!(u64::from_le_bytes(e.bytes(B + 0x300 + 88, 8).try_into().unwrap()), 7, "mtime");
    assert_eq!(e.call(133, &[e.str(B + 0x500, "/tmp/p"), 0o010644, 0]), 0, "mknod a FIFO");
    assert_eq!(e.call(133, &[e.str(B + 0x500, "/tmp/c"), 0o020644, 0]), EPERM, "no devices");
    assert_eq!(e.call(115, &[1, B + 0x600]), 1, "getgroups");
    assert_eq!(e.user.read_u32(B + 0x600), Ok(1000));
}

#[test]
fn devices() {
    let e = TestEnv::new();
    let null = e.call(2, &[e.str(B, "/dev/null"), O_RDWR, 0]) as u64;
    assert_eq!(e.call(1, &[null, BAD, 100]), 100, "/dev/null does not look at the buffer");
    assert_eq!(e.call(0, &[null, B, 100]), 0);
    assert_eq!(e.call(5, &[null, B + 0x100]), 0);
    assert_eq!(u64::from_le_bytes(e.bytes(B + 0x128, 8).try_into().unwrap()), (1 << 8) | 3, "rdev 1:3");
    let zero = e.call(2, &[e.str(B, "/dev/zero"), O_RDWR, 0]) as u64;
    e.user.write(B + 0x200, &[7u8; 16]).unwrap();
    assert_eq!(e.call(0, &[zero, B + 0x200, 16]), 16);
    assert_eq!(e.bytes(B + 0x200, 16), [0u8; 16]);
    let full = e.call(2, &[e.str(B, "/dev/full"), O_RDWR, 0]) as u64;
    assert_eq!(e.call(1, &[full, B, 1]), ENOSPC);
    let rnd = e.call(2, &[e.str(B, "/dev/urandom"), 0, 0]) as u64;
    assert_eq!(e.call(0, &[rnd, B + 0x300, 1000]), 1000);
    assert!(e.bytes(B + 0x300, 1000).iter().any(|b| *b != 0));
    assert_eq!(e.call(0, &[rnd, BAD, 10]), EFAULT);
}

#[test]
fn pipes_dup_and_readiness() {
    let e = TestEnv::new();
    assert_eq!(e.call(293, &[B, O_NONBLOCK]), 0, "pipe2");
    let r = e.user.read_u32(B).unwrap() as u64;
    let w = e.user.read_u32(B + 4).unwrap() as u64;
    assert_eq!(e.call(0, &[r, B + 0x100, 10]), EAGAIN, "empty and non-blocking");
    e.user.write(B + 0x100, b"ping").unwrap();
    assert_eq!(e.call(1, &[w, B + 0x100, 4]), 4);
    assert_eq!(e.call(8, &[r, 0, 0]), ESPIPE);
    assert_eq!(e.call(17, &[r, B, 1, 0]), ESPIPE, "pread on a pipe");
    // poll: the read end is readable now.
    e.user.write(B + 0x200, &[r as u32 as u64 | (1 << 32)].map(u64::to_le_bytes).concat()).unwrap();
    assert_eq!(e.call(7, &[B + 0x200, 1, 0]), 1);
    assert_eq!(e.user.read_u32(B + 0x204).map(|v| v >> 16), Ok(1), "POLLIN");
    let d = e.call(33, &[r, 50]);
    assert_eq!(d, 50, "dup2");
    assert_eq!(e.call(0, &[50, B + 0x300, 10]), 4);
    assert_eq!(e.bytes(B + 0x300, 4), b"ping");
    assert_eq!(e.call(292, &[r, r, 0]), EINVAL, "dup3 onto itself");
    assert_eq!(e.call(3, &[r]), 0);
    assert_eq!(e.call(3, &[50]), 0);
    // No reader left: EPIPE (SIGPIPE is raised by the handler on the guest; here the
    // test thread is not a running thread, so use a pipe end that does not raise).
    assert_eq!(e.call(22, &[BAD]), EFAULT, "pipe with a bad array");
}

#[test]
fn eventfd_and_epoll() {
    let e = TestEnv::new();
    let efd = e.call(290, &[3, O_NONBLOCK]) as u64;
    let ep = e.call(291, &[0]) as u64;
    assert_eq!(e.call(213, &[0]), EINVAL, "epoll_create(0)");
    // Watch the eventfd for input.
    e.user.write(B, &[1u32.to_le_bytes().as_slice(), &42u64.to_le_bytes()].concat()).unwrap();
    assert_eq!(e.call(233, &[ep, 1, efd, B]), 0, "EPOLL_CTL_ADD");
    assert_eq!(e.call(233, &[ep, 1, efd, B]), EEXIST);
    assert_eq!(e.call(233, &[ep, 1, ep, B]), EINVAL, "itself");
    let path = e.str(B + 0x800, "/tmp/regular");
    let reg = e.call(2, &[path, O_CREAT | O_RDWR, 0o600]) as u64;
    assert_eq!(e.call(233, &[ep, 1, reg, B]), EPERM, "regular files cannot be watched");
    assert_eq!(e.call(232, &[ep, B + 0x100, 8, 0]), 1, "epoll_wait, no timeout");
    assert_eq!(e.user.read_u32(B + 0x100), Ok(1), "EPOLLIN");
    assert_eq!(e.user.read_u64(B + 0x104), Ok(42), "the data");
    assert_eq!(e.call(0, &[efd, B + 0x200, 8]), 8);
    assert_eq!(e.user.read_u64(B + 0x200), Ok(3));
    assert_eq!(e.call(0, &[efd, B + 0x200, 8]), EAGAIN);
    assert_eq!(e.call(232, &[ep, B + 0x100, 8, 0]), 0, "nothing ready");
    assert_eq!(e.call(232, &[ep, BAD, 8, 0]), EFAULT);
    assert_eq!(e.call(232, &[ep, B + 0x100, 0, 0]), EINVAL, "maxevents 0");
}

#[test]
fn memory() {
    let e = TestEnv::new();
    let a = e.call(9, &[0, 0x3000, 3, 0x22, u64::MAX, 0]);
    assert!(a > 0, "mmap: {a}");
    let a = a as u64;
    assert_eq!(e.call(10, &[a, 0x1000, 1]), 0, "mprotect");
    assert_eq!(e.call(11, &[a + 1, 0x1000]), EINVAL, "munmap misaligned");
    assert_eq!(e.call(11, &[a, 0x3000]), 0);
    assert_eq!(e.call(9, &[0, 0x1000, 3, 0x02, 5, 0]), EBADF, "files cannot be mapped (yet)");
    assert_eq!(e.call(9, &[0, 0, 3, 0x22, u64::MAX, 0]), EINVAL, "length 0");
    let brk = e.call(12, &[0]) as u64;
    assert_eq!(e.call(12, &[brk + 0x2000]) as u64, brk + 0x2000);
}

#[test]
fn identity_limits_time_and_randomness() {
    let e = TestEnv::new();
    assert_eq!(e.call(39, &[]) as u64, e.proc.pid());
    assert_eq!(e.call(186, &[]) as u64, e.thread.tid());
    assert_eq!(e.call(102, &[]), 1000);
    assert_eq!(e.call(63, &[B]), 0, "uname");
    assert_eq!(e.bytes(B, 5), b"Linux");
    assert_eq!(e.call(63, &[BAD]), EFAULT);
    // The host name: sethostname is root's (this test's uid is 1000).
    e.user.write(B + 0x300, b"box").unwrap();
    assert_eq!(e.call(170, &[B + 0x300, 3]), EPERM, "sethostname as uid 1000");
    assert_eq!(e.call(170, &[B + 0x300, 65]), EINVAL, "longer than 64 bytes");
    *e.k.hostname.lock() = b"box".to_vec();
    assert_eq!(e.call(63, &[B]), 0);
    assert_eq!(e.bytes(B + 65, 4), b"box\0", "uname's nodename");
    assert_eq!(e.call(97, &[7, B]), 0, "getrlimit NOFILE");
    assert_eq!(e.user.read_u64(B), Ok(1024));
    e.user.write(B, &[100u64.to_le_bytes(), 200u64.to_le_bytes()].concat()).unwrap();
    assert_eq!(e.call(302, &[0, 7, B, B + 0x100]), 0, "prlimit64 sets and reports the old");
    assert_eq!(e.user.read_u64(B + 0x100), Ok(1024));
    assert_eq!(e.call(97, &[7, B + 0x200]), 0);
    assert_eq!(e.user.read_u64(B + 0x200), Ok(100));
    assert_eq!(e.call(302, &[0, 99, 0, B]), EINVAL, "no such resource");
    assert_eq!(e.call(228, &[1, B + 0x300]), 0, "clock_gettime");
    assert_eq!(e.call(228, &[99, B + 0x300]), EINVAL);
    assert_eq!(e.call(228, &[1, BAD]), EFAULT);
    assert_eq!(e.call(318, &[B + 0x400, 64, 0]), 64, "getrandom");
    assert_eq!(e.call(318, &[B + 0x400, 64, 0x100]), EINVAL);
    assert_eq!(e.call(204, &[0, 8, B + 0x500]), 8, "sched_getaffinity");
    assert_eq!(e.user.read_u64(B + 0x500), Ok(1));
    assert_eq!(e.call(157, &[15, e.str(B + 0x600, "worker")]), 0, "PR_SET_NAME");
    assert_eq!(e.call(157, &[16, B + 0x700]), 0);
    assert_eq!(e.bytes(B + 0x700, 7), b"worker\0");
    assert_eq!(e.call(999, &[]), ENOSYS);
}

#[test]
fn signal_dispositions_masks_and_stacks() {
    let e = TestEnv::new();
    // SIGUSR1 (10): a handler at 0x1234 with SA_RESTART.
    e.user.write(B, &[0x1234u64, 0x1000_0000, 0x5678, 0].map(u64::to_le_bytes).concat()).unwrap();
    assert_eq!(e.call(13, &[10, B, B + 0x100, 8]), 0);
    assert_eq!(e.user.read_u64(B + 0x100), Ok(0), "the old action was SIG_DFL");
    assert_eq!(e.call(13, &[10, 0, B + 0x100, 8]), 0);
    assert_eq!(e.user.read_u64(B + 0x100), Ok(0x1234));
    assert_eq!(e.call(13, &[9, B, 0, 8]), EINVAL, "SIGKILL cannot be caught");
    assert_eq!(e.call(13, &[10, B, 0, 4]), EINVAL, "sigsetsize");
    assert_eq!(e.call(13, &[10, BAD, 0, 8]), EFAULT);
    // Block SIGUSR1 and SIGKILL: KILL stays unblockable.
    e.user.write_u64(B + 0x200, (1 << 9) | (1 << 8)).unwrap();
    assert_eq!(e.call(14, &[0, B + 0x200, 0, 8]), 0);
    assert_eq!(e.call(14, &[2, 0, B + 0x208, 8]), 0);
    assert_eq!(e.user.read_u64(B + 0x208), Ok(1 << 9), "SIGUSR1 only");
    assert_eq!(e.call(14, &[7, B + 0x200, 0, 8]), EINVAL, "how");
    // An alternate stack.
    e.user.write(B + 0x300, &[0x7000_0000u64, 0, 0x4000].map(u64::to_le_bytes).concat()).unwrap();
    assert_eq!(e.call(131, &[B + 0x300, 0]), 0);
    assert_eq!(e.call(131, &[0, B + 0x400]), 0);
    assert_eq!(e.user.read_u64(B + 0x400), Ok(0x7000_0000));
    e.user.write(B + 0x300, &[0u64, 0, 100].map(u64::to_le_bytes).concat()).unwrap();
    assert_eq!(e.call(131, &[B + 0x300, 0]), -12, "ENOMEM: too small");
}

#[test]
fn futex_words() {
    let e = TestEnv::new();
    e.user.write_u32(B, 5).unwrap();
    assert_eq!(e.call(202, &[B, 0x80, 4, 0, 0, 0]), EAGAIN, "FUTEX_WAIT with another value");
    assert_eq!(e.call(202, &[B, 0x81, 1, 0, 0, 0]), 0, "nobody to wake");
    assert_eq!(e.call(202, &[B + 1, 0x81, 1, 0, 0, 0]), EINVAL, "misaligned");
    assert_eq!(e.call(202, &[BAD, 0x80, 5, 0, 0, 0]), EFAULT);
    assert_eq!(e.call(202, &[B, 0x80 | 6, 0, 0, 0, 0]), ENOSYS, "PI futexes");
    // FUTEX_WAKE_OP: set the second word to 3, wake nobody.
    let op = (1u32 << 28) | (3 << 12); // ADD 3 ... (op ADD=1, arg 3, cmp EQ 0)
    assert_eq!(e.call(202, &[B, 0x85, 1, 1, B + 4, u64::from(op)]), 0);
    assert_eq!(e.user.read_u32(B + 4), Ok(3));
}

#[test]
fn proc_files_links_and_directories() {
    let e = TestEnv::new();
    let pid = e.ctx().thread.pid();
    let fd = e.call(2, &[e.str(B, "/proc/self/status"), 0, 0]);
    assert!(fd >= 0);
    let n = e.call(0, &[fd as u64, B + 0x1000, 4096]);
    let text = alloc::string::String::from_utf8(e.bytes(B + 0x1000, n as usize)).unwrap();
    assert!(text.contains(&alloc::format!("\nPid:\t{pid}\n")), "{text}");
    assert!(text.contains("\nUid:\t1000\t1000\t1000\t1000\n"), "{text}");
    // One snapshot per open: pread anywhere in it; lseek from the end is refused.
    assert_eq!(e.call(17, &[fd as u64, B + 0x300, 5, 1]), 5);
    assert_eq!(e.bytes(B + 0x300, 5), b"ame:\t");
    assert_eq!(e.call(8, &[fd as u64, 0, 2]), EINVAL, "SEEK_END");
    assert_eq!(e.call(1, &[fd as u64, B, 1]), EBADF, "opened for reading");
    assert_eq!(e.call(2, &[e.str(B, "/proc/self/stat"), O_WRONLY, 0]), -13, "opened for writing: EACCES");
    // The links: the program, descriptors, the working directory.
    assert_eq!(e.call(89, &[e.str(B, "/proc/self/fd/0"), B + 0x200, 64]), 9);
    assert_eq!(e.bytes(B + 0x200, 9), b"/dev/null");
    assert_eq!(e.call(89, &[e.str(B, "/proc/self/cwd"), B + 0x200, 64]), 1);
    let me = alloc::format!("{pid}");
    assert_eq!(e.call(89, &[e.str(B, "/proc/self"), B + 0x200, 64]), me.len() as i64);
    assert_eq!(e.bytes(B + 0x200, me.len()), me.as_bytes());
    // fd/ lists the descriptors, the directory's own among them.
    let dfd = e.call(2, &[e.str(B, "/proc/self/fd"), O_DIRECTORY, 0]) as u64;
    let names = list(&e, dfd);
    let fdname = alloc::format!("{dfd}");
    assert_eq!(names[..5], [".", "..", "0", "1", "2"]);
    assert!(names.contains(&fdname), "{names:?}");
    // Relative to it: fstatat, readlinkat.
    assert_eq!(e.call(262, &[dfd, e.str(B, "1"), B + 0x300, 0x100]), 0, "fstatat");
    assert_eq!(u32::from_le_bytes(e.bytes(B + 0x318, 4).try_into().unwrap()) & 0o170000, 0o120000);
    // Nothing is made or removed there; /sys follows the CPUs.
    assert_eq!(e.call(83, &[e.str(B, "/proc/x"), 0o755]), EROFS);
    let fd = e.call(2, &[e.str(B, "/sys/devices/system/cpu/online"), 0, 0]);
    assert_eq!(e.call(0, &[fd as u64, B + 0x1000, 64]), 2);
    assert_eq!(e.bytes(B + 0x1000, 2), b"0\n");
}
