//! Host tests of system-call handlers: a kernel of their own (an empty tree with
//! /dev and /tmp, 64 MiB of pretend memory, host page tables that change nothing),
//! a process with the standard streams, a thread, and a fake user memory.

use crate::file::{oflag, FdTable};
use crate::mm::space::AddressSpace;
use crate::mm::user::BufferMem;
use crate::task::kernel::{Config, Kernel};
use crate::task::process::{FsCtx, Process, Start};
use crate::task::thread::Thread;
use crate::task::{sched, Ctx};
use crate::vfs::{Vfs, ROOT};
use onering_arch::frame::SyscallFrame;
use onering_arch::mm::ChunkAllocator;

/// Where the fake user memory starts, and how large it is.
pub const USER_BASE: u64 = 0x10_0000;
pub const USER_SIZE: usize = 1 << 20;

pub struct TestEnv {
    pub k: &'static Kernel,
    pub thread: &'static Thread,
    pub proc: &'static Process,
    pub user: BufferMem,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let mut chunks = ChunkAllocator::new();
        chunks.add_range(0x4000_0000, 0x4000_0000 + (64 << 20));
        let stack_chunk = chunks.alloc();
        let chunks = alloc::sync::Arc::new(onering_arch::sync::Mutex::new(chunks));
        let space = AddressSpace::new(
            chunks.clone(),
            onering_arch::mm::host_page_tables(),
            0x40_0000,
            0x1000_0000,
            0x7000_0000_0000,
        );
        let space = crate::mm::spaces::install(space).expect("address space");
        let cfg = Config {
            uid: 1000,
            gid: 1000,
            exe: b"/test".to_vec(),
            cmdline: b"/test\0a b\0".to_vec(),
            mem: 64 << 20,
            ..Config::default()
        };
        let mut vfs = Vfs::new();
        vfs.set_owner(1000, 1000);
        crate::fs::proc::mount(&mut vfs, 1);
        let k: &'static Kernel = alloc::boxed::Box::leak(alloc::boxed::Box::new(Kernel::new(cfg, chunks, vfs, [1, 2])));
        let mut fds = FdTable::new();
        {
            let mut v = k.vfs.lock();
            for (path, flags) in [
                (&b"/dev/stdin"[..], oflag::O_RDONLY),
                (b"/dev/stdout", oflag::O_WRONLY),
                (b"/dev/stderr", oflag::O_WRONLY),
            ] {
                let ino = v.lookup(ROOT, path, true).expect("stdio");
                fds.insert(crate::fs::open_node(k, &mut v, ino, flags), false).expect("fd");
            }
        }
        let pid = sched::alloc_tid() + 1_000_000;
        let start = Start {
            space,
            pid,
            ppid: 0,
            fds,
            fs: FsCtx { cwd: ROOT, cwd_hold: None, umask: 0o022 },
            actions: [[0; 4]; 64],
            rlimits: alloc::collections::BTreeMap::new(),
            image: None,
            pgid: pid,
            sid: pid,
            ctty: false,
        };
        let proc = Process::create(start).expect("process");
        let task = onering_arch::task::Task::new(|| stack_chunk).expect("task");
        let thread = Thread::new(task);
        thread.reset(pid, proc, 0, 0, u64::MAX);
        TestEnv { k, thread, proc, user: BufferMem::new(USER_BASE, USER_SIZE) }
    }

    pub fn ctx(&self) -> Ctx<'_> {
        Ctx { k: self.k, thread: self.thread, user: &self.user }
    }

    /// Makes system call `nr` with `args`: its result as Linux returns it.
    pub fn call(&self, nr: u64, args: &[u64]) -> i64 {
        let mut a = [0u64; 6];
        a[..args.len()].copy_from_slice(args);
        let mut f = SyscallFrame {
            rax: nr,
            rdi: a[0],
            rsi: a[1],
            rdx: a[2],
            r10: a[3],
            r8: a[4],
            r9: a[5],
            ..Default::default()
        };
        crate::syscall::dispatch(&self.ctx(), &mut f) as i64
    }

    /// Puts a NUL-terminated string in user memory at `addr`; returns `addr`.
    pub fn str(&self, addr: u64, s: &str) -> u64 {
        use crate::mm::user::UserMem;
        let mut b = alloc::vec::Vec::from(s.as_bytes());
        b.push(0);
        self.user.write(addr, &b).expect("user string");
        addr
    }

    /// Bytes of user memory.
    pub fn bytes(&self, addr: u64, len: usize) -> alloc::vec::Vec<u8> {
        use crate::mm::user::UserMemExt;
        self.user.read_vec(addr, len).expect("user bytes")
    }
}
