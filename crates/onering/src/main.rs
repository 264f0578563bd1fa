//! onering: run one unmodified static Linux program in its own thin KVM virtual
//! machine. `onering run [OPTIONS] <PROGRAM> [ARGS]...`
//!
//! This file is the CLI: it parses options, maps every failure to docker's exit
//! statuses (125 onering failed, 126 not runnable, 127 not found; otherwise the
//! program's status, or 128 + signal), and drives the other modules: `elf` validates
//! the program, `loader` lays out the guest, `vm` creates it, `exit` serves it.
#![deny(unsafe_code)]

mod elf;
mod exit;
mod loader;
mod stack;
mod sys;
mod vm;
mod x86;

mod kernel_image {
    include!(concat!(env!("OUT_DIR"), "/kernel_image.rs"));
}

use clap::{Args, Parser, Subcommand};
use exit::{Action, Env, Outcome, VmExit};
use kvm_ioctls::VcpuFd;
use std::ffi::OsString;
use std::io::{IsTerminal, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::process::ExitCode;
use vm_memory::GuestMemoryMmap;

#[derive(Parser)]
#[command(
    name = "onering",
    version,
    about = "Run one unmodified static Linux program in its own thin KVM virtual machine"
)]
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
    /// Do not report unsupported system calls.
    #[arg(short, long)]
    quiet: bool,
    /// The static x86-64 ELF program.
    program: OsString,
    /// Its arguments (everything after PROGRAM goes to the program).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// Parses sizes like `256M`, `1G`, `512m`, `64MiB`, `1048576`.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[digits.len()..];
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{s}' is not a size (try 256M or 1G)"))?;
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("'{s}' has an unknown unit (use K, M or G)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
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
    const TAKES_VALUE: &[&str] = &["--mem", "--smp", "-e", "--env"];
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(separate_program(std::env::args_os().collect())) {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help, --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let text = e.render().to_string();
            eprint!("onering: {}", text.strip_prefix("error: ").unwrap_or(&text));
            return ExitCode::from(125);
        }
    };
    match cli.command {
        Command::Run(args) => match run(args) {
            Ok(code) => ExitCode::from(code),
            Err(f) => {
                eprintln!("onering: {}", f.message());
                ExitCode::from(f.status())
            }
        },
    }
}

/// The guest environment: the host's if asked, then each -e.
fn environment(args: &RunArgs) -> Vec<Vec<u8>> {
    let mut vars: Vec<(OsString, OsString)> = if args.env_host {
        std::env::vars_os().collect()
    } else {
        Vec::new()
    };
    for e in &args.env {
        let bytes = e.as_bytes();
        let (key, value) = match bytes.iter().position(|b| *b == b'=') {
            Some(i) => (
                OsString::from_vec(bytes[..i].to_vec()),
                OsString::from_vec(bytes[i + 1..].to_vec()),
            ),
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

fn read_program(path: &OsString) -> Result<Vec<u8>, Failure> {
    let shown = path.to_string_lossy();
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Failure::NotFound(format!("{shown}: no such file")),
        std::io::ErrorKind::PermissionDenied => {
            Failure::NotRunnable(format!("{shown}: permission denied"))
        }
        _ => Failure::NotRunnable(format!("{shown}: {e}")),
    })?;
    if meta.is_dir() {
        return Err(Failure::NotRunnable(format!("{shown}: is a directory")));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(Failure::NotRunnable(format!(
            "{shown}: permission denied (not executable)"
        )));
    }
    std::fs::read(path).map_err(|e| Failure::NotRunnable(format!("{shown}: {e}")))
}

fn random16() -> [u8; 16] {
    let mut r = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut r);
    }
    r
}

fn run(args: RunArgs) -> Result<u8, Failure> {
    if args.smp == 0 || args.smp > onering_abi::MAX_CPUS as u64 {
        return Err(Failure::Onering(format!(
            "--smp {} is out of range (1 to {})",
            args.smp,
            onering_abi::MAX_CPUS
        )));
    }
    if args.mem > onering_abi::layout::MAX_RAM {
        return Err(Failure::Onering(format!(
            "--mem {} MiB is more than the {} GiB onering supports",
            args.mem >> 20,
            onering_abi::layout::MAX_RAM >> 30
        )));
    }
    let mem_size = onering_abi::layout::align_up(args.mem, onering_abi::layout::HUGE_PAGE_SIZE);
    let path = &args.program;
    let shown = path.to_string_lossy().into_owned();
    let file = read_program(path)?;
    let prog =
        elf::Program::parse(&file).map_err(|e| Failure::NotRunnable(format!("{shown}: {e}")))?;

    let kvm = vm::open_kvm().map_err(|e| Failure::Onering(e.to_string()))?;
    let mem = vm::guest_memory(mem_size).map_err(|e| Failure::Onering(e.to_string()))?;
    let machine = vm::Vm::new(kvm, &mem).map_err(|e| Failure::Onering(e.to_string()))?;

    let argv: Vec<Vec<u8>> = std::iter::once(&args.program)
        .chain(&args.args)
        .map(|a| a.as_bytes().to_vec())
        .collect();
    let envp = environment(&args);
    let mut flags = 0;
    if args.quiet {
        flags |= onering_abi::flags::QUIET;
    }
    if std::io::stdout().is_terminal() {
        flags |= onering_abi::flags::STDOUT_TTY;
    }
    if std::io::stderr().is_terminal() {
        flags |= onering_abi::flags::STDERR_TTY;
    }
    let (uid, gid) = sys::ids();
    // Only the boot CPU runs for now; more vCPUs come with threads.
    let spec = loader::LoadSpec {
        mem_size,
        ncpus: 1,
        argv: &argv,
        envp: &envp,
        execfn: path.as_bytes(),
        flags,
        winsize: if flags & onering_abi::flags::STDOUT_TTY != 0 {
            sys::winsize(1)
        } else {
            0
        },
        uid,
        gid,
        random: random16(),
        hwcap: machine.hwcap(),
    };
    let mut bi = loader::load(&mem, &spec, &prog, &file).map_err(|e| {
        let msg = format!("{shown}: {e}");
        if e.is_program_error() {
            Failure::NotRunnable(msg)
        } else {
            Failure::Onering(msg)
        }
    })?;

    let (entry, stack, arg) = loader::cpu_start(0);
    let onering_err = |e: vm::VmError| Failure::Onering(e.to_string());
    let mut vcpu = machine
        .create_vcpu(0, entry, stack, arg, kernel_image::SYSCALL_TRAP_ENTRY)
        .map_err(onering_err)?;
    let (tsc_hz, boot_tsc) = vm::tsc(&vcpu).map_err(onering_err)?;
    bi.tsc_hz = tsc_hz;
    bi.boot_tsc = boot_tsc;
    bi.boot_realtime_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    loader::write_boot_info(&mem, &bi).map_err(|e| Failure::Onering(e.to_string()))?;

    let outcome = run_vcpu(&mut vcpu, &mem, 0);
    let _ = std::io::stdout().flush();
    Ok(report(outcome))
}

struct VcpuEnv<'a> {
    mem: &'a GuestMemoryMmap,
    vcpu: &'a VcpuFd,
    cpu: u64,
}

impl Env for VcpuEnv<'_> {
    fn mem(&self) -> &GuestMemoryMmap {
        self.mem
    }
    fn cpu(&self) -> u64 {
        self.cpu
    }
    fn cr2(&mut self) -> u64 {
        self.vcpu.get_sregs().map_or(0, |s| s.cr2)
    }
    fn output(&mut self, fd: u32, data: &[u8]) -> std::io::Result<()> {
        if fd == 2 {
            std::io::stderr().lock().write_all(data)
        } else {
            let mut out = std::io::stdout().lock();
            out.write_all(data)?;
            out.flush()
        }
    }
}

fn run_vcpu(vcpu: &mut VcpuFd, mem: &GuestMemoryMmap, cpu: u64) -> Outcome {
    loop {
        let exit = match vcpu.run() {
            Ok(e) => VmExit::from_kvm(e),
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => continue,
            Err(e) => return Outcome::GuestError(format!("KVM_RUN failed: {e}")),
        };
        let mut env = VcpuEnv { mem, vcpu, cpu };
        if let Action::Stop(o) = exit::handle(exit, &mut env) {
            return o;
        }
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

/// Prints how the VM ended (if not by a plain exit) and returns the exit status.
fn report(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Exited(s) => s,
        Outcome::Killed { signal, rip, addr } => {
            let at = if signal == 11 || signal == 7 {
                format!(" (fault address {addr:#x})")
            } else {
                String::new()
            };
            eprintln!(
                "onering: program killed by {} at {rip:#x}{at}",
                signal_name(signal)
            );
            128 + (signal as u8 & 0x7f)
        }
        Outcome::KernelPanic(msg) => {
            eprintln!("onering: kernel panic: {msg}");
            125
        }
        Outcome::Fatal { vector, rip, error } => {
            eprintln!(
                "onering: unrecoverable exception {vector} at {rip:#x} (error code {error:#x})"
            );
            125
        }
        Outcome::GuestError(msg) => {
            eprintln!("onering: the VM stopped: {msg}");
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
            separate_program(v(&[
                "onering", "run", "--mem", "1G", "-e", "A=1", "-q", "p", "--mem", "x"
            ])),
            v(&["onering", "run", "--mem", "1G", "-e", "A=1", "-q", "--", "p", "--mem", "x"])
        );
        assert_eq!(
            separate_program(v(&["onering", "run", "--mem=1G", "p"])),
            v(&["onering", "run", "--mem=1G", "--", "p"])
        );
        assert_eq!(
            separate_program(v(&["onering", "run", "--", "p", "-x"])),
            v(&["onering", "run", "--", "p", "-x"])
        );
        assert_eq!(
            separate_program(v(&["onering", "--help"])),
            v(&["onering", "--help"])
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
