//! The network options through `onering run`: `-p` and `--net user` start passt and
//! stop it with the VM (also when onering is killed), the program's status is kept,
//! and the errors that must come before boot (a used host port, passt missing, a
//! TAP device that does not exist, bad options) give a clear message and 125.
//! `--net tap:NAME` attaches to a TAP device in a network namespace the test makes
//! (and removes). Through the guest's driver: the host fetches pages from a Go
//! server in the VM through a published port, a UDP echo server in the VM answers
//! the host, and a Go client in the VM fetches from the host at the gateway.
//!
//! These tests need /dev/kvm, musl-gcc, Go, passt and root (for the namespace);
//! without them they fail, loudly.

mod common;

use common::*;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A program that sleeps `argv[1]` ms and exits with `argv[2]`.
fn sleeper() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = temp_dir("net-sleeper");
            let src = dir.join("sleeper.c");
            std::fs::write(
                &src,
                "#include <stdlib.h>\n#include <time.h>\nint main(int c, char **v) {\n  long ms = c > 1 ? atol(v[1]) \
                 : 0;\n  struct timespec t = {ms / 1000, (ms % 1000) * 1000000};\n  nanosleep(&t, 0);\n  return c > 2 \
                 ? atoi(v[2]) : 0;\n}\n",
            )
            .unwrap();
            let bin = dir.join("sleeper");
            let out = Command::new("musl-gcc").args(["-static", "-O2"]).arg(&src).arg("-o").arg(&bin).output();
            let out = out.unwrap_or_else(|e| panic!("cannot run musl-gcc (apt-get install musl-tools): {e}"));
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            bin
        })
        .clone()
}

/// A host TCP port nobody uses now.
fn free_port() -> u16 {
    TcpListener::bind(("0.0.0.0", 0)).unwrap().local_addr().unwrap().port()
}

fn wait_for(what: &str, limit: Duration, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn port_is_taken(port: u16) -> bool {
    TcpListener::bind(("0.0.0.0", port)).is_err()
}

#[test]
fn publishing_a_port_runs_passt_for_the_vm_only() {
    require_passt();
    let bin = sleeper();
    let port = free_port();
    let spec = format!("{port}:80");
    let child = cmd(&["run", "--stats", "-p", &spec, bin.to_str().unwrap(), "700", "7"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("passt listens on the published port", Duration::from_secs(5), || port_is_taken(port));
    assert_eq!(passts_with(&format!("-t {spec}")).len(), 1);
    let out = child.wait_with_output().unwrap();
    assert_eq!(status(&out), 7, "the program's status: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("onering: stats: net: 0 frames (0 bytes) in"), "{err}");
    // Gone with the VM: no process, the port free again.
    assert!(passts_with(&format!("-t {spec}")).is_empty(), "passt outlived onering");
    assert!(!port_is_taken(port), "the port is still bound");
}

#[test]
fn passt_dies_with_a_killed_onering() {
    require_passt();
    let bin = sleeper();
    let port = free_port();
    let spec = format!("{port}:80/tcp");
    let mut child = cmd(&["run", "-p", &spec, bin.to_str().unwrap(), "20000"]).stdin(Stdio::null()).spawn().unwrap();
    wait_for("passt listens", Duration::from_secs(5), || port_is_taken(port));
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for("passt exits after onering was killed", Duration::from_secs(2), || {
        passts_with(&format!("-t {port}:80")).is_empty()
    });
}

#[test]
fn net_user_without_ports_boots() {
    require_passt();
    let out = onering(&["run", "--net", "user", sleeper().to_str().unwrap(), "0", "3"]);
    assert_eq!(status(&out), 3, "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

#[test]
fn a_used_host_port_is_refused_before_boot() {
    require_passt();
    let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let out = onering(&["run", "-p", &format!("{port}:80"), sleeper().to_str().unwrap()]);
    assert_eq!(status(&out), 125);
    assert_eq!(stderr(&out), format!("onering: -p {port}:80: host port {port}/tcp is already in use\n"));
    // UDP too.
    let u = std::net::UdpSocket::bind(("0.0.0.0", 0)).unwrap();
    let port = u.local_addr().unwrap().port();
    let out = onering(&["run", "-p", &format!("127.0.0.1:{port}:53/udp"), sleeper().to_str().unwrap()]);
    assert_eq!(status(&out), 125);
    assert!(stderr(&out).contains(&format!("host port {port}/udp is already in use")), "{}", stderr(&out));
}

#[test]
fn passt_missing_is_a_clear_125() {
    let out = cmd(&["run", "-p", "8080:80", sleeper().to_str().unwrap()])
        .env("PATH", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(status(&out), 125);
    assert!(stderr(&out).starts_with("onering: -p needs passt (user-mode networking), which is not installed"));
}

#[test]
fn bad_network_options_are_125() {
    let bin = sleeper();
    let bin = bin.to_str().unwrap();
    for (args, says) in [
        (vec!["--net", "bogus"], "--net 'bogus' is not none, user or tap:NAME"),
        (vec!["--net", "none", "-p", "80:80"], "-p needs --net user"),
        (vec!["--net", "tap:x", "-p", "80:80"], "-p works with --net user only"),
        (vec!["-p", "80"], "is not [HOSTIP:]HOSTPORT:GUESTPORT"),
        (vec!["--ip", "10.0.0.2/24"], "--ip and --gateway need a network"),
        (vec!["--net", "user", "--ip", "10.0.0.300/24"], "--ip '10.0.0.300/24' is not an IPv4 address"),
        (vec!["--net", "tap:onering-none0"], "--net tap:onering-none0: no such network device"),
        (vec!["--net", "tap:lo"], "--net tap:lo: lo is not a TAP device"),
    ] {
        let mut a = vec!["run"];
        a.extend(&args);
        a.push(bin);
        let out = onering(&a);
        assert_eq!(status(&out), 125, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).starts_with("onering: "), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_tap_device_in_a_namespace_is_attached() {
    require_kvm();
    let ns = Netns::new("onering-tap");
    ns.ip(&["tuntap", "add", "ortap0", "mode", "tap"]);
    ns.ip(&["addr", "add", "10.9.0.1/24", "dev", "ortap0"]);
    ns.ip(&["link", "set", "ortap0", "up"]);
    assert!(ns.ip(&["link", "show", "ortap0"]).contains("NO-CARRIER"), "nothing attached yet");
    let bin = sleeper();
    let child = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_onering"), "run", "--stats", "--net", "tap:ortap0"])
        .args(["--ip", "10.9.0.2/24", "--gateway", "10.9.0.1", bin.to_str().unwrap(), "1500", "5"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Attached: the link has a carrier while onering runs.
    wait_for("the TAP device gets a carrier", Duration::from_secs(5), || {
        ns.ip(&["link", "show", "ortap0"]).contains("LOWER_UP")
    });
    // Frames toward the VM (no driver yet: they wait in the device, or are dropped).
    let _ = Command::new("ip")
        .args(["netns", "exec", &ns.0, "ping", "-c", "1", "-W", "1", "10.9.0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let out = child.wait_with_output().unwrap();
    assert_eq!(status(&out), 5, "{}", stderr(&out));
    assert!(stderr(&out).contains("onering: stats: net: "), "{}", stderr(&out));
    // Detached once onering and its teardown helper (which shares its descriptors
    // for the milliseconds the VM's release takes) are gone.
    wait_for("the TAP device loses its carrier", Duration::from_secs(5), || {
        ns.ip(&["link", "show", "ortap0"]).contains("NO-CARRIER")
    });
    // Inside the namespace too, a missing device is named.
    let busy = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_onering"), "run", "--net", "tap:nosuch0"])
        .arg(bin.to_str().unwrap())
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&busy.stderr).contains("--net tap:nosuch0: no such network device"));
}

// ---- through the guest's driver -----------------------------------------------------

/// The Go guest program (tests/guest/go), built once.
fn go_guest() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let bin = out_dir().join("net-go-guest");
        build_go_guest(&bin);
        bin
    })
    .clone()
}

/// `onering run ARGS...` with its stdout read line by line.
fn spawn_run(args: &[&str]) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
    let mut a = vec!["run"];
    a.extend_from_slice(args);
    let mut child = cmd(&a).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// One HTTP/1.0 GET of `path` on 127.0.0.1:`port` from the host: the response.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r
}

/// Waits for a line on the child's stdout that starts with `what`.
fn wait_line(out: &mut impl std::io::BufRead, what: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the program ended before printing {what:?}");
        if line.starts_with(what) {
            return;
        }
    }
}

#[test]
fn a_go_server_in_the_vm_answers_the_host_through_a_published_port() {
    require_kvm();
    require_passt();
    let port = free_port();
    let publish = format!("{port}:8080");
    let (child, mut out) = spawn_run(&["-p", &publish, go_guest().to_str().unwrap(), "serve", "8080", "3"]);
    wait_line(&mut out, "listening");
    for path in ["/a", "/b", "/c"] {
        let r = http_get(port, path);
        assert!(r.starts_with("HTTP/1.0 200 OK"), "{r}");
        assert!(r.ends_with(&format!("hello from onering {path}\n")), "{r}");
    }
    wait_line(&mut out, "served 3");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A UDP echo server in the VM behind `-p` answers datagrams of 200 bytes to
/// 65,000, each one whole.
#[test]
fn a_udp_echo_server_in_the_vm_answers_the_host() {
    require_kvm();
    require_passt();
    let port = free_port();
    let publish = format!("127.0.0.1:{port}:7/udp");
    // (N 0: it echoes until it is stopped.)
    let (mut child, mut out) = spawn_run(&["-p", &publish, musl("udpecho").to_str().unwrap(), "7", "0"]);
    wait_line(&mut out, "listening");
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut buf = vec![0u8; 65536];
    let mut echoed = 0;
    for i in 0..100u32 {
        // Datagrams beyond the MTU too, both ways: passt neither fragments nor
        // reassembles, the VMM's end of it does (devices/netback/passt.rs).
        let len = [200, 1473, 4000, 20000, 65000][i as usize % 5];
        let msg: Vec<u8> = (0..len).map(|k| (i as u8).wrapping_add(k as u8)).collect();
        // UDP may lose a datagram (the first ones may go before the path is
        // ready): send again, and skip late echoes of earlier ones.
        'tries: for _ in 0..10 {
            s.send_to(&msg, ("127.0.0.1", port)).unwrap();
            while let Ok(n) = s.recv(&mut buf) {
                if buf[..n] == msg[..] {
                    echoed += 1;
                    break 'tries;
                }
            }
        }
    }
    assert_eq!(echoed, 100);
    child.kill().unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.stderr.is_empty() || !String::from_utf8_lossy(&o.stderr).contains("panic"));
}

#[test]
fn a_go_client_in_the_vm_reaches_the_host_through_the_gateway() {
    use std::io::{Read, Write};
    require_kvm();
    require_passt();
    // A one-request HTTP server on the host's loopback; the VM reaches it at the
    // gateway address, which passt maps to the host.
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut c, _) = server.accept().unwrap();
        let mut req = [0u8; 4096];
        let n = c.read(&mut req).unwrap();
        assert!(String::from_utf8_lossy(&req[..n]).starts_with("GET /from-vm HTTP/1.1"));
        c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nConnection: close\r\n\r\nhello from host").unwrap();
    });
    let url = format!("http://10.0.2.2:{port}/from-vm");
    let o = onering(&["run", "--net", "user", go_guest().to_str().unwrap(), "fetch", &url]);
    t.join().unwrap();
    assert_eq!(stdout(&o), "200 hello from host", "{}", stderr(&o));
    assert_eq!(status(&o), 0);
}

/// Traffic on a TAP device: a UDP echo server in the VM, on a TAP device in a
/// namespace made here, answers a client in that namespace (bench/udpping.c),
/// every datagram, with (nearly) no exit per packet.
#[test]
fn a_udp_echo_on_a_tap_device_answers_every_datagram() {
    require_kvm();
    let client = out_dir().join("udpping");
    let b =
        Command::new("gcc").args(["-O2"]).arg(root().join("bench/udpping.c")).arg("-o").arg(&client).output().unwrap();
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let ns = Netns::new("onering-tapio");
    ns.ip(&["link", "set", "lo", "up"]);
    ns.ip(&["tuntap", "add", "ortap1", "mode", "tap"]);
    ns.ip(&["addr", "add", "10.9.2.1/24", "dev", "ortap1"]);
    ns.ip(&["link", "set", "ortap1", "up"]);
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.0, env!("CARGO_BIN_EXE_onering"), "run", "--stats", "--net", "tap:ortap1"])
        .args(["--ip", "10.9.2.2/24", "--gateway", "10.9.2.1", musl("udpecho").to_str().unwrap(), "7", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    wait_line(&mut out, "listening");
    let o = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(&client)
        .args(["10.9.2.2", "7", "2000", "200"])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&o.stdout).into_owned();
    // (ARP and the first frames may take a resend: "lost" counts resends.)
    let lost: u32 = line.rsplit(' ').next().and_then(|w| w.trim().parse().ok()).unwrap_or(u32::MAX);
    assert!(o.status.success() && lost <= 5, "{line}{}", String::from_utf8_lossy(&o.stderr));
    // Datagrams larger than the TAP's MTU (1500) go both ways in IP fragments,
    // reassembled by the VM and by the host; the client checks every byte.
    for size in ["1473", "4000", "65507"] {
        let o =
            Command::new("ip").args(["netns", "exec", &ns.0]).arg(&client).args(["10.9.2.2", "7", "50", size]).output();
        let o = o.unwrap();
        let line = String::from_utf8_lossy(&o.stdout).into_owned();
        let lost: u32 = line.rsplit(' ').next().and_then(|w| w.trim().parse().ok()).unwrap_or(u32::MAX);
        assert!(o.status.success() && lost <= 5, "{size} B: {line}{}", String::from_utf8_lossy(&o.stderr));
    }
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("onering: stats: net: ") && !err.contains("panic"), "{err}");
    // The echoes' UDP checksums were left to the host (checksum offload).
    let offloaded = err.split(" with the checksum left to the host").next().and_then(|s| s.rsplit('(').next());
    assert!(offloaded.and_then(|n| n.trim().parse::<u32>().ok()).is_some_and(|n| n >= 2000), "{err}");
}
