//! The top of the kernel: boot, and the hooks `onering_arch` calls (named in
//! `main.rs` with `entry_point!`): every system call, every exception the program
//! raises, and every interrupt that preempted it. Guest only. Nothing below names
//! this module.

use crate::fault::{si_code, signal_for, vector};
use crate::file::{oflag, FdTable};
use crate::mm::space::{AddressSpace, Fault};
use crate::mm::user::{UserMem, UserMemExt};
use crate::mm::vma::{Vma, VmaKind, PROT_EXEC, PROT_READ, PROT_WRITE};
use crate::mm::UserSpace;
use crate::sigframe::{sig, Info};
use crate::task::kernel::{self, kernel, Config, Kernel};
use crate::task::process::{FsCtx, Process, Start};
use crate::task::{sched, signal, thread, Ctx};
use crate::vfs::{rootfs, Vfs, ROOT};
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::layout::{self, PAGE_SIZE};
use onering_abi::BootInfo;
use onering_arch::boot::Boot;
use onering_arch::frame::{FaultFrame, SyscallFrame};

/// Each CPU's first Rust code. CPU 0 sets the kernel up and starts the program's
/// first thread; the others start later (when the scheduler first kicks them).
/// Both then run their idle loop, which runs threads.
pub fn kmain(boot: Option<Boot>) -> ! {
    if let Some(boot) = boot {
        setup(boot);
    }
    sched::idle_loop()
}

fn setup(boot: Boot) {
    let bi = boot.info;
    crate::time::init(crate::time::Clock {
        tsc_hz: bi.tsc_hz,
        boot_tsc: bi.boot_tsc,
        boot_realtime_ns: bi.boot_realtime_ns,
    });
    onering_arch::panic::set_note(panic_note);
    let chunks = alloc::sync::Arc::new(onering_arch::sync::Mutex::new(boot.chunks));
    let space = address_space(chunks.clone(), boot.page_tables, boot.user_blocks, bi);
    let Ok(space) = crate::mm::spaces::install(space) else { panic!("cannot install the first address space") };
    let mut vfs = Vfs::new();
    vfs.set_owner(bi.uid as u32, bi.gid as u32);
    crate::fs::proc::mount(&mut vfs, bi.ncpus as usize);
    // The writable tree (/tmp, the rootfs' upper layer) lives in the kernel heap,
    // which grows from guest memory: it may take three quarters of the VM's RAM
    // (tmpfs takes half by default; a VM runs one program), then ENOSPC, never a
    // kernel panic. The pipes get a share of the first heap.
    let ram: u64 = bi.mem[..(bi.nmem as usize).min(bi.mem.len())].iter().map(|r| r.size).sum();
    vfs.set_limit((ram / 4 * 3) as usize);
    crate::pipebuf::set_budget(bi.heap_size as usize / 4);
    crate::net::inet::configure_link(bi.net);
    let volumes = if bi.flags & onering_abi::flags::MOUNTS != 0 {
        mount_host(&mut vfs, bi.flags, ram)
    } else {
        alloc::vec::Vec::new()
    };
    rootfs::load(&mut vfs, boot.rootfs);
    let (tmpfs, tmpfs_failed) = mount_tmpfs(&mut vfs, boot.tmpfs);
    let cwd = if boot.workdir.is_empty() { ROOT } else { vfs.lookup(ROOT, boot.workdir, true).unwrap_or(ROOT) };
    let mut execfn = alloc::vec![0u8; bi.execfn_len.min(4096) as usize];
    let _ = onering_arch::user::read(bi.execfn, &mut execfn);
    let exe = crate::vfs::absolute(&vfs.path_of(cwd).unwrap_or_else(|_| b"/".to_vec()), &execfn);
    let (cmdline, environ) = (start_strings(bi.user_sp, 0), start_strings(bi.user_sp, 1));
    let image = image_span(bi);
    let (flags, stdio, uid, gid, vdso) = (bi.flags, bi.stdio, bi.uid, bi.gid, bi.vdso_base);
    let caps = bi.caps;
    let rlimits =
        core::array::from_fn(|n| (bi.rlimits_set >> n & 1 != 0).then_some((bi.rlimits[n][0], bi.rlimits[n][1])));
    let cfg =
        Config { flags, stdio, uid, gid, exe, cmdline, environ, mem: ram, image, vdso, volumes, tmpfs, caps, rlimits };
    crate::observe::install(bi.flags, bi.trace_set);
    let k = kernel::install(Kernel::new(cfg, chunks, vfs, bi.seed));
    crate::task::hostexec::set_spawner(crate::syscall::hostexec::spawn);
    if let Some((path, why)) = tmpfs_failed {
        let shown = onering_rewrite::bytes::printable(&path, 256);
        k.message(&alloc::format!("onering: --tmpfs {shown}: {why:?}\n"));
        k.exit(125)
    }
    *k.hostname.lock() = onering_abi::hostname_of(&bi.hostname);
    onering_arch::heap::set_chunk_source(|n| kernel().chunks.lock().alloc_run(n));
    onering_arch::mm::set_reclaim(reclaim_cache);
    write_vvar(k, bi);
    protect_image(&mut space.mm.lock(), bi);
    sched::set_ncpus(bi.ncpus as usize);
    sched::set_realtime(bi.flags & onering_abi::flags::REALTIME != 0);
    crate::fs::epoll::set_max_watches(space.mm.lock().total_bytes());
    // The program: pid 1, with the standard streams on descriptors 0, 1 and 2.
    let mut fds = FdTable::new();
    {
        let mut v = k.vfs.lock();
        for (fd, path, flags) in [
            (0, &b"/dev/stdin"[..], oflag::O_RDONLY),
            (1, b"/dev/stdout", oflag::O_WRONLY),
            (2, b"/dev/stderr", oflag::O_WRONLY),
        ] {
            // A stream closed on the host is closed for the program too (its
            // stdin without `-i` is /dev/null, whatever the host's is).
            let closed = onering_abi::stdio::kind(bi.stdio, fd) == onering_abi::stdio::CLOSED;
            let file = v.lookup(ROOT, path, true).map(|ino| crate::fs::open_node(k, &mut v, ino, flags));
            match file {
                Ok(f) if !closed || (fd == 0 && bi.flags & onering_abi::flags::STDIN == 0) => {
                    let _ = fds.install(u64::from(fd), f, false);
                }
                _ => {}
            }
        }
    }
    let cwd_hold = Some(k.vfs.lock().hold(cwd));
    let tid = sched::alloc_tid();
    let start = Start::leader(k, space, tid, fds, FsCtx { cwd, cwd_hold, umask: 0o022 });
    let Ok(proc) = Process::create(start) else { panic!("cannot create the program's process") };
    proc.threads.store(1, Relaxed);
    // A terminal among the standard streams is its controlling terminal.
    if (0..3).any(|fd| onering_abi::stdio::kind(bi.stdio, fd) == onering_abi::stdio::TTY) {
        crate::task::tty::attach_first(proc);
    }
    // Its first thread "returns" to the entry point with the initial stack and every
    // other register zero (rdx = 0: no function for atexit).
    // A dynamically linked program starts in its interpreter, which the kernel
    // loads from the VM's tree (the VMM loaded the program itself).
    let user = k.user();
    crate::syscall::exec::remember_boot(&user, bi.user_sp, bi.vdso_base, bi.vdso_len);
    let entry = match crate::syscall::exec::boot_interp(k, &user, bi.user_sp) {
        Ok(e) => e.unwrap_or(bi.entry),
        Err(why) => {
            let shown = onering_rewrite::bytes::printable(&k.cfg.exe, 256);
            k.message(&alloc::format!("onering: {shown}: {why}\n"));
            k.exit(126)
        }
    };
    let frame = SyscallFrame { rip: entry, rflags: 0x202, rsp: bi.user_sp, ..SyscallFrame::default() };
    let spawn = sched::Spawn { tid, proc, ppid: 0, frame, fs_base: 0, sigmask: 0, affinity: u64::MAX };
    match sched::spawn(spawn, true, || k.chunk()) {
        Ok(t) if t.tid() == 1 => {}
        _ => panic!("cannot create the first thread"),
    }
}

/// Memory pressure (`onering_arch::mm::set_reclaim`): the page cache of host
/// files frees about `bytes` of the kernel heap, oldest chunks first; the bytes
/// freed. Callers may hold the memory lock, and the tree's lock is held while the
/// memory lock is taken (a copy to user memory under it backs a block; the heap
/// grows under it): so the tree's lock is only tried, for a while (another CPU's
/// short hold ends), then nothing is freed (this CPU may hold it itself).
fn reclaim_cache(bytes: usize) -> usize {
    for _ in 0..RECLAIM_TRIES {
        if let Some(mut v) = kernel().vfs.try_lock() {
            return v.shrink_cache(bytes);
        }
        core::hint::spin_loop();
    }
    0
}

/// Tries of the tree's lock in `reclaim_cache` (a `pause` each: about a
/// millisecond in all).
const RECLAIM_TRIES: usize = 1 << 15;

/// The vDSO's clock page (below the vDSO, in the program's image mapping): the
/// parameters of the kernel's own clock.
fn write_vvar(k: &Kernel, bi: &BootInfo) {
    use onering_abi::vvar;
    if bi.vdso_base == 0 {
        return;
    }
    let clock = crate::time::Clock { tsc_hz: bi.tsc_hz, boot_tsc: bi.boot_tsc, boot_realtime_ns: bi.boot_realtime_ns };
    let page = bi.vdso_base - vvar::BELOW_VDSO;
    let user = k.user();
    for (off, v) in [
        (vvar::TSC_BASE, bi.boot_tsc),
        (vvar::MULT, clock.mult()),
        (vvar::REAL_BASE, bi.boot_realtime_ns),
        (vvar::VERSION, 1),
    ] {
        if user.write_u64(page + off, v).is_err() {
            panic!("the vDSO's clock page at {page:#x} is not mapped");
        }
    }
}

fn address_space(
    chunks: crate::mm::space::Chunks,
    tables: onering_arch::mm::PageTables,
    blocks: onering_arch::mm::BootBlocks,
    bi: &BootInfo,
) -> UserSpace {
    let mut space = AddressSpace::new(chunks, tables, bi.brk_start, crate::mm::space::MMAP_BOTTOM, layout::MMAP_TOP);
    let stack = bi.user_maps[1];
    let image_start = layout::align_down(bi.image_start, PAGE_SIZE);
    let image_end = layout::align_up(bi.brk_start, PAGE_SIZE);
    let rwx = PROT_READ | PROT_WRITE | PROT_EXEC;
    space.adopt(
        blocks,
        &[
            Vma { start: image_start, end: image_end, prot: rwx, kind: VmaKind::Image, lazy: false },
            Vma {
                start: stack.virt,
                end: stack.virt + stack.size,
                prot: PROT_READ | PROT_WRITE,
                kind: VmaKind::Stack,
                lazy: false,
            },
        ],
    );
    space
}

/// The program's arguments (`which` 0) or environment (1) from its initial stack
/// at `sp` (argc, the argument pointers, 0, the environment's, 0), each string
/// NUL-ended, as /proc/PID/cmdline and environ show them.
fn start_strings(sp: u64, which: usize) -> alloc::vec::Vec<u8> {
    let word = |at: u64| {
        let mut b = [0u8; 8];
        onering_arch::user::read(at, &mut b).map(|_| u64::from_le_bytes(b)).unwrap_or(0)
    };
    let mut at = sp + 8;
    for _ in 0..which {
        while word(at) != 0 {
            at += 8;
        }
        at += 8;
    }
    let mut out = alloc::vec::Vec::new();
    while let p @ 1.. = word(at) {
        let mut b = [0u8; 1];
        let mut q = p;
        while onering_arch::user::read(q, &mut b).is_ok() && b[0] != 0 && out.len() < 1 << 20 {
            out.push(b[0]);
            q += 1;
        }
        out.push(0);
        at += 8;
    }
    out
}

/// The page-aligned span of the program's segments.
fn image_span(bi: &BootInfo) -> (u64, u64) {
    let segs = &bi.segments[..(bi.nsegments as usize).min(bi.segments.len())];
    match (segs.first(), segs.last()) {
        (Some(f), Some(l)) => (layout::align_down(f.start, PAGE_SIZE), layout::align_up(l.end, PAGE_SIZE)),
        _ => (0, 0),
    }
}

/// Gives the program's segments their protections (the image was adopted readable,
/// writable and executable, so that the vDSO's clock page could be written): pages
/// of a segment get its rights (a later segment's where two share a page, as Linux's
/// mappings do), pages between segments none. The trampolines, the vDSO and its
/// clock page after the last segment keep theirs.
fn protect_image(space: &mut UserSpace, bi: &BootInfo) {
    let segs = &bi.segments[..(bi.nsegments as usize).min(bi.segments.len())];
    let (lo, hi) = image_span(bi);
    if lo >= hi || space.mprotect(lo, hi - lo, 0).is_err() {
        return;
    }
    for s in segs {
        let start = layout::align_down(s.start, PAGE_SIZE);
        let end = layout::align_up(s.end, PAGE_SIZE).min(hi);
        if start < end {
            // Cannot fail for lack of memory: the image is backed already.
            let _ = space.mprotect(start, end - start, s.prot as u32);
        }
    }
}

/// Every system call (on the thread's kernel stack): dispatches it, leaves the
/// result in `rax`, and on the way out looks at what is pending for the thread
/// (a signal, or the end of its process) or for the CPU (a reschedule).
pub fn syscall_hook(frame: &mut SyscallFrame) {
    let k = kernel();
    let t = thread::current();
    let user = k.user();
    let ctx = Ctx { k, thread: t, user: &user };
    call(&ctx, frame);
    way_out(&ctx, frame);
}

/// The hook of the observed entry, which the VMM chooses for `--trace` and
/// `--stats` (`observe`): the same call, timed, counted and traced. The plain
/// hook above has no check for either.
pub fn syscall_hook_observed(frame: &mut SyscallFrame) {
    let k = kernel();
    let t = thread::current();
    let user = k.user();
    let ctx = Ctx { k, thread: t, user: &user };
    let Some(o) = crate::observe::get().filter(|o| o.observes(frame.rax)) else {
        call(&ctx, frame);
        return way_out(&ctx, frame);
    };
    let peek = |addr: u64, buf: &mut [u8]| user.read(addr, buf).is_ok();
    let mut c = crate::observe::Call {
        nr: frame.rax,
        args: frame.args(),
        ret: None,
        start: onering_arch::cpu::rdtsc(),
        ticks: 0,
        tid: t.tid(),
        peek: &peek,
    };
    if crate::observe::never_returns(c.nr) {
        o.record(&c);
        call(&ctx, frame);
        return way_out(&ctx, frame);
    }
    let exec = crate::observe::is_exec(c.nr);
    if exec {
        o.before_exec(&c);
    }
    call(&ctx, frame);
    if exec {
        let _ = o.take_exec(c.tid); // (it failed: recorded below)
    }
    c.ticks = onering_arch::cpu::rdtsc().wrapping_sub(c.start);
    c.ret = Some(frame.rax);
    o.record(&c);
    way_out(&ctx, frame);
}

/// Runs the call of `frame.rax` and leaves its result in `frame.rax`.
#[inline(always)]
fn call(ctx: &Ctx, frame: &mut SyscallFrame) {
    let nr = frame.rax;
    frame.rax = crate::syscall::dispatch(ctx, frame);
    if frame.rax == crate::errno::Errno::ERESTARTSYS.to_ret() {
        // Interrupted by a signal: EINTR, or (SA_RESTART) again after the handler.
        frame.rax = signal::restart_or_eintr(nr);
        if ctx.thread.pending.load(Relaxed) == 0 {
            ctx.thread.restart_nr.store(0, Relaxed); // (nothing to deliver after all)
        }
    }
}

/// Two loads on the way out: anything pending for the thread (a signal, or the
/// end of its process, which also marks SIGKILL pending), or a reschedule request
/// for the CPU?
#[inline(always)]
fn way_out(ctx: &Ctx, frame: &SyscallFrame) {
    if ctx.thread.pending.load(Relaxed) != 0 || onering_arch::cpu::resched_pending() {
        on_the_way_out(ctx, frame);
    }
}

#[cold]
fn on_the_way_out(ctx: &Ctx, frame: &SyscallFrame) {
    if onering_arch::cpu::take_resched() {
        sched::preempt_point();
    }
    let r = frame.regs();
    let n = signal::on_return(ctx.k, ctx.user, r);
    if n != r {
        onering_arch::entry::full_return(&n);
    }
}

/// Every exception raised in ring 3 (on the CPU's fault stack): a first touch of
/// lazily backed memory is backed and the instruction runs again; a fault in a
/// user-memory copy makes that copy fail; anything else in the kernel is a panic;
/// in the program it is a signal (its handler, or its end), handled off the fault
/// stack (`program_fault`). Nothing here blocks or takes a lock the interrupted
/// kernel code may hold, except the memory manager's (a user copy never runs
/// under it).
pub fn fault_hook(frame: &FaultFrame) -> ! {
    onering_arch::cpu::count(onering_arch::cpu::Counter::Faults);
    let k = kernel();
    if frame.vector == vector::BREAKPOINT || frame.vector == vector::DEBUG {
        debug_trap(k, frame);
    }
    let addr = if frame.vector == vector::PAGE_FAULT { onering_arch::cpu::fault_addr() } else { 0 };
    let mut oom = false;
    if frame.vector == vector::PAGE_FAULT {
        oom = first_touch(k, frame, addr);
    }
    if oom && frame.rip >= layout::KERNEL_VBASE {
        // In a user copy: it fails, and the thread's way out of the kernel ends the
        // program, once no lock is held.
        out_of_memory_later(k);
    }
    onering_arch::entry::fail_user_access(frame);
    // The top 2 GiB hold only the kernel image, the upper half the kernel's memory.
    // Kernel code always runs on a kernel stack (the trampolines switch before they
    // enter it, the VMM starts each CPU on one, `_start` refuses a user stack): an
    // exception at a kernel address with the program's stack pointer is the program
    // jumping there, and gets SIGSEGV as on Linux, where those pages are not its
    // to run. (What the stray code did before it faulted is the program's own
    // damage, inside its own VM: see the threat model in design.md.)
    if frame.rip >= layout::KERNEL_VBASE && !is_kernel_stack(frame.rsp) {
        onering_arch::entry::leave_fault_stack(frame, frame.rip, 0, wild_jump)
    }
    if frame.rip >= layout::KERNEL_VBASE {
        panic!(
            "exception {} at {:#x} in the kernel (error {:#x}, rsp {:#x}, address {:#x})",
            frame.vector, frame.rip, frame.error, frame.rsp, addr
        );
    }
    onering_arch::entry::leave_fault_stack(frame, addr, oom as u64, program_fault)
}

/// The program's own exception, on its thread's kernel stack: the end of the
/// program if memory ran out, else a signal.
fn program_fault(frame: &FaultFrame, addr: u64, oom: u64) -> ! {
    let k = kernel();
    if oom != 0 {
        k.report_oom();
        k.killed(sig::SIGKILL, frame.rip, addr)
    }
    let s = signal_for(frame.vector);
    if s == sig::SIGKILL {
        k.killed(s, frame.rip, addr);
    }
    let info = Info {
        signo: s,
        code: si_code(frame.vector),
        addr: if frame.vector == vector::PAGE_FAULT { addr } else { frame.rip },
        trapno: frame.vector,
        err: frame.error,
        ..Default::default()
    };
    let user = k.user();
    let regs = signal::fault(k, &user, frame.regs(), s, info);
    onering_arch::entry::resume_after_fault(&regs)
}

/// `--gdb`: a breakpoint (#BP) or a single-step trap (#DB) goes to the VMM's gdb
/// stub instead of becoming SIGTRAP. Returns when it is not the debugger's (no
/// `--gdb`; an `int3` in the kernel, which is then a kernel panic as before).
///
/// A single step that entered the kernel is a rewritten site's trampoline jumping
/// to the system-call entry with the trap flag still set (a trapping `syscall`
/// clears it through SFMASK): the VMM plants a breakpoint where the call returns
/// (`rcx`, in the trampoline) and the kernel runs on, the trap flag dropped (a
/// retry does not restore it), so the step ends after the call.
fn debug_trap(k: &Kernel, frame: &FaultFrame) {
    if k.cfg.flags & onering_abi::flags::GDB == 0 {
        return;
    }
    if frame.rip < layout::KERNEL_VBASE {
        onering_arch::entry::leave_fault_stack(frame, 0, 0, program_debug_trap)
    }
    if frame.vector == vector::DEBUG && is_kernel_stack(frame.rsp) {
        let mut regs = frame.regs();
        let tid = thread::try_current().map_or(0, |t| t.tid());
        onering_arch::hostcall::debug_stop(vector::DEBUG, &mut regs, &[], tid);
        onering_arch::entry::retry_fault(frame)
    }
}

/// The program's breakpoint or single step, on its thread's kernel stack: every
/// vCPU stops while gdb looks (`Hostcall::Debug`), then the thread goes on as gdb
/// says, with the registers gdb left. Without a debugger (gdb detached) the trap
/// is the program's SIGTRAP, as without `--gdb`.
fn program_debug_trap(frame: &FaultFrame, _: u64, _: u64) -> ! {
    use onering_abi::debug::resume;
    let k = kernel();
    let threads = sched::debug_threads();
    let mut regs = frame.regs();
    let r = onering_arch::hostcall::debug_stop(frame.vector, &mut regs, &threads, thread::current().tid());
    drop(threads);
    if r < 0 {
        program_fault(frame, 0, 0)
    }
    let s = resume::signal(r as u64);
    if (1..=64).contains(&s) {
        // gdb continues with a signal: delivered as a fault's would be.
        let info = Info { signo: s, code: 0, addr: regs.rip, trapno: frame.vector, ..Default::default() };
        regs = signal::fault(k, &k.user(), regs, s, info);
    }
    if r as u64 & 0xff == resume::STEP {
        onering_arch::entry::resume_stepping(&regs)
    }
    onering_arch::entry::resume_after_fault(&regs)
}

/// Whether `sp` lies in the kernel's half of the address space (every kernel and
/// fault stack does).
fn is_kernel_stack(sp: u64) -> bool {
    (sp as i64) < 0
}

/// The program jumped into the kernel's half (or stray kernel code it reached
/// faulted on the program's stack): SIGSEGV at that address, as Linux reports an
/// instruction fetch from a page the program may not run.
fn wild_jump(frame: &FaultFrame, addr: u64, _: u64) -> ! {
    let k = kernel();
    let info = Info {
        signo: sig::SIGSEGV,
        code: si_code(vector::PAGE_FAULT),
        addr,
        trapno: vector::PAGE_FAULT,
        err: 0x15, // present, user, instruction fetch
        ..Default::default()
    };
    let user = k.user();
    let regs = signal::fault(k, &user, frame.regs(), sig::SIGSEGV, info);
    onering_arch::entry::resume_after_fault(&regs)
}

/// Memory ran out under a user copy in the kernel: the copy fails, and the
/// program ends with the message when the thread leaves the kernel (SIGKILL).
fn out_of_memory_later(k: &Kernel) {
    k.oom.store(true, Relaxed);
    if let Some(t) = thread::try_current() {
        t.pending.fetch_or(crate::sigframe::bit(sig::SIGKILL), Relaxed);
    }
}

/// A page fault that may be the first touch of a block backed on demand: backs it
/// and runs the instruction again; returns if the fault is not that (false) or if
/// there was no memory left to back it (true).
fn first_touch(k: &Kernel, frame: &FaultFrame, addr: u64) -> bool {
    let t = thread::try_current();
    // (The idle loop runs only the kernel: a fault there is no first touch.)
    let Some(space) = t.map(|t| t.process().space()) else { return false };
    let _ = k;
    // (Error-code bit 1: the access was a write, which copies a copy-on-write page.)
    let outcome = space.mm.lock().fault_in(addr, frame.error & 2 != 0);
    match outcome {
        Fault::Retry => {
            if let Some(t) = t {
                t.last_fault.store(u64::MAX, Relaxed);
            }
        }
        Fault::Backed if t.is_some_and(|t| crate::fault::retry_spurious(&t.last_fault, addr)) => {}
        Fault::Backed | Fault::Segv => return false,
        Fault::OutOfMemory => return true,
        // In a user copy (the kernel checked the range, which fills, before: the
        // mapping changed since), the copy fails: the kernel may hold the lock the
        // fill would take.
        Fault::Fill if frame.rip >= layout::KERNEL_VBASE => return false,
        Fault::Fill => {
            if let Some(t) = t {
                t.last_fault.store(u64::MAX, Relaxed);
            }
            onering_arch::entry::leave_fault_stack(frame, addr, 0, fill_and_retry)
        }
    }
    onering_arch::entry::retry_fault(frame)
}

/// The program's first touch of a block of a file mapping, on its thread's kernel
/// stack (no lock held): the block is filled from the file (`GuestUser::check`,
/// which also waits for another CPU filling it), and the instruction runs again.
/// Memory exhausted ends the program; anything else (the mapping went meanwhile)
/// runs the instruction again, to fault as it now should.
fn fill_and_retry(frame: &FaultFrame, addr: u64, _: u64) -> ! {
    let mut r = Ok(());
    kernel().user().unprotected(&mut |u| r = u.check(addr, 1, false));
    if r == Err(crate::errno::Errno::ENOMEM) {
        program_fault(frame, addr, 1)
    }
    onering_arch::entry::resume_after_fault(&frame.regs())
}

/// On the running thread's kernel stack, when the APIC timer or a reschedule IPI
/// interrupted the program: other threads may run first, pending signals are
/// delivered, then the program continues exactly where it was.
pub fn interrupt_hook(frame: &FaultFrame) -> ! {
    onering_arch::cpu::take_resched();
    sched::preempt_point();
    let k = kernel();
    let user = k.user();
    let regs = signal::on_return(k, &user, frame.regs());
    onering_arch::entry::full_return(&regs)
}

/// What a kernel panic message ends with: where it happened.
fn panic_note(w: &mut dyn core::fmt::Write, panicking: &onering_arch::panic::Panicking) {
    let cpu = onering_arch::cpu::cpu_id();
    match thread::try_current() {
        Some(t) => {
            // The system call the thread is in, if any: the frame at the top of its
            // kernel stack still holds the number.
            let _ = write!(w, " (cpu {cpu}, thread {} of process {}, system call ", t.tid(), t.pid());
            let _ = match t.task.syscall_frame(panicking).map(|f| f.rax) {
                Some(nr) => match crate::sysnames::name(nr) {
                    Some(name) => write!(w, "{name})"),
                    None => write!(w, "{nr}, unknown)"),
                },
                None => write!(w, "none)"),
            };
        }
        None => {
            let _ = write!(w, " (cpu {cpu}, idle)");
        }
    }
}

/// The tmpfs mounts of `records` (`onering_abi::tmpfs`), made in the tree:
/// each one's path and whether it is read-only (for /proc's mounts), and the
/// first that failed, with why.
#[allow(clippy::type_complexity)]
fn mount_tmpfs(
    vfs: &mut Vfs,
    records: &[u8],
) -> (alloc::vec::Vec<(alloc::vec::Vec<u8>, bool)>, Option<(alloc::vec::Vec<u8>, crate::errno::Errno)>) {
    use onering_abi::tmpfs::{COPYUP, RO};
    let mut made = alloc::vec::Vec::new();
    for m in onering_abi::tmpfs::decode(records) {
        let ro = m.flags & RO != 0;
        if let Err(e) = vfs.mount_memory(&m.path, m.mode, ro, m.flags & COPYUP != 0) {
            return (made, Some((m.path, e)));
        }
        made.push((m.path, ro));
    }
    (made, None)
}

/// The host's directories the VMM serves (`--rootfs DIR` at `/`, `-v` volumes),
/// mounted in the tree (read when first used); the page cache of their files may
/// take a quarter of the VM's RAM. Returns the volumes: where, and whether read-only.
fn mount_host(vfs: &mut Vfs, flags: u64, ram: u64) -> alloc::vec::Vec<(alloc::vec::Vec<u8>, bool)> {
    use crate::vfs::host::Layer;
    use onering_abi::hostfs::{MOUNT_RO, MOUNT_ROOTFS};
    vfs.set_host(&crate::fs::host::HOSTCALLS, (ram / 4) as usize);
    let mut volumes = alloc::vec::Vec::new();
    for (handle, (f, path)) in crate::fs::host::mounts().into_iter().enumerate() {
        // (A rootfs without MOUNT_RO, `--rootfs-rw`, is written through to the
        // host, as a volume.)
        let (layer, readonly) = if f & MOUNT_ROOTFS != 0 && f & MOUNT_RO != 0 {
            (Layer::Rootfs, flags & onering_abi::flags::READ_ONLY != 0)
        } else {
            (Layer::Volume { ro: f & MOUNT_RO != 0 }, f & MOUNT_RO != 0)
        };
        if vfs.mount(&path, handle as u64, layer, readonly).is_ok() && f & MOUNT_ROOTFS == 0 {
            volumes.push((path, readonly));
        }
    }
    volumes
}
