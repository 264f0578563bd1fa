//! System calls: the one declarative table of handlers and the dispatcher, which
//! is the only place an `Errno` becomes `-errno`. Handlers are grouped by family,
//! one file each (`fs`, `fsmeta`, `poll`, `mm`, `net`, `proc`, `signal`, `time`,
//! `futex`);
//! docs/syscalls.md names each call's handler.
//!
//! A handler gets the call's context (`task::Ctx`: the kernel, the calling thread
//! and its process, user memory) and the frame (arguments, and registers for the
//! calls that change them). Handlers reach no global state of their own, so host
//! tests call them with a context built around a test kernel.
//!
//! The dispatcher does not care how it was entered (the ring-0 trap stub or a
//! rewritten call site): both arrive with the same frame.

pub mod clone3;
pub mod exec;
pub mod fs;
pub mod fsmeta;
pub mod futex;
pub mod hostexec;
pub mod mm;
pub mod net;
pub mod poll;
pub mod proc;
pub mod signal;
pub mod time;

#[cfg(test)]
pub mod testing;
#[cfg(test)]
mod tests_handlers;

use crate::errno::SysResult;
use crate::sysnames as names;
use crate::task::Ctx;
pub use onering_arch::frame::SyscallFrame;

/// A handler: the call's context and its frame.
pub type Handler = fn(&Ctx, &mut SyscallFrame) -> SysResult;

/// The table: `number name => handler`. Names are checked against [`names`] by a
/// unit test, and docs/syscalls.md lists the same set with the same handlers.
macro_rules! syscall_table {
    ($($nr:literal $name:ident => $handler:path,)*) => {
        /// Numbers, names and handlers (as written) of the implemented system calls.
        pub const IMPLEMENTED: &[(u64, &str, &str)] = &[$(($nr, stringify!($name), stringify!($handler)),)*];

        const TABLE: [Option<Handler>; names::COUNT] = {
            let mut t: [Option<Handler>; names::COUNT] = [None; names::COUNT];
            $(t[$nr] = Some($handler as Handler);)*
            t
        };
    };
}

syscall_table! {
    0 read => fs::read,
    1 write => fs::write,
    2 open => fs::open,
    3 close => fs::close,
    4 stat => fs::stat,
    5 fstat => fs::fstat,
    6 lstat => fs::lstat,
    7 poll => poll::poll,
    8 lseek => fs::lseek,
    9 mmap => mm::mmap,
    10 mprotect => mm::mprotect,
    11 munmap => mm::munmap,
    12 brk => mm::brk,
    13 rt_sigaction => signal::rt_sigaction,
    14 rt_sigprocmask => signal::rt_sigprocmask,
    15 rt_sigreturn => signal::rt_sigreturn,
    16 ioctl => fs::ioctl,
    17 pread64 => fs::pread64,
    18 pwrite64 => fs::pwrite64,
    19 readv => fs::readv,
    20 writev => fs::writev,
    21 access => fs::access,
    22 pipe => fs::pipe,
    23 select => poll::select,
    24 sched_yield => proc::sched_yield,
    25 mremap => mm::mremap,
    26 msync => mm::msync,
    27 mincore => mm::mincore,
    28 madvise => mm::madvise,
    32 dup => fs::dup,
    33 dup2 => fs::dup2,
    34 pause => signal::pause,
    35 nanosleep => time::nanosleep,
    36 getitimer => time::getitimer,
    37 alarm => time::alarm,
    38 setitimer => time::setitimer,
    39 getpid => proc::getpid,
    40 sendfile => fs::sendfile,
    41 socket => net::socket,
    42 connect => net::connect,
    43 accept => net::accept,
    44 sendto => net::sendto,
    45 recvfrom => net::recvfrom,
    46 sendmsg => net::sendmsg,
    47 recvmsg => net::recvmsg,
    48 shutdown => net::shutdown,
    49 bind => net::bind,
    50 listen => net::listen,
    51 getsockname => net::getsockname,
    52 getpeername => net::getpeername,
    53 socketpair => net::socketpair,
    54 setsockopt => net::setsockopt,
    55 getsockopt => net::getsockopt,
    56 clone => proc::clone,
    57 fork => proc::fork,
    58 vfork => proc::vfork,
    59 execve => exec::execve,
    60 exit => proc::exit,
    61 wait4 => proc::wait4,
    62 kill => signal::kill,
    63 uname => proc::uname,
    72 fcntl => fs::fcntl,
    73 flock => fs::flock,
    74 fsync => fsmeta::fsync,
    75 fdatasync => fsmeta::fsync,
    76 truncate => fsmeta::truncate,
    77 ftruncate => fs::ftruncate,
    79 getcwd => fs::getcwd,
    80 chdir => fs::chdir,
    81 fchdir => fs::fchdir,
    82 rename => fs::rename,
    83 mkdir => fs::mkdir,
    84 rmdir => fs::rmdir,
    85 creat => fs::creat,
    86 link => fsmeta::link,
    87 unlink => fs::unlink,
    88 symlink => fs::symlink,
    89 readlink => fs::readlink,
    90 chmod => fsmeta::chmod,
    91 fchmod => fsmeta::fchmod,
    92 chown => fsmeta::chown,
    93 fchown => fsmeta::fchown,
    94 lchown => fsmeta::lchown,
    95 umask => fs::umask,
    96 gettimeofday => time::gettimeofday,
    97 getrlimit => proc::getrlimit,
    98 getrusage => proc::getrusage,
    99 sysinfo => proc::sysinfo,
    102 getuid => proc::getuid,
    104 getgid => proc::getgid,
    105 setuid => proc::setuid,
    106 setgid => proc::setgid,
    107 geteuid => proc::getuid,
    108 getegid => proc::getgid,
    109 setpgid => proc::setpgid,
    110 getppid => proc::getppid,
    111 getpgrp => proc::getpgrp,
    112 setsid => proc::setsid,
    113 setreuid => proc::setreuid,
    114 setregid => proc::setregid,
    115 getgroups => fsmeta::getgroups,
    117 setresuid => proc::setresuid,
    118 getresuid => proc::getresuid,
    119 setresgid => proc::setresgid,
    120 getresgid => proc::getresgid,
    121 getpgid => proc::getpgid,
    124 getsid => proc::getsid,
    125 capget => proc::capget,
    126 capset => proc::capset,
    127 rt_sigpending => signal::rt_sigpending,
    128 rt_sigtimedwait => signal::rt_sigtimedwait,
    130 rt_sigsuspend => signal::rt_sigsuspend,
    131 sigaltstack => signal::sigaltstack,
    132 utime => fsmeta::utime,
    133 mknod => fsmeta::mknod,
    137 statfs => fsmeta::statfs,
    138 fstatfs => fsmeta::fstatfs,
    149 mlock => mm::mlock,
    150 munlock => mm::mlock,
    151 mlockall => mm::mlockall,
    152 munlockall => mm::munlockall,
    157 prctl => proc::prctl,
    158 arch_prctl => proc::arch_prctl,
    162 sync => fsmeta::sync,
    170 sethostname => proc::sethostname,
    186 gettid => proc::gettid,
    188 setxattr => fsmeta::setxattr,
    189 lsetxattr => fsmeta::lsetxattr,
    190 fsetxattr => fsmeta::fsetxattr,
    191 getxattr => fsmeta::getxattr,
    192 lgetxattr => fsmeta::lgetxattr,
    193 fgetxattr => fsmeta::fgetxattr,
    194 listxattr => fsmeta::listxattr,
    195 llistxattr => fsmeta::llistxattr,
    196 flistxattr => fsmeta::flistxattr,
    197 removexattr => fsmeta::removexattr,
    198 lremovexattr => fsmeta::lremovexattr,
    199 fremovexattr => fsmeta::fremovexattr,
    200 tkill => signal::tkill,
    201 time => time::time,
    202 futex => futex::futex,
    203 sched_setaffinity => proc::sched_setaffinity,
    204 sched_getaffinity => proc::sched_getaffinity,
    213 epoll_create => poll::epoll_create,
    217 getdents64 => fs::getdents64,
    218 set_tid_address => proc::set_tid_address,
    221 fadvise64 => fsmeta::fadvise64,
    228 clock_gettime => time::clock_gettime,
    229 clock_getres => time::clock_getres,
    230 clock_nanosleep => time::clock_nanosleep,
    231 exit_group => proc::exit_group,
    232 epoll_wait => poll::epoll_wait,
    233 epoll_ctl => poll::epoll_ctl,
    234 tgkill => signal::tgkill,
    235 utimes => fsmeta::utimes,
    247 waitid => proc::waitid,
    253 inotify_init => fs::inotify_init,
    254 inotify_add_watch => fs::inotify_add_watch,
    255 inotify_rm_watch => fs::inotify_rm_watch,
    257 openat => fs::openat,
    258 mkdirat => fs::mkdirat,
    259 mknodat => fsmeta::mknodat,
    260 fchownat => fsmeta::fchownat,
    261 futimesat => fsmeta::futimesat,
    262 newfstatat => fs::newfstatat,
    263 unlinkat => fs::unlinkat,
    264 renameat => fs::renameat,
    265 linkat => fsmeta::linkat,
    266 symlinkat => fs::symlinkat,
    267 readlinkat => fs::readlinkat,
    268 fchmodat => fsmeta::fchmodat,
    269 faccessat => fs::faccessat,
    270 pselect6 => poll::pselect6,
    271 ppoll => poll::ppoll,
    273 set_robust_list => proc::set_robust_list,
    274 get_robust_list => proc::get_robust_list,
    275 splice => fs::splice,
    276 tee => fs::tee,
    280 utimensat => fsmeta::utimensat,
    281 epoll_pwait => poll::epoll_pwait,
    284 eventfd => poll::eventfd,
    285 fallocate => fsmeta::fallocate,
    288 accept4 => net::accept4,
    290 eventfd2 => poll::eventfd2,
    291 epoll_create1 => poll::epoll_create1,
    292 dup3 => fs::dup3,
    293 pipe2 => fs::pipe2,
    294 inotify_init1 => fs::inotify_init1,
    299 recvmmsg => net::recvmmsg,
    302 prlimit64 => proc::prlimit64,
    306 syncfs => fsmeta::syncfs,
    307 sendmmsg => net::sendmmsg,
    316 renameat2 => fs::renameat2,
    318 getrandom => proc::getrandom,
    322 execveat => exec::execveat,
    325 mlock2 => mm::mlock2,
    326 copy_file_range => fsmeta::copy_file_range,
    332 statx => fs::statx,
    334 rseq => proc::rseq,
    424 pidfd_send_signal => signal::pidfd_send_signal,
    434 pidfd_open => proc::pidfd_open,
    435 clone3 => proc::clone3,
    436 close_range => fs::close_range,
    439 faccessat2 => fs::faccessat2,
    441 epoll_pwait2 => poll::epoll_pwait2,
    452 fchmodat2 => fsmeta::fchmodat2,
}

/// Runs the handler of `frame.rax`; unknown numbers are ENOSYS, reported once.
pub fn dispatch(ctx: &Ctx, frame: &mut SyscallFrame) -> u64 {
    let nr = frame.rax;
    let result = match TABLE.get(nr as usize).copied().flatten() {
        Some(h) => h(ctx, frame),
        None if hostexec::is_start(nr) => hostexec::start(ctx, frame),
        None if nr == onering_abi::TEST_PANIC_SYSCALL && ctx.k.cfg.flags & onering_abi::flags::TEST_PANIC != 0 => {
            panic!("the panic a test asked for (ONERING_TEST_PANIC)")
        }
        None => {
            ctx.k.report_unsupported(nr);
            Err(crate::errno::Errno::ENOSYS)
        }
    };
    crate::errno::to_ret(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_match_linux_numbers() {
        for (nr, name, _) in IMPLEMENTED {
            assert_eq!(names::name(*nr), Some(*name), "syscall {nr}");
        }
    }

    /// docs/syscalls.md has a row per implemented call: `| nr | name | status |
    /// handler |`, the handler as `syscall/FILE.rs: FUNCTION` (one hop from number
    /// to code).
    #[test]
    fn docs_list_exactly_the_table_with_its_handlers() {
        let doc = include_str!("../../../../docs/syscalls.md");
        let mut rows = alloc::collections::BTreeMap::new();
        for line in doc.lines().filter_map(|l| l.strip_prefix("| ")) {
            let Some((nrs, _)) = line.split_once(" |") else { continue };
            // The handler is the last cell.
            let body = line.trim_end().trim_end_matches('|').trim_end();
            let handler = body.rsplit_once(" | ").map_or("", |(_, h)| h).trim();
            for nr in nrs.split(',').filter_map(|n| n.trim().parse::<u64>().ok()) {
                rows.insert(nr, handler.to_string());
            }
        }
        let table: alloc::collections::BTreeMap<u64, &str> = IMPLEMENTED.iter().map(|(n, _, h)| (*n, *h)).collect();
        assert_eq!(
            rows.keys().collect::<alloc::vec::Vec<_>>(),
            table.keys().collect::<alloc::vec::Vec<_>>(),
            "docs/syscalls.md and the table list different calls"
        );
        for (nr, handler) in &table {
            let (file, func) = handler.split_once("::").unwrap_or(("", handler));
            let want = alloc::format!("`syscall/{file}.rs: {func}`");
            assert_eq!(rows[nr], want, "the handler column of syscall {nr}");
        }
    }
}
