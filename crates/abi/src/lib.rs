//! The guest/VMM interface of onering, shared by both sides.
//!
//! Everything the VMM and the guest kernel must agree on lives here and nowhere else:
//! the guest-physical and guest-virtual memory layout, the boot information the VMM
//! writes before the first instruction runs, the per-CPU header the ring-0 stubs use,
//! and the hostcall numbers and argument block. Every structure is `#[repr(C)]` plain
//! data made of `u64`s, so it reads the same from both sides and needs no unsafe code
//! to describe. A change to any of it bumps [`ABI_VERSION`]; the kernel refuses to run
//! with boot info of another version.
#![no_std]
#![deny(unsafe_code)]

extern crate alloc;

pub mod cpuid;
pub mod debug;
pub mod exec;
pub mod hostcall;
pub mod hostfs;
pub mod layout;
pub mod path;
pub mod rewrite;
pub mod sysnames;
pub mod tmpfs;

pub use hostcall::{Hostcall, HostcallBlock};

/// Version of this interface. Bump on any change to a structure or number in this crate.
pub const ABI_VERSION: u64 = 36;

/// First word of [`BootInfo`]: "ONERING" in ASCII, little endian.
pub const BOOT_MAGIC: u64 = u64::from_le_bytes(*b"ONERING\0");

/// Most vCPUs a VM can have (GDT, TSS and per-CPU areas are sized for this).
pub const MAX_CPUS: usize = 64;

/// Most guest-physical RAM regions (below and above the 32-bit MMIO hole).
pub const MAX_MEM_REGIONS: usize = 2;

/// Most loadable segments whose protections the VMM passes on (a program with more
/// keeps its whole image readable, writable and executable, as before).
pub const MAX_SEGMENTS: usize = 8;

/// A range of guest-physical RAM.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemRegion {
    pub start: u64,
    pub size: u64,
}

/// A range of user virtual memory that the VMM mapped before boot, backed by
/// contiguous guest-physical memory starting at `phys` (all three 2 MiB aligned).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserMapping {
    pub virt: u64,
    pub size: u64,
    pub phys: u64,
}

/// Interrupt vectors the VMM routes to the kernel (see `x86::write_idt`).
pub mod vectors {
    /// The local APIC's one-shot timer (preemption tick, timer deadlines).
    pub const TIMER: u8 = 0x40;
    /// The inter-processor interrupt one vCPU sends another to make it look at
    /// its run queue or at a signal for the thread it runs.
    pub const RESCHEDULE: u8 = 0x41;
}

/// How the VMM programs each vCPU's local APIC before it starts, so that the kernel
/// only writes the timer's initial count to arm it (one MMIO write) and the EOI.
pub mod lapic {
    /// Register offsets in the APIC's MMIO page.
    pub const ID: u64 = 0x20;
    pub const EOI: u64 = 0xb0;
    pub const SPURIOUS: u64 = 0xf0;
    pub const ICR_LOW: u64 = 0x300;
    pub const ICR_HIGH: u64 = 0x310;
    pub const LVT_TIMER: u64 = 0x320;
    pub const TIMER_INITIAL: u64 = 0x380;
    pub const TIMER_DIVIDE: u64 = 0x3e0;
    /// Spurious-vector register value: APIC enabled, spurious vector 0xff.
    pub const SPURIOUS_ENABLE: u32 = 0x1ff;
    /// Divide configuration "divide by 1": with KVM's 1 GHz APIC bus, one count
    /// per nanosecond.
    pub const DIVIDE_BY_1: u32 = 0xb;
    /// ICR low for a fixed, physical-destination, asserted IPI (or the vector in).
    pub const ICR_FIXED: u32 = 1 << 14;
}

/// The events page (at [`layout::EVENTS_PHYS`]): how the VMM's device threads
/// tell the guest that something completed, without an interrupt per event. The
/// VMM writes the device's result, then sets the device's bit in `PENDING`
/// (atomically), then wakes a vCPU (a halted one through the halt/kick path, else
/// an interrupt). The guest swaps `PENDING` to 0 when its scheduler looks (idle
/// loop, blocking, preemption points) and reads the results of the bits it found.
pub mod events {
    /// u64: bit n set = device n has posted something.
    pub const PENDING: u64 = 0;
    /// i64: the last stdin request's result: bytes read (> 0), 0 at end of file,
    /// or a negative errno.
    pub const STDIN_RESULT: u64 = 8;
    /// u64: signals sent to onering on the host, for the program (bit n-1 for
    /// signal n), or'ed in by the VMM and swapped to 0 by the guest.
    pub const SIGNALS: u64 = 16;
    /// u64: signals the host's terminal made (Ctrl-C, Ctrl-\, Ctrl-Z, a window
    /// change: `si_code` SI_KERNEL), for the VM terminal's foreground group, as
    /// `SIGNALS` (posted with the same pending bit).
    pub const TTY_SIGNALS: u64 = 24;
    /// Device bits.
    pub const STDIN: u64 = 1 << 0;
    pub const SIGNAL: u64 = 1 << 1;
    /// The host's stdin is readable (a watch, `StdinRequest` with length 0).
    pub const STDIN_READY: u64 = 1 << 2;
    /// The host queued processes to start or signals for them (`onering exec`):
    /// the kernel takes them with `Hostcall::ExecTake` ([`crate::exec`]).
    pub const EXEC: u64 = 1 << 3;
    /// i64 per exec slot: the result of the last stdin request of slot n's
    /// process (as `STDIN_RESULT`), at `EXEC_STDIN_RESULTS + 8 * n`.
    pub const EXEC_STDIN_RESULTS: u64 = 32;
    /// Bit 8 + n: slot n's stdin request has its result (as `STDIN`).
    pub const EXEC_STDIN: u64 = 0xff << 8;
    /// Bit 16 + n: slot n's stdin is readable (a watch; as `STDIN_READY`).
    pub const EXEC_STDIN_READY: u64 = 0xff << 16;

    // (Inputs: 0 the program's stdin, 1 + n slot n's: `crate::exec::input_of`.)
    const _: () = assert!(crate::exec::MAX_EXECS <= 8);

    /// The word holding input `input`'s request result.
    pub const fn result_word(input: usize) -> u64 {
        match input {
            0 => STDIN_RESULT,
            n => EXEC_STDIN_RESULTS + 8 * (n as u64 - 1),
        }
    }

    /// The pending bit saying input `input`'s request has its result.
    pub const fn done_bit(input: usize) -> u64 {
        match input {
            0 => STDIN,
            n => 1 << (8 + n - 1),
        }
    }

    /// The pending bit saying input `input` is readable (its watch's answer).
    pub const fn ready_bit(input: usize) -> u64 {
        match input {
            0 => STDIN_READY,
            n => 1 << (16 + n - 1),
        }
    }
}

/// Bits of [`BootInfo::flags`].
pub mod flags {
    /// `--quiet`: do not report unsupported system calls.
    pub const QUIET: u64 = 1 << 0;
    /// Ring 0 may execute privileged instructions (hardware KVM). Clear on PVM, where
    /// `hlt`, `invlpg`, `wrmsr` and friends raise #GP once ring 3 has run.
    pub const PRIVILEGED_RING0: u64 = 1 << 3;
    /// `-i`: the program's stdin reads the host's (the `StdinRequest` hostcall).
    pub const STDIN: u64 = 1 << 4;
    /// `ONERING_TEST_PANIC` is set: system call [`super::TEST_PANIC_SYSCALL`] makes
    /// the kernel panic, so the tests can see what a panic reports.
    pub const TEST_PANIC: u64 = 1 << 5;
    /// `--read-only`: the root file system takes no changes (EROFS); volumes and
    /// `/tmp` still do.
    pub const READ_ONLY: u64 = 1 << 6;
    /// The VM has host mounts: the kernel asks for them (`hostfs::MOUNTS`).
    pub const MOUNTS: u64 = 1 << 7;
    /// `--no-rewrite`: programs the kernel loads (`execve`, shared libraries) are
    /// not rewritten either; every system call traps.
    pub const NO_REWRITE: u64 = 1 << 8;
    /// `--trace`: the kernel writes a line per system call of the set in
    /// [`super::BootInfo::trace_set`] (`Hostcall::Trace`, kind `trace::LINES`).
    pub const TRACE: u64 = 1 << 9;
    /// `--stats`: the kernel counts calls, errors and time per system call and
    /// sends the table at exit (`Hostcall::Trace`, kind `trace::STATS`).
    pub const STATS: u64 = 1 << 10;
    /// `--gdb`: the program's breakpoint and single-step traps (#BP, #DB) go to
    /// the VMM's gdb stub (`Hostcall::Debug`) instead of becoming SIGTRAP.
    pub const GDB: u64 = 1 << 11;
    /// The VMM runs under a real-time host policy (started with `chrt -f`/`-r`):
    /// a halted vCPU thread then runs as soon as its halt ends, and the host caps
    /// real-time threads at 95% of a CPU, so an idle vCPU halts until its next
    /// deadline instead of spinning up to it.
    pub const REALTIME: u64 = 1 << 12;
    /// `--no-new-privileges` (an OCI bundle's process.noNewPrivileges): the
    /// program starts with the no_new_privs flag set.
    pub const NO_NEW_PRIVS: u64 = 1 << 13;
}

/// What `Hostcall::Trace` carries (`args[0]`), and the shapes of its data.
pub mod trace {
    /// `args[1]`/`args[2]`: text, whole lines (`--trace`), to be escaped by the VMM.
    pub const LINES: u64 = 0;
    /// `args[1]`/`args[2]`: the per-system-call table (`--stats`): records of
    /// [`STATS_WORDS`] u64s: number, calls, errors, TSC ticks spent.
    pub const STATS: u64 = 1;
    pub const STATS_WORDS: usize = 4;
    /// Most bytes one `LINES` call carries (the kernel's buffer).
    pub const MAX_LINES: u64 = 64 * 1024;
    /// Words of the trace set's bitmap: one bit per system-call number.
    pub const SET_WORDS: usize = crate::sysnames::SET_WORDS;
}

/// A system-call number Linux does not have: with [`flags::TEST_PANIC`] it panics
/// the kernel (tests only); otherwise ENOSYS like any unknown number.
pub const TEST_PANIC_SYSCALL: u64 = 0x6f6e_0001;

/// Everything the kernel needs to know at its first instruction. Written by the VMM at
/// [`layout::BOOT_INFO_PHYS`]; the kernel receives its virtual address in `rdi`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BootInfo {
    pub magic: u64,
    pub abi_version: u64,
    pub flags: u64,
    pub ncpus: u64,
    /// Guest RAM.
    pub mem: [MemRegion; MAX_MEM_REGIONS],
    pub nmem: u64,
    /// Region 0 below this address is in use (boot area, kernel, VMM allocations);
    /// everything above it, and all of the other regions, is free for the kernel.
    pub phys_free_start: u64,
    /// The kernel heap, in guest-physical memory (use it through the direct map).
    pub heap_phys: u64,
    pub heap_size: u64,
    /// Guest TSC ticks per second.
    pub tsc_hz: u64,
    /// The guest TSC and the host's CLOCK_REALTIME (ns since the epoch), read together.
    pub boot_tsc: u64,
    pub boot_realtime_ns: u64,
    /// The program: entry point, initial stack pointer (argc at [sp]), program break.
    pub entry: u64,
    pub user_sp: u64,
    pub brk_start: u64,
    /// Lowest address of the program's loaded segments.
    pub image_start: u64,
    /// User mappings made by the VMM: [0] holds the program image, [1] the stack.
    pub user_maps: [UserMapping; 2],
    /// What the program's standard streams are on the host: a [`stdio`] kind per
    /// descriptor, fd n in bits 8n..8n+8.
    pub stdio: u64,
    /// Host identity the program sees.
    pub uid: u64,
    pub gid: u64,
    /// Length of the guest path of the program (bytes at `execfn`), for /proc/self/exe.
    pub execfn: u64,
    pub execfn_len: u64,
    /// 16 random bytes from the host, to seed the kernel's generator.
    pub seed: [u64; 2],
    /// The `--rootfs` image (see `rootfs`), guest-physical; size 0 when none.
    pub rootfs_phys: u64,
    pub rootfs_size: u64,
    /// The working directory (`-w`): a path inside `rootfs_phys`'s chunk, after the
    /// image; length 0 means `/`.
    pub workdir_phys: u64,
    pub workdir_len: u64,
    /// User address of the vDSO the VMM mapped (0: none); its clock parameters go in
    /// the page below it ([`vvar`]).
    pub vdso_base: u64,
    /// The program's loadable segments (biased), so that the kernel gives each its
    /// protection: copies into a read-only segment fail with EFAULT, as on Linux.
    /// `nsegments` 0: unknown (the whole image stays readable and writable).
    pub segments: [Segment; MAX_SEGMENTS],
    pub nsegments: u64,
    /// The network device and the VM's address on it (`--net`, `-p`).
    pub net: NetInfo,
    /// Length of the vDSO at `vdso_base` (the kernel keeps a copy, with its clock
    /// page, for the programs `execve` starts).
    pub vdso_len: u64,
    /// `--trace=SET`: bit n of word n/64 set: system call n is traced (with
    /// [`flags::TRACE`]).
    pub trace_set: [u64; trace::SET_WORDS],
    /// `--hostname`: the VM's host name, NUL-padded (all zero: the default,
    /// [`DEFAULT_HOSTNAME`]).
    pub hostname: [u64; HOSTNAME_WORDS],
    /// The program's capability sets, a bit per capability, indexed by
    /// [`caps`]'s constants.
    pub caps: [u64; caps::SETS],
    /// `--ulimit NAME=SOFT:HARD`: resource limits of the processes without a
    /// parent in the VM, (soft, hard) per resource ([`rlimit`]'s numbers,
    /// RLIM_INFINITY is u64::MAX), where bit n of `rlimits_set` is set (else
    /// the kernel's default); SOFT <= HARD, and HARD <= [`NR_OPEN`] for nofile.
    pub rlimits: [[u64; 2]; rlimit::COUNT],
    pub rlimits_set: u64,
    /// The tmpfs mounts (`tmpfs`' records), guest-physical, after the working
    /// directory in the same reserved chunk; length 0: none.
    pub tmpfs_phys: u64,
    pub tmpfs_len: u64,
}

/// The `PATH` a program is looked up in when its environment has none (docker's).
pub const DEFAULT_PATH: &[u8] = b"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The most RLIMIT_NOFILE can be (Linux's default `fs.nr_open`).
pub const NR_OPEN: u64 = 1 << 20;

/// Resource limits (`BootInfo::rlimits`): Linux's numbers and docker's names.
pub mod rlimit {
    /// How many resources Linux has (RLIMIT_CPU 0 to RLIMIT_RTTIME 15).
    pub const COUNT: usize = 16;
    pub const NPROC: usize = 6;
    pub const NOFILE: usize = 7;
    /// Each resource's name as `docker run --ulimit` and `ulimit` spell it,
    /// indexed by number.
    pub const NAMES: [&str; COUNT] = [
        "cpu",
        "fsize",
        "data",
        "stack",
        "core",
        "rss",
        "nproc",
        "nofile",
        "memlock",
        "as",
        "locks",
        "sigpending",
        "msgqueue",
        "nice",
        "rtprio",
        "rttime",
    ];

    /// The number of resource `name`.
    pub fn number(name: &str) -> Option<usize> {
        NAMES.iter().position(|n| *n == name)
    }
}

/// Capability sets (`BootInfo::caps`): the VMM chooses them (all of them for
/// root, else only the bounding set; an OCI bundle's own); the kernel reports them.
pub mod caps {
    pub const BOUNDING: usize = 0;
    pub const PERMITTED: usize = 1;
    pub const EFFECTIVE: usize = 2;
    pub const INHERITABLE: usize = 3;
    pub const AMBIENT: usize = 4;
    pub const SETS: usize = 5;
    /// The highest capability (CAP_CHECKPOINT_RESTORE, Linux 5.9).
    pub const LAST: u32 = 40;
    /// Every capability.
    pub const ALL: u64 = (1 << (LAST + 1)) - 1;
    /// The capability named `name` (`CAP_NET_ADMIN` or `net_admin`), if Linux knows it.
    pub fn number(name: &str) -> Option<u32> {
        let bare = name.strip_prefix("CAP_").or_else(|| name.strip_prefix("cap_")).unwrap_or(name);
        NAMES.iter().position(|n| n.eq_ignore_ascii_case(bare)).map(|i| i as u32)
    }
    /// Linux's names, without `CAP_`, by number.
    pub const NAMES: [&str; LAST as usize + 1] = [
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "KILL",
        "SETGID",
        "SETUID",
        "SETPCAP",
        "LINUX_IMMUTABLE",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "NET_RAW",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_CHROOT",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "MKNOD",
        "LEASE",
        "AUDIT_WRITE",
        "AUDIT_CONTROL",
        "SETFCAP",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ];
    /// The sets of a program run by user `uid` when nothing else is asked.
    pub fn default_for(uid: u64) -> [u64; SETS] {
        let mut c = [0; SETS];
        c[BOUNDING] = ALL;
        if uid == 0 {
            (c[PERMITTED], c[EFFECTIVE]) = (ALL, ALL);
        }
        c
    }
}

/// The longest host name, as Linux's `__NEW_UTS_LEN`.
pub const MAX_HOSTNAME: usize = 64;
pub const HOSTNAME_WORDS: usize = MAX_HOSTNAME / 8;
/// The VM's host name unless `--hostname` says otherwise.
pub const DEFAULT_HOSTNAME: &[u8] = b"onering";

/// Whether `name` may be given as the VM's host name (`--hostname`, an OCI
/// bundle's): 1 to [`MAX_HOSTNAME`] bytes, no NUL (it ends the name in
/// [`BootInfo::hostname`]) and no newline (/etc/hostname, /etc/hosts are lines).
pub fn hostname_ok(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_HOSTNAME && !name.iter().any(|b| matches!(b, 0 | b'\n'))
}

/// `name` (at most [`MAX_HOSTNAME`] bytes, longer is cut) as [`BootInfo::hostname`].
pub fn hostname_words(name: &[u8]) -> [u64; HOSTNAME_WORDS] {
    let mut w = [0u64; HOSTNAME_WORDS];
    for (i, b) in name.iter().take(MAX_HOSTNAME).enumerate() {
        w[i / 8] |= u64::from(*b) << (8 * (i % 8));
    }
    w
}

/// The host name in [`BootInfo::hostname`] (the default when it is empty).
pub fn hostname_of(words: &[u64; HOSTNAME_WORDS]) -> alloc::vec::Vec<u8> {
    let bytes: alloc::vec::Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).take_while(|b| *b != 0).collect();
    if bytes.is_empty() {
        DEFAULT_HOSTNAME.to_vec()
    } else {
        bytes
    }
}

/// The VM's network device: a virtio-net device at `layout::VIRTIO_NET_PHYS`
/// (virtio-mmio version 2, queue 0 receive, queue 1 transmit), and the static
/// address configuration the VMM chose with its back end (no DHCP needed). IPv4
/// addresses are in network byte order in the low 4 bytes (`u32::from_be_bytes`
/// of the octets); 0 means none.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetInfo {
    /// 1: the device is there; 0: loopback only (`--net none`, the default).
    pub present: u64,
    /// The device's MAC address in the low 6 bytes, first octet lowest (also in the
    /// device's configuration space).
    pub mac: u64,
    /// The VM's IPv4 address and prefix length, its default gateway (where the
    /// host is reachable with `--net user`), and the DNS server for resolv.conf.
    pub ipv4: u64,
    pub prefix4: u64,
    pub gateway4: u64,
    pub dns4: u64,
    /// The link's MTU (1500 unless the back end says otherwise).
    pub mtu: u64,
}

/// A loadable segment: `[start, end)` in user memory with its `PROT_*` bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    pub prot: u64,
}

/// The program's standard streams: what the VMM's descriptors 0, 1 and 2 are on the
/// host (`BootInfo::stdio`), so that the program sees them as Linux would show it
/// the same descriptors: a pipe is a FIFO (and `lseek` gives ESPIPE), a file a
/// regular file with its size and offset, a terminal a terminal.
pub mod stdio {
    /// Not open on the host: the program does not get the descriptor either.
    pub const CLOSED: u64 = 0;
    /// A terminal (isatty).
    pub const TTY: u64 = 1;
    /// A pipe or FIFO.
    pub const PIPE: u64 = 2;
    /// A regular file.
    pub const FILE: u64 = 3;
    /// /dev/null (also the program's stdin without `-i`, as `docker run` gives).
    pub const NULL: u64 = 4;
    /// Another character device.
    pub const CHAR: u64 = 5;
    /// A socket.
    pub const SOCKET: u64 = 6;
    /// Anything else (a directory, a block device).
    pub const OTHER: u64 = 7;

    /// The kind of descriptor `fd` (0, 1, 2) in `BootInfo::stdio`.
    pub const fn kind(word: u64, fd: u32) -> u64 {
        (word >> (8 * fd)) & 0xff
    }

    /// The `StdioIoctl` requests, each with its argument's size and direction
    /// (true: the VMM writes the argument to the guest).
    pub const TCGETS: u64 = 0x5401;
    pub const TCSETS: u64 = 0x5402;
    pub const TCSETSW: u64 = 0x5403;
    pub const TCSETSF: u64 = 0x5404;
    pub const TIOCGWINSZ: u64 = 0x5413;
    pub const FIONREAD: u64 = 0x541b;
    /// `struct termios` as the kernel's ioctls see it.
    pub const TERMIOS_SIZE: u64 = 36;
    pub const IOCTLS: [(u64, u64, bool); 6] = [
        (TCGETS, TERMIOS_SIZE, true),
        (TCSETS, TERMIOS_SIZE, false),
        (TCSETSW, TERMIOS_SIZE, false),
        (TCSETSF, TERMIOS_SIZE, false),
        (TIOCGWINSZ, 8, true),
        (FIONREAD, 4, true),
    ];

    /// The size and direction of request `req` (None: not forwarded).
    pub fn ioctl(req: u64) -> Option<(u64, bool)> {
        IOCTLS.iter().find(|(r, _, _)| *r == req).map(|(_, n, out)| (*n, *out))
    }
}

/// What `StdioStat` reports of a host stream (its `struct stat`, as plain u64s).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u64,
    pub nlink: u64,
    pub uid: u64,
    pub gid: u64,
    pub rdev: u64,
    pub size: u64,
    pub blksize: u64,
    pub blocks: u64,
    pub atime_sec: u64,
    pub atime_nsec: u64,
    pub mtime_sec: u64,
    pub mtime_nsec: u64,
    pub ctime_sec: u64,
    pub ctime_nsec: u64,
}

/// Bytes of [`HostStat`].
pub const HOST_STAT_SIZE: usize = 16 * 8;
const _: () = assert!(core::mem::size_of::<HostStat>() == HOST_STAT_SIZE);

impl HostStat {
    /// The little-endian bytes (what the VMM writes into guest memory).
    pub fn to_bytes(&self) -> [u8; HOST_STAT_SIZE] {
        let w = [
            self.dev,
            self.ino,
            self.mode,
            self.nlink,
            self.uid,
            self.gid,
            self.rdev,
            self.size,
            self.blksize,
            self.blocks,
            self.atime_sec,
            self.atime_nsec,
            self.mtime_sec,
            self.mtime_nsec,
            self.ctime_sec,
            self.ctime_nsec,
        ];
        let mut b = [0u8; HOST_STAT_SIZE];
        for (i, v) in w.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Read back from those bytes.
    pub fn from_bytes(b: &[u8; HOST_STAT_SIZE]) -> HostStat {
        let w = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(x)
        };
        HostStat {
            dev: w(0),
            ino: w(1),
            mode: w(2),
            nlink: w(3),
            uid: w(4),
            gid: w(5),
            rdev: w(6),
            size: w(7),
            blksize: w(8),
            blocks: w(9),
            atime_sec: w(10),
            atime_nsec: w(11),
            mtime_sec: w(12),
            mtime_nsec: w(13),
            ctime_sec: w(14),
            ctime_nsec: w(15),
        }
    }
}

/// The page below the vDSO: clock parameters the kernel writes once at boot, which
/// the vDSO's clock_gettime reads (u64 words at these offsets).
pub mod vvar {
    /// Where the page lies: this many bytes below the vDSO.
    pub const BELOW_VDSO: u64 = 4096;
    /// TSC value at monotonic time 0.
    pub const TSC_BASE: u64 = 0;
    /// Nanoseconds per TSC tick, 32.32 fixed point.
    pub const MULT: u64 = 8;
    /// Real time (ns since the epoch) at monotonic time 0.
    pub const REAL_BASE: u64 = 16;
    /// Layout version (1).
    pub const VERSION: u64 = 24;
}

/// The first bytes of each vCPU's per-CPU area, the page the GS base points at.
/// The ring-0 stubs reach these fields with `%gs:OFFSET` because ring 0 here cannot
/// run `swapgs`; the kernel owns the rest of the page.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PerCpuHeader {
    /// Virtual address of this header (so Rust code can turn GS base into a pointer).
    pub self_ptr: u64,
    pub cpu: u64,
    /// Top of the kernel stack the system-call entry switches to.
    pub kstack_top: u64,
    /// Top of the stack the exception path switches to.
    pub fault_stack_top: u64,
    /// Scratch: the user stack pointer at system-call entry.
    pub user_rsp: u64,
    /// Non-zero while this CPU handles an exception in ring 3 (a nested one is fatal).
    pub in_fault: u64,
    /// The hostcall argument block of this vCPU, see [`HostcallBlock`].
    pub hostcall: HostcallBlock,
    /// System calls that arrived through the trap (not a rewritten site); the ring-0
    /// stub counts them, the VMM reports them (`--stats`).
    pub traps: u64,
    /// Timer interrupts and reschedule IPIs taken (counted by the ring-0 stub).
    pub interrupts: u64,
    /// Stores to the local APIC by the kernel (timer arming, IPIs): each exits to
    /// the hypervisor.
    pub lapic_writes: u64,
    /// Thread switches (to another thread or to the idle loop).
    pub switches: u64,
    /// Page-cache chunks the kernel gave back under memory pressure.
    pub reclaimed: u64,
    /// Exceptions the fault hook took in ring 3 (page faults and others; `--stats`).
    pub faults: u64,
    /// Address-space switches (CR3 loads by the supervisor call; `--stats`).
    pub root_loads: u64,
    /// The address of `exception_frame` (this header's own, by the direct map):
    /// the exception stubs load it into rsp and `iretq` through the frame.
    pub exception_frame_ptr: u64,
    /// The `iretq` frame (rip, cs, rflags, rsp, ss) that takes an exception from
    /// ring 0 to its ring-3 landing (`exception_landing`, interrupts on, on the
    /// IST1 stack just below the vector, error code and hardware frame the stub
    /// left there). Written by the VMM; `iretq` only reads it.
    pub exception_frame: [u64; 5],
}

/// KVM's steal-time record (`struct kvm_steal_time`, 64 bytes), one per vCPU at
/// [`STEAL_TIME_OFFSET`] in its per-CPU page. The VMM points the vCPU's
/// `MSR_KVM_STEAL_TIME` at it before the vCPU first runs (the guest cannot `wrmsr`
/// here); KVM then adds to `steal` the time the vCPU thread waited, runnable, for
/// a host CPU, each time the vCPU enters the guest (`version` is odd while it
/// writes). All zero when the host's KVM offers no steal time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StealTime {
    pub steal: u64,
    pub version: u32,
    pub flags: u32,
    /// Bit 0: the vCPU was preempted (set by KVM when it deschedules the vCPU
    /// thread at an instruction boundary; never seen set on PVM).
    pub preempted: u8,
    pub u8_pad: [u8; 3],
    pub pad: [u32; 11],
}

/// Where a vCPU's [`StealTime`] lies in its per-CPU page (64-byte aligned, as KVM
/// requires, and clear of the header and the kernel's words).
pub const STEAL_TIME_OFFSET: u64 = 0xc00;
/// `MSR_KVM_STEAL_TIME` and its enable bit.
pub const MSR_KVM_STEAL_TIME: u32 = 0x4b56_4d03;
pub const KVM_MSR_ENABLED: u64 = 1;

/// Byte offsets into [`PerCpuHeader`], used by assembly.
pub mod percpu_offsets {
    pub const SELF_PTR: usize = 0;
    pub const CPU: usize = 8;
    pub const KSTACK_TOP: usize = 16;
    pub const FAULT_STACK_TOP: usize = 24;
    pub const USER_RSP: usize = 32;
    pub const IN_FAULT: usize = 40;
    pub const HOSTCALL: usize = 48;
    pub const TRAPS: usize = 104;
    pub const INTERRUPTS: usize = 112;
    pub const LAPIC_WRITES: usize = 120;
    pub const SWITCHES: usize = 128;
    pub const RECLAIMED: usize = 136;
    pub const FAULTS: usize = 144;
    pub const ROOT_LOADS: usize = 152;
    pub const EXCEPTION_FRAME_PTR: usize = 160;
    pub const EXCEPTION_FRAME: usize = 168;
}

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(PerCpuHeader, kstack_top) == percpu_offsets::KSTACK_TOP);
    assert!(offset_of!(PerCpuHeader, fault_stack_top) == percpu_offsets::FAULT_STACK_TOP);
    assert!(offset_of!(PerCpuHeader, user_rsp) == percpu_offsets::USER_RSP);
    assert!(offset_of!(PerCpuHeader, in_fault) == percpu_offsets::IN_FAULT);
    assert!(offset_of!(PerCpuHeader, hostcall) == percpu_offsets::HOSTCALL);
    assert!(offset_of!(PerCpuHeader, traps) == percpu_offsets::TRAPS);
    assert!(offset_of!(PerCpuHeader, interrupts) == percpu_offsets::INTERRUPTS);
    assert!(offset_of!(PerCpuHeader, lapic_writes) == percpu_offsets::LAPIC_WRITES);
    assert!(offset_of!(PerCpuHeader, switches) == percpu_offsets::SWITCHES);
    assert!(offset_of!(PerCpuHeader, reclaimed) == percpu_offsets::RECLAIMED);
    assert!(offset_of!(PerCpuHeader, faults) == percpu_offsets::FAULTS);
    assert!(offset_of!(PerCpuHeader, root_loads) == percpu_offsets::ROOT_LOADS);
    assert!(offset_of!(PerCpuHeader, exception_frame_ptr) == percpu_offsets::EXCEPTION_FRAME_PTR);
    assert!(offset_of!(PerCpuHeader, exception_frame) == percpu_offsets::EXCEPTION_FRAME);
    assert!(size_of::<BootInfo>() <= layout::PAGE_SIZE as usize);
    assert!(size_of::<PerCpuHeader>() <= layout::PERCPU_STRIDE as usize);
    assert!(size_of::<StealTime>() == 64 && STEAL_TIME_OFFSET.is_multiple_of(64));
    assert!(STEAL_TIME_OFFSET + 64 <= layout::PERCPU_STRIDE);
};

/// The `--rootfs` image: the host directory, flattened by the VMM into guest memory
/// and read by the kernel at boot. A sequence of records, each starting 8-byte
/// aligned: a [`rootfs::Header`] (32 bytes), the path (relative to the root, no
/// leading `/`), then the data (file contents or link target), padded to 8 bytes.
/// A directory comes before anything inside it.
pub mod rootfs {
    pub const DIR: u32 = 1;
    pub const FILE: u32 = 2;
    pub const SYMLINK: u32 = 3;
    pub const HEADER_SIZE: usize = 32;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Header {
        pub kind: u32,
        pub mode: u32,
        pub mtime_ns: u64,
        pub path_len: u32,
        pub data_len: u64,
    }

    impl Header {
        pub fn to_bytes(&self) -> [u8; HEADER_SIZE] {
            let mut b = [0u8; HEADER_SIZE];
            b[0..4].copy_from_slice(&self.kind.to_le_bytes());
            b[4..8].copy_from_slice(&self.mode.to_le_bytes());
            b[8..16].copy_from_slice(&self.mtime_ns.to_le_bytes());
            b[16..20].copy_from_slice(&self.path_len.to_le_bytes());
            b[24..32].copy_from_slice(&self.data_len.to_le_bytes());
            b
        }

        pub fn from_bytes(b: &[u8]) -> Option<Header> {
            let b = b.get(..HEADER_SIZE)?;
            let u32_ = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
            let u64_ = |o: usize| u64::from(u32_(o)) | (u64::from(u32_(o + 4)) << 32);
            Some(Header { kind: u32_(0), mode: u32_(4), mtime_ns: u64_(8), path_len: u32_(16), data_len: u64_(24) })
        }

        /// Bytes this record takes, header and padding included.
        pub fn record_len(&self) -> Option<usize> {
            let n = (HEADER_SIZE as u64).checked_add(u64::from(self.path_len))?.checked_add(self.data_len)?;
            usize::try_from(n.checked_add(7)? & !7).ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::rootfs::Header;

    #[test]
    fn rootfs_header_round_trip() {
        let h = Header { kind: 2, mode: 0o644, mtime_ns: 1 << 40, path_len: 3, data_len: 9 };
        assert_eq!(Header::from_bytes(&h.to_bytes()), Some(h));
        assert_eq!(h.record_len(), Some(48)); // 32 + 3 + 9 = 44, padded to 8
        assert_eq!(Header::from_bytes(&[0; 31]), None);
        let huge = Header { data_len: u64::MAX, ..h };
        assert_eq!(huge.record_len(), None);
    }
}
