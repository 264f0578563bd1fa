//! Builds the VM for one program and runs it (Firecracker's `builder`): opens KVM,
//! maps and registers guest memory, creates the interrupt controller and vCPU 0,
//! lays the guest out, and hands everything to `vstate::Machine`, which runs the VM
//! until the program ends and then ends the process. The order of the steps is the
//! start-up budget's (docs/design.md, Start-up); `trace` times each.
//!
//! It takes a plain `VmConfig`, not the command line: `cli` parses and validates
//! options and the program file, maps errors to exit statuses and prints messages.

use crate::devices::netback::{self, NetBackError, NetSpec};
use crate::devices::virtio::net::{NetConfig, NetDevice};
use crate::devices::virtio::VirtioError;
use crate::devices::{self, BusError};
use crate::embedded::vdso;
use crate::exit::Outcome;
use crate::loader::rootfs::{self, RootfsError};
use crate::loader::{self, LoadError, LoadSpec, RewriteStats};
use crate::trace::Trace;
use crate::vstate::{self, vcpu, vm, Finish, Machine, VmError};
use onering_abi::NetInfo;
use onering_rewrite::elf::Program;
use std::convert::Infallible;
use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use thiserror::Error;
use vm_memory::GuestMemoryMmap;

/// What to run, and how.
pub struct VmConfig<'a> {
    /// Guest memory in bytes (the caller checked it is at most `layout::MAX_RAM`).
    pub mem: u64,
    /// vCPUs (the caller checked the range).
    pub smp: u64,
    /// The program's arguments, `argv[0]` (the path as given) first.
    pub argv: Vec<Vec<u8>>,
    /// Its environment, `KEY=VALUE` each.
    pub envp: Vec<Vec<u8>>,
    /// The path as given (AT_EXECFN).
    pub execfn: &'a [u8],
    /// `--rootfs DIR`, `-w DIR`.
    pub rootfs: Option<&'a Path>,
    /// `-v HOST:GUEST[:ro]`, `--read-only`.
    pub volumes: Vec<crate::hostfs::MountSpec>,
    pub read_only: bool,
    /// `--rootfs-rw`: the program's changes to the rootfs go to the host.
    pub rootfs_rw: bool,
    /// `--oci-caps`: the capability sets (None: `onering_abi::caps::default_for`).
    pub caps: Option<[u64; onering_abi::caps::SETS]>,
    /// `--no-new-privileges`.
    pub no_new_privs: bool,
    /// `--ulimit NAME=SOFT:HARD`: (resource number, soft, hard) each.
    pub rlimits: Vec<(usize, u64, u64)>,
    /// `--tmpfs PATH[:OPTIONS]` mounts.
    pub tmpfs: Vec<onering_abi::tmpfs::Tmpfs>,
    pub workdir: Option<&'a OsStr>,
    /// `--hostname` (None: `onering_abi::DEFAULT_HOSTNAME`).
    pub hostname: Option<&'a [u8]>,
    /// `-i`, `-q`; rewrite `syscall` instructions (not `--no-rewrite`); map the vDSO
    /// (not `--no-vdso`).
    pub interactive: bool,
    pub quiet: bool,
    pub rewrite: bool,
    pub vdso: bool,
    /// The profiler's sampler (`--profile`, `--profile-top`), started with the VM.
    pub sampler: Option<&'static vstate::sampler::Sampler>,
    /// The network device and its back end (`--net`, `-p`); None: loopback only.
    pub net: Option<NetSpec>,
    /// The option that asked for the network, for messages (`-p`, `--net user`).
    pub net_option: &'static str,
    /// `--trace[=SET]`: the system calls to trace (a bit each).
    pub trace_set: Option<[u64; onering_abi::trace::SET_WORDS]>,
    /// `--stats`: the kernel counts calls per system call.
    pub stats: bool,
    /// `--gdb ADDR`: where gdb will connect (already listening).
    pub gdb: Option<&'a std::net::TcpListener>,
    /// `--exec-socket PATH`: where `onering exec` connects (`vstate::exec`).
    pub exec_socket: Option<&'a Path>,
}

/// Why the VM could not be built.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("{0}")]
    Vm(#[from] VmError),
    /// Laying out the guest failed; `program` is the path as shown in messages.
    #[error("{program}: {error}")]
    Load { program: String, error: LoadError },
    #[error("{0}")]
    BootInfo(LoadError),
    #[error("{0}")]
    Rootfs(#[from] RootfsError),
    #[error("{0}")]
    Bus(#[from] BusError),
    #[error("{0}")]
    Gdb(String),
    #[error("{0}")]
    Net(#[from] NetBackError),
    #[error("{0}")]
    Virtio(#[from] VirtioError),
    #[error("{0}")]
    HostFs(#[from] crate::hostfs::HostFsError),
    #[error("--exec-socket {0}: {1}")]
    ExecSocket(String, std::io::Error),
}

impl BuildError {
    /// Whether the program is at fault (exit status 126) rather than onering or its
    /// configuration (125).
    pub fn is_program_error(&self) -> bool {
        matches!(self, BuildError::Load { error, .. } if error.is_program_error())
    }
}

/// What the caller does once the VM ended (after the trace is printed): reports how,
/// and returns the exit status.
pub type OnExit = Box<dyn Fn(&GuestMemoryMmap, Outcome, RewriteStats) -> u8 + Send + Sync>;

fn random16() -> [u8; 16] {
    let mut r = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut r);
    }
    r
}

/// The boot info's view of the network: addresses in network byte order in the low
/// 4 bytes, the MAC's first octet lowest.
fn net_info(n: &NetSpec) -> NetInfo {
    let ip4 = |a: Option<std::net::Ipv4Addr>| a.map_or(0, |a| u64::from(u32::from_be_bytes(a.octets())));
    let mut mac = [0u8; 8];
    mac[..6].copy_from_slice(&n.mac);
    NetInfo {
        present: 1,
        mac: u64::from_le_bytes(mac),
        ipv4: ip4(n.ip.map(|i| i.0)),
        prefix4: n.ip.map_or(0, |i| u64::from(i.1)),
        gateway4: ip4(n.gateway),
        dns4: ip4(n.dns),
        mtu: u64::from(n.mtu),
    }
}

/// Builds the VM for `prog` (parsed from `file`; `shown` is its path for messages)
/// and runs it. Returns only if building failed: once the VM runs, the process ends
/// with it (see `Machine::run_boot_cpu`).
pub fn run(
    config: &VmConfig,
    prog: &Program,
    file: &[u8],
    shown: &str,
    trace: &'static Trace,
    on_exit: OnExit,
) -> Result<Infallible, BuildError> {
    // Observing needs the kernel's observed entry everywhere: chosen before any plan.
    crate::embedded::use_observed_entry(config.trace_set.is_some() || config.stats);
    let plan = config.rewrite.then(|| loader::plan_rewrite(prog, file));
    trace.mark("rewrite planned");
    // The back end first: its errors (passt missing, a port in use) come before any
    // work, and passt starts while the VM is built.
    let net = match &config.net {
        Some(spec) => Some((spec, netback::start(spec, config.net_option)?)),
        None => None,
    };
    if net.is_some() {
        trace.mark("network back end started");
    }

    let mem_size = onering_abi::layout::align_up(config.mem, onering_abi::layout::HUGE_PAGE_SIZE);
    let kvm = vm::open_kvm()?;
    let mem = vm::guest_memory(mem_size)?;
    trace.mark("/dev/kvm opened, guest memory mapped");
    let vmfd = vm::create_vm(&kvm)?;
    trace.mark("VM created");
    vm::register_memory(&vmfd, &mem)?;
    trace.mark("memory registered");
    vm::create_irqchip(&vmfd)?;
    trace.mark("interrupt controller created");
    let cpuid = vm::supported_cpuid(&kvm)?;
    let (entry, stack, arg) = crate::layout::cpu_start(0);
    let vcpu = vcpu::create_vcpu(&vmfd, &cpuid, 0, entry, stack, arg, crate::embedded::syscall_trap_entry())?;
    trace.mark("vCPU created");

    let mut flags = 0;
    if config.quiet {
        flags |= onering_abi::flags::QUIET;
    }
    if !config.rewrite {
        flags |= onering_abi::flags::NO_REWRITE;
    }
    if config.interactive {
        flags |= onering_abi::flags::STDIN;
    }
    if std::env::var_os("ONERING_TEST_PANIC").is_some() {
        flags |= onering_abi::flags::TEST_PANIC;
    }
    if crate::sys::hardware_virtualization() {
        flags |= onering_abi::flags::PRIVILEGED_RING0;
    }
    let stdio: &'static vstate::stdio::Stdio = Box::leak(Box::new(vstate::stdio::Stdio::new(config.interactive)));
    // The rootfs is read from the host when the program first uses it (mount 0,
    // the root's lower layer); the image holds only the /etc files onering adds.
    let mut mounts = Vec::new();
    if let Some(dir) = config.rootfs {
        // A directory, or a tar archive served in place.
        let tar = dir.is_file();
        if !dir.is_dir() && !tar {
            return Err(RootfsError::NotADirectory(dir.display().to_string()).into());
        }
        if tar && config.rootfs_rw && !config.read_only {
            return Err(RootfsError::ArchiveNotWritable(dir.display().to_string()).into());
        }
        let host = std::path::absolute(dir).map_err(|e| RootfsError::Read(dir.display().to_string(), e))?;
        // Read-only on the host unless the changes are to be written there
        // (`--rootfs-rw`): then the kernel serves it as a writable volume at /.
        let ro = !config.rootfs_rw || config.read_only;
        mounts.push(crate::hostfs::MountSpec { host, guest: b"/".to_vec(), ro, rootfs: true, tar });
    }
    mounts.extend(config.volumes.iter().cloned());
    let hostfs = if mounts.is_empty() {
        None
    } else {
        flags |= onering_abi::flags::MOUNTS;
        Some(crate::hostfs::HostFs::new(mounts)?)
    };
    if config.read_only {
        flags |= onering_abi::flags::READ_ONLY;
    }
    if config.no_new_privs {
        flags |= onering_abi::flags::NO_NEW_PRIVS;
    }
    if config.trace_set.is_some() {
        flags |= onering_abi::flags::TRACE;
    }
    if config.stats {
        flags |= onering_abi::flags::STATS;
    }
    if config.gdb.is_some() {
        flags |= onering_abi::flags::GDB;
    }
    if crate::sys::realtime_policy() {
        flags |= onering_abi::flags::REALTIME;
    }
    let mut image = Vec::new();
    let dns = config.net.as_ref().and_then(|n| n.dns).map(|d| d.octets());
    rootfs::add_etc(&mut image, config.rootfs, dns, config.hostname.unwrap_or(onering_abi::DEFAULT_HOSTNAME));
    let volumes: Vec<(&[u8], &std::path::Path)> =
        config.volumes.iter().map(|v| (&v.guest[..], v.host.as_path())).collect();
    let workdir = rootfs::workdir(config.workdir, config.rootfs, &volumes)?;
    let (uid, gid) = crate::sys::ids();
    let tmpfs = onering_abi::tmpfs::encode(&config.tmpfs);
    let spec = LoadSpec {
        mem_size,
        ncpus: config.smp,
        argv: &config.argv,
        envp: &config.envp,
        execfn: config.execfn,
        vdso: config.vdso.then_some(vdso::IMAGE),
        flags,
        stdio: stdio.word,
        uid,
        gid,
        random: random16(),
        seed: {
            let r = random16();
            [
                u64::from_le_bytes(r[..8].try_into().unwrap_or_default()),
                u64::from_le_bytes(r[8..].try_into().unwrap_or_default()),
            ]
        },
        // Linux's AT_HWCAP on x86-64: CPUID leaf 1 EDX.
        hwcap: u64::from(std::arch::x86_64::__cpuid(1).edx),
        rewrite: plan.as_ref(),
        rootfs: &image,
        workdir: &workdir,
        net: config.net.as_ref().map_or_else(NetInfo::default, net_info),
        trace_set: config.trace_set.unwrap_or_default(),
        hostname: config.hostname.unwrap_or_default(),
        caps: config.caps.unwrap_or_else(|| onering_abi::caps::default_for(uid)),
        rlimits: &config.rlimits,
        tmpfs: &tmpfs,
    };

    let (mut bi, rewritten) =
        loader::load(&mem, &spec, prog, file).map_err(|error| BuildError::Load { program: shown.into(), error })?;
    trace.mark("guest memory laid out");
    let (tsc_hz, boot_tsc) = vcpu::tsc(&vcpu)?;
    bi.tsc_hz = tsc_hz;
    bi.boot_tsc = boot_tsc;
    bi.boot_realtime_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    loader::write_boot_info(&mem, &bi).map_err(BuildError::BootInfo)?;
    // What KVM answers vCPU 0 now that its state is built (the CR4 and XCR0
    // dependent bits included): rewritten `cpuid`s are answered from it.
    let answers = crate::arch::cpuid::table(&vcpu::guest_cpuid(&vcpu)?);
    loader::write_cpuid(&mem, &answers).map_err(BuildError::BootInfo)?;
    // From the first free chunk on, which the kernel takes at boot for its own
    // things (kernel stacks, page tables, and then its heap: the page cache, plans).
    // Leaving that chunk without a host huge page saved 2 MiB of host memory per
    // sleeping VM, but a glibc dynamic hello, which fills that heap, took 36-51 ms
    // instead of 32-39 ms in four interleaved rounds (perf.md): density stays within
    // its target with it.
    vm::advise_pool(&mem, bi.phys_free_start);
    let mut bus = devices::standard_bus()?;
    let (net, child) = match net {
        Some((spec, started)) => {
            let offloads = started.backend.offloads();
            let dev = NetDevice::new(mem.clone(), &NetConfig { mac: spec.mac, mtu: spec.mtu, offloads })?;
            bus.insert(onering_abi::layout::VIRTIO_NET_PHYS, onering_abi::layout::PAGE_SIZE, dev.clone())?;
            (Some((dev, started.backend)), Some(started.child))
        }
        None => (None, None),
    };
    let at_end = net.as_ref().map(|(dev, _)| dev.clone()).zip(child);
    let finish: Finish = Box::new(move |mem, outcome| {
        // No back-end process outlives the VM (and its going is no news).
        if let Some((dev, child)) = &at_end {
            dev.end();
            child.stop();
        }
        trace.mark("VM ended");
        trace.print();
        on_exit(mem, outcome, rewritten)
    });
    // The VM (and its memory) stays until the process exits: its teardown (~0.6 ms
    // here) happens after onering has exited, see sys::exit_leaving_teardown.
    let machine = vstate::Machine::new(mem, bus, vmfd, cpuid, config.smp, stdio, finish);
    if let Some(fs) = hostfs {
        machine.serve_files(fs);
    }
    if let Some(s) = config.sampler {
        machine.profile_with(s);
    }
    if let Some(p) = config.exec_socket {
        machine.serve_exec(p).map_err(|e| BuildError::ExecSocket(p.display().to_string(), e))?;
    }
    if let Some(listener) = config.gdb {
        // The program starts once gdb continues it.
        machine.debug_with(listener, bi.entry, bi.user_sp).map_err(BuildError::Gdb)?;
    }
    if let Some((dev, backend)) = net {
        dev.set_wake(Box::new(move || machine.wake_halted()));
        // The I/O thread runs until the process ends.
        std::mem::forget(dev.start(backend)?);
        trace.mark("network device started");
    }
    Machine::run_boot_cpu(machine, vcpu, &|| trace.mark("first exit from the guest"))
}
