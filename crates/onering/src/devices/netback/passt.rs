//! The user-mode back end (`--net user`, `-p`): `passt` started as a child, in the
//! foreground, on one end of a socket pair (`--fd`, no socket file, no temporary
//! directory), with the VM's static addresses and the published ports. Frames go
//! both ways in QEMU's stream protocol: a 4-byte big-endian length, then the
//! Ethernet frame.
//!
//! Why passt (not libslirp, not a NAT of our own): it is a maintained, packaged
//! (Debian `passt`), rootless implementation, used by podman, that forwards ports
//! and makes outbound TCP/UDP connections through ordinary host sockets, maps the
//! gateway address to the host, and forwards DNS to the host's resolver
//! (`--dns-forward`); as a separate process it also keeps that whole stack out of
//! the VMM's address space.
//!
//! Its life is tied to onering's three ways: it is killed and reaped when the VM
//! ends (`ChildGuard::stop`, from the machine's finish), it gets SIGKILL when
//! onering's main thread dies (the parent-death signal; passt drops to `nobody`
//! when started as root, which clears that signal, hence the third), and it quits
//! when its end of the socket pair closes (`-1`, "one-off"), which happens when
//! onering is gone, however it ended.
//!
//! passt neither fragments nor reassembles IPv4: it hands the VM a UDP datagram
//! from outside as one frame however long (beyond the MTU, larger than any of the
//! guest's receive buffers), and takes a fragment from the VM for a whole datagram
//! (the host got the first 1,472 bytes of a 3,000-byte one). So this end does it
//! for passt (`onering-ipfrag`, which the guest's stack uses too): a frame longer
//! than the MTU reaches the guest in fragments, and the guest's fragments reach
//! passt as one datagram.
//!
//! The version in Debian 12 (2023-03) has `--fd`; its own log goes to /dev/null
//! (`-l`), its stderr (start-up and fatal messages only) to a pipe read when it
//! stops, so the reason can be shown. It reports a host port it cannot bind only
//! after it started (and exits), so the ports are checked here first by binding
//! them.

use super::{NetBackError, NetSpec, PortForward, Proto};
use crate::devices::virtio::net::{Backend, MAX_FRAME};
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Instant;

/// Bytes `send` may queue while passt does not read, before frames are held back.
const OUT_LIMIT: usize = 256 * 1024;

/// passt's end of the stream.
pub struct Passt {
    sock: UnixStream,
    /// Received bytes in `inbuf[start..end]`.
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes to send, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    stderr: Option<ChildStderr>,
    /// The VM's MAC address: passt sends to 00:00:00:00:00:00 until it has seen a
    /// frame from the guest (a published port's first SYN, say), which a guest
    /// stack filtering on its own address would drop; such frames get this one.
    mac: [u8; 6],
    /// The link's MTU, fragments of a frame from passt that was longer still (to
    /// hand on before the stream's next frame), and the guest's fragments being
    /// put back together, on a clock from `epoch`.
    mtu: usize,
    pending: VecDeque<Vec<u8>>,
    frags: onering_ipfrag::Reassembler,
    epoch: Instant,
}

/// Ethernet's header length, and the type of IPv4 in it.
const ETH_HLEN: usize = 14;
const ETH_P_IP: [u8; 2] = [0x08, 0x00];

/// The IPv4 packet in Ethernet frame `f`, if it carries one.
fn ipv4(f: &[u8]) -> Option<&[u8]> {
    f.get(12..14).filter(|t| *t == ETH_P_IP)?;
    f.get(ETH_HLEN..)
}

/// Frames of `header` (an Ethernet header) around each packet of `packets`.
fn framed(header: &[u8], packets: Vec<Vec<u8>>) -> impl Iterator<Item = Vec<u8>> + '_ {
    packets.into_iter().map(move |p| [header, &p].concat())
}

/// Where `passt` is, if installed.
pub fn find() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join("passt")).find(|p| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Binds each host port of `f` and lets it go again: an error says passt would
/// fail to.
fn check_ports(f: &PortForward) -> Result<(), NetBackError> {
    let ip = f.host_ip.unwrap_or(Ipv4Addr::UNSPECIFIED);
    for port in f.host.0..=f.host.1 {
        let r = match f.proto {
            Proto::Tcp => TcpListener::bind((ip, port)).map(drop),
            Proto::Udp => UdpSocket::bind((ip, port)).map(drop),
        };
        if let Err(error) = r {
            let (spec, proto) = (f.spec.clone(), f.proto);
            return Err(if error.kind() == ErrorKind::AddrInUse {
                NetBackError::PortInUse { spec, port, proto }
            } else {
                NetBackError::PortBind { spec, port, proto, error }
            });
        }
    }
    Ok(())
}

/// passt's `-t`/`-u` argument for `f`: `[ADDR/]HOST[-END]:GUEST[-END]`.
fn port_arg(f: &PortForward) -> String {
    let range = |(a, b): (u16, u16)| if a == b { a.to_string() } else { format!("{a}-{b}") };
    let addr = f.host_ip.map_or(String::new(), |ip| format!("{ip}/"));
    format!("{addr}{}:{}", range(f.host), range(f.guest))
}

/// The command line for `spec`, passt's end of the socket being `fd`.
fn arguments(spec: &NetSpec, ports: &[PortForward], fd: RawFd) -> Vec<String> {
    let mut a: Vec<String> = ["-f", "-q", "-1", "-4", "-l", "/dev/null", "--fd"].map(String::from).to_vec();
    a.push(fd.to_string());
    a.extend(["-m".into(), spec.mtu.to_string()]);
    if let Some((ip, prefix)) = spec.ip {
        a.extend(["-a".into(), ip.to_string(), "-n".into(), prefix.to_string()]);
    }
    if let Some(gw) = spec.gateway {
        a.extend(["-g".into(), gw.to_string()]);
    }
    if let Some(dns) = spec.dns {
        a.extend(["--dns-forward".into(), dns.to_string()]);
    }
    for f in ports {
        a.push(if f.proto == Proto::Tcp { "-t" } else { "-u" }.into());
        a.push(port_arg(f));
    }
    a
}

/// Checks the ports and starts passt; its end of the stream and the process.
pub fn start(spec: &NetSpec, ports: &[PortForward], option: &'static str) -> Result<(Passt, Child), NetBackError> {
    let exe = find().ok_or(NetBackError::PasstMissing(option))?;
    for f in ports {
        check_ports(f)?;
    }
    let (ours, theirs) = UnixStream::pair().map_err(NetBackError::Passt)?;
    ours.set_nonblocking(true).map_err(NetBackError::Passt)?;
    let mut cmd = Command::new(exe);
    cmd.args(arguments(spec, ports, theirs.as_raw_fd()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    crate::sys::net::die_with_parent_keeping(&mut cmd, theirs.as_raw_fd());
    let mut child = cmd.spawn().map_err(NetBackError::Passt)?;
    drop(theirs);
    let stderr = child.stderr.take();
    if let Some(e) = &stderr {
        // Read only once passt stopped; never block the I/O thread on it.
        let _ = crate::sys::net::set_nonblocking(e);
    }
    Ok((Passt::over(ours, stderr, spec.mac, usize::from(spec.mtu)), child))
}

impl Passt {
    /// The back end's state over stream `sock` (passt's other end), for a VM with
    /// MAC address `mac`.
    fn over(sock: UnixStream, stderr: Option<ChildStderr>, mac: [u8; 6], mtu: usize) -> Passt {
        Passt {
            sock,
            inbuf: vec![0; 2 * (4 + MAX_FRAME)],
            start: 0,
            end: 0,
            out: Vec::new(),
            out_at: 0,
            stderr,
            mac,
            mtu,
            pending: VecDeque::new(),
            frags: Default::default(),
            epoch: Instant::now(),
        }
    }

    /// Queues `frame` for passt.
    fn queue(&mut self, frame: &[u8]) {
        self.out.extend((frame.len() as u32).to_be_bytes());
        self.out.extend_from_slice(frame);
    }

    /// A frame read from passt, in `buf[..len]`: as it is if the guest can take
    /// it, else (an IPv4 packet beyond the MTU) its first fragment there and the
    /// others pending. Its length; 0 if it was dropped (longer than the MTU and
    /// not IPv4, or malformed).
    fn fit(&mut self, buf: &mut [u8], len: usize) -> usize {
        if len <= ETH_HLEN + self.mtu {
            return len;
        }
        let Some(p) = ipv4(&buf[..len]) else { return 0 };
        let header = buf[..ETH_HLEN].to_vec();
        self.pending.extend(framed(&header, onering_ipfrag::fragment(p.to_vec(), self.mtu)));
        match self.pending.pop_front() {
            Some(f) => {
                buf[..f.len()].copy_from_slice(&f);
                f.len()
            }
            None => 0,
        }
    }

    /// What passt said before it stopped (start-up chatter left out).
    fn last_words(&mut self) -> String {
        let mut text = String::new();
        if let Some(e) = self.stderr.as_mut() {
            let mut buf = [0u8; 4096];
            if let Ok(n) = e.read(&mut buf) {
                text = String::from_utf8_lossy(&buf[..n]).into_owned();
            }
        }
        let said: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("Failed to send") && !l.starts_with("Don't run as root") && !l.is_empty())
            .collect();
        if said.is_empty() {
            "passt exited".into()
        } else {
            format!("passt: {}", said.join("; "))
        }
    }
}

impl Backend for Passt {
    fn send(&mut self, frame: &[u8]) -> std::io::Result<bool> {
        if self.out.len() - self.out_at >= OUT_LIMIT {
            return Ok(false);
        }
        match ipv4(frame).filter(|p| onering_ipfrag::is_fragment(p)) {
            Some(p) => {
                // A fragment: the datagram goes once it is whole.
                let now = self.epoch.elapsed().as_nanos() as u64;
                if let Some(whole) = self.frags.input(p.to_vec(), now) {
                    self.queue(&[&frame[..ETH_HLEN], &whole].concat());
                }
            }
            None => self.queue(frame),
        }
        Ok(true)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        while self.out_at < self.out.len() {
            match self.sock.write(&self.out[self.out_at..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        } else if self.out_at > OUT_LIMIT {
            self.out.drain(..self.out_at);
            self.out_at = 0;
        }
        Ok(())
    }

    fn can_send(&self) -> bool {
        self.out.len() - self.out_at < OUT_LIMIT
    }

    fn recv(&mut self, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
        if let Some(f) = self.pending.pop_front() {
            buf[..f.len()].copy_from_slice(&f);
            return Ok(Some(f.len()));
        }
        loop {
            let have = &self.inbuf[self.start..self.end];
            if have.len() >= 4 {
                let len = u32::from_be_bytes([have[0], have[1], have[2], have[3]]) as usize;
                if len > MAX_FRAME || len > buf.len() {
                    let why = format!("passt sent a frame of {len} bytes");
                    return Err(std::io::Error::new(ErrorKind::InvalidData, why));
                }
                if have.len() >= 4 + len {
                    buf[..len].copy_from_slice(&have[4..4 + len]);
                    self.start += 4 + len;
                    if let Some(dst) = buf.get_mut(..6).filter(|d| **d == [0; 6]) {
                        dst.copy_from_slice(&self.mac);
                    }
                    match self.fit(buf, len) {
                        0 => continue,
                        n => return Ok(Some(n)),
                    }
                }
            }
            // Need more: move what is left to the front, then read.
            self.inbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            match self.sock.read(&mut self.inbuf[self.end..]) {
                Ok(0) => return Err(std::io::Error::other(self.last_words())),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    fn name(&self) -> String {
        "passt".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::netback::{Mode, MAC, MTU, USER_DNS, USER_GATEWAY, USER_IP};

    fn spec(ports: Vec<PortForward>) -> NetSpec {
        NetSpec {
            mode: Mode::User(ports),
            mac: MAC,
            mtu: MTU,
            ip: Some(USER_IP),
            gateway: Some(USER_GATEWAY),
            dns: Some(USER_DNS),
        }
    }

    #[test]
    fn the_command_line() {
        let ports = vec!["8080:80".parse().unwrap(), "127.0.0.1:5353-5354:53-54/udp".parse().unwrap()];
        let a = arguments(&spec(ports.clone()), &ports, 7).join(" ");
        assert_eq!(
            a,
            "-f -q -1 -4 -l /dev/null --fd 7 -m 1500 -a 10.0.2.15 -n 24 -g 10.0.2.2 --dns-forward 10.0.2.3 \
             -t 8080:80 -u 127.0.0.1/5353-5354:53-54"
        );
    }

    #[test]
    fn a_used_port_is_found() {
        let l = TcpListener::bind(("0.0.0.0", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let f: PortForward = format!("{port}:80").parse().unwrap();
        assert!(matches!(check_ports(&f), Err(NetBackError::PortInUse { port: p, .. }) if p == port));
        drop(l);
        assert!(check_ports(&f).is_ok());
    }

    /// An Ethernet frame around an IPv4 UDP packet of `payload` bytes.
    fn udp_frame(payload: usize) -> Vec<u8> {
        let total = 28 + payload;
        let mut f = vec![2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1, 8, 0];
        f.extend([0x45, 0, (total >> 8) as u8, total as u8, 0x12, 0x34, 0, 0, 64, 17, 0, 0]);
        f.extend([10, 0, 2, 2, 10, 0, 2, 15]);
        f.extend([0, 53, 0x30, 0x39, ((payload + 8) >> 8) as u8, (payload + 8) as u8, 0, 0]);
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    /// passt neither fragments nor reassembles: a frame from it beyond the MTU
    /// reaches the guest in fragments, and the guest's fragments go to it whole.
    #[test]
    fn datagrams_beyond_the_mtu_are_fragmented_and_reassembled() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut p = Passt::over(ours, None, [2, 0, 0, 0, 0, 9], 1500);
        let big = udp_frame(3000);
        theirs.write_all(&(big.len() as u32).to_be_bytes()).unwrap();
        theirs.write_all(&big).unwrap();
        let mut buf = vec![0; MAX_FRAME];
        let mut pieces = Vec::new();
        while let Some(n) = p.recv(&mut buf).unwrap() {
            assert!(n <= 14 + 1500 && buf[..14] == big[..14]);
            pieces.push(buf[..n].to_vec());
        }
        assert_eq!(pieces.len(), 3);
        // The guest's fragments (the same ones, say) go to passt as one frame.
        for f in &pieces {
            assert!(p.send(f).unwrap());
        }
        p.flush().unwrap();
        let mut got = vec![0; 4 + big.len()];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(u32::from_be_bytes([got[0], got[1], got[2], got[3]]) as usize, big.len());
        // (The reassembled header has its checksum filled; the rest is the same.)
        assert_eq!(got[4..14 + 4], big[..14]);
        assert_eq!(got[4 + 34..], big[34..]);
        // A frame that fits goes as it is, both ways.
        let small = udp_frame(100);
        assert!(p.send(&small).unwrap());
        p.flush().unwrap();
        let mut got = vec![0; 4 + small.len()];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(got[4..], small[..]);
    }

    /// Frames through the stream protocol, with a socket pair standing in for passt.
    #[test]
    fn frames_are_length_prefixed_both_ways() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut p = Passt::over(ours, None, [2, 0, 0, 0, 0, 9], 1500);
        assert!(p.send(b"abc").unwrap());
        p.flush().unwrap();
        let mut got = [0u8; 7];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"\0\0\0\x03abc");
        let mut buf = vec![0; MAX_FRAME];
        assert_eq!(p.recv(&mut buf).unwrap(), None);
        // Two frames, the second split across writes.
        theirs.write_all(b"\0\0\0\x02hi\0\0\0\x05wor").unwrap();
        assert_eq!(p.recv(&mut buf).unwrap(), Some(2));
        assert_eq!(&buf[..2], b"hi");
        assert_eq!(p.recv(&mut buf).unwrap(), None);
        theirs.write_all(b"ld").unwrap();
        assert_eq!(p.recv(&mut buf).unwrap(), Some(5));
        assert_eq!(&buf[..5], b"world");
        // A frame to the all-zero MAC (passt has not learned the guest's yet) is
        // addressed to the VM's.
        theirs.write_all(b"\0\0\0\x0f\0\0\0\0\0\0\x02\xfc\0\0\0\x01\x08\0!").unwrap();
        assert_eq!(p.recv(&mut buf).unwrap(), Some(15));
        assert_eq!(&buf[..15], b"\x02\0\0\0\0\x09\x02\xfc\0\0\0\x01\x08\0!");
        // An absurd length is an error, as is the other end closing.
        theirs.write_all(&[0xff; 4]).unwrap();
        assert!(p.recv(&mut buf).is_err());
        drop(theirs);
        p.start = p.end;
        assert!(p.recv(&mut buf).is_err());
    }
}
