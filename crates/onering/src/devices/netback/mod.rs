//! The network device's back ends (`virtio::net::Backend`), chosen by `--net`:
//! `user` (also implied by `-p`) starts `passt`, a maintained user-mode network
//! stack (rootless, used by podman), as a child that speaks QEMU's stream protocol
//! over a socket pair ([`passt`]); `tap:NAME` attaches to an existing TAP device
//! ([`tap`]). `none`, the default, makes no device at all.
//!
//! Also here: the `-p` syntax (docker's `[HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]`,
//! ranges as `8000-8010:8000-8010`), and the checks that must fail before the VM
//! boots with a clear message (status 125): passt not installed, a host port
//! already in use (checked by binding it, since passt reports it only after it
//! started), a TAP device that does not exist.

pub mod passt;
pub mod tap;

use crate::devices::virtio::net::Backend;
use std::net::Ipv4Addr;
use std::process::Child;
use std::sync::Mutex;
use thiserror::Error;

/// Why the network back end could not start.
#[derive(Debug, Error)]
pub enum NetBackError {
    #[error(
        "{0} needs passt (user-mode networking), which is not installed: install the Debian package passt \
         (scripts/setup.sh does)"
    )]
    PasstMissing(&'static str),
    #[error("cannot start passt: {0}")]
    Passt(std::io::Error),
    #[error("-p {spec}: host port {port}/{proto} is already in use")]
    PortInUse { spec: String, port: u16, proto: Proto },
    #[error("-p {spec}: cannot bind host port {port}/{proto}: {error}")]
    PortBind { spec: String, port: u16, proto: Proto, error: std::io::Error },
    #[error("--net tap:{0}: no such network device (create it first, e.g. ip tuntap add {0} mode tap)")]
    NoTapDevice(String),
    #[error("--net tap:{0}: {0} is not a TAP device")]
    NotTap(String),
    #[error("--net tap:{name}: {error}")]
    Tap { name: String, error: std::io::Error },
}

/// A published port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        })
    }
}

/// One `-p`: host ports `host.0..=host.1` (on `host_ip`, or every address) to guest
/// ports `guest.0..=guest.1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortForward {
    pub host_ip: Option<Ipv4Addr>,
    pub host: (u16, u16),
    pub guest: (u16, u16),
    pub proto: Proto,
    /// As the user wrote it, for messages.
    pub spec: String,
}

fn port_range(s: &str) -> Option<(u16, u16)> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let (a, b): (u16, u16) = (a.parse().ok()?, b.parse().ok()?);
    (a != 0 && a <= b).then_some((a, b))
}

impl std::str::FromStr for PortForward {
    type Err = String;

    /// `[HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp]`, ports or equal-length ranges.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("'{s}' is not [HOSTIP:]HOSTPORT:GUESTPORT[/tcp|/udp] (e.g. 8080:80 or 127.0.0.1:53:53/udp)");
        let (ports, proto) = match s.rsplit_once('/') {
            Some((p, "tcp")) => (p, Proto::Tcp),
            Some((p, "udp")) => (p, Proto::Udp),
            Some(_) => return Err(bad()),
            None => (s, Proto::Tcp),
        };
        let parts: Vec<&str> = ports.split(':').collect();
        let (ip, host, guest) = match parts[..] {
            [h, g] => (None, h, g),
            [ip, h, g] => (Some(ip.parse::<Ipv4Addr>().map_err(|_| bad())?), h, g),
            _ => return Err(bad()),
        };
        let (host, guest) = (port_range(host).ok_or_else(bad)?, port_range(guest).ok_or_else(bad)?);
        if host.1 - host.0 != guest.1 - guest.0 {
            return Err(format!("'{s}': the host and guest port ranges differ in length"));
        }
        Ok(PortForward { host_ip: ip, host, guest, proto, spec: s.to_string() })
    }
}

/// Which back end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// passt, with these ports published.
    User(Vec<PortForward>),
    /// The TAP device of this name.
    Tap(String),
}

/// The network the VM is on: back end and static addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetSpec {
    pub mode: Mode,
    pub mac: [u8; 6],
    pub mtu: u16,
    /// The VM's address and prefix length (None: the guest's choice, e.g. DHCP).
    pub ip: Option<(Ipv4Addr, u8)>,
    pub gateway: Option<Ipv4Addr>,
    pub dns: Option<Ipv4Addr>,
}

/// The MAC address the device gets (locally administered, QEMU's prefix).
pub const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
/// `--net user`'s defaults: the VM at 10.0.2.15/24, the host at the gateway
/// 10.0.2.2 (passt maps it to the host's loopback), DNS at 10.0.2.3 (passt
/// forwards it to the host's resolver), as QEMU's user networking.
pub const USER_IP: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 0, 2, 15), 24);
pub const USER_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
pub const USER_DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
/// The device's MTU, with passt and with a TAP device. (passt's own default,
/// 65,520, was tried: Go net/http in the VM driven from the host through `-p` then
/// got connection resets in every try, and it went back to 1,500. passt does not
/// fragment: the passt back end cuts a longer datagram from outside into
/// fragments, and puts the guest's fragments back together for it.)
pub const MTU: u16 = 1500;

/// The `n`-th address of `ip`'s network (skipping `avoid`).
pub fn host_in(ip: (Ipv4Addr, u8), n: u32, avoid: &[Ipv4Addr]) -> Ipv4Addr {
    let mask = if ip.1 == 0 { 0 } else { u32::MAX << (32 - u32::from(ip.1.min(32))) };
    let net = u32::from(ip.0) & mask;
    (n..n + 8).map(|k| Ipv4Addr::from(net.wrapping_add(k))).find(|a| !avoid.contains(a)).unwrap_or(ip.0)
}

/// Parses `--ip CIDR` (`10.0.0.2/24`; no prefix means /24).
pub fn parse_cidr(s: &str) -> Result<(Ipv4Addr, u8), String> {
    let (ip, prefix) = s.split_once('/').unwrap_or((s, "24"));
    let ip: Ipv4Addr =
        ip.parse().map_err(|_| format!("'{s}' is not an IPv4 address with a prefix (e.g. 10.0.0.2/24)"))?;
    match prefix.parse::<u8>() {
        Ok(p) if (1..=32).contains(&p) => Ok((ip, p)),
        _ => Err(format!("'{s}': the prefix length must be 1 to 32")),
    }
}

/// A started back end, and the process behind it (passt) to stop when the VM ends.
pub struct Started {
    pub backend: Box<dyn Backend>,
    pub child: ChildGuard,
}

/// The back end's process, if any: killed and reaped by [`ChildGuard::stop`], so
/// none is left behind when the VM ends (and it dies with onering in any case: see
/// `passt`).
#[derive(Debug, Default)]
pub struct ChildGuard(Mutex<Option<Child>>);

impl ChildGuard {
    pub fn stop(&self) {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = c.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the back end `spec` asks for. Before the VM boots: every error here is
/// onering's (status 125).
pub fn start(spec: &NetSpec, option: &'static str) -> Result<Started, NetBackError> {
    match &spec.mode {
        Mode::User(ports) => {
            let (backend, child) = passt::start(spec, ports, option)?;
            Ok(Started { backend: Box::new(backend), child: ChildGuard(Mutex::new(Some(child))) })
        }
        Mode::Tap(name) => Ok(Started { backend: Box::new(tap::Tap::open(name)?), child: ChildGuard::default() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_specs() {
        let p = |s: &str| s.parse::<PortForward>();
        let f = p("8080:80").unwrap();
        assert_eq!((f.host_ip, f.host, f.guest, f.proto), (None, (8080, 8080), (80, 80), Proto::Tcp));
        let f = p("127.0.0.1:5353:53/udp").unwrap();
        assert_eq!(
            (f.host_ip, f.host, f.guest, f.proto),
            (Some(Ipv4Addr::LOCALHOST), (5353, 5353), (53, 53), Proto::Udp)
        );
        let f = p("8000-8002:9000-9002/tcp").unwrap();
        assert_eq!((f.host, f.guest), ((8000, 8002), (9000, 9002)));
        for bad in ["80", "x:80", "80:80/sctp", "0:80", "1:2:3:4", "host:80:80", "8000-8002:9000", "9-8:9-8", "70000:1"]
        {
            assert!(p(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs_and_default_hosts() {
        assert_eq!(parse_cidr("10.1.2.3/16"), Ok((Ipv4Addr::new(10, 1, 2, 3), 16)));
        assert_eq!(parse_cidr("10.1.2.3"), Ok((Ipv4Addr::new(10, 1, 2, 3), 24)));
        assert!(parse_cidr("10.1.2.3/33").is_err());
        assert!(parse_cidr("10.1.2/8").is_err());
        let ip = (Ipv4Addr::new(192, 168, 7, 2), 24);
        assert_eq!(host_in(ip, 2, &[ip.0]), Ipv4Addr::new(192, 168, 7, 3));
        assert_eq!(host_in(ip, 1, &[ip.0]), Ipv4Addr::new(192, 168, 7, 1));
    }
}
