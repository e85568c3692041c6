//! The test network: one network namespace per node, joined by veth pairs
//! to a bridge in the harness's own namespace (where the clients run), and
//! the faults, applied inside the namespaces with nftables (drops, random
//! loss) and on the links with tc (a slow, congested link).
//!
//! Every name carries the harness's process id, so concurrent runs do not
//! collide and [`sweep_stale`] can remove what a killed run left behind.

use std::net::Ipv4Addr;
use std::process::Command;

/// A fault on the network, as the nemesis applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The node neither sends nor receives anything (clients included).
    Isolate(usize),
    /// The node cannot reach the other nodes; clients still reach it. Used
    /// on a leader: it keeps answering while the others elect a new one.
    CutFromPeers(usize),
    /// The two nodes other than `middle` cannot reach each other; `middle`
    /// reaches both (a bridge partition).
    Bridge { middle: usize },
    /// Every node drops this share of the packets it receives, in percent.
    Loss(u8),
    /// The node's link carries at most `kbit` kilobits per second each
    /// way, queueing the rest (up to 300 ms) and dropping beyond.
    Slow { node: usize, kbit: u32 },
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Isolate(n) => write!(f, "node {} isolated", n + 1),
            Fault::CutFromPeers(n) => write!(f, "node {} cut from its peers", n + 1),
            Fault::Bridge { middle } => write!(f, "bridge partition through node {}", middle + 1),
            Fault::Loss(p) => write!(f, "{p}% packet loss on every node"),
            Fault::Slow { node, kbit } => {
                write!(f, "node {}'s link slowed to {kbit} kbit/s", node + 1)
            }
        }
    }
}

/// The namespaces, links and addresses of one run.
pub struct Network {
    tag: String,
    subnet: [u8; 3],
    nodes: usize,
    up: bool,
}

fn run(args: &[&str]) -> Result<(), String> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Runs `nft` in a namespace with a script on its standard input.
fn nft(namespace: &str, script: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", namespace, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft in {namespace}: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .map_err(|e| format!("nft in {namespace}: {e}"))?;
    let output = child
        .wait_with_output()
        .map_err(|e| format!("nft in {namespace}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {namespace} failed on {script:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// The rules of a fault-free node: an input and an output chain to add
/// drops to.
const BASE_TABLE: &str = "table inet netfault {
  chain input { type filter hook input priority 0; policy accept; }
  chain output { type filter hook output priority 0; policy accept; }
}
";

impl Network {
    /// Creates the namespaces, links and the bridge for `nodes` nodes.
    pub fn create(nodes: usize) -> Result<Network, String> {
        let pid = std::process::id();
        let mut network = Network {
            tag: format!("rnf{pid}"),
            subnet: [10, 213, (pid % 250) as u8],
            nodes,
            up: true,
        };
        network.build().inspect_err(|_| network.destroy())?;
        Ok(network)
    }

    fn build(&mut self) -> Result<(), String> {
        let bridge = self.bridge();
        let gateway = format!("{}/24", self.harness_ip());
        run(&["ip", "link", "add", &bridge, "type", "bridge"])?;
        run(&["ip", "addr", "add", &gateway, "dev", &bridge])?;
        run(&["ip", "link", "set", &bridge, "up"])?;
        for i in 0..self.nodes {
            let (ns, outer) = (self.namespace(i), self.outer_link(i));
            let inner = format!("{outer}i");
            let address = format!("{}/24", self.node_ip(i));
            run(&["ip", "netns", "add", &ns])?;
            run(&[
                "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            run(&["ip", "link", "set", &inner, "netns", &ns])?;
            run(&["ip", "link", "set", &outer, "master", &bridge])?;
            run(&["ip", "link", "set", &outer, "up"])?;
            let exec = ["ip", "netns", "exec", &ns];
            run(&[&exec[..], &["ip", "link", "set", "lo", "up"]].concat())?;
            run(&[&exec[..], &["ip", "link", "set", &inner, "name", "eth0"]].concat())?;
            run(&[&exec[..], &["ip", "addr", "add", &address, "dev", "eth0"]].concat())?;
            run(&[&exec[..], &["ip", "link", "set", "eth0", "up"]].concat())?;
            nft(&ns, BASE_TABLE)?;
        }
        Ok(())
    }

    pub fn namespace(&self, node: usize) -> String {
        format!("{}-n{}", self.tag, node + 1)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// The bridge side of node `node`'s veth pair.
    fn outer_link(&self, node: usize) -> String {
        format!("{}v{}", self.tag, node + 1)
    }

    pub fn node_ip(&self, node: usize) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, node as u8 + 1)
    }

    fn harness_ip(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 254)
    }

    /// Applies `fault` (on top of whatever is applied already).
    pub fn apply(&self, fault: &Fault) -> Result<(), String> {
        let peers_of =
            |node: usize| -> Vec<usize> { (0..self.nodes).filter(|&n| n != node).collect() };
        match *fault {
            Fault::Isolate(node) => nft(
                &self.namespace(node),
                "add rule inet netfault input iifname != \"lo\" drop\n\
                 add rule inet netfault output oifname != \"lo\" drop\n",
            ),
            Fault::CutFromPeers(node) => {
                for peer in peers_of(node) {
                    self.cut(node, peer)?;
                }
                Ok(())
            }
            Fault::Bridge { middle } => {
                let sides = peers_of(middle);
                self.cut(sides[0], sides[1])
            }
            Fault::Loss(percent) => {
                for node in 0..self.nodes {
                    let rule = format!(
                        "add rule inet netfault input iifname != \"lo\" numgen random mod 100 < {percent} drop\n"
                    );
                    nft(&self.namespace(node), &rule)?;
                }
                Ok(())
            }
            Fault::Slow { node, kbit } => {
                let rate = format!("{kbit}kbit");
                let shape = [
                    "root", "tbf", "rate", &rate, "burst", "16kb", "latency", "300ms",
                ];
                let outer = self.outer_link(node);
                run(&[&["tc", "qdisc", "add", "dev", &outer][..], &shape].concat())?;
                let ns = self.namespace(node);
                let inner = [
                    "ip", "netns", "exec", &ns, "tc", "qdisc", "add", "dev", "eth0",
                ];
                run(&[&inner[..], &shape].concat())
            }
        }
    }

    /// Drops everything between nodes `a` and `b`, both ways, in both
    /// namespaces.
    fn cut(&self, a: usize, b: usize) -> Result<(), String> {
        for (me, other) in [(a, b), (b, a)] {
            let ip = self.node_ip(other);
            let rules = format!(
                "add rule inet netfault input ip saddr {ip} drop\n\
                 add rule inet netfault output ip daddr {ip} drop\n"
            );
            nft(&self.namespace(me), &rules)?;
        }
        Ok(())
    }

    /// Removes every fault.
    pub fn heal(&self) -> Result<(), String> {
        for node in 0..self.nodes {
            let ns = self.namespace(node);
            nft(
                &ns,
                "flush chain inet netfault input\nflush chain inet netfault output\n",
            )?;
            // No shaping is the usual case: deleting it then fails, harmlessly.
            let _ = run(&["tc", "qdisc", "del", "dev", &self.outer_link(node), "root"]);
            let _ = run(&[
                "ip", "netns", "exec", &ns, "tc", "qdisc", "del", "dev", "eth0", "root",
            ]);
        }
        Ok(())
    }

    /// Removes the namespaces (and with them the veth pairs) and the bridge.
    pub fn destroy(&mut self) {
        if !std::mem::replace(&mut self.up, false) {
            return;
        }
        for node in 0..self.nodes {
            let _ = run(&["ip", "netns", "del", &self.namespace(node)]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge()]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.destroy();
    }
}

/// Removes the namespaces and bridges of runs whose process is gone.
pub fn sweep_stale() {
    let stale = |name: &str| -> bool {
        let digits: String = name
            .strip_prefix("rnf")
            .unwrap_or("")
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits
            .parse::<u32>()
            .is_ok_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if stale(name) {
                let _ = run(&["ip", "netns", "del", name]);
            }
        }
    }
    if let Ok(out) = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
    {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split(':').nth(1).unwrap_or("").trim();
            if name.ends_with("br") && stale(name) {
                let _ = run(&["ip", "link", "del", name]);
            }
        }
    }
}
