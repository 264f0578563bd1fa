//! Pod networking: a container given a network namespace that its manager
//! (podman's netavark, a CNI plugin) has set up, with an interface and an IPv4
//! address in it, gets that address in its VM, as Kata does. In the namespace,
//! `create` makes a TAP device, moves the interface's address to the VM (the
//! namespace's own stack gives it up, so it answers nothing for it) and joins the
//! interface and the TAP with two tc `mirred` redirects: every frame in on one
//! goes out of the other. The VMM is then `ip netns exec NAME onering run --net
//! tap:onering0 --ip ADDR/PREFIX --gateway GW ...`, which attaches to the TAP
//! from inside the namespace (with that namespace's /sys). The VM answers ARP
//! for the address with its own MAC, which the bridge beyond learns.
//!
//! Only namespaces named under /run/netns (what podman and containerd's CRI
//! make) are joined; a namespace with no IPv4 address but loopback (podman
//! `--network none`) leaves the VM's network at its default, loopback only.
//! The tools are iproute2's `ip` and `tc`.

use std::path::Path;
use std::process::Command;

/// Why the pod's network could not be given to the VM.
#[derive(Debug, thiserror::Error)]
pub enum PodNetError {
    #[error("pod network: {0}: {1}")]
    Tool(String, String),
}

/// The TAP device made in the pod's namespace.
pub const TAP: &str = "onering0";

/// A pod's network as the VM takes it over.
#[derive(Debug, PartialEq)]
pub struct PodNet {
    /// The namespace's name under /run/netns.
    pub ns: String,
    /// The interface the address was on (eth0).
    pub dev: String,
    /// ADDR/PREFIX.
    pub ip: String,
    pub gateway: Option<String>,
}

impl PodNet {
    /// The `onering run` options that use it.
    pub fn run_options(&self) -> Vec<String> {
        let mut o = vec!["--net".into(), format!("tap:{TAP}"), "--ip".into(), self.ip.clone()];
        if let Some(g) = &self.gateway {
            o.extend(["--gateway".into(), g.clone()]);
        }
        o
    }
}

/// Runs `tool args`, its stdout if it succeeds.
fn run(tool: &str, args: &[&str]) -> Result<String, PodNetError> {
    let shown = format!("{tool} {}", args.join(" "));
    let out = Command::new(tool).args(args).output().map_err(|e| PodNetError::Tool(shown.clone(), e.to_string()))?;
    if !out.status.success() {
        return Err(PodNetError::Tool(shown, String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The pod network of namespace `path`, None if it is not one onering joins.
pub fn discover(path: &Path) -> Result<Option<PodNet>, PodNetError> {
    let in_run = ["/run/netns", "/var/run/netns"].iter().any(|d| path.parent() == Some(Path::new(d)));
    let Some(ns) = path.file_name().and_then(|n| n.to_str()).filter(|_| in_run) else { return Ok(None) };
    let addrs = run("ip", &["-n", ns, "-4", "-j", "addr", "show"])?;
    let routes = run("ip", &["-n", ns, "-4", "-j", "route", "show", "default"])?;
    Ok(parse(ns, &addrs, &routes))
}

/// The first interface other than loopback with an IPv4 address, from `ip -j`'s
/// addresses and default routes.
fn parse(ns: &str, addrs: &str, routes: &str) -> Option<PodNet> {
    let addrs: serde_json::Value = serde_json::from_str(addrs).ok()?;
    let (dev, ip) = addrs.as_array()?.iter().find_map(|link| {
        let name = link["ifname"].as_str().filter(|n| *n != "lo")?;
        let a = link["addr_info"].as_array()?.iter().find(|a| a["family"] == "inet")?;
        Some((name.to_string(), format!("{}/{}", a["local"].as_str()?, a["prefixlen"].as_u64()?)))
    })?;
    let routes: serde_json::Value = serde_json::from_str(routes).unwrap_or_default();
    let gateway = routes
        .as_array()
        .and_then(|r| r.iter().find(|r| r["dev"] == dev.as_str()))
        .and_then(|r| r["gateway"].as_str())
        .map(str::to_string);
    Some(PodNet { ns: ns.to_string(), dev, ip, gateway })
}

/// Makes the TAP, takes the address off the interface, and joins the two.
pub fn attach(p: &PodNet) -> Result<(), PodNetError> {
    let ns = p.ns.as_str();
    let dev = p.dev.as_str();
    run("ip", &["-n", ns, "tuntap", "add", "dev", TAP, "mode", "tap"])?;
    run("ip", &["-n", ns, "link", "set", TAP, "up"])?;
    run("ip", &["-n", ns, "addr", "flush", "dev", dev])?;
    for (from, to) in [(dev, TAP), (TAP, dev)] {
        run("tc", &["-n", ns, "qdisc", "add", "dev", from, "ingress"])?;
        let redirect = ["-n", ns, "filter", "add", "dev", from, "parent", "ffff:", "protocol", "all", "u32"];
        let rest = ["match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", to];
        run("tc", &[&redirect[..], &rest[..]].concat())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_address_and_gateway() {
        let addrs = r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifname":"eth0","addr_info":[{"family":"inet","local":"10.88.0.10","prefixlen":16}]}]"#;
        let routes = r#"[{"dst":"default","gateway":"10.88.0.1","dev":"eth0"}]"#;
        let p = parse("netns-1", addrs, routes).unwrap();
        assert_eq!(
            p,
            PodNet {
                ns: "netns-1".into(),
                dev: "eth0".into(),
                ip: "10.88.0.10/16".into(),
                gateway: Some("10.88.0.1".into())
            }
        );
        assert_eq!(p.run_options(), ["--net", "tap:onering0", "--ip", "10.88.0.10/16", "--gateway", "10.88.0.1"]);
        let only_lo = r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]}]"#;
        assert_eq!(parse("n", only_lo, "[]"), None);
        assert_eq!(discover(Path::new("/proc/1/ns/net")).unwrap(), None);
    }
}
