//! The command line: `onering run [OPTIONS] <PROGRAM> [ARGS]...`. Parses options,
//! reads and validates the program file, maps every failure to docker's exit
//! statuses (125 onering failed, 126 not runnable, 127 not found; otherwise the
//! program's status, or 128 + signal) and prints onering's own messages, each
//! starting with `onering:`. The VM itself is built and run by `builder`.

use crate::builder::{self, VmConfig};
use crate::devices::netback::{self, Mode, NetSpec, PortForward};
use crate::devices::virtio::net::STATS as NET;
use crate::exit::{self, Outcome};
use crate::loader::RewriteStats;
use crate::trace::Trace;
use crate::{profile, vstate};
use clap::{Args, Parser, Subcommand};
use onering_rewrite::elf;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use vm_memory::GuestMemoryMmap;

#[derive(Parser)]
#[command(name = "onering", version, about = "Run one unmodified Linux program in its own thin KVM virtual machine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a VM, run PROGRAM in it, stream its output and exit with its status.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Guest memory, e.g. 64M, 256M, 1G (a plain number is bytes).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    mem: u64,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1)]
    smp: u64,
    /// Set an environment variable (KEY=VALUE, or KEY to copy it from the host).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    env: Vec<OsString>,
    /// Pass the host's whole environment (the -e values override it).
    #[arg(long)]
    env_host: bool,
    /// A host directory as the VM's file tree, read from the host when first used
    /// (not copied); changes stay in the VM's memory (with /dev and a writable
    /// in-memory /tmp on top).
    #[arg(long, value_name = "DIR")]
    rootfs: Option<std::path::PathBuf>,
    /// The program's changes to the `--rootfs` directory are written to it, as a
    /// container runtime's are to the container's layer (the OCI runtime's
    /// default); without it they stay in the VM's memory.
    #[arg(long, requires = "rootfs")]
    rootfs_rw: bool,
    /// The program's capability sets, BOUNDING:PERMITTED:EFFECTIVE:INHERITABLE:AMBIENT,
    /// each a hexadecimal mask (the OCI runtime's: an OCI bundle's
    /// process.capabilities); without it root has every capability.
    #[arg(long, value_name = "B:P:E:I:A", value_parser = parse_caps, hide = true)]
    oci_caps: Option<[u64; onering_abi::caps::SETS]>,
    /// The program starts with no_new_privs set (`prctl(PR_GET_NO_NEW_PRIVS)`
    /// says 1), as `docker run --security-opt no-new-privileges`.
    #[arg(long)]
    no_new_privileges: bool,
    /// A resource limit of the program, as `docker run --ulimit` (repeatable):
    /// NAME is cpu, fsize, data, stack, core, rss, nproc, nofile, memlock, as,
    /// locks, sigpending, msgqueue, nice, rtprio or rttime; -1 is unlimited;
    /// nofile at most 1048576.
    #[arg(long, value_name = "NAME=SOFT[:HARD]", value_parser = parse_ulimit)]
    ulimit: Vec<(usize, u64, u64)>,
    /// Share a host directory as GUEST in the VM, read-write (`:ro`: read-only),
    /// as `docker -v`; repeatable.
    #[arg(short = 'v', long = "volume", value_name = "HOST:GUEST[:ro]")]
    volume: Vec<OsString>,
    /// Mount an in-memory file system at PATH, as `docker run --tmpfs` (repeatable;
    /// made if missing, empty). OPTIONS, comma separated: rw or ro, mode=OCTAL
    /// (default 1777), size=BYTES[k|m|g] (reported, not enforced: every tmpfs
    /// shares the VM's memory), tmpcopyup (starts with a copy of what the
    /// directory held), and Linux's nosuid, nodev, noexec, exec, suid, dev and
    /// propagation flags, which change nothing in the VM.
    #[arg(long, value_name = "PATH[:OPTIONS]", value_parser = crate::loader::rootfs::parse_tmpfs)]
    tmpfs: Vec<onering_abi::tmpfs::Tmpfs>,
    /// The root file system takes no changes (EROFS); volumes and /tmp still do.
    #[arg(long)]
    read_only: bool,
    /// The program's working directory inside the VM (default /).
    #[arg(short = 'w', long = "workdir", value_name = "DIR")]
    workdir: Option<OsString>,
    /// The VM's host name (uname, /etc/hostname, /etc/hosts; default onering), as
    /// `docker run --hostname`: 1 to 64 bytes, no NUL or newline.
    #[arg(long, value_name = "NAME", value_parser = parse_hostname)]
    hostname: Option<OsString>,
    /// Listen on the unix socket PATH for `onering exec`: other processes started
    /// in the running VM (the OCI runtime's `exec`; made anew, removed by its
    /// owner).
    #[arg(long, value_name = "PATH", hide = true)]
    exec_socket: Option<std::path::PathBuf>,
    /// Keep stdin open: the program reads the host's (as `docker run -i`); without
    /// it the program's stdin is empty.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Do not report unsupported system calls.
    #[arg(short, long)]
    quiet: bool,
    /// At exit, a summary: per system call count, errors and time (as strace -c),
    /// sites rewritten and calls that trapped, VM exits by reason, hostcalls by
    /// kind, faults, interrupts, halts and kicks, each vCPU's time.
    #[arg(long)]
    stats: bool,
    /// Write the --stats summary as JSON to FILE (implies the counting of --stats).
    #[arg(long, value_name = "FILE")]
    stats_json: Option<std::path::PathBuf>,
    /// Print every system call as strace -f -tt -T does; SET (after `=`) limits it:
    /// names and classes (%file, %net, %process, %memory, %signal), comma
    /// separated, `!` in front to negate.
    #[arg(long, value_name = "SET", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    trace: Option<String>,
    /// Write the --trace lines to FILE instead of stderr (implies --trace).
    #[arg(long, value_name = "FILE")]
    trace_out: Option<std::path::PathBuf>,
    /// Count guest-mode cycles and instructions (perf_event_open) and print them
    /// at exit; where the host has no counters, say so and print TSC-based times.
    #[arg(long)]
    perf: bool,
    /// Leave `syscall` instructions alone: every system call traps (slow; for
    /// comparison and debugging).
    #[arg(long)]
    no_rewrite: bool,
    /// Give the program no vDSO: clock_gettime and gettimeofday become system calls
    /// (for comparison and debugging).
    #[arg(long)]
    no_vdso: bool,
    /// Sample the program and the kernel while it runs and write a flame graph (SVG)
    /// to FILE, and the folded stacks beside it (FILE with the extension .folded; a
    /// FILE ending in .folded gets the stacks, and the graph goes to FILE.svg).
    #[arg(long, value_name = "FILE")]
    profile: Option<std::path::PathBuf>,
    /// Sample the program and the kernel and print the N hottest functions at exit.
    #[arg(long, value_name = "N")]
    profile_top: Option<usize>,
    /// Samples a second of each vCPU's running time for --profile and --profile-top
    /// (stacks are read at the host's timer tick, at most its rate: each counts for
    /// the periods it covers).
    #[arg(long, value_name = "HZ", default_value_t = 1000)]
    profile_hz: u32,
    /// Wait for gdb on ADDR (host:port) before the program's first instruction;
    /// then `gdb PROGRAM -ex 'target remote ADDR'`: breakpoints, single steps,
    /// registers, memory, the program's threads.
    #[arg(long, value_name = "ADDR")]
    gdb: Option<String>,
    /// Publish a guest port on the host, as docker run -p (repeatable; implies
    /// --net user): [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp], ports or ranges
    /// (8000-8010:8000-8010).
    #[arg(short = 'p', long = "publish", value_name = "[HOSTIP:]HOSTPORT:GUESTPORT[/PROTO]")]
    publish: Vec<PortForward>,
    /// The VM's network: none (loopback only, the default without -p), user
    /// (outbound TCP/UDP and DNS through the host with passt, no root; the host is
    /// the gateway 10.0.2.2) or tap:NAME (an existing TAP device).
    #[arg(long, value_name = "none|user|tap:NAME")]
    net: Option<String>,
    /// The VM's IPv4 address and prefix (default with --net user: 10.0.2.15/24).
    #[arg(long, value_name = "CIDR")]
    ip: Option<String>,
    /// The VM's default gateway (default with --net user: 10.0.2.2, the host).
    #[arg(long, value_name = "IP")]
    gateway: Option<String>,
    /// The static x86-64 ELF program.
    program: OsString,
    /// Its arguments (everything after PROGRAM goes to the program).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// `--hostname`: 1 to 64 bytes (Linux's limit), no NUL or newline.
fn parse_hostname(s: &str) -> Result<OsString, String> {
    if !onering_abi::hostname_ok(s.as_bytes()) {
        return Err(format!("a host name is 1 to {} bytes without NUL or newline", onering_abi::MAX_HOSTNAME));
    }
    Ok(s.into())
}

/// Parses `--ulimit NAME=SOFT[:HARD]` (HARD defaults to SOFT, as docker's; -1
/// or `unlimited` is RLIM_INFINITY): the resource's number and its limits.
fn parse_ulimit(s: &str) -> Result<(usize, u64, u64), String> {
    use onering_abi::rlimit;
    let (name, v) = s.split_once('=').ok_or("expected NAME=SOFT[:HARD]")?;
    let n = rlimit::number(name)
        .ok_or_else(|| format!("unknown resource {name:?} (one of {})", rlimit::NAMES.join(", ")))?;
    let (soft, hard) = v.split_once(':').unwrap_or((v, v));
    let limit = |x: &str| match x {
        "-1" | "unlimited" => Ok(u64::MAX),
        _ => x.parse::<u64>().map_err(|_| format!("{x:?} is not a number, -1 or unlimited")),
    };
    let (soft, hard) = (limit(soft)?, limit(hard)?);
    if soft > hard {
        return Err(format!("{name}: the soft limit is above the hard one"));
    }
    if n == rlimit::NOFILE && hard > onering_abi::NR_OPEN {
        return Err(format!("nofile: at most {}", onering_abi::NR_OPEN));
    }
    Ok((n, soft, hard))
}

/// Parses `--oci-caps`: five hexadecimal masks separated by `:`, within the
/// capabilities Linux knows.
fn parse_caps(s: &str) -> Result<[u64; onering_abi::caps::SETS], String> {
    let bad = || format!("five hexadecimal capability masks B:P:E:I:A, within {:#x}", onering_abi::caps::ALL);
    let masks: Vec<u64> =
        s.split(':').map(|m| u64::from_str_radix(m, 16).map_err(|_| bad())).collect::<Result<_, _>>()?;
    let sets: [u64; onering_abi::caps::SETS] = masks.try_into().map_err(|_| bad())?;
    if sets.iter().any(|m| m & !onering_abi::caps::ALL != 0) {
        return Err(bad());
    }
    Ok(sets)
}

/// Parses sizes like `256M`, `1G`, `512m`, `64MiB`, `1048576`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let n: u64 = digits.parse().map_err(|_| format!("'{s}' is not a size (try 256M or 1G)"))?;
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("'{s}' has an unknown unit (use K, M or G)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("'{s}' is too large"))
}

/// Why `onering run` did not run the program; each maps to docker's exit status.
enum Failure {
    /// onering itself failed (no KVM, bad options, too little memory): 125.
    Onering(String),
    /// The file exists but cannot be run: 126.
    NotRunnable(String),
    /// The file does not exist: 127.
    NotFound(String),
}

impl Failure {
    fn status(&self) -> u8 {
        match self {
            Failure::Onering(_) => 125,
            Failure::NotRunnable(_) => 126,
            Failure::NotFound(_) => 127,
        }
    }
    fn message(&self) -> &str {
        match self {
            Failure::Onering(m) | Failure::NotRunnable(m) | Failure::NotFound(m) => m,
        }
    }
}

/// Everything after the program belongs to the program (`onering run prog --mem x`
/// passes `--mem x` to prog), as with `docker run`. clap would still parse options
/// there, so a `--` goes in front of the program before clap sees the arguments.
fn separate_program(mut args: Vec<OsString>) -> Vec<OsString> {
    const TAKES_VALUE: &[&str] = &[
        "--mem",
        "--smp",
        "-e",
        "--env",
        "--rootfs",
        "-v",
        "--volume",
        "-w",
        "--workdir",
        "--hostname",
        "--profile",
        "--profile-top",
        "--profile-hz",
        "--gdb",
        "--stats-json",
        "--trace-out",
        "-p",
        "--publish",
        "--net",
        "--ip",
        "--gateway",
        "--exec-socket",
        "--oci-caps",
        "--ulimit",
        "--tmpfs",
    ];
    let Some(run) = args.iter().position(|a| a == "run") else {
        return args;
    };
    let mut i = run + 1;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if a == "--" {
            break;
        }
        if TAKES_VALUE.contains(&a.as_ref()) {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            args.insert(i, "--".into());
            break;
        }
    }
    args
}

/// onering's `main`: runs the command line of this process and returns the exit
/// status (unless the VM ran: then the process ends with it).
pub fn main() -> u8 {
    let args: Vec<OsString> = std::env::args_os().collect();
    // runc's command line (podman, containerd): `create`, `start`, ... (oci/).
    if let Some(status) = crate::oci::dispatch(&args) {
        return status;
    }
    let cli = match Cli::try_parse_from(separate_program(args)) {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return 0;
        }
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // Plain `onering`: the help, as a usage error.
            let _ = e.print();
            return 125;
        }
        Err(e) => {
            let text = e.render().to_string();
            say_raw!("onering: {}", text.strip_prefix("error: ").unwrap_or(&text));
            return 125;
        }
    };
    match cli.command {
        Command::Run(args) => match run(args) {
            Ok(never) => match never {},
            Err(f) => {
                say!("onering: {}", f.message());
                f.status()
            }
        },
    }
}

/// The guest environment: the host's if asked, then each -e.
fn environment(args: &RunArgs) -> Vec<Vec<u8>> {
    let mut vars: Vec<(OsString, OsString)> = if args.env_host { std::env::vars_os().collect() } else { Vec::new() };
    for e in &args.env {
        let bytes = e.as_bytes();
        let (key, value) = match bytes.iter().position(|b| *b == b'=') {
            Some(i) => (OsString::from_vec(bytes[..i].to_vec()), OsString::from_vec(bytes[i + 1..].to_vec())),
            None => match std::env::var_os(e) {
                Some(v) => (e.clone(), v),
                None => continue,
            },
        };
        vars.retain(|(k, _)| *k != key);
        vars.push((key, value));
    }
    vars.into_iter()
        .map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            kv
        })
        .collect()
}

/// The host file to run: with `--rootfs`, the program as the guest names it in that
/// tree (a path, or a bare name searched in the guest's `PATH`, as `docker run
/// IMAGE sh`); a path only the host has still works. Without it, the path as given.
fn program_file(args: &RunArgs) -> OsString {
    let Some(root) = args.rootfs.as_deref().filter(|r| !r.is_file()) else { return args.program.clone() };
    let env = environment(args);
    let path = env.iter().find_map(|v| v.strip_prefix(b"PATH=")).unwrap_or(onering_abi::DEFAULT_PATH);
    let workdir = args.workdir.as_deref().map_or(&b"/"[..], |w| w.as_bytes());
    match crate::loader::rootfs::find_program(root, args.program.as_bytes(), workdir, path) {
        Some(found) => found.into_os_string(),
        None => args.program.clone(),
    }
}

/// With `--rootfs FILE.tar`: the program as the guest names it in the archive (a
/// path, or a bare name searched in the guest's `PATH`), None if it is not there
/// (then the host's path as given).
fn program_in_archive(args: &RunArgs) -> Result<Option<Vec<u8>>, Failure> {
    let Some(root) = args.rootfs.as_deref().filter(|r| r.is_file()) else { return Ok(None) };
    let index = crate::hostfs::tar::TarIndex::open(root)
        .map_err(|e| Failure::Onering(format!("--rootfs {}: {e}", root.display())))?;
    let env = environment(args);
    let path = env.iter().find_map(|v| v.strip_prefix(b"PATH=")).unwrap_or(onering_abi::DEFAULT_PATH);
    let workdir = args.workdir.as_deref().map_or(&b"/"[..], |w| w.as_bytes());
    let name = args.program.as_bytes();
    let candidates: Vec<Vec<u8>> = if name.contains(&b'/') {
        vec![if name.first() == Some(&b'/') { name.to_vec() } else { [workdir, b"/", name].concat() }]
    } else {
        path.split(|b| *b == b':').filter(|d| !d.is_empty()).map(|d| [d, b"/", name].concat()).collect()
    };
    for c in candidates {
        if let Some(n) = index.resolve(&c) {
            let st = index.nodes[n].stat;
            if st.mode & 0o170000 != 0o100000 {
                continue;
            }
            if st.mode & 0o111 == 0 {
                return Err(Failure::NotRunnable(format!(
                    "{}: permission denied (not executable)",
                    args.program.to_string_lossy()
                )));
            }
            let mut bytes = vec![0u8; st.size as usize];
            let got = index
                .read(n, 0, &mut bytes)
                .map_err(|e| Failure::NotRunnable(format!("{}: {e}", args.program.to_string_lossy())))?;
            bytes.truncate(got);
            return Ok(Some(bytes));
        }
    }
    Ok(None)
}

/// The program file, checked to be an executable file, and mapped.
fn read_program(path: &OsString) -> Result<ProgramBytes, Failure> {
    let shown = path.to_string_lossy();
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Failure::NotFound(format!("{shown}: no such file")),
        std::io::ErrorKind::PermissionDenied => Failure::NotRunnable(format!("{shown}: permission denied")),
        _ => Failure::NotRunnable(format!("{shown}: {e}")),
    })?;
    if meta.is_dir() {
        return Err(Failure::NotRunnable(format!("{shown}: is a directory")));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Failure::NotRunnable(format!("{shown}: permission denied (not executable)")));
    }
    let mapped = std::fs::File::open(path).and_then(|f| crate::sys::fs::MappedFile::new(&f));
    Ok(Box::new(mapped.map_err(|e| Failure::NotRunnable(format!("{shown}: {e}")))?))
}

/// The program file's bytes: mapped from the host's file, or read from a tar archive.
type ProgramBytes = Box<dyn std::ops::Deref<Target = [u8]>>;

/// The program's bytes: from the `--rootfs` archive, else the host's file.
fn program_bytes(args: &RunArgs) -> Result<ProgramBytes, Failure> {
    match program_in_archive(args)? {
        Some(bytes) => Ok(Box::new(bytes)),
        None => read_program(&program_file(args)),
    }
}

/// The `-v HOST:GUEST[:ro]` mounts: HOST must be a directory (made absolute),
/// GUEST an absolute path other than `/`, `/dev` or `/tmp` and below them.
fn volumes(args: &RunArgs) -> Result<Vec<crate::hostfs::MountSpec>, Failure> {
    let bad = |v: &OsString, why: &str| Failure::Onering(format!("-v {}: {why}", v.to_string_lossy()));
    let mut out: Vec<crate::hostfs::MountSpec> = Vec::new();
    for v in &args.volume {
        let parts: Vec<&[u8]> = v.as_bytes().split(|b| *b == b':').collect();
        let (host, guest, ro) = match parts[..] {
            [h, g] => (h, g, false),
            [h, g, b"ro"] => (h, g, true),
            [h, g, b"rw"] => (h, g, false),
            _ => return Err(bad(v, "expected HOST:GUEST or HOST:GUEST:ro")),
        };
        let host = std::path::Path::new(std::ffi::OsStr::from_bytes(host));
        let host = std::path::absolute(host).map_err(|e| bad(v, &e.to_string()))?;
        if !host.is_dir() {
            return Err(bad(v, "the host path is not a directory"));
        }
        let guest =
            crate::loader::rootfs::normal_path(guest).ok_or_else(|| bad(v, "GUEST must be an absolute path"))?;
        let taken = [&b"/"[..], b"/dev", b"/tmp", b"/proc"];
        if taken.iter().any(|t| guest == *t || (*t != b"/" && guest.starts_with(&[t, &b"/"[..]].concat()))) {
            return Err(bad(v, "GUEST cannot be /, /dev, /proc, /tmp or below them"));
        }
        if out.iter().any(|m| m.guest == guest) {
            return Err(bad(v, "another -v has the same GUEST"));
        }
        out.push(crate::hostfs::MountSpec { host, guest, ro, rootfs: false, tar: false });
    }
    Ok(out)
}

/// The `--tmpfs` mounts, none at the same place as another or as a volume.
fn tmpfs_mounts(
    args: &RunArgs,
    volumes: &[crate::hostfs::MountSpec],
) -> Result<Vec<onering_abi::tmpfs::Tmpfs>, Failure> {
    for (i, m) in args.tmpfs.iter().enumerate() {
        if volumes.iter().any(|v| v.guest == m.path) || args.tmpfs[..i].iter().any(|o| o.path == m.path) {
            let shown = String::from_utf8_lossy(&m.path);
            return Err(Failure::Onering(format!("--tmpfs {shown}: another mount has the same path")));
        }
    }
    Ok(args.tmpfs.clone())
}

/// The network from `--net`, `-p`, `--ip` and `--gateway` (None: loopback only),
/// and the option that asked for it.
fn network(args: &RunArgs) -> Result<(Option<NetSpec>, &'static str), Failure> {
    let bad = |m: String| Failure::Onering(m);
    let ip = args.ip.as_deref().map(netback::parse_cidr).transpose().map_err(|e| bad(format!("--ip {e}")))?;
    let gateway = match args.gateway.as_deref() {
        Some(g) => Some(g.parse().map_err(|_| bad(format!("--gateway '{g}' is not an IPv4 address")))?),
        None => None,
    };
    let net = args.net.as_deref().unwrap_or(if args.publish.is_empty() { "none" } else { "user" });
    let (mode, option) = match net {
        "none" => {
            if !args.publish.is_empty() {
                return Err(bad("-p needs --net user (ports are published through passt)".into()));
            }
            if ip.is_some() || gateway.is_some() {
                return Err(bad("--ip and --gateway need a network (--net user or --net tap:NAME)".into()));
            }
            return Ok((None, ""));
        }
        "user" => (Mode::User(args.publish.clone()), if args.net.is_some() { "--net user" } else { "-p" }),
        tap => match tap.strip_prefix("tap:") {
            Some(name) if !name.is_empty() => {
                if !args.publish.is_empty() {
                    return Err(bad(
                        "-p works with --net user only (with a TAP device, the host's own routing decides)".into(),
                    ));
                }
                (Mode::Tap(name.to_string()), "--net tap")
            }
            _ => return Err(bad(format!("--net '{net}' is not none, user or tap:NAME"))),
        },
    };
    let spec = match mode {
        Mode::User(_) => {
            let ip = ip.unwrap_or(netback::USER_IP);
            let gateway = gateway.unwrap_or(if ip == netback::USER_IP {
                netback::USER_GATEWAY
            } else {
                netback::host_in(ip, 2, &[ip.0])
            });
            let dns =
                if ip == netback::USER_IP { netback::USER_DNS } else { netback::host_in(ip, 3, &[ip.0, gateway]) };
            NetSpec { mode, mac: netback::MAC, mtu: netback::MTU, ip: Some(ip), gateway: Some(gateway), dns: Some(dns) }
        }
        Mode::Tap(_) => NetSpec { mode, mac: netback::MAC, mtu: netback::MTU, ip, gateway, dns: None },
    };
    Ok((Some(spec), option))
}

fn run(args: RunArgs) -> Result<std::convert::Infallible, Failure> {
    let trace: &'static Trace = Box::leak(Box::new(Trace::from_env()));
    if args.smp == 0 || args.smp > onering_abi::MAX_CPUS as u64 {
        return Err(Failure::Onering(format!("--smp {} is out of range (1 to {})", args.smp, onering_abi::MAX_CPUS)));
    }
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    if args.smp > host_cpus {
        say!(
            "onering: warning: --smp {} is more than this host's {host_cpus} CPUs: vCPUs will take turns, and \
             threads that spin waiting for each other get slow",
            args.smp
        );
    }
    if args.mem > onering_abi::layout::MAX_RAM {
        return Err(Failure::Onering(format!(
            "--mem {} MiB is more than the {} GiB onering supports",
            args.mem >> 20,
            onering_abi::layout::MAX_RAM >> 30
        )));
    }
    let (net, net_option) = network(&args)?;
    let trace_set = match (&args.trace, &args.trace_out) {
        (None, None) => None,
        (spec, out) => {
            let set = onering_abi::sysnames::parse_set(spec.as_deref().unwrap_or(""))
                .map_err(|e| Failure::Onering(format!("--trace: {e}")))?;
            crate::observe::trace_to(out.as_deref()).map_err(|e| {
                Failure::Onering(format!("--trace-out {}: {e}", out.as_deref().unwrap_or(Path::new("")).display()))
            })?;
            Some(set)
        }
    };
    let stats_on = args.stats || args.stats_json.is_some();
    crate::observe::STATS_ON.store(stats_on || args.perf, std::sync::atomic::Ordering::Relaxed);
    crate::observe::PERF_ON.store(args.perf, std::sync::atomic::Ordering::Relaxed);
    let mut args = args;
    let mut file = program_bytes(&args)?;
    // A script runs its `#!` interpreter (one level, as the kernel's execve does
    // for what the program runs later): argv becomes the interpreter, its
    // argument, the script's path, then the arguments.
    if let Some(line) = elf::shebang(&file[..file.len().min(256)]) {
        let shown = args.program.to_string_lossy().into_owned();
        let (interp, arg) = line.map_err(|_| Failure::NotRunnable(format!("{shown}: a #! line without a program")))?;
        let script = std::mem::replace(&mut args.program, OsString::from_vec(interp));
        let rest = std::mem::take(&mut args.args);
        args.args = arg.map(OsString::from_vec).into_iter().chain(std::iter::once(script)).chain(rest).collect();
        file = program_bytes(&args)?;
    }
    let path = &args.program;
    let shown = path.to_string_lossy().into_owned();
    let prog = elf::Program::parse(&file).map_err(|e| Failure::NotRunnable(format!("{shown}: {e}")))?;
    trace.mark("program read and validated");
    // A dynamically linked program without --rootfs finds its loader and libraries
    // in the host's own tree, read-only to it (changes stay in the VM), from the
    // host's working directory (docs/design.md, "Programs the kernel loads").
    let host_root = prog.interp.is_some() && args.rootfs.is_none();
    let host_cwd = match (host_root, &args.workdir) {
        (true, None) => std::env::current_dir().ok().map(std::path::PathBuf::into_os_string),
        _ => None,
    };

    let gdb = args.gdb.as_deref().map(vstate::gdb::listen).transpose().map_err(Failure::Onering)?;
    let volumes = volumes(&args)?;
    let tmpfs = tmpfs_mounts(&args, &volumes)?;
    let config = VmConfig {
        mem: args.mem,
        smp: args.smp,
        argv: std::iter::once(&args.program).chain(&args.args).map(|a| a.as_bytes().to_vec()).collect(),
        envp: environment(&args),
        execfn: path.as_bytes(),
        rootfs: if host_root { Some(std::path::Path::new("/")) } else { args.rootfs.as_deref() },
        volumes,
        read_only: args.read_only,
        rootfs_rw: args.rootfs_rw,
        caps: args.oci_caps,
        no_new_privs: args.no_new_privileges,
        rlimits: args.ulimit.clone(),
        tmpfs,
        workdir: args.workdir.as_deref().or(host_cwd.as_deref()),
        hostname: args.hostname.as_deref().map(|h| h.as_bytes()),
        interactive: args.interactive,
        quiet: args.quiet,
        rewrite: !args.no_rewrite,
        vdso: !args.no_vdso,
        sampler: (args.profile.is_some() || args.profile_top.is_some())
            .then(|| vstate::sampler::Sampler::new(args.profile_hz, args.smp)),
        net,
        net_option,
        trace_set,
        stats: stats_on,
        gdb: gdb.as_ref(),
        exec_socket: args.exec_socket.as_deref(),
    };
    let (stats, stats_json, perf, ncpus) = (args.stats, args.stats_json.clone(), args.perf, args.smp);
    let started = std::time::Instant::now();
    let profile = config.sampler.map(|sampler| {
        let (bias, _) = crate::loader::placement(&prog);
        let symbols = profile::Symbols::new(
            onering_rewrite::functions::named_functions(&file),
            bias,
            |a| crate::embedded::kernel_symbols::lookup(a).map(|(name, _)| name),
            onering_abi::layout::KERNEL_VBASE,
        );
        (sampler, symbols, args.profile.clone(), args.profile_top)
    });
    let on_exit: builder::OnExit = Box::new(move |mem, outcome, rewritten| {
        crate::observe::flush_trace();
        let wall_ns = started.elapsed().as_nanos() as u64;
        if stats || stats_json.is_some() {
            let summary = summary(mem, rewritten, ncpus, wall_ns);
            if stats {
                print_stats(mem, rewritten, ncpus, &summary);
            }
            if let Some(path) = &stats_json {
                if let Err(e) = std::fs::write(path, summary.json()) {
                    say!("onering: --stats-json {}: {e}", path.display());
                }
            }
        }
        if perf {
            for line in crate::observe::perf_report(wall_ns) {
                say!("{line}");
            }
        }
        if let Some((sampler, symbols, file, top)) = &profile {
            report_profile(sampler, symbols, file.as_deref(), *top);
        }
        report(outcome)
    });
    builder::run(&config, &prog, &file, &shown, trace, on_exit).map_err(|e| {
        if e.is_program_error() {
            Failure::NotRunnable(e.to_string())
        } else {
            Failure::Onering(e.to_string())
        }
    })
}

/// `--profile FILE` and `--profile-top N`: writes the flame graph and the folded
/// stacks, prints the hottest functions; a failure to write is reported, and does
/// not change the program's exit status.
fn report_profile(
    sampler: &vstate::sampler::Sampler,
    symbols: &profile::Symbols,
    file: Option<&Path>,
    top: Option<usize>,
) {
    let (samples, took) = sampler.take();
    say!(
        "onering: profile: {} samples at {} Hz a vCPU over {:.2} s ({} stacks read at the host's timer ticks; halted vCPUs are not sampled)",
        samples.total(),
        sampler.hz,
        took.as_secs_f64(),
        samples.stacks()
    );
    if let Some(n) = top {
        say!("{}", profile::top(&samples, symbols, n).trim_end());
        if std::env::var_os("ONERING_PROFILE_ADDRESSES").is_some() {
            for (addr, count) in samples.leaves().into_iter().take(n) {
                say!("{count:>7}  {addr:#x}  {}", symbols.name(addr));
            }
        }
    }
    let Some(file) = file else {
        return;
    };
    let folded = profile::folded(&samples, symbols);
    // (FILE.folded asked for the folded stacks: the flame graph goes beside it, in
    // FILE.svg, rather than over them.)
    let (file, folded_path) = match file.extension() {
        Some(e) if e == "folded" => (file.with_extension("svg"), file.to_path_buf()),
        _ => (file.to_path_buf(), file.with_extension("folded")),
    };
    let file = &file;
    let written = std::fs::write(&folded_path, folded.iter().map(|l| format!("{l}\n")).collect::<String>())
        .map_err(|e| format!("{}: {e}", folded_path.display()))
        .and_then(|()| profile::flame_graph(&folded, "onering profile"))
        .and_then(|svg| std::fs::write(file, svg).map_err(|e| format!("{}: {e}", file.display())));
    match written {
        Ok(()) => {
            say!("onering: profile: flame graph in {}, folded stacks in {}", file.display(), folded_path.display())
        }
        Err(e) => say!("onering: profile: {e}"),
    }
}

fn signal_name(sig: u64) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// `--stats`: system-call sites rewritten and left, calls that trapped, interrupts,
/// local-APIC stores and thread switches (each CPU counts its own), how often
/// vCPUs halted in the VMM and were kicked awake, and the hostcalls (exits) made,
/// of them output writes; the page cache's chunks the kernel gave back when memory
/// ran short; the vCPUs' steal time.
fn print_stats(mem: &GuestMemoryMmap, r: RewriteStats, ncpus: u64, summary: &crate::observe::Summary) {
    use onering_abi::percpu_offsets as pc;
    use std::sync::atomic::Ordering::Relaxed;
    let sum = |offset: usize| percpu_sum(mem, ncpus, offset);
    say!("onering: stats: system calls (as strace -c; time is wall time in the kernel, blocking included):");
    say_raw!("{}", summary.call_table());
    for line in summary.lines() {
        say!("{line}");
    }
    say!(
        "onering: stats: {} syscall sites, {} rewritten, {} left on the trap path; {} cpuid sites, {} rewritten; \
         {} system calls trapped; \
         {} interrupts, {} APIC stores, {} thread switches; {} halts, {} kicks; {} hostcalls, {} output writes; \
         {} host-file closes, unlocks and writes carried by a later hostcall",
        r.sites,
        r.rewritten,
        r.sites - r.rewritten,
        r.cpuid_sites,
        r.cpuid_rewritten,
        sum(pc::TRAPS),
        sum(pc::INTERRUPTS),
        sum(pc::LAPIC_WRITES),
        sum(pc::SWITCHES),
        exit::HALTS.load(Relaxed),
        exit::KICKS.load(Relaxed),
        exit::HOSTCALLS.load(Relaxed),
        exit::WRITES.load(Relaxed),
        exit::DEFERRED.load(Relaxed)
    );
    say!("onering: stats: page cache: {} chunks given back under memory pressure", sum(pc::RECLAIMED));
    say!("onering: stats: {} address-space switches", sum(pc::ROOT_LOADS));
    say!(
        "onering: stats: {} host-file calls served by the poller, without an exit",
        crate::vstate::poller::POLLED.load(Relaxed)
    );
    say!(
        "onering: stats: steal time (vCPU threads waiting for a host CPU, KVM's record): {:.1} ms",
        sum(onering_abi::STEAL_TIME_OFFSET as usize) as f64 / 1e6
    );
    if NET.present.load(Relaxed) {
        say!(
            "onering: stats: net: {} frames ({} bytes) in, {} frames ({} bytes) out ({} with the checksum left to \
             the host); {} doorbells, {} kicks, {} dropped",
            NET.rx_frames.load(Relaxed),
            NET.rx_bytes.load(Relaxed),
            NET.tx_frames.load(Relaxed),
            NET.tx_bytes.load(Relaxed),
            NET.csum_offloaded.load(Relaxed),
            NET.doorbells.load(Relaxed),
            NET.kicks.load(Relaxed),
            NET.drops.load(Relaxed)
        );
    }
}

/// Counter `offset` of the per-CPU headers, summed over the vCPUs.
fn percpu_sum(mem: &GuestMemoryMmap, ncpus: u64, offset: usize) -> u64 {
    use vm_memory::Bytes;
    (0..ncpus)
        .map(|cpu| {
            let at = onering_abi::layout::PERCPU_PHYS + cpu * onering_abi::layout::PERCPU_STRIDE + offset as u64;
            mem.read_obj::<u64>(vm_memory::GuestAddress(at)).unwrap_or(0)
        })
        .sum()
}

/// The `--stats` summary: the kernel's per-call table and the VMM's counters,
/// with the kernel's per-CPU counters and the rewriter's figures.
fn summary(mem: &GuestMemoryMmap, r: RewriteStats, ncpus: u64, wall_ns: u64) -> crate::observe::Summary {
    use onering_abi::percpu_offsets as pc;
    use std::sync::atomic::Ordering::Relaxed;
    use vm_memory::Bytes;
    let sum = |offset: usize| percpu_sum(mem, ncpus, offset);
    let tsc_at = onering_abi::layout::BOOT_INFO_PHYS + std::mem::offset_of!(onering_abi::BootInfo, tsc_hz) as u64;
    let tsc_hz = mem.read_obj::<u64>(vm_memory::GuestAddress(tsc_at)).unwrap_or(0);
    let traps = sum(pc::TRAPS);
    let calls = crate::observe::total_calls();
    let counters = vec![
        ("system calls", calls),
        ("trapped", traps),
        ("through rewritten sites", calls.saturating_sub(traps)),
        ("syscall sites", r.sites as u64),
        ("sites rewritten", r.rewritten as u64),
        ("cpuid sites", r.cpuid_sites as u64),
        ("cpuid sites rewritten", r.cpuid_rewritten as u64),
        ("faults (exceptions in ring 3)", sum(pc::FAULTS)),
        ("interrupts", sum(pc::INTERRUPTS)),
        ("APIC stores", sum(pc::LAPIC_WRITES)),
        ("thread switches", sum(pc::SWITCHES)),
        ("halts", exit::HALTS.load(Relaxed)),
        ("kicks", exit::KICKS.load(Relaxed)),
        ("hostcalls", exit::HOSTCALLS.load(Relaxed)),
    ];
    crate::observe::Summary::collect(ncpus, tsc_hz, counters, wall_ns)
}

/// Prints how the VM ended (if not by a plain exit) and returns the exit status.
fn report(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Exited(s) => s,
        // A broken pipe is routine at the end of a pipeline, and Ctrl-C is what the
        // user asked for: no message, as a shell.
        Outcome::Killed { signal: s @ (2 | 13), .. } => 128 + s as u8,
        // A signal someone sent: where the program was says nothing.
        Outcome::Killed { signal, .. } if !matches!(signal, 4 | 5 | 6 | 7 | 8 | 11 | 31) => {
            say!("onering: program killed by {}", signal_name(signal));
            128 + (signal as u8 & 0x7f)
        }
        Outcome::Stopped(signal) => {
            say!(
                "onering: the program did not end within {} s of {}: stopped",
                crate::vstate::machine::GRACE.as_secs(),
                signal_name(signal)
            );
            128 + (signal as u8 & 0x7f)
        }
        Outcome::Killed { signal, rip, addr } => {
            let at = if signal == 11 || signal == 7 { format!(" (fault address {addr:#x})") } else { String::new() };
            if rip == 0 {
                // (Stray kernel code the program jumped into: no address is known.)
                say!("onering: program killed by {}", signal_name(signal));
            } else {
                say!("onering: program killed by {} at {rip:#x}{at}", signal_name(signal));
            }
            128 + (signal as u8 & 0x7f)
        }
        Outcome::KernelPanic(msg) => {
            say!("onering: kernel panic: {msg}");
            125
        }
        Outcome::Fatal { vector, rip, error } => {
            say!("onering: unrecoverable exception {vector} at {rip:#x} (error code {error:#x})");
            125
        }
        Outcome::GuestError(msg) => {
            say!("onering: the VM stopped: {msg}");
            125
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_arguments_are_separated() {
        let v = |s: &[&str]| s.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            separate_program(v(&["onering", "run", "--mem", "1G", "-e", "A=1", "-q", "p", "--mem", "x"])),
            v(&["onering", "run", "--mem", "1G", "-e", "A=1", "-q", "--", "p", "--mem", "x"])
        );
        assert_eq!(
            separate_program(v(&["onering", "run", "--mem=1G", "p"])),
            v(&["onering", "run", "--mem=1G", "--", "p"])
        );
        assert_eq!(separate_program(v(&["onering", "run", "--", "p", "-x"])), v(&["onering", "run", "--", "p", "-x"]));
        assert_eq!(separate_program(v(&["onering", "--help"])), v(&["onering", "--help"]));
        assert_eq!(
            separate_program(v(&[
                "onering",
                "run",
                "-p",
                "80:80",
                "--net",
                "user",
                "--ip",
                "a",
                "--gateway",
                "b",
                "p"
            ])),
            v(&["onering", "run", "-p", "80:80", "--net", "user", "--ip", "a", "--gateway", "b", "--", "p"])
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("64mib"), Ok(64 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }
}
