//! Serving hostcalls: the guest fills its vCPU's `HostcallBlock` (six arguments and
//! a result, in its per-CPU header) and rings the doorbell with the hostcall number
//! (`onering_abi::hostcall`). Nothing in the block is trusted: guest-virtual
//! addresses are translated through the guest's own page tables, each entry checked
//! to lie in guest memory; lengths are capped, and output is copied in bounded pieces
//! so no guest-chosen length sizes a VMM allocation; an unknown number ends the VM.

use super::{Action, Env, Outcome};
use crate::arch::paging::{read_guest, read_guest_pairs, write_guest};
use crate::arch::translate;
use crate::layout;
use onering_abi::hostcall::RET_OFFSET;
use onering_abi::Hostcall;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Largest single write, as Linux's MAX_RW_COUNT.
const MAX_WRITE: u64 = 0x7fff_f000;
const MAX_PANIC_MESSAGE: u64 = 4096;
/// Halts and kicks so far, all vCPUs together (for `--stats`).
pub static HALTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static KICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Hostcalls so far (each one exit), and of them output writes (for `--stats`).
pub static HOSTCALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Host-file operations the guest deferred to ride on a later `Fs` hostcall
/// (closes, unlocks and writes that took no exit of their own; for `--stats`).
pub static DEFERRED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes copied out of the guest at a time by `Write`.
const WRITE_CHUNK: u64 = 64 * 1024;
const EBADF: i64 = 9;
const EFAULT: i64 = 14;
const EIO: i64 = 5;
const EINVAL: i64 = 22;
const EPIPE: i64 = 32;

/// Serves hostcall `nr` for the exiting vCPU (its doorbell rang with `nr`).
pub fn serve(nr: u64, env: &mut impl Env) -> Action {
    let block = layout::hostcall_block(env.cpu());
    let mut args = [0u64; 6];
    for (i, a) in args.iter_mut().enumerate() {
        match env.mem().read_obj::<u64>(GuestAddress(block + 8 * i as u64)) {
            Ok(v) => *a = v,
            Err(_) => return Action::Stop(Outcome::GuestError("hostcall block outside guest memory".into())),
        }
    }
    HOSTCALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::observe::count_hostcall(nr);
    // The guest-virtual arguments translate through the root the kernel last
    // loaded on this vCPU (it switches address spaces without exits).
    crate::arch::paging::set_current_root(crate::arch::paging::guest_root(env.mem(), env.cpu()));
    let ret: i64 = match Hostcall::from_u64(nr) {
        Some(Hostcall::Write) => {
            WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            write(args, env)
        }
        Some(Hostcall::StdinRequest) => env.stdin_request(args[0], args[1], args[2]),
        Some(Hostcall::StdioStat) => match env.stdio_stat(args[0]) {
            Ok(st) => match write_guest(env.mem(), args[1], &st.to_bytes()) {
                Some(()) => 0,
                None => -EFAULT,
            },
            Err(e) => e,
        },
        Some(Hostcall::StdioSeek) => env.stdio_seek(args[0], args[1], args[2]),
        Some(Hostcall::StdioIoctl) => stdio_ioctl(args, env),
        Some(Hostcall::Fs) => env.host_file(args),
        Some(Hostcall::Rewrite) => rewrite(args, env.mem()),
        Some(Hostcall::HugePages) => huge_pages(args[0], env.mem()),
        Some(Hostcall::Trace) => trace(args, env.mem()),
        Some(Hostcall::Debug) => env.debug_stop(args),
        Some(Hostcall::ExecTake) => env.exec_take(args[0], args[1]),
        Some(Hostcall::ExecDone) => env.exec_done(args[0], args[1], args[2]),
        Some(Hostcall::Halt) => {
            HALTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            env.halt(std::time::Duration::from_nanos(args[0].min(onering_abi::hostcall::MAX_HALT_NS)));
            0
        }
        Some(Hostcall::Kick) if args[0] >= env.ncpus() => -EINVAL,
        Some(Hostcall::Kick) => match env.kick(args[0]).inspect(|_| {
            KICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }) {
            Ok(()) => 0,
            Err(e) => return Action::Stop(Outcome::GuestError(e)),
        },
        // No result is written: the guest may ask from any point (see the ABI).
        Some(Hostcall::Yield) => {
            std::thread::yield_now();
            return Action::Resume;
        }
        Some(Hostcall::Exit) => return Action::Stop(Outcome::Exited(args[0] as u8)),
        Some(Hostcall::Killed) if !(1..=64).contains(&args[0]) => {
            return Action::Stop(Outcome::GuestError(format!("killed by an invalid signal number {}", args[0])))
        }
        Some(Hostcall::Killed) => {
            return Action::Stop(Outcome::Killed { signal: args[0], rip: args[1], addr: args[2] })
        }
        Some(Hostcall::Fatal) => return Action::Stop(fatal(env)),
        Some(Hostcall::Panic) => {
            let msg = read_guest(env.mem(), args[0], args[1].min(MAX_PANIC_MESSAGE))
                .unwrap_or_else(|| b"(message unreadable)".to_vec());
            // The program shares the kernel's ring: the message may be anything.
            let mut text = onering_rewrite::bytes::printable(&msg, 4096);
            text.push_str(&backtrace(env.mem(), args[2], args[3]));
            return Action::Stop(Outcome::KernelPanic(text));
        }
        None => return Action::Stop(Outcome::GuestError(format!("unknown hostcall {nr}"))),
    };
    match env.mem().write_obj(ret as u64, GuestAddress(block + RET_OFFSET)) {
        Ok(()) => Action::Resume,
        Err(_) => Action::Stop(Outcome::GuestError("hostcall block outside guest memory".into())),
    }
}

/// A `Rewrite` hostcall: plans the rewriting of the ELF file the guest holds in
/// the pieces listed at `args[0]` (`args[1]` of them), trampolines at `args[2]`
/// (bias 0), and writes the plan (`onering_abi::rewrite`) to `args[3]` (at most
/// `args[4]` bytes). The file is as untrusted as the first program's: the same
/// total parser and planner read it.
fn rewrite(args: [u64; 6], mem: &GuestMemoryMmap) -> i64 {
    let wire =
        read_pieces(mem, args[0], args[1]).and_then(|f| crate::plancache::wire_plan(&f, args[5], args[2], args[4]));
    match wire.map(|w| write_guest(mem, args[3], &w).map(|()| w.len() as i64)) {
        Ok(Some(n)) => n,
        Ok(None) => -EFAULT,
        Err(e) => e,
    }
}

/// The file a `Rewrite` hostcall hands over: its pieces (`n` of them, listed at
/// guest-virtual `list`) joined; -EINVAL for too many pieces, -EFBIG for more than
/// `MAX_REWRITE_FILE` bytes in all (checked before anything is read), -EFAULT.
fn read_pieces(mem: &GuestMemoryMmap, list: u64, n: u64) -> Result<Vec<u8>, i64> {
    use onering_abi::hostcall::{MAX_REWRITE_FILE, MAX_REWRITE_PIECES};
    const EFBIG: i64 = 27;
    if n > MAX_REWRITE_PIECES {
        return Err(-EINVAL);
    }
    let pieces = read_guest_pairs(mem, list, n).ok_or(-EFAULT)?;
    let total = pieces.iter().try_fold(0u64, |t, p| t.checked_add(p.1).filter(|t| *t <= MAX_REWRITE_FILE));
    let mut file = Vec::with_capacity(total.ok_or(-EFBIG)? as usize);
    for (addr, len) in pieces {
        file.extend(read_guest(mem, addr, len).ok_or(-EFAULT)?);
    }
    Ok(file)
}

/// A `Trace` hostcall: `--trace` lines (escaped on their way out) or the
/// `--stats` table, each read in full only below its bound.
fn trace(args: [u64; 6], mem: &GuestMemoryMmap) -> i64 {
    use onering_abi::trace as wire;
    let max = match args[0] {
        wire::LINES => wire::MAX_LINES,
        wire::STATS => (onering_abi::sysnames::COUNT * wire::STATS_WORDS * 8) as u64,
        _ => return -EINVAL,
    };
    if args[2] > max {
        return -EINVAL;
    }
    let Some(data) = read_guest(mem, args[1], args[2]) else { return -EFAULT };
    if args[0] == wire::LINES {
        crate::observe::trace_lines(&data);
    } else {
        crate::observe::syscall_table(&data);
    }
    0
}

/// An `Fs` hostcall of vCPU `cpu` (made by exit or through its poll slot): first
/// the operations the guest deferred to it (left in its per-CPU page,
/// `onering_abi::hostfs` "Deferred operations": only closes, unlocks, read locks
/// and bounded writes, each checked as any call is), in order, each through
/// `serve(op, true)`, then its own through `serve(op, false)`: its result.
pub fn fs_call(mem: &GuestMemoryMmap, cpu: u64, args: [u64; 6], serve: &mut dyn FnMut([u64; 6], bool) -> i64) -> i64 {
    let (ops, n) = match deferred_ops(mem, cpu, args[0]) {
        Ok(d) => d,
        Err(e) => return e,
    };
    for item in &ops[..n] {
        serve(*item, true);
    }
    let (op, _) = onering_abi::hostfs::split_op(args[0]);
    serve([op, args[1], args[2], args[3], args[4], args[5]], false)
}

/// The deferred operations an `Fs` call whose first word is `op` carries, read
/// from vCPU `cpu`'s area and checked to be ones that may wait (closes, unlocks,
/// small writes): the operations and their count, or -errno.
fn deferred_ops(
    mem: &GuestMemoryMmap,
    cpu: u64,
    op: u64,
) -> Result<([[u64; 6]; onering_abi::hostfs::MAX_DEFERRED], usize), i64> {
    use onering_abi::hostfs::{self as proto, DEFERRED_WORDS};
    let (_, n) = proto::split_op(op);
    if n > proto::MAX_DEFERRED {
        return Err(-EINVAL);
    }
    let base = layout::deferred_ops(cpu);
    let mut ops = [[0u64; 6]; proto::MAX_DEFERRED];
    for (i, item) in ops.iter_mut().take(n).enumerate() {
        for (j, w) in item.iter_mut().take(DEFERRED_WORDS).enumerate() {
            let at = base + 8 * (i * DEFERRED_WORDS + j) as u64;
            *w = mem.read_obj::<u64>(GuestAddress(at)).map_err(|_| -EFAULT)?;
        }
        let unlock = item[0] == proto::LOCK && matches!(item[2], proto::LOCK_UNLOCK | proto::LOCK_READ);
        let write = item[0] == proto::WRITE && item[3] <= proto::MAX_DEFERRED_WRITE;
        if item[0] != proto::CLOSE && !unlock && !write {
            return Err(-EINVAL);
        }
    }
    DEFERRED.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    Ok((ops, n))
}

/// A kernel panic's backtrace, named with the kernel's symbols: `count` return
/// addresses at guest-virtual `virt` (at most `MAX_BACKTRACE`), one line each.
fn backtrace(mem: &GuestMemoryMmap, virt: u64, count: u64) -> String {
    let n = count.min(onering_abi::hostcall::MAX_BACKTRACE as u64);
    let Some(raw) = read_guest(mem, virt, n * 8).filter(|_| n > 0) else { return String::new() };
    let mut out = String::from("\nkernel backtrace:");
    for (i, word) in raw.chunks_exact(8).enumerate() {
        let addr = u64::from_le_bytes(word.try_into().unwrap_or_default());
        // The return address: the call is the instruction before it.
        match crate::embedded::kernel_symbols::lookup(addr.wrapping_sub(1)) {
            Some((name, off)) => out.push_str(&format!("\n  #{i:<2} {addr:#x} {name}+{:#x}", off + 1)),
            None => out.push_str(&format!("\n  #{i:<2} {addr:#x}")),
        }
    }
    out
}

/// The frame a fatal exception left on the IST stack (the stub does not trust GS, so
/// the VMM reads it from where it must be).
fn fatal(env: &impl Env) -> Outcome {
    let at = layout::fatal_frame_phys(env.cpu());
    let word = |i: u64| env.mem().read_obj::<u64>(GuestAddress(at + 8 * i)).unwrap_or(0);
    Outcome::Fatal { vector: word(0), error: word(1), rip: word(2) }
}

/// `HugePages`: the chunk at guest-physical `phys` merged into a host huge page.
/// Only a whole 2 MiB chunk of guest RAM: the guest chooses `phys`.
fn huge_pages(phys: u64, mem: &GuestMemoryMmap) -> i64 {
    use vm_memory::GuestMemoryBackend;
    let len = onering_abi::layout::HUGE_PAGE_SIZE;
    let at = |a: Option<u64>| a.and_then(|a| mem.get_host_address(GuestAddress(a)).ok());
    // Both ends in guest RAM, one mapping apart (so in one region).
    let (first, last) = (at(Some(phys)), at(phys.checked_add(len - 1)));
    let Some(host) = first.filter(|f| phys.is_multiple_of(len) && last == Some(f.wrapping_add(len as usize - 1)))
    else {
        return -EINVAL;
    };
    // (A huge page needs the host's mapping 2 MiB aligned too; Linux aligns large
    // anonymous mappings so since 6.7, older ones may not.)
    if !(host as usize).is_multiple_of(len as usize) {
        return -i64::from(libc::EOPNOTSUPP);
    }
    match crate::sys::collapse_hugepages(host, len as usize) {
        Ok(()) => 0,
        Err(e) => -i64::from(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// `StdioIoctl`: the argument (of the request's fixed size) is read from the guest
/// for a request that takes one, and written back for one that gives one.
fn stdio_ioctl(args: [u64; 6], env: &mut impl Env) -> i64 {
    let [fd, request, virt, ..] = args;
    let Some((size, out)) = onering_abi::stdio::ioctl(request) else { return -EINVAL };
    let mut arg = if out {
        vec![0u8; size as usize]
    } else {
        match read_guest(env.mem(), virt, size) {
            Some(a) => a,
            None => return -EFAULT,
        }
    };
    let r = env.stdio_ioctl(fd, request, &mut arg);
    if r >= 0 && out && write_guest(env.mem(), virt, &arg).is_none() {
        return -EFAULT;
    }
    r
}

fn write(args: [u64; 6], env: &mut impl Env) -> i64 {
    let [fd, virt, len, ..] = args;
    if fd != 1 && fd != 2 && onering_abi::exec::slot_of(fd).is_none_or(|(_, n)| n == 0) {
        return -EBADF;
    }
    // Copied out page by page through a bounded buffer: the guest chooses the length
    // and may alias one page many times, so nothing is sized by what it asks for.
    let len = len.min(MAX_WRITE);
    let mut buf = vec![0u8; len.min(WRITE_CHUNK) as usize];
    let mut done = 0u64;
    while done < len {
        let Some((pa, avail)) =
            virt.checked_add(done).and_then(|va| translate(env.mem(), crate::arch::paging::current_root(), va))
        else {
            break;
        };
        let n = avail.min(len - done).min(WRITE_CHUNK) as usize;
        if env.mem().read_slice(&mut buf[..n], GuestAddress(pa)).is_err() {
            break;
        }
        match env.output(fd as u32, &buf[..n]) {
            Ok(()) => done += n as u64,
            Err(_) if done > 0 => break,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return -EPIPE,
            Err(e) if e.raw_os_error() == Some(EBADF as i32) => return -EBADF,
            Err(_) => return -EIO,
        }
    }
    // As on Linux: what was written, or EFAULT if the buffer's start was bad.
    if done == 0 && len > 0 {
        -EFAULT
    } else {
        done as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::PageTables;
    use crate::exit::{handle, VmExit};

    struct TestEnv {
        mem: GuestMemoryMmap,
        bus: crate::devices::MmioBus,
        out: Vec<(u32, Vec<u8>)>,
        fail: Option<std::io::ErrorKind>,
        halts: u32,
        kicks: Vec<u64>,
        stdin: Vec<(u64, u64, u64)>,
        fs: Vec<[u64; 6]>,
    }

    impl Env for TestEnv {
        fn mem(&self) -> &GuestMemoryMmap {
            &self.mem
        }
        fn bus(&self) -> &crate::devices::MmioBus {
            &self.bus
        }
        fn cpu(&self) -> u64 {
            0
        }
        fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()> {
            if let Some(k) = self.fail {
                return Err(k.into());
            }
            if fd > 2 {
                // (As `Stdio::output` for an exec stream no slot holds.)
                return Err(std::io::Error::from_raw_os_error(EBADF as i32));
            }
            self.out.push((fd, data.to_vec()));
            Ok(())
        }
        fn stdin_request(&mut self, virt: u64, len: u64, stream: u64) -> i64 {
            self.stdin.push((virt, len, stream));
            0
        }
        fn halt(&mut self, _: std::time::Duration) {
            self.halts += 1;
        }
        fn ncpus(&self) -> u64 {
            2
        }
        fn kick(&mut self, cpu: u64) -> Result<(), String> {
            self.kicks.push(cpu);
            Ok(())
        }
        fn host_file(&mut self, args: [u64; 6]) -> i64 {
            let fs = &mut self.fs;
            fs_call(&self.mem, 0, args, &mut |a, _| {
                fs.push(a);
                7
            })
        }
    }

    /// 8 MiB of guest memory with [0x40_0000, 0x60_0000) mapped to [0x40_0000, ...).
    fn env() -> TestEnv {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
        PageTables::new(&mem).map_2m(0x40_0000, 0x40_0000, 0).unwrap();
        let bus = crate::devices::standard_bus().unwrap();
        TestEnv { mem, bus, out: vec![], fail: None, halts: 0, kicks: vec![], stdin: Vec::new(), fs: Vec::new() }
    }

    fn call(e: &mut TestEnv, nr: Hostcall, args: &[u64]) -> Action {
        for (i, a) in args.iter().enumerate() {
            e.mem.write_obj(*a, GuestAddress(layout::hostcall_block(0) + 8 * i as u64)).unwrap();
        }
        handle(VmExit::MmioWrite { addr: onering_abi::layout::HOSTCALL_DOORBELL_PHYS, data: nr as u64, len: 8 }, e)
    }

    fn ret(e: &TestEnv) -> i64 {
        e.mem.read_obj::<u64>(GuestAddress(layout::hostcall_block(0) + RET_OFFSET)).unwrap() as i64
    }

    #[test]
    fn write_reads_guest_virtual_memory() {
        let mut e = env();
        e.mem.write_slice(b"hello\n", GuestAddress(0x40_1000)).unwrap();
        assert_eq!(call(&mut e, Hostcall::Write, &[1, 0x40_1000, 6]), Action::Resume);
        assert_eq!(ret(&e), 6);
        assert_eq!(e.out, [(1, b"hello\n".to_vec())]);
    }

    #[test]
    fn write_rejects_bad_arguments() {
        let mut e = env();
        // Not an output stream (an exec'd process's stdin, past the slots), or
        // one no exec'd process holds.
        for fd in [0, 3, onering_abi::exec::stream(onering_abi::exec::MAX_EXECS, 1), 7] {
            assert_eq!(call(&mut e, Hostcall::Write, &[fd, 0x40_1000, 1]), Action::Resume);
            assert_eq!(ret(&e), -EBADF, "fd {fd}");
        }
        // Unmapped, non-canonical, wrapping: nothing written.
        for (addr, len) in [(0x10_0000, 1), (0x8000_0000_0000, 1), (u64::MAX, 2)] {
            assert_eq!(call(&mut e, Hostcall::Write, &[2, addr, len]), Action::Resume);
            assert_eq!(ret(&e), -EFAULT, "{addr:#x}+{len:#x}");
        }
        assert!(e.out.is_empty());
        // Straddling the end of the mapping, or huge: what is mapped, in bounded pieces.
        call(&mut e, Hostcall::Write, &[2, 0x5f_fff0, 0x20]);
        assert_eq!(ret(&e), 0x10);
        call(&mut e, Hostcall::Write, &[2, 0x40_0000, u64::MAX]);
        assert_eq!(ret(&e), 2 << 20);
        assert!(e.out.iter().all(|(_, d)| d.len() as u64 <= WRITE_CHUNK));
        e.out.clear();
        e.fail = Some(std::io::ErrorKind::BrokenPipe);
        call(&mut e, Hostcall::Write, &[1, 0x40_0000, 1]);
        assert_eq!(ret(&e), -EPIPE);
    }

    #[test]
    fn stdin_requests_go_to_the_device() {
        let mut e = env();
        assert_eq!(call(&mut e, Hostcall::StdinRequest, &[0x40_1000, 100, 0]), Action::Resume);
        assert_eq!(ret(&e), 0);
        assert_eq!(
            call(&mut e, Hostcall::StdinRequest, &[0x40_1000, 10, onering_abi::exec::stream(2, 0)]),
            Action::Resume
        );
        assert_eq!(e.stdin, [(0x40_1000, 100, 0), (0x40_1000, 10, 9)]);
    }

    #[test]
    fn deferred_closes_and_unlocks_go_first_and_nothing_else_is_taken() {
        use onering_abi::hostfs::{self as proto, DEFERRED_WORDS};
        let mut e = env();
        let put = |e: &mut TestEnv, items: &[[u64; DEFERRED_WORDS]]| {
            for (i, w) in items.iter().flatten().enumerate() {
                e.mem.write_obj(*w, GuestAddress(layout::deferred_ops(0) + 8 * i as u64)).unwrap();
            }
        };
        let close = [proto::CLOSE, 9, 0, 0, 0];
        let unlock = [proto::LOCK, 4, proto::LOCK_UNLOCK, 120, 1];
        put(&mut e, &[close, unlock]);
        call(&mut e, Hostcall::Fs, &[proto::STATAT | 2 << 32, 1, 2, 3]);
        assert_eq!(ret(&e), 7);
        assert_eq!(
            e.fs,
            [
                [proto::CLOSE, 9, 0, 0, 0, 0],
                [proto::LOCK, 4, proto::LOCK_UNLOCK, 120, 1, 0],
                [proto::STATAT, 1, 2, 3, 0, 0]
            ],
            "in order, then the call's own (a deferred unlock reports no stat)"
        );
        // Too many, or anything but a close or an unlock: the call does nothing.
        let long = [proto::WRITE, 4, 0x40_1000, proto::MAX_DEFERRED_WRITE + 1, 0];
        for bad in [[proto::UNLINK, 0, 0, 0, 0], [proto::LOCK, 4, proto::LOCK_WRITE, 0, 0], long] {
            e.fs.clear();
            put(&mut e, &[close, bad]);
            call(&mut e, Hostcall::Fs, &[proto::STATAT | 2 << 32]);
            assert_eq!((ret(&e), e.fs.len()), (-EINVAL, 0));
        }
        call(&mut e, Hostcall::Fs, &[proto::STATAT | ((proto::MAX_DEFERRED as u64 + 1) << 32)]);
        assert_eq!((ret(&e), e.fs.len()), (-EINVAL, 0));
    }

    /// Guest-virtual arguments translate through the root the guest published
    /// in the vCPU's poll slot (the one it loaded), the boot root while that is
    /// not a page of guest RAM.
    #[test]
    fn arguments_translate_through_the_published_root() {
        let mut e = env();
        let slot = crate::layout::poll_slot(0) + onering_abi::hostcall::poll_offsets::ROOT;
        // A second root mapping the same user block to other memory.
        let root = 0x20_0000;
        e.mem.write_obj(0x60_0000u64 | 0x87, GuestAddress(0x20_3000 + 2 * 8)).unwrap(); // PD entry of 0x40_0000
        e.mem.write_obj(0x20_3000u64 | 7, GuestAddress(0x20_2000)).unwrap(); // PDPT entry
        e.mem.write_obj(0x20_2000u64 | 7, GuestAddress(root)).unwrap(); // PML4 entry
        e.mem.write_slice(b"other", GuestAddress(0x60_0000 + 0x1000)).unwrap();
        e.mem.write_slice(b"first", GuestAddress(0x40_1000)).unwrap();
        for (published, seen) in
            [(root, b"other"), (0x1234, b"first"), (8 << 20, b"first"), (0, b"first"), (root, b"other")]
        {
            e.mem.write_obj(published, GuestAddress(slot)).unwrap();
            e.out.clear();
            call(&mut e, Hostcall::Write, &[1, 0x40_1000, 5]);
            assert_eq!(e.out, [(1, seen.to_vec())], "{published:#x}");
        }
    }

    /// `HugePages` takes only a whole, aligned chunk of guest RAM, and keeps what
    /// the chunk holds.
    #[test]
    fn huge_pages_takes_a_whole_chunk_and_keeps_it() {
        let mut e = env();
        for bad in [0x1000, 0x30_0000, 8 << 20, 6 << 20 | 1, !0x1f_ffff] {
            assert_eq!(call(&mut e, Hostcall::HugePages, &[bad]), Action::Resume);
            assert_eq!(ret(&e), -EINVAL, "{bad:#x}");
        }
        e.mem.write_slice(b"kept", GuestAddress(0x40_1234)).unwrap();
        assert_eq!(call(&mut e, Hostcall::HugePages, &[0x40_0000]), Action::Resume);
        // 0, or the host's refusal (a host without huge pages): never a lost byte.
        assert!(ret(&e) == 0 || ret(&e) < 0 && ret(&e) != -EINVAL, "{}", ret(&e));
        let mut b = [0u8; 4];
        e.mem.read_slice(&mut b, GuestAddress(0x40_1234)).unwrap();
        assert_eq!(&b, b"kept");
    }

    #[test]
    fn halt_and_kick() {
        let mut e = env();
        assert_eq!(call(&mut e, Hostcall::Halt, &[u64::MAX]), Action::Resume);
        assert_eq!(e.halts, 1);
        assert_eq!(call(&mut e, Hostcall::Kick, &[1]), Action::Resume);
        assert_eq!(ret(&e), 0);
        for bad in [2, u64::MAX] {
            assert_eq!(call(&mut e, Hostcall::Kick, &[bad]), Action::Resume);
            assert_eq!(ret(&e), -EINVAL);
        }
        assert_eq!(e.kicks, [1]);
    }

    #[test]
    fn yield_writes_no_result() {
        let mut e = env();
        e.mem.write_obj(0x1234u64, GuestAddress(layout::hostcall_block(0) + RET_OFFSET)).unwrap();
        assert_eq!(call(&mut e, Hostcall::Yield, &[]), Action::Resume);
        assert_eq!(ret(&e), 0x1234, "a yield may come between another call's doorbell and its result");
    }

    #[test]
    fn ending_hostcalls() {
        let mut e = env();
        assert_eq!(call(&mut e, Hostcall::Exit, &[3]), Action::Stop(Outcome::Exited(3)));
        assert_eq!(call(&mut e, Hostcall::Exit, &[0x1ff]), Action::Stop(Outcome::Exited(0xff)));
        assert_eq!(
            call(&mut e, Hostcall::Killed, &[11, 0x401000, 0]),
            Action::Stop(Outcome::Killed { signal: 11, rip: 0x401000, addr: 0 })
        );
        for bad in [0, 65, u64::MAX] {
            let a = call(&mut e, Hostcall::Killed, &[bad, 0x401000, 0]);
            assert!(matches!(a, Action::Stop(Outcome::GuestError(_))), "{bad}: {a:?}");
        }
        e.mem.write_slice(b"oops", GuestAddress(0x40_0000)).unwrap();
        assert_eq!(call(&mut e, Hostcall::Panic, &[0x40_0000, 4]), Action::Stop(Outcome::KernelPanic("oops".into())));
        assert!(matches!(call(&mut e, Hostcall::Panic, &[0x10, 4]), Action::Stop(Outcome::KernelPanic(_))));
        e.mem.write_slice(b"o\x1b[2J", GuestAddress(0x40_0000)).unwrap();
        let escaped = Action::Stop(Outcome::KernelPanic("o\\u{1b}[2J".into()));
        assert_eq!(call(&mut e, Hostcall::Panic, &[0x40_0000, 5]), escaped);
        // A backtrace: addresses named with the kernel's symbols where they fall in
        // a function, bare otherwise.
        let (entry, name) = crate::embedded::kernel_symbols::find("arch_start").expect("the kernel's symbols");
        e.mem.write_obj(entry + 5, GuestAddress(0x40_1000)).unwrap();
        e.mem.write_obj(0x1234u64, GuestAddress(0x40_1008)).unwrap();
        let Action::Stop(Outcome::KernelPanic(text)) = call(&mut e, Hostcall::Panic, &[0x40_0000, 1, 0x40_1000, 2])
        else {
            panic!("not a panic")
        };
        assert!(text.starts_with("o\nkernel backtrace:\n  #0  "), "{text}");
        assert!(text.contains(&format!("{:#x} {name}+0x5", entry + 5)), "{text}");
        assert!(text.ends_with("\n  #1  0x1234"), "{text}");
    }
}
