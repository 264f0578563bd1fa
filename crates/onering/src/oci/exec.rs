//! `exec`: another process in a running container's VM, as `runc exec` starts
//! one (`podman exec`, `ctr task exec`, `kubectl exec`).
//!
//! The process comes from `--process FILE` (a runtime-spec `process` object, what
//! containerd's shim and conmon pass) or from the command line: the container's
//! own `process` from its bundle with the command given, `--env` added, `--cwd`,
//! `--tty` and `--user` applied. Only root may be asked for (the VM's programs
//! run as root), and a terminal needs `--console-socket`.
//!
//! The container's VMM listens on `ROOT/ID/exec.sock` (`--exec-socket`, see
//! `vstate::exec`): `exec` connects, hands over the process's standard streams
//! (its own, or the slave of a new pseudo-terminal whose master went to the
//! console socket) and the request, and waits for `started` (or why not). Then
//! it stays, as the process's stand-in on the host: signals sent to it go to the
//! process, and it exits with the process's status (128 + N for signal N). With
//! `--detach` a child of it does that (its pid goes to `--pid-file`) and `exec`
//! returns at once, so that the shim or conmon, subreapers, wait for the process
//! through that pid, as they wait for runc's. If the stand-in is killed, the
//! process is too (SIGKILL): nobody could collect its status any more.

use super::{failed, parse, state, write_pid_file, Log, OciError};
use crate::sys::oci as host;
use oci_spec::runtime::{Process, Spec};
use state::{Status, Store};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The socket in the container's directory where its VMM listens.
pub const SOCKET: &str = "exec.sock";

/// runc's `exec` flags: (name, takes a value).
const FLAGS: &[(&str, bool)] = &[
    ("process|p", true),
    ("console-socket", true),
    ("pid-file", true),
    ("detach|d", false),
    ("tty|t", false),
    ("cwd", true),
    ("env|e", true),
    ("user|u", true),
    ("additional-gids|g", true),
    ("cap|c", true),
    ("no-new-privs", false),
    ("apparmor", true),
    ("process-label", true),
    ("preserve-fds", true),
    ("cgroup", true),
    ("ignore-paused", false),
];

/// `exec [FLAGS] ID [COMMAND [ARGS...]]`: the exit status of the process (or 0
/// with `--detach` once it runs).
pub(super) fn exec(store: &Store, args: &[OsString], log: &Log) -> Result<u8, OciError> {
    let f = parse(args, FLAGS, true)?;
    let Some((id, command)) = f.rest.split_first() else { return Err(OciError::Usage("exec: no container id".into())) };
    let id = id.to_string_lossy().into_owned();
    if id.starts_with('-') {
        return Err(OciError::Usage(format!("exec: unknown flag {id}")));
    }
    if f.get("preserve-fds").is_some_and(|n| n != "0") {
        return Err(OciError::Usage("exec: --preserve-fds is not supported by onering".into()));
    }
    let r = store.load(&id)?;
    match store.status(&r) {
        Status::Running => {}
        s => return Err(OciError::Failed(format!("cannot exec in a container that is {}", s.name()))),
    }
    let process = process_of(&f, command, &r.bundle)?;
    let terminal = process.terminal() == Some(true);
    let console = f.get("console-socket");
    if terminal && console.is_none() {
        return Err(OciError::Usage("exec: a terminal (--tty, process.terminal) needs --console-socket".into()));
    }
    let sock = connect(&store.dir(&id)?.join(SOCKET), r.pid, r.start_time)?;
    // The process's standard streams: a new terminal's slave, or ours.
    let slave = match (terminal, console) {
        (true, Some(c)) => Some(super::console_pty(c)?),
        _ => None,
    };
    let fds = match &slave {
        Some(s) => [s.as_raw_fd(); 3],
        None => [0, 1, 2],
    };
    let request = serde_json::json!({
        "args": process.args().clone().unwrap_or_default(),
        "env": process.env().clone().unwrap_or_default(),
        "cwd": process.cwd().to_string_lossy(),
    });
    {
        use vmm_sys_util::sock_ctrl_msg::ScmSocket;
        let how = |e: vmm_sys_util::errno::Error| failed("the container's VMM", e);
        sock.send_with_fds(&[&b"x"[..]], &fds).map_err(how)?;
    }
    (&sock).write_all(format!("{request}\n").as_bytes()).map_err(|e| failed("the container's VMM", e))?;
    drop(slave);
    let mut replies =
        Replies { from: BufReader::new(sock.try_clone().map_err(|e| failed("a socket", e))?), line: String::new() };
    let what = process.args().as_ref().and_then(|a| a.first().cloned()).unwrap_or_default();
    match replies.next(None).unwrap_or(Reply::Gone) {
        Reply::Started => {}
        Reply::Failed(errno) => {
            let e = std::io::Error::from_raw_os_error(errno);
            log.error(&format!("exec: {what}: {}", strip_os_error(&e)));
            return Ok(if errno == libc::ENOENT { 127 } else { 126 });
        }
        Reply::Error(why) => return Err(OciError::Failed(format!("exec: {why}"))),
        Reply::Status(st) => return Ok(code_of(st)),
        Reply::Gone => return Err(OciError::Failed("exec: the container stopped".into())),
    }
    let detach = f.has("detach");
    let cwd = std::env::current_dir().unwrap_or_default();
    if detach {
        // The stand-in is a child: `exec` returns, the shim or conmon adopts it.
        if let Some(child) = host::fork_single_threaded().map_err(|e| failed("fork", e))? {
            write_pid_file(f.get("pid-file"), &cwd, child)?;
            return Ok(0);
        }
        // (The process has its streams: the stand-in holds none of them.)
        if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
            for fd in 0..3 {
                let _ = host::dup_onto(null.as_fd(), fd);
            }
        }
    } else {
        write_pid_file(f.get("pid-file"), &cwd, std::process::id())?;
    }
    Ok(stand_in(&sock, &mut replies))
}

/// What `strerror` says, without std's " (os error N)".
fn strip_os_error(e: &std::io::Error) -> String {
    let s = e.to_string();
    s.split(" (os error").next().unwrap_or(&s).to_string()
}

/// The process to start: `--process FILE`, or the container's own process with
/// the command line's changes.
fn process_of(f: &super::Flags, command: &[OsString], bundle: &std::path::Path) -> Result<Process, OciError> {
    let mut p = match f.get("process") {
        Some(path) => {
            let text = std::fs::read(path).map_err(|e| failed(path, e))?;
            serde_json::from_slice::<Process>(&text).map_err(|e| failed(path, e))?
        }
        None => {
            let config = bundle.join("config.json");
            let spec = Spec::load(&config).map_err(|e| failed(config.display(), e))?;
            let mut p = spec.process().clone().unwrap_or_default();
            if command.is_empty() {
                return Err(OciError::Usage("exec: no command to run (give one, or --process)".into()));
            }
            p.set_args(Some(command.iter().map(|a| a.to_string_lossy().into_owned()).collect()));
            let mut env = p.env().clone().unwrap_or_default();
            env.extend(f.values.iter().filter(|(n, _)| n == "env").map(|(_, v)| v.clone()));
            p.set_env(Some(env));
            if let Some(cwd) = f.get("cwd") {
                p.set_cwd(cwd.into());
            }
            p.set_terminal(Some(f.has("tty")));
            if let Some(u) = f.get("user") {
                let (uid, gid) = u.split_once(':').unwrap_or((u, "0"));
                let root = |s: &str| s == "0" || s == "root";
                if !root(uid) || !root(gid) {
                    return Err(OciError::Failed(format!(
                        "exec: --user {u} is not supported by onering (the VM's programs run as root)"
                    )));
                }
            }
            p
        }
    };
    if p.args().as_ref().is_none_or(|a| a.is_empty()) {
        return Err(OciError::Usage("exec: process.args is empty".into()));
    }
    let user = p.user();
    if user.uid() != 0 || user.gid() != 0 {
        return Err(OciError::Failed(format!(
            "exec: process.user {}:{} is not supported by onering (the VM's programs run as root)",
            user.uid(),
            user.gid()
        )));
    }
    if p.cwd().as_os_str().is_empty() {
        p.set_cwd("/".into());
    }
    Ok(p)
}

/// Connects to the VMM's socket `path`, waiting (10 s at most) while the VMM
/// (pid `pid`, started at `start`) is alive but not listening yet.
fn connect(path: &std::path::Path, pid: i32, start: u64) -> Result<UnixStream, OciError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return Ok(s),
            Err(_) if state::alive(pid, start) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(failed(format!("the container's VMM ({})", path.display()), e)),
        }
    }
}

/// What the VMM said.
enum Reply {
    Started,
    Failed(i32),
    Error(String),
    Status(u64),
    /// The connection ended (the VM did).
    Gone,
}

struct Replies {
    from: BufReader<UnixStream>,
    /// What was read of the next line.
    line: String,
}

impl Replies {
    /// The next reply; None if `wait` passed first (the socket has a read timeout).
    fn next(&mut self, wait: Option<Duration>) -> Option<Reply> {
        let _ = self.from.get_ref().set_read_timeout(wait);
        loop {
            match self.from.read_line(&mut self.line) {
                Ok(0) => return Some(Reply::Gone),
                Ok(_) if !self.line.ends_with('\n') => continue,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return None;
                }
                Err(_) => return Some(Reply::Gone),
            }
            let v: serde_json::Value = serde_json::from_str(&std::mem::take(&mut self.line)).unwrap_or_default();
            let num = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
            return Some(if v.get("started").is_some() {
                Reply::Started
            } else if let Some(e) = num("failed") {
                Reply::Failed(e as i32)
            } else if let Some(s) = num("status") {
                Reply::Status(s)
            } else {
                Reply::Error(v.get("error").and_then(|e| e.as_str()).unwrap_or("a malformed answer").to_string())
            });
        }
    }
}

/// A wait status as an exit status: the code, or 128 + the signal.
fn code_of(status: u64) -> u8 {
    match status & 0x7f {
        0 => ((status >> 8) & 0xff) as u8,
        sig => 128 + sig as u8,
    }
}

/// Signals that came, bit n-1 for signal n.
static SIGNALS: AtomicU64 = AtomicU64::new(0);

fn on_signal(sig: i32, _: bool) {
    if (1..=64).contains(&sig) {
        SIGNALS.fetch_or(1 << (sig - 1), Ordering::AcqRel);
    }
}

/// The process's stand-in: forwards the signals it gets, and returns the
/// process's exit status (137 if the container stopped first: killed with it).
fn stand_in(sock: &UnixStream, replies: &mut Replies) -> u8 {
    crate::sys::signals::forward_signals(on_signal, false);
    loop {
        let bits = SIGNALS.swap(0, Ordering::AcqRel);
        for sig in (1..=64u64).filter(|s| bits & (1 << (s - 1)) != 0) {
            let _ = (&*sock).write_all(format!("{}\n", serde_json::json!({ "signal": sig })).as_bytes());
        }
        match replies.next(Some(Duration::from_millis(50))) {
            Some(Reply::Status(st)) => return code_of(st),
            Some(Reply::Gone) => return 128 + libc::SIGKILL as u8,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(code_of(3 << 8), 3);
        assert_eq!(code_of(15), 143);
        assert_eq!(code_of(9), 137);
        assert_eq!(code_of(0), 0);
    }
}
