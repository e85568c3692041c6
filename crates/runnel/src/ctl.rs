//! `runnel ctl`: operator commands. `status` prints what a node's
//! `/_runnel/status` reports: the nodes, and per group its leader, term,
//! log and applied indexes and each follower's replication lag.
//! `rotate-webhook-key` replaces the key that signs webhooks. `node add`,
//! `node remove` and `node replace` change the cluster's membership,
//! `node rebalance` its placement and replication factor ([`membership`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use clap::Subcommand;

pub(crate) mod membership;
mod placing;

#[derive(Subcommand)]
pub enum CtlCommand {
    /// Add or remove cluster members.
    #[command(subcommand)]
    Node(NodeCommand),
    /// Nodes, groups, leaders, terms and replication lag.
    Status {
        /// Any node's base URL, e.g. http://127.0.0.1:4437.
        #[arg(long, default_value = "http://127.0.0.1:4437")]
        target: String,
        /// Print the raw JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Bearer token with `admin` on every stream (servers with
        /// access control).
        #[arg(long, env = "RUNNEL_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// https:// targets: the PEM file of the CA that signed the
        /// server's certificate [default: the system's CAs].
        #[arg(long)]
        ca: Option<std::path::PathBuf>,
    },
    /// Pause or resume self-healing: the leaders of a member's groups
    /// moving its replicas to live nodes once it has not answered for
    /// `serve --dead-node-after` (kept in the cluster's metadata).
    Rebalance {
        #[arg(value_enum)]
        action: RebalanceAction,
        #[command(flatten)]
        common: NodeArgs,
    },
    /// Finish a rolling upgrade: once every member runs the new build,
    /// raise the cluster version so that the new formats may be written
    /// (no member can go back to the previous build after). Refused,
    /// naming the member, while one still runs an older build.
    Upgrade {
        #[arg(value_enum)]
        action: UpgradeAction,
        #[command(flatten)]
        common: NodeArgs,
    },
    /// Replace the key that signs webhooks; the old public key stays in
    /// `jwks.json` for --keep-secs so receivers verify deliveries already
    /// sent.
    RotateWebhookKey {
        /// Any node's base URL.
        #[arg(long, default_value = "http://127.0.0.1:4437")]
        target: String,
        /// How long the old key stays published.
        #[arg(long, default_value_t = 3600)]
        keep_secs: u64,
        /// Bearer token with `admin` on every stream.
        #[arg(long, env = "RUNNEL_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// https:// targets: the CA's PEM file [default: the system's CAs].
        #[arg(long)]
        ca: Option<std::path::PathBuf>,
    },
}

/// `runnel ctl rebalance pause|resume`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum RebalanceAction {
    Pause,
    Resume,
}

/// `runnel ctl upgrade finalize`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum UpgradeAction {
    Finalize,
}

/// Cluster membership.
#[derive(Subcommand)]
pub enum NodeCommand {
    /// Make a running node a member: it joins group 0 and takes its
    /// share of the other groups' replicas, moved from the busiest nodes
    /// (each a learner first, caught up by snapshot and log, then a
    /// voter, then the old replica removed). Start the new node first,
    /// with `--peers` naming the existing nodes and itself (a node
    /// started with `--join` does this by itself).
    Add {
        /// The new node's id (unique in the cluster).
        #[arg(long)]
        node_id: u64,
        /// The new node's HTTP address, HOST:PORT (Raft on the next port).
        #[arg(long)]
        addr: String,
        #[command(flatten)]
        common: NodeArgs,
    },
    /// Drain a node: its replicas move to the other nodes, then it
    /// leaves every group and is retired. Refused for a group that would
    /// be left without a reachable quorum. A removed node serves again
    /// only with an empty data directory and a new id.
    Remove {
        #[arg(long)]
        node_id: u64,
        #[command(flatten)]
        common: NodeArgs,
    },
    /// Replace a node (a dead machine, say) by a new one: each replica
    /// of the old node is replaced by one elsewhere (mostly on the new
    /// node), added before the old one is removed, so the groups never
    /// have fewer replicas than before; then the old node is retired.
    Replace {
        /// The node that goes.
        #[arg(long)]
        node_id: u64,
        /// The node that takes its place (a new id), already started.
        #[arg(long)]
        new_node_id: u64,
        /// The new node's HTTP address, HOST:PORT.
        #[arg(long)]
        addr: String,
        #[command(flatten)]
        common: NodeArgs,
    },
    /// Place the replicas as they should be for the current members
    /// (balanced, each data group on the replication factor's number of
    /// nodes), moving them one at a time; with --replication-factor, set
    /// the cluster's factor first. Idempotent: with nothing to move it
    /// changes nothing.
    Rebalance {
        /// The cluster's new replication factor (1 to 15): groups gain
        /// or lose replicas to match.
        #[arg(long)]
        replication_factor: Option<u32>,
        #[command(flatten)]
        common: NodeArgs,
    },
    /// Move one group's replica from a node to another: the receiving
    /// node becomes a learner of the group, is caught up and promoted,
    /// then the giving node leaves the group and drops its copy. Group 0
    /// (the cluster's metadata and subscriptions), followed by every
    /// node, is placed by `rebalance`, not moved by hand.
    Move {
        /// The group whose replica moves.
        #[arg(long)]
        group: u32,
        /// The node that gives its replica up.
        #[arg(long)]
        node_id: u64,
        /// The node that receives it, already running.
        #[arg(long)]
        to: u64,
        /// The receiving node's HTTP address, HOST:PORT.
        #[arg(long)]
        addr: String,
        #[command(flatten)]
        common: NodeArgs,
    },
}

#[derive(clap::Args, Clone)]
pub struct NodeArgs {
    /// Any member's base URL.
    #[arg(long, default_value = "http://127.0.0.1:4437")]
    pub(crate) target: String,
    /// Bearer token with `admin` on every stream.
    #[arg(long, env = "RUNNEL_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// https:// targets: the CA's PEM file [default: the system's CAs].
    #[arg(long)]
    pub(crate) ca: Option<std::path::PathBuf>,
    /// Give up on a group after this long without progress (a leader
    /// change or a slow catch-up); running the command again resumes it.
    #[arg(long, default_value_t = 120)]
    pub(crate) timeout_secs: u64,
}

pub fn run(command: CtlCommand) -> Result<(), String> {
    match command {
        CtlCommand::Node(node) => membership::run(node),
        CtlCommand::Status {
            target,
            json,
            token,
            ca,
        } => {
            let body = http_request(
                "GET",
                &target,
                "/_runnel/status",
                token.as_deref(),
                ca.as_deref(),
            )?;
            if json {
                println!("{body}");
                return Ok(());
            }
            let status: serde_json::Value = serde_json::from_str(&body)
                .map_err(|e| format!("{target} answered with something other than JSON: {e}"))?;
            print!("{}", render(&status));
            Ok(())
        }
        CtlCommand::Rebalance { action, common } => {
            let (word, done) = match action {
                RebalanceAction::Pause => ("pause", "paused"),
                RebalanceAction::Resume => ("resume", "resumed"),
            };
            let path = format!("/_runnel/cluster/groups/0/members?healing={word}");
            let report = membership::change_group(&common, &path, 0)?;
            let already = if report["changed"] == false {
                " (it was already)"
            } else {
                ""
            };
            println!("self-healing {done}{already}");
            Ok(())
        }
        CtlCommand::Upgrade {
            action: UpgradeAction::Finalize,
            common,
        } => {
            let path = "/_runnel/cluster/groups/0/members?upgrade=finalize";
            let report = membership::change_group(&common, path, 0)?;
            if report["changed"] == false {
                println!("the cluster was already at the version this build supports");
            } else {
                println!("upgrade finalised: the cluster is at the version this build supports");
            }
            Ok(())
        }
        CtlCommand::RotateWebhookKey {
            target,
            keep_secs,
            token,
            ca,
        } => {
            let path = format!("/_runnel/rotate-webhook-key?keep_secs={keep_secs}");
            let body = http_request("POST", &target, &path, token.as_deref(), ca.as_deref())?;
            println!("{body}");
            Ok(())
        }
    }
}

fn render(status: &serde_json::Value) -> String {
    let mut out = String::new();
    if status["mode"] != "cluster" {
        out.push_str(&format!(
            "single node: {} groups, log at {} bytes\n",
            status["groups"], status["log_position"]
        ));
        out.push_str(&render_tiering(&status["tiering"]));
        out.push_str(&render_memory(&status["memory"]));
        return out;
    }
    out.push_str(&render_tiering(&status["tiering"]));
    out.push_str(&render_memory(&status["memory"]));
    out.push_str(&format!(
        "cluster {}, answered by node {}\n\nnodes:\n",
        status["cluster_id"].as_str().unwrap_or("(not named yet)"),
        status["node_id"]
    ));
    let zones = &status["zones"];
    let zone_of = |id: &str| zones[id].as_str().map(str::to_string);
    let member_states = &status["rebalancing"]["members"];
    if let Some(nodes) = status["nodes"].as_object() {
        for (id, addr) in nodes {
            let zone = zone_of(id).map_or(String::new(), |z| format!("  zone {z}"));
            let state = member_states[id]
                .as_str()
                .map_or(String::new(), |s| format!("  {s}"));
            out.push_str(&format!(
                "  {id}  {}{zone}{state}\n",
                addr.as_str().unwrap_or("?")
            ));
        }
    }
    out.push_str(&render_healing(&status["healing"]));
    out.push_str(&render_version(&status["cluster_version"]));
    for exposed in status["quorum_in_one_zone"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "warning: group {} has a quorum of its voters in zone {}: losing that zone stops it\n",
            exposed["group"],
            exposed["zone"].as_str().unwrap_or("?")
        ));
    }
    let retired: Vec<String> = status["retired_nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| n.to_string())
        .collect();
    if !retired.is_empty() {
        out.push_str(&format!(
            "retired (never members again): {}\n",
            retired.join(", ")
        ));
    }
    let zoned = zones.as_object().is_some_and(|z| !z.is_empty());
    out.push_str(match zoned {
        true => "\ngroup  leader  term  state      last-log  applied  votes  members (zones) follower lag\n",
        false => "\ngroup  leader  term  state      last-log  applied  votes  members         follower lag\n",
    });
    for group in status["groups"].as_array().into_iter().flatten() {
        let lag: Vec<String> = group["follower_lag"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| match pair[1].as_u64() {
                Some(lag) => format!("{}:{lag}", pair[0]),
                None => format!("{}:?", pair[0]),
            })
            .collect();
        let number = |v: &serde_json::Value| v.as_u64().map_or("-".into(), |n| n.to_string());
        // Voters, then learners (catching up) with a `+`: "1,2,3+4".
        let ids = |v: &serde_json::Value| -> Vec<String> {
            v.as_array().into_iter().flatten().map(&number).collect()
        };
        let mut members = ids(&group["voters"]).join(",");
        for learner in ids(&group["learners"]) {
            members.push('+');
            members.push_str(&learner);
        }
        // The voters' zones, in voter order, when the cluster has zones.
        if zoned {
            let voter_zones: Vec<String> = ids(&group["voters"])
                .iter()
                .map(|id| zone_of(id).unwrap_or_else(|| "?".into()))
                .collect();
            members.push_str(&format!(" ({})", voter_zones.join(",")));
        }
        out.push_str(&format!(
            "{:<6} {:<7} {:<5} {:<10} {:<9} {:<8} {:<6} {:<15} {}\n",
            number(&group["group"]),
            number(&group["leader"]),
            number(&group["term"]),
            group["state"].as_str().unwrap_or("?"),
            number(&group["last_log_index"]),
            number(&group["last_applied_index"]),
            // "no" while the node rejoins without its state and catches up.
            match group["votes"].as_bool() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "?",
            },
            members,
            if lag.is_empty() {
                "-".into()
            } else {
                lag.join(" ")
            },
        ));
    }
    out
}

/// The cluster version line, with what an upgrade in progress waits for.
fn render_version(version: &serde_json::Value) -> String {
    let (Some(current), Some(this_build)) =
        (version["current"].as_u64(), version["this_build"].as_u64())
    else {
        return String::new();
    };
    let behind: Vec<String> = version["peers"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| v.as_u64() < Some(this_build))
        .map(|(node, v)| format!("node {node} supports {v}"))
        .collect();
    let pending = if current >= this_build {
        String::new()
    } else if behind.is_empty() {
        format!(
            "; every member supports {this_build}: `runnel ctl upgrade finalize` (finalize: {})",
            version["finalize"].as_str().unwrap_or("?")
        )
    } else {
        format!("; upgrade in progress ({})", behind.join(", "))
    };
    format!("cluster version {current} (this build supports {this_build}){pending}\n")
}

/// The self-healing line: when replicas move off a silent member, which
/// members are silent, and how many replicas this node moved.
fn render_healing(healing: &serde_json::Value) -> String {
    if healing.is_null() {
        return String::new();
    }
    let when = match healing["dead_node_after_secs"].as_u64() {
        Some(secs) => format!("replicas move off a member silent for {secs} s"),
        None => "off (--dead-node-after 0)".into(),
    };
    let paused = if healing["paused"] == true {
        ", paused (runnel ctl rebalance resume)"
    } else {
        ""
    };
    let silent: Vec<String> = healing["silent"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pair| format!("{} for {} s", pair[0], pair[1]))
        .collect();
    let silent = match silent.is_empty() {
        true => String::new(),
        false => format!("; silent: {}", silent.join(", ")),
    };
    format!(
        "self-healing: {when}{paused}{silent}; {} moved by this node\n",
        healing["moves"]
    )
}

/// The memory line: resident memory by kind, then by owner, in MB.
fn render_memory(memory: &serde_json::Value) -> String {
    let mb = |v: &serde_json::Value| v.as_u64().map(|b| format!("{:.1}", b as f64 / 1e6));
    let Some(resident) = mb(&memory["resident"]) else {
        return String::new();
    };
    let mut out = format!("memory: {resident} MB resident");
    if let (Some(anonymous), Some(file)) = (mb(&memory["anonymous"]), mb(&memory["file"])) {
        out.push_str(&format!(" ({anonymous} allocated, {file} mapped files)"));
    }
    if let Some(owners) = memory["by_owner"].as_object() {
        let owners: Vec<String> = owners
            .iter()
            .filter_map(|(owner, bytes)| {
                Some(format!("{} {}", owner.replace('_', " "), mb(bytes)?))
            })
            .collect();
        out.push_str(&format!("; by owner (MB): {}", owners.join(", ")));
    }
    out.push('\n');
    out
}

/// The tiering lines: what is tiered and untiered, and trouble if any.
fn render_tiering(tiering: &serde_json::Value) -> String {
    if tiering.is_null() {
        return "tiering: off\n".into();
    }
    let n = |key: &str| tiering[key].as_u64().unwrap_or(0);
    let mut out = format!(
        "tiering to {}: {} bytes tiered in {} chunks, {} bytes untiered (503 above {}){}\n",
        tiering["object_store"].as_str().unwrap_or("?"),
        n("tiered_bytes"),
        n("tiered_chunks"),
        n("untiered_bytes"),
        n("max_untiered_bytes"),
        if tiering["backlog_full"] == true {
            ": BACKLOG FULL, writes refused"
        } else {
            ""
        },
    );
    if let Some(error) = tiering["last_error"].as_str() {
        out.push_str(&format!("  last error: {error}\n"));
    }
    out
}

/// A plain HTTP/1.1 request without a body, inside TLS for `https://`
/// (the answers are small; no client crate): the body of a 200 answer.
fn http_request(
    method: &str,
    base: &str,
    path: &str,
    token: Option<&str>,
    ca: Option<&std::path::Path>,
) -> Result<String, String> {
    let (status, body) = http_exchange(method, base, path, token, ca, Duration::from_secs(5))?;
    if status != 200 {
        return Err(format!("{base} answered {status}: {}", body.trim()));
    }
    Ok(body)
}

/// [`http_request`], any answer: its status code and body.
pub(crate) fn http_exchange(
    method: &str,
    base: &str,
    path: &str,
    token: Option<&str>,
    ca: Option<&std::path::Path>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let (authority, tls) = match (base.strip_prefix("http://"), base.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (_, Some(rest)) => (rest, true),
        _ => return Err(format!("{base:?}: targets are http:// or https:// URLs")),
    };
    let authority = authority.trim_end_matches('/');
    let tcp =
        TcpStream::connect(authority).map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    tcp.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut stream: Box<dyn ReadWrite> = if tls {
        let config = runnel_tls::client_config(ca).map_err(|e| e.to_string())?;
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(host, _)| host)
            .trim_matches(['[', ']'])
            .to_string();
        let name = runnel_tls::rustls::pki_types::ServerName::try_from(host)
            .map_err(|e| format!("{authority}: {e}"))?;
        let connection = runnel_tls::rustls::ClientConnection::new(config, name)
            .map_err(|e| format!("TLS with {authority}: {e}"))?;
        Box::new(runnel_tls::rustls::StreamOwned::new(connection, tcp))
    } else {
        Box::new(tcp)
    };
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\n{authorization}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("sending to {authority}: {e}"))?;
    let mut response = Vec::new();
    // A TLS peer that closes without close_notify still sent it all.
    if let Err(e) = stream.read_to_end(&mut response) {
        if response.is_empty() || e.kind() != std::io::ErrorKind::UnexpectedEof {
            return Err(format!("reading from {authority}: {e}"));
        }
    }
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{authority} sent a malformed response"))?;
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("{authority} sent a malformed status line"))?;
    Ok((status, body.to_string()))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_each_groups_voters_and_learners() {
        let status = serde_json::json!({
            "mode": "cluster", "node_id": 2, "nodes": {"1": "a:1", "2": "b:1"},
            "tiering": null,
            "groups": [{
                "group": 0, "leader": 1, "term": 3, "state": "Follower",
                "last_log_index": 9, "last_applied_index": 9, "votes": true,
                "voters": [1, 2, 3], "learners": [4], "follower_lag": [],
            }],
        });
        let text = render(&status);
        let row = text
            .lines()
            .find(|l| l.starts_with("0 "))
            .expect("group row");
        assert!(row.contains(" 1,2,3+4 "), "{text}");
        assert!(
            text.contains("cluster (not named yet), answered by node 2"),
            "{text}"
        );
        assert!(!text.contains("retired"), "{text}");
        assert!(!text.contains("zone"), "{text}");
        assert!(!text.contains("self-healing"), "{text}");
        let mut healing = status.clone();
        healing["healing"] = serde_json::json!({
            "dead_node_after_secs": 300, "paused": true, "silent": [[3, 12]], "moves": 2,
        });
        let text = render(&healing);
        assert!(
            text.contains(
                "self-healing: replicas move off a member silent for 300 s, paused (runnel ctl \
                 rebalance resume); silent: 3 for 12 s; 2 moved by this node"
            ),
            "{text}"
        );
        let mut zoned = status.clone();
        zoned["zones"] = serde_json::json!({"1": "a", "2": "b", "3": "c"});
        zoned["quorum_in_one_zone"] = serde_json::json!([{"group": 4, "zone": "a"}]);
        let text = render(&zoned);
        assert!(text.contains("  2  b:1  zone b\n"), "{text}");
        assert!(text.contains(" 1,2,3+4 (a,b,c) "), "{text}");
        assert!(
            text.contains("warning: group 4 has a quorum of its voters in zone a"),
            "{text}"
        );
        let mut named = status;
        named["cluster_id"] = "prod".into();
        named["retired_nodes"] = serde_json::json!([5, 7]);
        let text = render(&named);
        assert!(text.contains("cluster prod, answered by node 2"), "{text}");
        assert!(
            text.contains("retired (never members again): 5, 7"),
            "{text}"
        );
    }

    #[test]
    fn status_shows_tiered_and_untiered_bytes_and_a_full_backlog() {
        let status = serde_json::json!({
            "mode": "single", "groups": 1, "log_position": 10,
            "tiering": {
                "object_store": "s3://b/p", "tiered_bytes": 1000, "tiered_chunks": 3,
                "untiered_bytes": 20, "max_untiered_bytes": 50, "backlog_full": true,
                "last_error": "store down",
            },
        });
        let text = render(&status);
        assert!(
            text.contains("tiering to s3://b/p: 1000 bytes tiered in 3 chunks, 20 bytes untiered"),
            "{text}"
        );
        assert!(text.contains("BACKLOG FULL"), "{text}");
        assert!(text.contains("last error: store down"), "{text}");
        let off = render(
            &serde_json::json!({"mode": "single", "groups": 1, "log_position": 0, "tiering": null}),
        );
        assert!(off.contains("tiering: off"), "{off}");
        assert!(!off.contains("memory"), "no memory section, no line: {off}");
    }

    #[test]
    fn status_shows_memory_by_kind_and_by_owner() {
        let status = serde_json::json!({
            "mode": "single", "groups": 1, "log_position": 0, "tiering": null,
            "memory": {
                "resident": 52_000_000, "anonymous": 40_000_000, "file": 12_000_000,
                "by_owner": {"index": 24_000_000, "read_pages": 8_388_608, "streams": 3_600_000},
            },
        });
        let text = render(&status);
        assert!(
            text.contains(
                "memory: 52.0 MB resident (40.0 allocated, 12.0 mapped files); \
                 by owner (MB): index 24.0, read pages 8.4, streams 3.6\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_version_line_says_what_an_upgrade_waits_for() {
        let version = |current: u64, peers: serde_json::Value| {
            render_version(&serde_json::json!({
                "current": current, "this_build": 2, "peers": peers, "finalize": "manual"
            }))
        };
        assert_eq!(
            version(1, serde_json::json!({"2": 1, "3": 2})),
            "cluster version 1 (this build supports 2); upgrade in progress (node 2 supports 1)\n"
        );
        assert_eq!(
            version(1, serde_json::json!({"2": 2, "3": 2})),
            "cluster version 1 (this build supports 2); every member supports 2: `runnel ctl \
             upgrade finalize` (finalize: manual)\n"
        );
        assert_eq!(
            version(2, serde_json::json!({"2": 2})),
            "cluster version 2 (this build supports 2)\n"
        );
        assert_eq!(render_version(&serde_json::Value::Null), "");
    }
}
