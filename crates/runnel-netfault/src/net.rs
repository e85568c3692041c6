//! The test network: one network namespace per node, joined by veth pairs
//! to a bridge in the harness's own namespace (where the clients run), and
//! the faults, applied inside the namespaces with nftables (drops, random
//! loss) and on the links with tc (a slow, congested link).
//!
//! Every name carries the harness's process id, so concurrent runs do not
//! collide and [`sweep_stale`] can remove what a killed run left behind.

use std::net::Ipv4Addr;
use std::process::Command;

use crate::error::{NetfaultError, Result};

/// A fault on the network, as the nemesis applies it. Nodes are 0-based
/// namespace indexes (node id minus one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The node neither sends nor receives anything (clients included).
    Isolate(usize),
    /// The node cannot reach `peers`; clients still reach it. Used on a
    /// leader: it keeps answering while the others elect a new one.
    CutFromPeers { node: usize, peers: Vec<usize> },
    /// The nodes of `left` cannot reach those of `right`; `middle`
    /// reaches both (a bridge partition).
    Bridge {
        middle: usize,
        left: Vec<usize>,
        right: Vec<usize>,
    },
    /// Each of `nodes` drops this share of the packets it receives, in
    /// percent.
    Loss { percent: u8, nodes: Vec<usize> },
    /// The node's link carries at most `kbit` kilobits per second each
    /// way, queueing the rest (up to 300 ms) and dropping beyond.
    Slow { node: usize, kbit: u32 },
}

/// `1,2,3` for 0-based indexes.
fn ids(nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(|n| (n + 1).to_string())
        .collect::<Vec<_>>()
        .join(",")
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Isolate(n) => write!(f, "node {} isolated", n + 1),
            Fault::CutFromPeers { node, peers } => {
                write!(f, "node {} cut from nodes {}", node + 1, ids(peers))
            }
            Fault::Bridge {
                middle,
                left,
                right,
            } => write!(
                f,
                "bridge partition: nodes {} | nodes {}, node {} reaching both",
                ids(left),
                ids(right),
                middle + 1
            ),
            Fault::Loss { percent, nodes } => {
                write!(f, "{percent}% packet loss on nodes {}", ids(nodes))
            }
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

fn run(args: &[&str]) -> Result<()> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| NetfaultError::io(args.join(" "), e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NetfaultError::Command {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// Runs `nft` in a namespace with a script on its standard input.
fn nft(namespace: &str, script: &str) -> Result<()> {
    use std::io::Write;
    let what = || format!("nft in {namespace}");
    let mut child = Command::new("ip")
        .args(["netns", "exec", namespace, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| NetfaultError::io(what(), e))?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .map_err(|e| NetfaultError::io(what(), e))?;
    let output = child
        .wait_with_output()
        .map_err(|e| NetfaultError::io(what(), e))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NetfaultError::Command {
            command: format!("nft in {namespace} on {script:?}"),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
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
    pub fn create(nodes: usize) -> Result<Network> {
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

    fn build(&mut self) -> Result<()> {
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
    pub fn apply(&self, fault: &Fault) -> Result<()> {
        match fault {
            Fault::Isolate(node) => nft(
                &self.namespace(*node),
                "add rule inet netfault input iifname != \"lo\" drop\n\
                 add rule inet netfault output oifname != \"lo\" drop\n",
            ),
            Fault::CutFromPeers { node, peers } => {
                for &peer in peers {
                    self.cut(*node, peer)?;
                }
                Ok(())
            }
            Fault::Bridge { left, right, .. } => {
                for &a in left {
                    for &b in right {
                        self.cut(a, b)?;
                    }
                }
                Ok(())
            }
            Fault::Loss { percent, nodes } => {
                for &node in nodes {
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
                let outer = self.outer_link(*node);
                run(&[&["tc", "qdisc", "add", "dev", &outer][..], &shape].concat())?;
                let ns = self.namespace(*node);
                let inner = [
                    "ip", "netns", "exec", &ns, "tc", "qdisc", "add", "dev", "eth0",
                ];
                run(&[&inner[..], &shape].concat())
            }
        }
    }

    /// Drops everything between nodes `a` and `b`, both ways, in both
    /// namespaces.
    fn cut(&self, a: usize, b: usize) -> Result<()> {
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
    pub fn heal(&self) -> Result<()> {
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
