//! `runnel serve` settings: command-line flags over a TOML file over
//! defaults. The TOML keys are the flag names with `_` for `-`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use runnel_engine::{EngineConfig, SyncMode, TierConfig};
use runnel_server::ServerConfig;
use runnel_tier::StoreConfig;
use serde::Deserialize;

#[derive(Args, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeArgs {
    /// TOML file with any of these settings (flags win).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:4437].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Directory for the log and metadata [default: ./runnel-data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Long-poll wait before answering 204, in ms [default: 30000].
    #[arg(long)]
    pub long_poll_timeout_ms: Option<u64>,
    /// Largest PUT/POST body in bytes; larger get 413 [default: 67108864].
    #[arg(long)]
    pub max_append_bytes: Option<u64>,
    /// Most bytes in one read response [default: 1048576].
    #[arg(long)]
    pub max_read_bytes: Option<u64>,
    /// never | batch | always: when writes are fsynced [default: batch].
    #[arg(long)]
    pub sync: Option<String>,
    /// Stream groups [default: on a single node, the data directory's own
    /// count, or for a new one 1 up to two cores and cores/2 past that; in
    /// a cluster, group 0 (metadata only) plus nodes × cores/2 data groups].
    #[arg(long)]
    pub groups: Option<u32>,
    /// Log segment size in bytes [default: 268435456].
    #[arg(long)]
    pub segment_bytes: Option<u64>,
    /// true | false: write each next log segment as zeros ahead of time,
    /// which makes syncs cheaper; costs one spare segment of disk [default: true].
    #[arg(long)]
    pub preallocate_segments: Option<bool>,
    /// SSE keepalive comment interval in ms [default: 15000].
    #[arg(long)]
    pub sse_keepalive_ms: Option<u64>,
    /// SSE connections close after this many ms [default: 60000].
    #[arg(long)]
    pub sse_max_duration_ms: Option<u64>,
    /// A connection that accepts no bytes for this long is closed [default: 10000].
    #[arg(long)]
    pub write_stall_timeout_ms: Option<u64>,
    /// A connection that sends no complete request this long is closed [default: 30000].
    #[arg(long)]
    pub request_read_timeout_ms: Option<u64>,
    /// Open connections at most; more wait in the backlog [default: 50000].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// HTTP/2 requests one connection may cancel at once before it is closed [default: 1000].
    #[arg(long)]
    pub http2_cancel_burst: Option<u32>,
    /// HTTP/2 cancelled requests a connection earns back each second [default: 250].
    #[arg(long)]
    pub http2_cancels_per_sec: Option<u32>,
    /// SSE and long-poll readers at most; more get 503 [default: 40000].
    #[arg(long)]
    pub max_live_readers: Option<usize>,
    /// Resident memory in bytes above which new SSE and long-poll readers
    /// get 503; the caches keep to shares of it (a quarter for tiered
    /// blocks unless --cache-bytes is given, a sixteenth for recent log
    /// pages) [default: no limit].
    #[arg(long)]
    pub max_memory_bytes: Option<u64>,
    /// cdn | private | off: what shared caches may keep of read answers
    /// (docs/caching.md) [default: cdn].
    #[arg(long)]
    pub cache_control: Option<String>,
    /// Lifetime of pages below the tail, in s [default: 31536000].
    #[arg(long)]
    pub cache_page_max_age_secs: Option<u64>,
    /// Lifetime of reads at the tail and from -1, in s [default: 1].
    #[arg(long)]
    pub cache_tail_max_age_secs: Option<u64>,
    /// Lifetime of long-poll 200s, in s [default: 20].
    #[arg(long)]
    pub cache_long_poll_max_age_secs: Option<u64>,
    /// Largest snapshot body in bytes; larger get 413 [default: 134217728].
    #[arg(long)]
    pub max_snapshot_bytes: Option<u64>,
    /// Most message bytes after the snapshot in one bootstrap [default: 67108864].
    #[arg(long)]
    pub max_bootstrap_bytes: Option<u64>,
    /// Most bytes a fork across groups copies from its source; larger
    /// forks get 413 [default: 67108864].
    #[arg(long)]
    pub max_fork_copy_bytes: Option<u64>,
    /// Seconds between checkpoints (and log garbage collection) [default: 300].
    #[arg(long)]
    pub checkpoint_interval_secs: Option<u64>,
    /// Log bytes that trigger a checkpoint sooner [default: 268435456].
    #[arg(long)]
    pub checkpoint_bytes: Option<u64>,
    /// Queued proposals per group before writes get 503 [default: 65536].
    #[arg(long)]
    pub max_pending_proposals: Option<usize>,
    /// Body bytes in flight per group before writes get 503 [default: 536870912].
    #[arg(long)]
    pub max_inflight_bytes: Option<u64>,
    /// This node's id in the cluster (a key of --peers).
    #[arg(long)]
    pub node_id: Option<u64>,
    /// Every cluster node's HTTP address, this one's included:
    /// `1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`. Raft traffic uses each
    /// node's port + 1. Without it the node runs alone. With zones, every
    /// entry names its node's: `1=HOST:PORT@ZONE,...` (see --zone).
    #[arg(long)]
    pub peers: Option<String>,
    /// This node's zone (failure domain: an availability zone, a rack):
    /// the cluster puts each group's replicas in distinct zones while it
    /// has at least as many zones as replicas, so losing a zone loses no
    /// group's quorum. Kept in DATA_DIR/zone; a node's zone does not
    /// change. Founders name every node's zone in --peers (`ID=ADDR@ZONE`),
    /// which this must match; a node that joins later gives its own here.
    /// Letters, digits, '.', '_' and '-', up to 64.
    #[arg(long)]
    pub zone: Option<String>,
    /// In a cluster, how long a member may go without answering before
    /// the leaders of its groups move its replicas to live nodes (zones
    /// respected, one move at a time per leader); 0 never moves them.
    /// `runnel ctl rebalance pause` pauses it cluster-wide [default: 300].
    #[arg(long)]
    pub dead_node_after: Option<u64>,
    /// In a cluster, how long a member may hold no replica of a data group
    /// (it joined, or came back after self-healing) before the groups'
    /// leaders move replicas onto it, one move per leader at a time, up to
    /// its share; 0 never moves them. `runnel ctl rebalance pause` pauses
    /// it cluster-wide [default: 30].
    #[arg(long)]
    pub rebalance_after: Option<u64>,
    /// In a cluster, who finalises a rolling upgrade: `auto`, the control
    /// group's leader once every member runs a build that supports the
    /// new cluster version; or `manual`, an operator (`runnel ctl upgrade
    /// finalize`), so that until then a node can go back to the previous
    /// build [default: auto].
    #[arg(long, env = "RUNNEL_UPGRADE_FINALIZE")]
    pub upgrade_finalize: Option<String>,
    /// Join a running cluster through any member's base URL
    /// (`http://HOST:PORT`), instead of naming every node with --peers:
    /// this node (--node-id, reached by the others at --listen) learns the
    /// members and the group count from it, starts, and becomes a voter
    /// of every group. Give the same flags again on a restart.
    #[arg(long)]
    pub join: Option<String>,
    /// The id of the cluster this node belongs to: a new cluster takes it
    /// when formed (without it, a random one), and the node refuses to
    /// start over a data directory, or --join a cluster, named otherwise.
    /// Letters, digits, '.', '_' and '-', up to 64.
    #[arg(long)]
    pub cluster_id: Option<String>,
    /// --join with access control on: a bearer token with `admin` on
    /// every stream.
    #[arg(long, env = "RUNNEL_JOIN_TOKEN", hide_env_values = true)]
    pub join_token: Option<String>,
    /// --join to an https:// URL: the CA's PEM file [default: the
    /// system's CAs].
    #[arg(long)]
    pub join_ca: Option<PathBuf>,
    /// A follower that hears no leader for this long (randomized up to
    /// twice as long) calls an election; leaders heartbeat six times as
    /// often [default: 350].
    #[arg(long)]
    pub election_timeout_ms: Option<u64>,
    /// In a new cluster, how many nodes hold each data group's replicas
    /// (1 to 15): the cluster forms each group on this many of its nodes
    /// and keeps the factor in its metadata; `runnel ctl node` keeps to
    /// it as nodes come and go, and `runnel ctl node rebalance
    /// --replication-factor N` changes it. Once a cluster has formed, the
    /// flag changes nothing. Group 0 (the cluster's metadata and
    /// subscriptions) is voted on by five nodes at most and followed by
    /// every other node as a learner (founders past five are made
    /// learners a few seconds after the cluster forms) [default: 3].
    #[arg(long)]
    pub replication_factor: Option<u64>,
    /// In a cluster, how long a request that meets a leadership change
    /// (no leader yet, a deposed or unreachable one) waits for the new
    /// leader and is retried inside the cluster before the client gets
    /// 503 [default: 10000].
    #[arg(long)]
    pub leader_wait_ms: Option<u64>,
    /// Where tiered history goes: file:///PATH, s3://BUCKET/PREFIX,
    /// gs://BUCKET/PREFIX, az://CONTAINER/PREFIX, or `none` to keep every
    /// byte in the local log [default: file://DATA_DIR/objects on a single
    /// node; none in a cluster, whose nodes must share one store].
    #[arg(long)]
    pub object_store: Option<String>,
    /// An object store setting, KEY=VALUE, repeatable (e.g.
    /// aws_endpoint=http://127.0.0.1:9000, aws_region=us-east-1,
    /// aws_allow_http=true); `AWS_*` environment variables are read too.
    #[arg(long = "object-store-option", value_name = "KEY=VALUE")]
    pub object_store_option: Option<Vec<String>>,
    /// A stream's untiered bytes go to the object store once they reach
    /// this many; also the largest chunk object [default: 8388608].
    #[arg(long)]
    pub tier_chunk_bytes: Option<u64>,
    /// Appends older than this many seconds are tiered whatever their
    /// stream's size [default: 60].
    #[arg(long)]
    pub tier_max_age_secs: Option<u64>,
    /// The local window: log bytes further back than this are tiered
    /// first, whatever their size and age [default: 1073741824].
    #[arg(long)]
    pub hot_bytes: Option<u64>,
    /// Past this many untiered bytes (the object store is down or slow)
    /// writes get 503 [default: 8589934592].
    #[arg(long)]
    pub max_untiered_bytes: Option<u64>,
    /// Memory for cached blocks of tiered history [default: 268435456].
    #[arg(long)]
    pub cache_bytes: Option<u64>,
    /// Objects of trimmed and deleted history are deleted this many
    /// seconds after [default: 300].
    #[arg(long)]
    pub tier_gc_grace_secs: Option<u64>,
    /// Unreferenced objects (of uploads that failed or crashed) older than
    /// this many seconds are deleted by the sweep [default: 3600].
    #[arg(long)]
    pub tier_orphan_grace_secs: Option<u64>,
    /// Seconds between sweeps for unreferenced objects [default: 3600].
    #[arg(long)]
    pub tier_sweep_interval_secs: Option<u64>,
    /// Milliseconds between the tierer's passes [default: 1000].
    #[arg(long)]
    pub tier_interval_ms: Option<u64>,
    /// Objects larger than this are uploaded in parts of this size (at
    /// least 5 MiB) [default: 16777216].
    #[arg(long)]
    pub tier_part_bytes: Option<u64>,
    /// Longest one object store call may take, retries included, in ms
    /// [default: 30000].
    #[arg(long)]
    pub object_store_timeout_ms: Option<u64>,
    /// Seconds between checkpoint backups while tiering makes progress
    /// (single node) [default: 30].
    #[arg(long)]
    pub tier_backup_interval_secs: Option<u64>,
    /// For benchmarks: wait this many ms before every object store read,
    /// as a distant store's first byte would [default: none].
    #[arg(long)]
    pub object_store_read_latency_ms: Option<u64>,
    /// PEM certificate chain for HTTPS (with --tls-key); re-read on
    /// SIGHUP [default: plain HTTP].
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Cluster mutual TLS: the cluster CA's PEM certificate. Raft and
    /// forwarding go over TLS, each node known by its certificate, which
    /// must name it `node-ID.runnel` [default: plaintext between nodes].
    #[arg(long)]
    pub cluster_ca: Option<PathBuf>,
    /// Cluster mutual TLS: this node's PEM certificate (from the cluster
    /// CA, naming `node-ID.runnel`); re-read on SIGHUP.
    #[arg(long)]
    pub cluster_cert: Option<PathBuf>,
    /// Cluster mutual TLS: this node's PEM private key.
    #[arg(long)]
    pub cluster_key: Option<PathBuf>,
    /// Access control: a TOML file of bearer tokens (SHA-256 hashes), JWT
    /// keys, grants and rate limits (see README); re-read on SIGHUP
    /// [default: off, every request allowed].
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
    /// The server's URL as clients reach it (`https://streams.example`):
    /// subscription answers and webhook bodies carry URLs under it
    /// [default: the URL each request came in on].
    #[arg(long)]
    pub public_url: Option<String>,
    /// Allow webhooks to `http://localhost` and `http://127.0.0.x`, for
    /// development [default: public `https://` targets only].
    #[arg(long)]
    #[serde(default)]
    pub allow_dev_webhooks: bool,
    /// Do not serve the web console at /console.
    #[arg(long)]
    #[serde(default)]
    pub no_console: bool,
    /// How long a webhook receiver may take to answer before the delivery
    /// counts as failed and is retried [default: 10000].
    #[arg(long)]
    pub webhook_timeout_ms: Option<u64>,
    /// A host webhooks may reach whatever its address (repeatable).
    #[arg(long = "webhook-allow-host")]
    #[serde(default)]
    pub webhook_allow_hosts: Vec<String>,
    /// Start an empty data directory from the object store's backups.
    /// A single node takes its newest checkpoint (without the flag, an
    /// empty data directory is restored on its own when the store holds
    /// one); with --peers, the fresh nodes form a new cluster with every
    /// stream, subscription and setting of the old one's groups.
    #[arg(long)]
    #[serde(skip)]
    pub restore: bool,
    /// With --restore in a cluster: the id of the old cluster to restore
    /// [default: the one whose backup is newest].
    #[arg(long, value_name = "CLUSTER_ID", requires = "restore")]
    #[serde(skip)]
    pub restore_from: Option<String>,
}

/// A cluster member's identity and its peers.
pub struct ClusterSettings {
    pub node_id: u64,
    /// With `join`, this node alone until [`crate::join::learn_cluster`]
    /// adds the members.
    pub peers: BTreeMap<u64, String>,
    pub election_timeout: Option<Duration>,
    pub join: Option<crate::join::Join>,
    /// `--cluster-id`: the cluster this node must belong to.
    pub cluster_id: Option<String>,
    /// `--replication-factor`: replicas of each data group.
    pub replication: usize,
    /// The founders' zones, as `--peers` names them (the same on every
    /// founder, so each places the new cluster alike).
    pub zones: BTreeMap<u64, String>,
    /// This node's zone: `--zone`, or its `--peers` entry.
    pub zone: Option<String>,
    /// `--dead-node-after` (`None`: 0, never).
    pub dead_node_after: Option<Duration>,
    /// `--upgrade-finalize`.
    pub finalize_upgrade: runnel_engine::cluster::upgrade::FinalizeUpgrade,
    /// `--rebalance-after` (`None`: 0, never).
    pub rebalance_after: Option<Duration>,
}

/// Everything `serve` needs, resolved.
pub struct Settings {
    pub listen: SocketAddr,
    pub engine: EngineConfig,
    pub server: ServerConfig,
    /// Set when the node is a cluster member.
    pub cluster: Option<ClusterSettings>,
    /// Restore the data directory from the object store first.
    pub restore: bool,
    /// `--groups` (or the file) chose the group count: a restore must
    /// find a backup of as many groups, rather than take the backup's.
    pub groups_given: bool,
    /// With `restore` in a cluster: the old cluster (`--restore-from`).
    pub restore_from: Option<String>,
    /// Access control, when an auth file is given.
    pub auth: Option<std::sync::Arc<runnel_server::auth::Auth>>,
    /// The HTTP listener's certificate (`--tls-cert`).
    pub tls: Option<std::sync::Arc<runnel_tls::ReloadableCert>>,
    /// Mutual TLS between cluster nodes.
    pub cluster_tls: Option<std::sync::Arc<runnel_tls::ClusterTls>>,
}

/// Shares of `--max-memory-bytes` the caches keep to, where their own
/// flags do not size them: the block cache of tiered history a quarter
/// (`cache_bytes_given`: `--cache-bytes` sized it), the groups' recent
/// log pages a sixteenth between them. Neither grows past its default.
fn memory_budget(budget: u64, engine: &mut EngineConfig, cache_bytes_given: bool) {
    if let Some(tier) = engine.tier.as_mut().filter(|_| !cache_bytes_given) {
        tier.cache_bytes = tier.cache_bytes.min(budget / 4);
    }
    let per_group = budget / 16 / u64::from(engine.groups.max(1));
    engine.read_pages_bytes = engine.read_pages_bytes.min(per_group);
}

/// Tiering settings from flags over the file: `None` when tiering is off.
fn tier_config(
    flags: &ServeArgs,
    file: &ServeArgs,
    data_dir: &std::path::Path,
    cluster: bool,
) -> Result<Option<TierConfig>, String> {
    macro_rules! pick {
        ($field:ident) => {
            flags.$field.clone().or(file.$field.clone())
        };
    }
    let url = match pick!(object_store) {
        Some(url) if url == "none" => return Ok(None),
        Some(url) => url,
        None if cluster => return Ok(None),
        None => {
            let dir = std::path::absolute(data_dir.join("objects"))
                .map_err(|e| format!("data directory {}: {e}", data_dir.display()))?;
            format!("file://{}", dir.display())
        }
    };
    let mut store = StoreConfig::new(url);
    for option in pick!(object_store_option).unwrap_or_default() {
        let (key, value) = option
            .split_once('=')
            .ok_or_else(|| format!("object store option {option:?} is not KEY=VALUE"))?;
        store
            .options
            .push((key.trim().to_string(), value.trim().to_string()));
    }
    if let Some(bytes) = pick!(tier_part_bytes) {
        store.multipart_part_bytes = bytes.max(5 << 20);
    }
    if let Some(ms) = pick!(object_store_timeout_ms) {
        store.call_timeout = Duration::from_millis(ms.max(100));
    }
    store.read_latency = pick!(object_store_read_latency_ms).map(Duration::from_millis);
    let mut tier = TierConfig::new(store);
    if let Some(secs) = pick!(tier_backup_interval_secs) {
        tier.backup_interval = Duration::from_secs(secs);
    }
    if let Some(bytes) = pick!(tier_chunk_bytes) {
        if bytes == 0 || bytes > runnel_tier::chunk::MAX_CHUNK_BYTES {
            return Err("tier-chunk-bytes must be between 1 and 4294967295".into());
        }
        tier.chunk_bytes = bytes;
    }
    if let Some(secs) = pick!(tier_max_age_secs) {
        tier.max_age = Duration::from_secs(secs);
    }
    if let Some(bytes) = pick!(hot_bytes) {
        tier.hot_bytes = bytes;
    }
    if let Some(bytes) = pick!(max_untiered_bytes) {
        tier.max_untiered_bytes = bytes;
    }
    if let Some(bytes) = pick!(cache_bytes) {
        tier.cache_bytes = bytes;
    }
    if let Some(secs) = pick!(tier_gc_grace_secs) {
        tier.gc_grace = Duration::from_secs(secs);
    }
    if let Some(secs) = pick!(tier_orphan_grace_secs) {
        tier.orphan_grace = Duration::from_secs(secs);
    }
    if let Some(secs) = pick!(tier_sweep_interval_secs) {
        tier.sweep_interval = Duration::from_secs(secs.max(1));
    }
    if let Some(ms) = pick!(tier_interval_ms) {
        tier.interval = Duration::from_millis(ms.max(10));
    }
    Ok(Some(tier))
}

impl ServeArgs {
    /// Merges flags over the config file over defaults, and validates.
    pub fn resolve(self) -> Result<Settings, String> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
                toml::from_str::<ServeArgs>(&text)
                    .map_err(|e| format!("config {}: {e}", path.display()))?
            }
            None => ServeArgs::default(),
        };
        macro_rules! pick {
            ($field:ident) => {
                self.$field.or(file.$field)
            };
        }
        let data_dir = self
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from("runnel-data"));
        let join = self.join.clone().or(file.join.clone());
        let clustered = self.node_id.or(file.node_id).is_some()
            || self.peers.is_some()
            || file.peers.is_some()
            || join.is_some();
        let cluster_id = self.cluster_id.clone().or(file.cluster_id.clone());
        if let Some(id) = &cluster_id {
            if !clustered {
                return Err("--cluster-id is for cluster members (--node-id)".into());
            }
            runnel_engine::cluster::identity::validate(id)
                .map_err(|e| format!("--cluster-id: {e}"))?;
        }
        if (self.zone.is_some() || file.zone.is_some()) && !clustered {
            return Err("--zone is for cluster members (--node-id)".into());
        }
        let tier = tier_config(&self, &file, &data_dir, clustered)?;
        let mut engine = EngineConfig::new(data_dir);
        engine.tier = tier;
        let cluster = match (pick!(node_id), self.peers.or(file.peers), join) {
            (None, None, None) => None,
            (Some(_), None, None) => return Err("--node-id needs --peers or --join".into()),
            (None, _, _) => return Err("--peers and --join need --node-id".into()),
            (Some(_), Some(_), Some(_)) => {
                return Err(
                    "--peers and --join exclude each other: a joining node learns its peers \
                     from the cluster"
                        .into(),
                )
            }
            (Some(node_id), peers, join) => {
                let (Peers { peers, zones }, join) = match (peers, join) {
                    (Some(peers), _) => (parse_peers(&peers)?, None),
                    (None, Some(url)) => {
                        let listen = pick!(listen).ok_or(
                            "--join needs --listen HOST:PORT: the address the other nodes \
                             reach this node at",
                        )?;
                        let join = crate::join::Join::new(
                            url,
                            self.join_token.clone().or(file.join_token.clone()),
                            self.join_ca.clone().or(file.join_ca.clone()),
                            pick!(groups),
                            listen,
                            cluster_id.clone(),
                        )?;
                        let peers = BTreeMap::from([(node_id, listen.to_string())]);
                        let zones = BTreeMap::new();
                        (Peers { peers, zones }, Some(join))
                    }
                    (None, None) => unreachable!("matched above"),
                };
                let zone = own_zone(node_id, self.zone.clone().or(file.zone.clone()), &zones)?;
                if !peers.contains_key(&node_id) {
                    return Err(format!("--peers does not list this node ({node_id})"));
                }
                // Data groups spread over the nodes, a few per node and
                // core, besides group 0 (the cluster's metadata, no streams).
                let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
                engine.groups = (peers.len() * (cores / 2).max(1)) as u32 + 1;
                let election_timeout = match pick!(election_timeout_ms) {
                    Some(ms) if ms < 50 => {
                        return Err("election-timeout-ms must be at least 50".into())
                    }
                    other => other.map(Duration::from_millis),
                };
                let most = runnel_engine::cluster::MAX_REPLICATION;
                let replication = match pick!(replication_factor) {
                    Some(r) if r == 0 || r > u64::from(most) => {
                        return Err(format!("replication-factor is 1 to {most}, not {r}"))
                    }
                    Some(r) => r as usize,
                    None => runnel_engine::cluster::DEFAULT_REPLICATION,
                };
                Some(ClusterSettings {
                    node_id,
                    peers,
                    election_timeout,
                    join,
                    cluster_id,
                    replication,
                    zones,
                    zone,
                    dead_node_after: match pick!(dead_node_after) {
                        Some(0) => None,
                        Some(secs) => Some(Duration::from_secs(secs)),
                        None => Some(runnel_engine::cluster::DEFAULT_DEAD_NODE_AFTER),
                    },
                    rebalance_after: match pick!(rebalance_after) {
                        Some(0) => None,
                        Some(secs) => Some(Duration::from_secs(secs)),
                        None => Some(runnel_engine::cluster::DEFAULT_REBALANCE_AFTER),
                    },
                    finalize_upgrade: pick!(upgrade_finalize)
                        .map(|mode| mode.parse())
                        .transpose()?
                        .unwrap_or_default(),
                })
            }
        };
        if let Some(sync) = self.sync.or(file.sync) {
            engine.sync = sync.parse::<SyncMode>()?;
        }
        let groups_given = pick!(groups).is_some();
        if let Some(groups) = pick!(groups) {
            let most = runnel_engine::MAX_GROUPS;
            if groups == 0 || groups > most {
                return Err(format!("groups must be between 1 and {most}"));
            }
            engine.groups = groups;
        } else if cluster.is_none() {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            engine.groups = runnel_engine::stored_groups(&engine.data_dir)
                .unwrap_or_else(|| runnel_engine::single_node_groups(cores));
        }
        if let Some(bytes) = pick!(segment_bytes) {
            engine.segment_bytes = bytes.max(1 << 20);
        }
        if let Some(preallocate) = pick!(preallocate_segments) {
            engine.preallocate_segments = preallocate;
        }
        if let Some(n) = pick!(max_pending_proposals) {
            engine.max_pending_proposals = n.max(1);
        }
        if let Some(n) = pick!(max_inflight_bytes) {
            engine.max_inflight_bytes = n;
        }
        let mut server = ServerConfig::default();
        if let Some(ms) = pick!(long_poll_timeout_ms) {
            server.long_poll_timeout = Duration::from_millis(ms);
        }
        if let Some(bytes) = pick!(max_append_bytes) {
            server.max_append_bytes = bytes;
        }
        if let Some(bytes) = pick!(max_read_bytes) {
            server.max_read_bytes = bytes.max(1);
        }
        if let Some(ms) = pick!(sse_keepalive_ms) {
            server.sse_keepalive = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = pick!(sse_max_duration_ms) {
            server.sse_max_duration = Duration::from_millis(ms);
        }
        if let Some(bytes) = pick!(max_snapshot_bytes) {
            server.max_snapshot_bytes = bytes;
            engine.compaction.max_snapshot_bytes = bytes;
        }
        if let Some(bytes) = pick!(max_bootstrap_bytes) {
            server.max_bootstrap_bytes = bytes.max(1);
        }
        if let Some(bytes) = pick!(max_fork_copy_bytes) {
            server.max_fork_copy_bytes = bytes;
        }
        if let Some(secs) = pick!(checkpoint_interval_secs) {
            engine.checkpoint_interval = Duration::from_secs(secs.max(1));
        }
        if let Some(bytes) = pick!(checkpoint_bytes) {
            engine.checkpoint_bytes = bytes.max(1 << 20);
        }
        if let Some(ms) = pick!(write_stall_timeout_ms) {
            server.write_stall_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(ms) = pick!(request_read_timeout_ms) {
            server.request_read_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(n) = pick!(max_connections) {
            server.max_connections = n.max(1);
        }
        if let Some(n) = pick!(http2_cancel_burst) {
            server.http2_cancel_burst = n.max(1);
        }
        if let Some(n) = pick!(http2_cancels_per_sec) {
            server.http2_cancels_per_sec = n;
        }
        if let Some(n) = pick!(max_live_readers) {
            server.max_live_readers = n.max(1);
        }
        if let Some(bytes) = pick!(max_memory_bytes) {
            server.max_memory_bytes = Some(bytes);
            memory_budget(bytes, &mut engine, pick!(cache_bytes).is_some());
        }
        if let Some(mode) = pick!(cache_control) {
            server.cache.mode = runnel_server::cache::CacheMode::parse(&mode).ok_or(format!(
                "cache-control must be cdn, private or off; got {mode:?}"
            ))?;
        }
        let cache = &mut server.cache;
        cache.page_max_age = pick!(cache_page_max_age_secs).unwrap_or(cache.page_max_age);
        cache.tail_max_age = pick!(cache_tail_max_age_secs).unwrap_or(cache.tail_max_age);
        cache.long_poll_max_age =
            pick!(cache_long_poll_max_age_secs).unwrap_or(cache.long_poll_max_age);
        // A record holds one command with its body (an append's, or the
        // copy a fork across groups brings) and a small header.
        let record_limit = server
            .max_append_bytes
            .saturating_mul(2)
            .max(server.max_fork_copy_bytes)
            .saturating_add(1 << 20);
        engine.max_record_bytes = u32::try_from(record_limit).map_err(|_| {
            "max-append-bytes must be below 1 GiB and max-fork-copy-bytes below 2 GiB".to_string()
        })?;
        let listen = match (pick!(listen), &cluster) {
            (Some(listen), _) => listen,
            (None, Some(c)) => c.peers[&c.node_id]
                .parse()
                .expect("peer addresses were parsed as socket addresses"),
            (None, None) => SocketAddr::from(([127, 0, 0, 1], 4437)),
        };
        if self.restore && cluster.as_ref().is_some_and(|c| c.join.is_some()) {
            return Err(
                "--restore forms a new cluster from --peers; a node that --joins recovers from its peers".into(),
            );
        }
        if self.restore && engine.tier.is_none() {
            return Err(
                "--restore needs the object store the backups are in (--object-store)".into(),
            );
        }
        let auth = match self.auth_file.or(file.auth_file) {
            None => None,
            Some(path) => {
                let auth = runnel_server::auth::Auth::load(&path).map_err(|e| e.to_string())?;
                if cluster
                    .as_ref()
                    .is_some_and(|c| c.peers.len() > 1 || c.join.is_some())
                    && auth.cluster_key().is_none()
                {
                    return Err(format!(
                        "auth file {}: a cluster with access control needs a cluster_key, \
                         which its nodes send each other",
                        path.display()
                    ));
                }
                Some(std::sync::Arc::new(auth))
            }
        };
        let tls = match (
            self.tls_cert.or(file.tls_cert),
            self.tls_key.or(file.tls_key),
        ) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(std::sync::Arc::new(
                runnel_tls::ReloadableCert::load(&cert, &key).map_err(|e| e.to_string())?,
            )),
            _ => return Err("--tls-cert and --tls-key go together".into()),
        };
        let cluster_tls = match (
            self.cluster_ca.or(file.cluster_ca),
            self.cluster_cert.or(file.cluster_cert),
            self.cluster_key.or(file.cluster_key),
        ) {
            (None, None, None) => None,
            (Some(ca), Some(cert), Some(key)) => {
                let Some(cluster) = &cluster else {
                    return Err(
                        "--cluster-ca/--cluster-cert/--cluster-key are for a cluster".into(),
                    );
                };
                Some(std::sync::Arc::new(
                    runnel_tls::ClusterTls::load(cluster.node_id, &ca, &cert, &key)
                        .map_err(|e| e.to_string())?,
                ))
            }
            _ => return Err("--cluster-ca, --cluster-cert and --cluster-key go together".into()),
        };
        server.public_url = self.public_url.or(file.public_url);
        if let Some(url) = &server.public_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!(
                    "--public-url {url:?} must start with http:// or https://"
                ));
            }
        }
        server.https = tls.is_some();
        server.console = !(self.no_console || file.no_console);
        if let Some(ms) = pick!(leader_wait_ms) {
            server.leader_wait = Duration::from_millis(ms);
        }
        if let Some(ms) = pick!(webhook_timeout_ms) {
            server.webhook_timeout = Duration::from_millis(ms.max(1));
        }
        server.webhook_policy = runnel_server::subscriptions::UrlPolicy {
            allow_loopback_http: self.allow_dev_webhooks || file.allow_dev_webhooks,
            allowed_hosts: [self.webhook_allow_hosts, file.webhook_allow_hosts].concat(),
        };
        Ok(Settings {
            listen,
            engine,
            server,
            cluster,
            restore: self.restore,
            groups_given,
            restore_from: self.restore_from,
            auth,
            tls,
            cluster_tls,
        })
    }
}

mod peers;
#[cfg(test)]
mod tests;

pub(crate) use peers::parse_peers;
use peers::{own_zone, Peers};
