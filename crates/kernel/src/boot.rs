//! Boot and the three ways into the kernel's Rust code: `kmain` (first instruction),
//! `syscall_dispatch` (every system call) and `fault_dispatch` (every exception the
//! program raises). Guest only.

use crate::arch;
use crate::arch::UserSpace;
use crate::fault::signal_for;
use crate::fs::rootfs;
use crate::fs::vfs::{Vfs, ROOT};
use crate::kernel::{self, kernel, Kernel};
use crate::mm::chunks::ChunkAllocator;
use crate::mm::space::AddressSpace;
use crate::mm::vma::{Vma, VmaKind, PROT_EXEC, PROT_READ, PROT_WRITE};
use crate::syscall::{self, SyscallFrame};
use core::sync::atomic::Ordering::Relaxed;
use onering_abi::layout::{self, PAGE_SIZE};
use onering_abi::{BootInfo, Hostcall, ABI_VERSION, BOOT_MAGIC};

/// Lowest address `mmap` hands out without MAP_FIXED (Linux's mmap_min_addr).
const MMAP_BOTTOM: u64 = 0x1_0000;

/// First Rust code, in ring 3 on the CPU's boot stack. CPU 0 sets the kernel up;
/// the others start later (when the scheduler first kicks them) and go straight to
/// their idle loop.
pub extern "C" fn kmain(boot_info: u64) -> ! {
    if arch::thread::cpu_id() != 0 {
        crate::sched::idle_loop()
    }
    let bi = arch::boot_info(boot_info);
    if bi.magic != BOOT_MAGIC || bi.abi_version != ABI_VERSION {
        panic!("boot info of ABI version {} (kernel speaks {ABI_VERSION})", bi.abi_version);
    }
    arch::init_heap(bi);
    arch::supervisor::init(bi.flags);
    let space = address_space(bi);
    let mut vfs = Vfs::new();
    vfs.set_owner(bi.uid as u32, bi.gid as u32);
    // The writable tree and the pipes live in the kernel heap: give them a share, so
    // that running out is ENOSPC or EAGAIN for the program, never a kernel panic.
    vfs.set_limit(bi.heap_size as usize / 2);
    crate::fs::file::set_pipe_budget(bi.heap_size as usize / 4);
    if bi.rootfs_size > 0 {
        rootfs::load(&mut vfs, arch::static_bytes(bi.rootfs_phys, bi.rootfs_size));
    }
    let workdir = arch::static_bytes(bi.workdir_phys, bi.workdir_len);
    let cwd = if workdir.is_empty() { ROOT } else { vfs.lookup(ROOT, workdir, true).unwrap_or(ROOT) };
    let execfn = arch::user_slice(&space, bi.execfn, bi.execfn_len).map(|s| s.to_vec()).unwrap_or_default();
    let exe = crate::fs::absolute(&vfs.path_of(cwd).unwrap_or_else(|_| b"/".to_vec()), &execfn);
    write_vvar(&space, bi);
    kernel::init(Kernel::new(space, vfs, cwd, bi, exe));
    crate::fs::file::ON_PIPE_CLOSE.call_once(|| crate::sched::wake_all);
    crate::sched::init();
    crate::sched::set_ncpus(bi.ncpus as usize);
    // The program's first thread: it "returns" to the entry point with the initial
    // stack and every other register zero (rdx = 0: no function for atexit).
    let frame = SyscallFrame { rip: bi.entry, rflags: 0x202, rsp: bi.user_sp, ..SyscallFrame::default() };
    let spawn = crate::sched::Spawn {
        pid: 1,
        ppid: 0,
        proc_slot: 0,
        frame,
        fs_base: 0,
        sigmask: 0,
        leader: true,
        affinity: u64::MAX,
    };
    match crate::sched::spawn(spawn, kernel().space.chunks(), true) {
        Ok(t) if t.tid() == 1 => {}
        _ => panic!("cannot create the first thread"),
    }
    crate::sched::idle_loop()
}

/// The vDSO's clock page (below the vDSO, in the program's image mapping): the
/// parameters of the kernel's own clock.
fn write_vvar(space: &UserSpace, bi: &BootInfo) {
    use onering_abi::vvar;
    if bi.vdso_base == 0 {
        return;
    }
    let clock = crate::time::Clock { tsc_hz: bi.tsc_hz, boot_tsc: bi.boot_tsc, boot_realtime_ns: bi.boot_realtime_ns };
    let page = bi.vdso_base - vvar::BELOW_VDSO;
    for (off, v) in [
        (vvar::TSC_BASE, bi.boot_tsc),
        (vvar::MULT, clock.mult()),
        (vvar::REAL_BASE, bi.boot_realtime_ns),
        (vvar::VERSION, 1),
    ] {
        if arch::copy_to_user(space, page + off, &v.to_le_bytes()).is_err() {
            panic!("the vDSO's clock page at {page:#x} is not mapped");
        }
    }
}

fn address_space(bi: &BootInfo) -> UserSpace {
    let mut chunks = ChunkAllocator::new();
    for (i, r) in bi.mem.iter().take(bi.nmem as usize).enumerate() {
        let start = if i == 0 { bi.phys_free_start } else { r.start };
        chunks.add_range(start, r.start + r.size);
    }
    let mut space = AddressSpace::new(chunks, arch::GuestMmu::default(), bi.brk_start, MMAP_BOTTOM, layout::MMAP_TOP);
    let [image, stack] = bi.user_maps;
    let image_start = layout::align_down(bi.image_start, PAGE_SIZE);
    let image_end = layout::align_up(bi.brk_start, PAGE_SIZE);
    let rwx = PROT_READ | PROT_WRITE | PROT_EXEC;
    space.adopt(
        image.virt,
        image.size,
        image.phys,
        Vma { start: image_start, end: image_end, prot: rwx, kind: VmaKind::Image, lazy: false },
    );
    space.adopt(
        stack.virt,
        stack.size,
        stack.phys,
        Vma {
            start: stack.virt,
            end: stack.virt + stack.size,
            prot: PROT_READ | PROT_WRITE,
            kind: VmaKind::Stack,
            lazy: false,
        },
    );
    space
}

/// Called by `syscall_entry` with the frame it built; leaves the result in `rax`,
/// or returns into a signal handler if one is due.
pub extern "C" fn syscall_dispatch(frame: &mut SyscallFrame) {
    let nr = frame.rax;
    frame.rax = syscall::dispatch(frame);
    if frame.rax == crate::errno::Errno::ERESTARTSYS.to_ret() {
        // Interrupted by a signal: EINTR, or (SA_RESTART) again after the handler.
        frame.rax = crate::syscall::signal::restart_or_eintr(nr);
        let t = crate::sched::current();
        if t.pending.load(Relaxed) == 0 {
            t.restart_nr.store(0, Relaxed); // (nothing to deliver after all)
        }
    }
    // Two loads on the way out: anything pending for the thread (a signal, or the
    // end of its process, which also marks SIGKILL pending), or a reschedule request
    // for the CPU?
    let t = crate::sched::current();
    if t.pending.load(Relaxed) != 0 || arch::thread::resched_pending() {
        on_the_way_out(frame);
    }
}

#[cold]
fn on_the_way_out(frame: &SyscallFrame) {
    if arch::thread::take_resched() {
        crate::sched::preempt_point();
    }
    crate::syscall::signal::on_syscall_return(frame);
}

/// Registers at an exception, as `exception_common` lays them out.
#[repr(C)]
#[derive(Debug)]
pub struct FaultFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    pub vector: u64,
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

/// Called on the fault stack for every exception raised in ring 3: the program's
/// handler for the signal runs, or the program ends as killed by it.
pub extern "C" fn fault_dispatch(frame: &FaultFrame) -> ! {
    // The top 2 GiB hold only the kernel image: a fault there is the kernel's. A
    // program jumping to any other wild address gets SIGSEGV like on Linux.
    if frame.rip >= layout::KERNEL_VBASE {
        panic!(
            "exception {} at {:#x} in the kernel (error {:#x}, rsp {:#x})",
            frame.vector, frame.rip, frame.error, frame.rsp
        );
    }
    let addr =
        if frame.vector == crate::fault::vector::PAGE_FAULT { arch::hostcall(Hostcall::FaultAddr, &[]) } else { 0 };
    if frame.vector == crate::fault::vector::PAGE_FAULT {
        first_touch(frame, addr);
    }
    let s = signal_for(frame.vector);
    if s == crate::signal::sig::SIGKILL {
        kernel().killed(s, frame.rip, addr);
    }
    let regs = fault_regs(frame);
    let info = crate::signal::Info {
        signo: s,
        code: crate::fault::si_code(frame.vector),
        addr: if frame.vector == crate::fault::vector::PAGE_FAULT { addr } else { frame.rip },
        trapno: frame.vector,
        err: frame.error,
        ..Default::default()
    };
    crate::syscall::signal::fault(regs, s, info)
}

/// A page fault that may be the first touch of a block backed on demand: backs it
/// and runs the instruction again; returns only if the fault is the program's.
fn first_touch(frame: &FaultFrame, addr: u64) {
    use crate::mm::space::Fault;
    let t = crate::sched::current();
    let outcome = kernel().space.fault_in(addr);
    match outcome {
        Fault::Retry => t.last_fault.store(u64::MAX, Relaxed),
        Fault::Backed if t.last_fault.swap(addr, Relaxed) != addr => {}
        Fault::Backed | Fault::Segv => return,
        Fault::OutOfMemory => {
            crate::kernel::report_message_once(
                "onering: out of memory: the program touched more memory than the VM has (raise --mem); \
                 killed, as Linux's OOM killer would\n",
            );
            kernel().killed(crate::signal::sig::SIGKILL, frame.rip, addr)
        }
    }
    arch::thread::clear_in_fault();
    arch::thread::full_return(&fault_regs(frame))
}

/// Called on the running thread's kernel stack when the APIC timer or a
/// reschedule IPI interrupted the program (`preempt_stub`): other threads may run
/// first, pending signals are delivered, then the program continues exactly where
/// it was.
pub extern "C" fn interrupt_dispatch(frame: &FaultFrame) -> ! {
    let regs = fault_regs(frame);
    arch::thread::take_resched();
    crate::sched::preempt_point();
    arch::thread::full_return(&crate::syscall::signal::on_return(regs))
}

fn fault_regs(frame: &FaultFrame) -> crate::signal::Regs {
    crate::signal::Regs {
        r8: frame.r8,
        r9: frame.r9,
        r10: frame.r10,
        r11: frame.r11,
        r12: frame.r12,
        r13: frame.r13,
        r14: frame.r14,
        r15: frame.r15,
        rdi: frame.rdi,
        rsi: frame.rsi,
        rbp: frame.rbp,
        rbx: frame.rbx,
        rdx: frame.rdx,
        rax: frame.rax,
        rcx: frame.rcx,
        rsp: frame.rsp,
        rip: frame.rip,
        rflags: frame.rflags,
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    // Formats into a fixed buffer: the heap may be what broke.
    struct Buf {
        b: [u8; 512],
        n: usize,
    }
    impl core::fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let take = s.len().min(self.b.len() - self.n);
            self.b[self.n..self.n + take].copy_from_slice(&s.as_bytes()[..take]);
            self.n += take;
            Ok(())
        }
    }
    let mut buf = Buf { b: [0; 512], n: 0 };
    let _ = core::fmt::write(&mut buf, format_args!("{info}"));
    arch::hostcall(Hostcall::Panic, &[buf.b.as_ptr() as u64, buf.n as u64]);
    kernel::unreachable_after_hostcall()
}
