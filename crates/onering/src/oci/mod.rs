//! onering as an OCI runtime: the command line runc has, which podman (through
//! conmon) and containerd's runc shim call, on the same binary as `onering run`.
//!
//! A container is one `onering run` process, the VMM, whose command line
//! `spec::plan` makes from the bundle. `create` starts it detached, as
//! `onering oci-init [--tty] [--netns NAME] GATE run ...`: a new session, the stdio `create`
//! was given (or a pseudo-terminal whose master goes to `--console-socket`), and
//! a wait on the FIFO GATE in the state directory. `start` writes a byte to the
//! FIFO and removes it; the waiting process then execs `onering run` in place,
//! so the pid written to `--pid-file` is the VMM's for the container's whole
//! life: `kill` signals it (run forwards SIGTERM, SIGINT, ... to the program),
//! and its exit status is the program's. The VM is built after `start`, not
//! during `create`: what `create` checks is the bundle, the program's place in
//! the root file system and the options, so a bundle onering cannot honour fails
//! `create`, not the container.
//!
//! `exec` (`exec.rs`) starts another process in the running VM: the VMM
//! listens on `ROOT/ID/exec.sock` (`onering run --exec-socket`, which `create`
//! adds), takes the process and its standard streams from `onering exec`, and
//! has the guest kernel start it (`vstate::exec`, `onering_abi::exec`); `exec`
//! stays as its stand-in on the host (with `--detach`, a child whose pid goes to
//! `--pid-file`), forwarding signals and exiting with its status. Hooks run on
//! the host with the state on their stdin, as runc runs them (createContainer
//! too: there is no container namespace to enter); startContainer hooks are
//! refused by `spec`.
//!
//! `create` puts the VMM in the container's cgroup (`cgroup.rs`) while it
//! waits at the gate, and `delete` removes that cgroup once the VMM is gone.
//!
//! Messages start with `onering:` on stderr and, with `--log`, go to the log
//! too (one JSON object a line with `--log-format json`, which conmon and the
//! shim read back).

pub mod cgroup;
pub mod exec;
pub mod podnet;
pub mod spec;
pub mod state;

use crate::sys::oci as host;
use oci_spec::runtime::{Hook, Spec};
use state::{Record, Status, Store, GATE};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why an OCI command failed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error(transparent)]
    PodNet(#[from] podnet::PodNetError),
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

fn failed(what: impl std::fmt::Display, e: impl std::fmt::Display) -> OciError {
    OciError::Failed(format!("{what}: {e}"))
}

/// The runc subcommands; `run` is onering's own unless a runc global flag came
/// first.
const COMMANDS: &[&str] = &[
    "create",
    "start",
    "state",
    "kill",
    "delete",
    "exec",
    "ps",
    "features",
    "list",
    "pause",
    "resume",
    "update",
    "events",
    "checkpoint",
    "restore",
    "spec",
];

/// runc's global flags: (name, takes a value).
const GLOBALS: &[(&str, bool)] = &[
    ("root", true),
    ("log", true),
    ("log-format", true),
    ("systemd-cgroup", false),
    ("debug", false),
    ("rootless", true),
    ("criu", true),
];

/// A parsed command line: flags by name (without dashes) and the rest.
#[derive(Default, Debug)]
struct Flags {
    values: Vec<(String, String)>,
    rest: Vec<OsString>,
}

impl Flags {
    fn get(&self, name: &str) -> Option<&str> {
        self.values.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
    fn has(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v != "false")
    }
}

/// Parses flags from `args` (`--name value`, `--name=value`, `-name`, a bool
/// alone) while they are in `known` (aliases map to their long name); stops at
/// the first other word or at `--` when `stop_at_word`, else collects words.
fn parse(args: &[OsString], known: &[(&str, bool)], stop_at_word: bool) -> Result<Flags, OciError> {
    let mut f = Flags::default();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        let Some(flag) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')).filter(|s| !s.is_empty()) else {
            if a == "--" {
                f.rest.extend(args[i + 1..].iter().cloned());
                return Ok(f);
            }
            if stop_at_word {
                f.rest.extend(args[i..].iter().cloned());
                return Ok(f);
            }
            f.rest.push(args[i].clone());
            i += 1;
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag, None),
        };
        let Some(&(long, takes)) = known.iter().find(|(n, _)| n.split('|').any(|x| x == name)) else {
            if stop_at_word {
                f.rest.extend(args[i..].iter().cloned());
                return Ok(f);
            }
            return Err(OciError::Usage(format!("unknown flag {a}")));
        };
        let long = long.split('|').next().unwrap_or(long).to_string();
        let value = match (takes, inline) {
            (_, Some(v)) => v,
            (true, None) => {
                i += 1;
                args.get(i).ok_or_else(|| OciError::Usage(format!("{a} needs a value")))?.to_string_lossy().into_owned()
            }
            (false, None) => "true".into(),
        };
        f.values.push((long, value));
        i += 1;
    }
    Ok(f)
}

/// Where messages go besides stderr.
struct Log {
    path: Option<PathBuf>,
    json: bool,
}

impl Log {
    fn error(&self, msg: &str) {
        say!("onering: {msg}");
        let Some(path) = &self.path else { return };
        let line = if self.json {
            let v =
                serde_json::json!({"level": "error", "msg": format!("onering: {msg}"), "time": state::now_rfc3339()});
            format!("{v}\n")
        } else {
            format!("{} onering: {msg}\n", state::now_rfc3339())
        };
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Runs the command line `args` (with the program name first) if it is one of
/// the OCI runtime's; None if it is `onering run` or one clap handles.
pub fn dispatch(args: &[OsString]) -> Option<u8> {
    let rest = args.get(1..).unwrap_or_default();
    if rest.first().is_some_and(|a| a == "oci-init") {
        return Some(gate(&rest[1..]));
    }
    let globals = parse(rest, GLOBALS, true).ok()?;
    let word = globals.rest.first()?.to_str()?;
    let runc_run = word == "run" && !globals.values.is_empty();
    if !COMMANDS.contains(&word) && !runc_run {
        return None;
    }
    let log = Log { path: globals.get("log").map(PathBuf::from), json: globals.get("log-format") == Some("json") };
    let store = Store { root: PathBuf::from(globals.get("root").unwrap_or("/run/onering")) };
    let ran = match word {
        "exec" => exec::exec(&store, &globals.rest[1..], &log),
        _ => command(&store, word, &globals.rest[1..], globals.has("systemd-cgroup"), &log).map(|()| 0),
    };
    match ran {
        Ok(code) => Some(code),
        Err(e) => {
            log.error(&e.to_string());
            Some(1)
        }
    }
}

/// Runs OCI command `word`; `systemd`: runc's global `--systemd-cgroup` was
/// given (cgroupsPath is `SLICE:PREFIX:NAME`).
fn command(store: &Store, word: &str, args: &[OsString], systemd: bool, log: &Log) -> Result<(), OciError> {
    let id_of = |f: &Flags| -> Result<String, OciError> {
        let id = f.rest.first().ok_or_else(|| OciError::Usage(format!("{word}: no container id")))?;
        Ok(id.to_string_lossy().into_owned())
    };
    match word {
        "create" => {
            let known = [
                ("bundle|b", true),
                ("pid-file", true),
                ("console-socket", true),
                ("no-pivot", false),
                ("no-new-keyring", false),
                ("preserve-fds", true),
            ];
            let f = parse(args, &known, false)?;
            if f.get("preserve-fds").is_some_and(|n| n != "0") {
                return Err(OciError::Usage("create: --preserve-fds is not supported by onering".into()));
            }
            create(store, &id_of(&f)?, &f, systemd)
        }
        "start" => start(store, &id_of(&parse(args, &[], false)?)?, log),
        "state" => {
            let r = store.load(&id_of(&parse(args, &[], false)?)?)?;
            let text = serde_json::to_string_pretty(&state::oci_state(&r, store.status(&r))).expect("json");
            println!("{text}");
            Ok(())
        }
        "kill" => {
            let f = parse(args, &[("all|a", false)], false)?;
            let sig = signal(f.rest.get(1).map_or("SIGTERM".into(), |s| s.to_string_lossy()).as_ref())?;
            let r = store.load(&id_of(&f)?)?;
            if store.status(&r) == Status::Stopped {
                return Err(OciError::Failed("container not running".into()));
            }
            host::kill(r.pid, sig).map_err(|e| failed(format!("kill {}", r.pid), e))
        }
        "delete" => {
            let f = parse(args, &[("force|f", false)], false)?;
            delete(store, &id_of(&f)?, f.has("force"), log)
        }
        "ps" => {
            let f = parse(args, &[("format|f", true)], false)?;
            let r = store.load(&id_of(&f)?)?;
            let pids: Vec<i32> = if store.status(&r) == Status::Stopped { vec![] } else { vec![r.pid] };
            match f.get("format").unwrap_or("table") {
                "json" => println!("{}", serde_json::json!(pids)),
                _ => println!("PID\n{}", pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n")),
            }
            Ok(())
        }
        "features" => {
            println!("{}", serde_json::to_string_pretty(&features()).expect("json"));
            Ok(())
        }
        other => Err(OciError::Failed(format!("{other} is not supported by onering"))),
    }
}

/// The OCI features document (runtime spec, features.md).
fn features() -> serde_json::Value {
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.1.0",
        "hooks": ["prestart", "createRuntime", "createContainer", "poststart", "poststop"],
        "mountOptions": ["bind", "rbind", "ro", "rw"],
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "uts"],
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {"enabled": false},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": {
            "org.onering.vm": "true",
            "org.onering.exec": "true",
            "org.onering.exec.stdin": "true",
            "onering.mem": "guest memory (--mem)",
            "onering.smp": "vCPUs (--smp)",
            "onering.net": "the VM's network (--net)",
            "onering.quiet": "true: no reports of unsupported system calls (-q)"
        }
    })
}

/// A signal by number or name (`TERM`, `SIGTERM`, `15`).
fn signal(s: &str) -> Result<i32, OciError> {
    if let Ok(n) = s.parse::<i32>() {
        return Ok(n);
    }
    let name = s.strip_prefix("SIG").unwrap_or(s);
    onering_abi::sysnames::SIGNALS
        .iter()
        .position(|n| n.strip_prefix("SIG") == Some(name))
        .map(|n| n as i32)
        .ok_or_else(|| OciError::Usage(format!("unknown signal {s:?}")))
}

/// `create`: checks the bundle, starts the gated VMM process, puts it in the
/// container's cgroup, records it, runs the prestart, createRuntime and
/// createContainer hooks, writes the pid file. On a failure the VMM is killed
/// and what was made goes.
fn create(store: &Store, id: &str, f: &Flags, systemd: bool) -> Result<(), OciError> {
    let cwd = std::env::current_dir().map_err(|e| failed("current directory", e))?;
    let bundle = cwd.join(f.get("bundle").unwrap_or("."));
    let config = bundle.join("config.json");
    let spec = Spec::load(&config).map_err(|e| failed(config.display(), e))?;
    let mut plan = spec::plan(&spec, &bundle)?;
    if plan.terminal && f.get("console-socket").is_none() {
        return Err(OciError::Usage("process.terminal is true but there is no --console-socket".into()));
    }
    let dir = store.make(id)?;
    // The VMM listens there for `exec`.
    let at = plan.run_args.iter().position(|a| a == "--").unwrap_or(plan.run_args.len());
    plan.run_args.splice(at..at, ["--exec-socket".into(), dir.join(exec::SOCKET).into_os_string()]);
    let made = (|| {
        let net = pod_network(&spec, &mut plan)?;
        let mut r = spawn(id, &dir, &bundle, &spec, &plan, net.as_ref(), f.get("console-socket"))?;
        let placed = cgroup::apply(&spec, systemd, r.pid, &mut r.cgroups);
        let started = placed.map_err(OciError::from).and_then(|()| {
            store.save(&r)?;
            let hooks = r.hooks.clone().unwrap_or_default();
            let json = state::oci_state(&r, Status::Created).to_string();
            for (kind, list) in [
                ("prestart", hooks.prestart()),
                ("createRuntime", hooks.create_runtime()),
                ("createContainer", hooks.create_container()),
            ] {
                run_hooks(kind, list.as_deref().unwrap_or_default(), &json)?;
            }
            write_pid_file(f.get("pid-file"), &cwd, r.pid)
        });
        if started.is_err() {
            let _ = host::kill(r.pid, libc::SIGKILL);
            // (A killed process leaves its cgroups at once, even unreaped.)
            let _ = cgroup::remove(&r.cgroups);
        }
        started
    })();
    if made.is_err() {
        let _ = store.remove(id);
    }
    made
}

/// The pod network the bundle's network namespace holds, if any (and no
/// `onering.net` annotation chose another): attached, and its options added.
fn pod_network(spec: &Spec, plan: &mut spec::Plan) -> Result<Option<podnet::PodNet>, OciError> {
    use oci_spec::runtime::LinuxNamespaceType;
    if plan.run_args.iter().any(|a| a == "--net") {
        return Ok(None);
    }
    let namespaces = spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default();
    let Some(path) = namespaces.iter().find(|n| n.typ() == LinuxNamespaceType::Network).and_then(|n| n.path().clone())
    else {
        return Ok(None);
    };
    let Some(net) = podnet::discover(&path)? else { return Ok(None) };
    podnet::attach(&net)?;
    let at = plan.run_args.iter().position(|a| a == "--").unwrap_or(plan.run_args.len());
    plan.run_args.splice(at..at, net.run_options().into_iter().map(OsString::from));
    Ok(Some(net))
}

/// Starts `onering oci-init` for container `id`: the VMM process, waiting at the
/// gate, with the pseudo-terminal's slave as its stdio if the bundle asks for a
/// terminal (the master goes to `console` first).
fn spawn(
    id: &str,
    dir: &Path,
    bundle: &Path,
    spec: &Spec,
    plan: &spec::Plan,
    net: Option<&podnet::PodNet>,
    console: Option<&str>,
) -> Result<Record, OciError> {
    let gate_path = dir.join(GATE);
    host::mkfifo(&gate_path).map_err(|e| failed(gate_path.display(), e))?;
    let exe = std::env::current_exe().map_err(|e| failed("/proc/self/exe", e))?;
    let mut cmd = Command::new(exe);
    cmd.arg0("onering").arg("oci-init");
    if let Some(net) = net {
        cmd.args(["--netns", &net.ns]);
    }
    if plan.terminal {
        cmd.arg("--tty");
        let slave = console_pty(console.unwrap_or_default())?;
        let dup = |fd: &std::os::fd::OwnedFd| fd.try_clone().map_err(|e| failed("a pseudo-terminal", e));
        cmd.stdin(Stdio::from(dup(&slave)?)).stdout(Stdio::from(dup(&slave)?)).stderr(Stdio::from(slave));
    }
    cmd.arg(&gate_path).args(&plan.run_args).current_dir(bundle);
    let child = cmd.spawn().map_err(|e| failed("starting the VMM", e))?;
    let pid = child.id() as i32;
    // (Not waited for: once `create` exits, the subreaper that ran it, conmon or
    // the shim, is its parent and reaps it.)
    drop(child);
    Ok(Record {
        id: id.to_string(),
        pid,
        start_time: state::start_time(pid),
        bundle: bundle.to_path_buf(),
        created: state::now_rfc3339(),
        oci_version: spec.version().clone(),
        annotations: spec.annotations().clone().unwrap_or_default().into_iter().collect(),
        hooks: spec.hooks().clone(),
        cgroups: Vec::new(),
    })
}

/// A new pseudo-terminal whose master goes to the console socket `socket`
/// (SCM_RIGHTS, as runc sends it): its slave.
fn console_pty(socket: &str) -> Result<std::os::fd::OwnedFd, OciError> {
    let (master, slave) = host::open_pty().map_err(|e| failed("a pseudo-terminal", e))?;
    let stream = std::os::unix::net::UnixStream::connect(socket).map_err(|e| failed(socket, e))?;
    use std::os::fd::AsRawFd;
    use vmm_sys_util::sock_ctrl_msg::ScmSocket;
    stream.send_with_fd(&b"/dev/ptmx"[..], master.as_raw_fd()).map_err(|e| failed(socket, e))?;
    Ok(slave)
}

/// `onering oci-init [--tty] [--netns NAME] GATE run ...`: the container's
/// process before `start`. Leads a new session (with the terminal on stdin as
/// its controlling one), waits for the byte `start` writes to GATE, then becomes
/// `onering run` (through `ip netns exec NAME` with a pod network). If GATE
/// disappears first (the container was deleted, or `create` failed), it exits.
fn gate(args: &[OsString]) -> u8 {
    let Ok(f) = parse(args, &[("tty", false), ("netns", true)], true) else { return 125 };
    let Some((path, run)) = f.rest.split_first() else { return 125 };
    let (path, tty) = (PathBuf::from(path), f.has("tty"));
    if let Err(e) = host::new_session(tty) {
        say!("onering: a new session: {e}");
        return 125;
    }
    // Opened for reading and writing, the FIFO never blocks the open, and it
    // stays readable while `start`'s byte is in it even once removed.
    let mut fifo = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) => {
            say!("onering: {}: {e}", path.display());
            return 125;
        }
    };
    loop {
        use std::os::fd::AsFd;
        match host::readable(fifo.as_fd(), 1000) {
            Ok(true) => break,
            Ok(false) if !path.exists() => return 125,
            Ok(false) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                say!("onering: {}: {e}", path.display());
                return 125;
            }
        }
    }
    let _ = fifo.read(&mut [0u8]);
    drop(fifo);
    let exe = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    let e = match f.get("netns") {
        Some(ns) => Command::new("ip").args(["netns", "exec", ns]).arg(exe).args(run).exec(),
        None => Command::new(exe).arg0("onering").args(run).exec(),
    };
    say!("onering: starting the VM: {e}");
    125
}

/// `start`: opens the gate of a created container and runs the poststart hooks.
fn start(store: &Store, id: &str, log: &Log) -> Result<(), OciError> {
    let r = store.load(id)?;
    let status = store.status(&r);
    if status != Status::Created {
        return Err(OciError::Failed(format!("cannot start a container that is {}", status.name())));
    }
    let path = store.dir(id)?.join(GATE);
    // Non-blocking: with no reader the open fails. The process may not have
    // opened its end yet (a `start` right after `create`): it is given until it
    // does, or dies.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut fifo = loop {
        match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&path) {
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) && state::alive(r.pid, r.start_time) => {
                if Instant::now() > deadline {
                    return Err(failed(path.display(), "the container's process does not open its end"));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            opened => break opened.map_err(|e| failed(path.display(), e))?,
        }
    };
    fifo.write_all(b"0").map_err(|e| failed(path.display(), e))?;
    std::fs::remove_file(&path).map_err(|e| failed(path.display(), e))?;
    let hooks = r.hooks.clone().unwrap_or_default();
    let json = state::oci_state(&r, Status::Running).to_string();
    run_hooks_warning("poststart", hooks.poststart().as_deref().unwrap_or_default(), &json, log);
    Ok(())
}

/// `delete`: a stopped or created container goes (a created one is killed);
/// a running one only with `force`, after SIGKILL. Runs the poststop hooks.
fn delete(store: &Store, id: &str, force: bool, log: &Log) -> Result<(), OciError> {
    let r = match store.load(id) {
        Ok(r) => r,
        // No record, or a broken one: a create that died half-way. Its directory
        // (and with it the gate, whose process then exits) goes.
        Err(state::StateError::NotFound(_) | state::StateError::Corrupt(..)) => {
            // (As runc: with --force, a container that is not there is deleted.)
            return match store.remove(id)? || force {
                true => Ok(()),
                false => Err(state::StateError::NotFound(id.to_string()).into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let status = store.status(&r);
    if status == Status::Running && !force {
        return Err(OciError::Failed(format!("cannot delete container {id} that is not stopped: running")));
    }
    if status != Status::Stopped {
        let _ = host::kill(r.pid, libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(5);
        while state::alive(r.pid, r.start_time) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if let Err(e) = cgroup::remove(&r.cgroups) {
        log.error(&format!("warning: {e}"));
    }
    let hooks = r.hooks.clone().unwrap_or_default();
    let json = state::oci_state(&r, Status::Stopped).to_string();
    run_hooks_warning("poststop", hooks.poststop().as_deref().unwrap_or_default(), &json, log);
    store.remove(id)?;
    Ok(())
}

/// Writes `pid` to `--pid-file` (relative to `cwd`), if one was given.
fn write_pid_file(path: Option<&str>, cwd: &Path, pid: impl std::fmt::Display) -> Result<(), OciError> {
    match path {
        Some(p) => Ok(state::write_atomically(&cwd.join(p), pid.to_string().as_bytes())?),
        None => Ok(()),
    }
}

/// Runs poststart or poststop `hooks` in order: one that fails is a warning in
/// the log, and the others still run (the runtime spec's lifecycle).
fn run_hooks_warning(kind: &str, hooks: &[Hook], json: &str, log: &Log) {
    for h in hooks {
        if let Err(e) = run_hooks(kind, std::slice::from_ref(h), json) {
            log.error(&format!("warning: {e}"));
        }
    }
}

/// Runs `hooks` in order on the host, each with the state `json` on its stdin,
/// its own env, and its timeout; the first that fails stops the rest.
fn run_hooks(kind: &str, hooks: &[Hook], json: &str) -> Result<(), OciError> {
    for h in hooks {
        let shown = format!("{kind} hook {}", h.path().display());
        let args = h.args().as_deref().unwrap_or_default();
        let mut cmd = Command::new(h.path());
        if let Some((first, rest)) = args.split_first() {
            cmd.arg0(first).args(rest);
        }
        cmd.env_clear().stdin(Stdio::piped()).stdout(Stdio::null());
        for kv in h.env().as_deref().unwrap_or_default() {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        let mut child = cmd.spawn().map_err(|e| failed(&shown, e))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(json.as_bytes());
        }
        let deadline = h.timeout().filter(|t| *t > 0).map(|t| Instant::now() + Duration::from_secs(t as u64));
        let status = loop {
            match child.try_wait().map_err(|e| failed(&shown, e))? {
                Some(s) => break s,
                None if deadline.is_some_and(|d| Instant::now() >= d) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(failed(&shown, "timed out"));
                }
                None => std::thread::sleep(Duration::from_millis(2)),
            }
        };
        if !status.success() {
            return Err(failed(&shown, status));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn dispatch_leaves_onering_run_alone() {
        assert_eq!(dispatch(&v(&["onering", "run", "prog"])), None);
        assert_eq!(dispatch(&v(&["onering", "--help"])), None);
        assert_eq!(dispatch(&v(&["onering"])), None);
    }

    #[test]
    fn flags() {
        let g = parse(&v(&["--root", "/r", "--log=/l", "--systemd-cgroup", "create", "--bundle", "b"]), GLOBALS, true)
            .unwrap();
        assert_eq!((g.get("root"), g.get("log"), g.has("systemd-cgroup")), (Some("/r"), Some("/l"), true));
        assert_eq!(g.rest, v(&["create", "--bundle", "b"]));
        let known = [("bundle|b", true), ("pid-file", true), ("no-pivot", false)];
        let f = parse(&v(&["-b", "/x", "--no-pivot", "--pid-file=/p", "id1"]), &known, false).unwrap();
        assert_eq!((f.get("bundle"), f.get("pid-file"), f.has("no-pivot")), (Some("/x"), Some("/p"), true));
        assert_eq!(f.rest, v(&["id1"]));
        assert!(parse(&v(&["--bogus", "id"]), &known, false).is_err());
        assert_eq!(signal("TERM").unwrap(), 15);
        assert_eq!(signal("SIGKILL").unwrap(), 9);
        assert_eq!(signal("2").unwrap(), 2);
        assert!(signal("NOPE").is_err());
    }
}
