//! What the VMM does when a vCPU exits: a plain function from an exit (our own
//! owned copy of KVM's) and an environment (guest memory, output, registers) to an
//! action. Hostcalls arrive here as MMIO writes to the doorbell. Nothing the guest
//! sends is trusted: every address and length is checked against guest memory, and
//! anything unexpected ends the VM with a message instead of a VMM panic or a hang.

use crate::x86;
use onering_abi::hostcall::RET_OFFSET;
use onering_abi::layout;
use onering_abi::Hostcall;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Largest single write, as Linux's MAX_RW_COUNT.
const MAX_WRITE: u64 = 0x7fff_f000;
const MAX_PANIC_MESSAGE: u64 = 4096;
/// Halts and kicks so far, all vCPUs together (for `--stats`).
pub static HALTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static KICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Longest single `Halt` (the guest asks again if it needs more).
const MAX_HALT_NS: u64 = 1_000_000_000;
/// Bytes copied out of the guest at a time by `Write`.
const WRITE_CHUNK: u64 = 64 * 1024;
const EBADF: i64 = 9;
const EFAULT: i64 = 14;
const EIO: i64 = 5;
const EINVAL: i64 = 22;
const EPIPE: i64 = 32;

/// A vCPU exit, detached from KVM's borrowed run structure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmExit {
    MmioWrite { addr: u64, data: u64 },
    MmioRead { addr: u64 },
    IoOut { port: u16 },
    IoIn { port: u16 },
    Hlt,
    Shutdown,
    InternalError,
    FailEntry(u64),
    Other(String),
}

impl VmExit {
    pub fn from_kvm(exit: kvm_ioctls::VcpuExit) -> VmExit {
        use kvm_ioctls::VcpuExit as E;
        match exit {
            E::MmioWrite(addr, data) => {
                let mut v = [0u8; 8];
                let n = data.len().min(8);
                v[..n].copy_from_slice(&data[..n]);
                VmExit::MmioWrite { addr, data: u64::from_le_bytes(v) }
            }
            E::MmioRead(addr, data) => {
                data.fill(0);
                VmExit::MmioRead { addr }
            }
            E::IoOut(port, _) => VmExit::IoOut { port },
            E::IoIn(port, data) => {
                data.fill(0xff);
                VmExit::IoIn { port }
            }
            E::Hlt => VmExit::Hlt,
            E::Shutdown => VmExit::Shutdown,
            E::InternalError => VmExit::InternalError,
            E::FailEntry(reason, _) => VmExit::FailEntry(reason),
            other => VmExit::Other(format!("{other:?}")),
        }
    }
}

/// How the VM ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The program exited with this status.
    Exited(u8),
    /// The program was killed by a signal.
    Killed { signal: u64, rip: u64, addr: u64 },
    /// The guest kernel panicked.
    KernelPanic(String),
    /// An exception the kernel could not handle.
    Fatal { vector: u64, rip: u64, error: u64 },
    /// The guest did something no correct guest does.
    GuestError(String),
}

#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    Resume,
    Stop(Outcome),
}

/// What the exit handler may use.
pub trait Env {
    fn mem(&self) -> &GuestMemoryMmap;
    /// The exiting vCPU's number.
    fn cpu(&self) -> u64;
    /// The exiting vCPU's CR2.
    fn cr2(&mut self) -> u64;
    /// Writes all of `data` to the host's fd 1 or 2.
    fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()>;
    /// Reads the host's stdin into `buf` (`-i`).
    fn input(&mut self, buf: &mut [u8]) -> std::io::Result<usize>;
    /// Halts the exiting vCPU for at most `d`, or until it is kicked (at once if it
    /// was kicked since its last halt).
    fn halt(&mut self, d: std::time::Duration);
    /// The number of vCPUs.
    fn ncpus(&self) -> u64;
    /// Kicks vCPU `cpu` (< `ncpus`) out of its halt, starting it if it never ran.
    fn kick(&mut self, cpu: u64) -> Result<(), String>;
}

pub fn handle(exit: VmExit, env: &mut impl Env) -> Action {
    match exit {
        VmExit::MmioWrite { addr, data } if addr == layout::HOSTCALL_DOORBELL_PHYS => hostcall(data, env),
        VmExit::MmioWrite { addr, .. } => {
            Action::Stop(Outcome::GuestError(format!("unexpected MMIO write at {addr:#x}")))
        }
        VmExit::MmioRead { addr } => Action::Stop(Outcome::GuestError(format!("unexpected MMIO read at {addr:#x}"))),
        VmExit::IoOut { port } | VmExit::IoIn { port } => {
            Action::Stop(Outcome::GuestError(format!("unexpected port I/O on port {port:#x}")))
        }
        VmExit::Hlt => Action::Stop(Outcome::GuestError("unexpected halt".into())),
        VmExit::Shutdown => {
            Action::Stop(Outcome::GuestError("triple fault (the guest's exception handling broke down)".into()))
        }
        VmExit::InternalError => Action::Stop(Outcome::GuestError("KVM internal error (emulation failure)".into())),
        VmExit::FailEntry(r) => {
            Action::Stop(Outcome::GuestError(format!("KVM could not enter the guest (reason {r:#x})")))
        }
        VmExit::Other(what) => Action::Stop(Outcome::GuestError(format!("unexpected exit {what}"))),
    }
}

fn block_addr(cpu: u64) -> u64 {
    layout::PERCPU_PHYS + cpu * layout::PERCPU_STRIDE + onering_abi::percpu_offsets::HOSTCALL as u64
}

fn hostcall(nr: u64, env: &mut impl Env) -> Action {
    let block = block_addr(env.cpu());
    let mut args = [0u64; 6];
    for (i, a) in args.iter_mut().enumerate() {
        match env.mem().read_obj::<u64>(GuestAddress(block + 8 * i as u64)) {
            Ok(v) => *a = v,
            Err(_) => return Action::Stop(Outcome::GuestError("hostcall block outside guest memory".into())),
        }
    }
    let ret: i64 = match Hostcall::from_u64(nr) {
        Some(Hostcall::Write) => write(args, env),
        Some(Hostcall::FaultAddr) => env.cr2() as i64,
        Some(Hostcall::StdinRequest) => -EBADF, // (the stdin device comes with the device model)
        Some(Hostcall::Halt) => {
            HALTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            env.halt(std::time::Duration::from_nanos(args[0].min(MAX_HALT_NS)));
            0
        }
        Some(Hostcall::Kick) if args[0] >= env.ncpus() => -EINVAL,
        Some(Hostcall::Kick) => match env.kick(args[0]).inspect(|_| {
            KICKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }) {
            Ok(()) => 0,
            Err(e) => return Action::Stop(Outcome::GuestError(e)),
        },
        Some(Hostcall::Exit) => return Action::Stop(Outcome::Exited(args[0] as u8)),
        Some(Hostcall::Killed) => {
            return Action::Stop(Outcome::Killed { signal: args[0], rip: args[1], addr: args[2] })
        }
        Some(Hostcall::Fatal) => return Action::Stop(fatal(env)),
        Some(Hostcall::Panic) => {
            let msg = read_guest(env.mem(), args[0], args[1].min(MAX_PANIC_MESSAGE))
                .unwrap_or_else(|| b"(message unreadable)".to_vec());
            return Action::Stop(Outcome::KernelPanic(String::from_utf8_lossy(&msg).into_owned()));
        }
        None => return Action::Stop(Outcome::GuestError(format!("unknown hostcall {nr}"))),
    };
    match env.mem().write_obj(ret as u64, GuestAddress(block + RET_OFFSET)) {
        Ok(()) => Action::Resume,
        Err(_) => Action::Stop(Outcome::GuestError("hostcall block outside guest memory".into())),
    }
}

/// The frame a fatal exception left on the IST stack (the stub does not trust GS, so
/// the VMM reads it from where it must be).
fn fatal(env: &impl Env) -> Outcome {
    let at = crate::loader::fatal_frame_phys(env.cpu());
    let word = |i: u64| env.mem().read_obj::<u64>(GuestAddress(at + 8 * i)).unwrap_or(0);
    Outcome::Fatal { vector: word(0), error: word(1), rip: word(2) }
}

/// Copies `len` bytes at guest-virtual `virt` out of the guest, through its page
/// tables; `None` if any byte has no translation.
pub fn read_guest(mem: &GuestMemoryMmap, virt: u64, len: u64) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len as usize];
    let mut done = 0u64;
    while done < len {
        let (pa, avail) = x86::translate(mem, layout::BOOT_PT_PHYS, virt.checked_add(done)?)?;
        let n = avail.min(len - done);
        mem.read_slice(&mut out[done as usize..(done + n) as usize], GuestAddress(pa)).ok()?;
        done += n;
    }
    Some(out)
}

fn write(args: [u64; 6], env: &mut impl Env) -> i64 {
    let [fd, virt, len, ..] = args;
    if fd != 1 && fd != 2 {
        return -EBADF;
    }
    // Copied out page by page through a bounded buffer: the guest chooses the length
    // and may alias one page many times, so nothing is sized by what it asks for.
    let len = len.min(MAX_WRITE);
    let mut buf = vec![0u8; len.min(WRITE_CHUNK) as usize];
    let mut done = 0u64;
    while done < len {
        let Some((pa, avail)) =
            virt.checked_add(done).and_then(|va| x86::translate(env.mem(), layout::BOOT_PT_PHYS, va))
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

/// `Read`: the host's stdin into guest memory, one piece at most (like `read(2)`).
fn read(args: [u64; 6], env: &mut impl Env) -> i64 {
    let [virt, len, ..] = args;
    let Some((pa, avail)) = x86::translate(env.mem(), layout::BOOT_PT_PHYS, virt) else {
        return -EFAULT;
    };
    let n = avail.min(len).min(WRITE_CHUNK) as usize;
    let mut buf = vec![0u8; n];
    match env.input(&mut buf) {
        Ok(got) => match env.mem().write_slice(&buf[..got], GuestAddress(pa)) {
            Ok(()) => got as i64,
            Err(_) => -EFAULT,
        },
        Err(_) => -EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::PageTables;

    struct TestEnv {
        mem: GuestMemoryMmap,
        out: Vec<(u32, Vec<u8>)>,
        fail: Option<std::io::ErrorKind>,
        halts: u32,
        kicks: Vec<u64>,
    }

    impl Env for TestEnv {
        fn mem(&self) -> &GuestMemoryMmap {
            &self.mem
        }
        fn cpu(&self) -> u64 {
            0
        }
        fn cr2(&mut self) -> u64 {
            0xdead
        }
        fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()> {
            if let Some(k) = self.fail {
                return Err(k.into());
            }
            self.out.push((fd, data.to_vec()));
            Ok(())
        }
        fn input(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(5);
            buf[..n].copy_from_slice(&b"input"[..n]);
            Ok(n)
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
    }

    /// 8 MiB of guest memory with [0x40_0000, 0x60_0000) mapped to [0x40_0000, ...).
    fn env() -> TestEnv {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
        PageTables::new(&mem).map_2m(0x40_0000, 0x40_0000, 0).unwrap();
        TestEnv { mem, out: vec![], fail: None, halts: 0, kicks: vec![] }
    }

    fn call(e: &mut TestEnv, nr: Hostcall, args: &[u64]) -> Action {
        for (i, a) in args.iter().enumerate() {
            e.mem.write_obj(*a, GuestAddress(block_addr(0) + 8 * i as u64)).unwrap();
        }
        handle(VmExit::MmioWrite { addr: layout::HOSTCALL_DOORBELL_PHYS, data: nr as u64 }, e)
    }

    fn ret(e: &TestEnv) -> i64 {
        e.mem.read_obj::<u64>(GuestAddress(block_addr(0) + RET_OFFSET)).unwrap() as i64
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
        assert_eq!(call(&mut e, Hostcall::Write, &[7, 0x40_1000, 1]), Action::Resume);
        assert_eq!(ret(&e), -EBADF);
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
    fn read_fills_guest_memory() {
        let mut e = env();
        assert_eq!(call(&mut e, Hostcall::Read, &[0x40_1000, 100]), Action::Resume);
        assert_eq!(ret(&e), 5);
        let mut b = [0u8; 5];
        e.mem.read_slice(&mut b, GuestAddress(0x40_1000)).unwrap();
        assert_eq!(&b, b"input");
        call(&mut e, Hostcall::Read, &[0x10, 100]);
        assert_eq!(ret(&e), -EFAULT);
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
    fn ending_hostcalls() {
        let mut e = env();
        assert_eq!(call(&mut e, Hostcall::Exit, &[3]), Action::Stop(Outcome::Exited(3)));
        assert_eq!(call(&mut e, Hostcall::Exit, &[0x1ff]), Action::Stop(Outcome::Exited(0xff)));
        assert_eq!(
            call(&mut e, Hostcall::Killed, &[11, 0x401000, 0]),
            Action::Stop(Outcome::Killed { signal: 11, rip: 0x401000, addr: 0 })
        );
        e.mem.write_slice(b"oops", GuestAddress(0x40_0000)).unwrap();
        assert_eq!(call(&mut e, Hostcall::Panic, &[0x40_0000, 4]), Action::Stop(Outcome::KernelPanic("oops".into())));
        assert!(matches!(call(&mut e, Hostcall::Panic, &[0x10, 4]), Action::Stop(Outcome::KernelPanic(_))));
        assert_eq!(call(&mut e, Hostcall::FaultAddr, &[]), Action::Resume);
        assert_eq!(ret(&e), 0xdead);
    }

    #[test]
    fn unexpected_exits_stop_the_vm() {
        let mut e = env();
        let stops = [
            VmExit::MmioWrite { addr: 0x1234, data: 0 },
            VmExit::MmioWrite { addr: layout::HOSTCALL_DOORBELL_PHYS, data: 999 },
            VmExit::MmioRead { addr: layout::HOSTCALL_DOORBELL_PHYS },
            VmExit::IoOut { port: 0x3f8 },
            VmExit::IoIn { port: 0x60 },
            VmExit::Hlt,
            VmExit::Shutdown,
            VmExit::InternalError,
            VmExit::FailEntry(7),
            VmExit::Other("Debug".into()),
        ];
        for x in stops {
            assert!(matches!(handle(x.clone(), &mut e), Action::Stop(Outcome::GuestError(_))), "{x:?}");
        }
    }
}
