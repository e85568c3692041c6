//! The Prometheus text format (version 0.0.4) of the HTTP layer's
//! counters, the engine's figures and the process's.

use std::fmt::Write;

use runnel_engine::{GroupMetrics, NodeMetrics};

use super::{LiveMode, Metrics, Protocol, Route, CLASSES};
use runnel_engine::metrics::histogram::Snapshot;

/// The content type of a scrape's answer.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &str, value: impl std::fmt::Display) {
        if labels.is_empty() {
            let _ = writeln!(self.0, "{name} {value}");
        } else {
            let _ = writeln!(self.0, "{name}{{{labels}}} {value}");
        }
    }

    fn one(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, "", value);
    }

    /// The samples of one histogram series (its family declared already).
    fn histogram(&mut self, name: &str, labels: &str, snapshot: &Snapshot) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (le, count) in &snapshot.buckets {
            self.sample(
                &format!("{name}_bucket"),
                &format!("{labels}{sep}le=\"{le}\""),
                count,
            );
        }
        self.sample(
            &format!("{name}_bucket"),
            &format!("{labels}{sep}le=\"+Inf\""),
            snapshot.count,
        );
        self.sample(&format!("{name}_sum"), labels, snapshot.sum_seconds);
        self.sample(&format!("{name}_count"), labels, snapshot.count);
    }
}

/// Renders every metric (access control's when it is on).
pub fn render(http: &Metrics, engine: &NodeMetrics, auth: Option<&crate::auth::Auth>) -> String {
    let mut out = Out(String::with_capacity(16 << 10));
    render_http(&mut out, http);
    if let Some(auth) = auth {
        out.family(
            "runnel_auth_refusals_total",
            "counter",
            "Requests refused by access control: no valid credentials (401), no grant (403), over a rate limit (429).",
        );
        let [unauthenticated, forbidden, limited] = auth.refusals();
        out.sample(
            "runnel_auth_refusals_total",
            "reason=\"unauthenticated\"",
            unauthenticated,
        );
        out.sample(
            "runnel_auth_refusals_total",
            "reason=\"forbidden\"",
            forbidden,
        );
        out.sample(
            "runnel_auth_refusals_total",
            "reason=\"rate_limited\"",
            limited,
        );
    }
    render_engine(&mut out, engine);
    render_peers(&mut out, engine);
    render_process(&mut out, http, engine);
    out.0
}

/// Raft RPCs to each peer, and the data directory's disk.
fn render_peers(out: &mut Out, e: &NodeMetrics) {
    if !e.peers.is_empty() {
        out.family(
            "runnel_peer_rpc_duration_seconds",
            "histogram",
            "Round trips of Raft RPCs to each peer (appends, votes, snapshots, probes, read indexes).",
        );
        for peer in &e.peers {
            let labels = format!("peer=\"{}\"", peer.node);
            out.histogram("runnel_peer_rpc_duration_seconds", &labels, &peer.latency);
        }
        out.family(
            "runnel_peer_rpc_failures_total",
            "counter",
            "Raft RPCs to each peer that failed: no connection, no answer in time, or an error.",
        );
        for peer in &e.peers {
            let labels = format!("peer=\"{}\"", peer.node);
            out.sample("runnel_peer_rpc_failures_total", &labels, peer.failures);
        }
    }
    if let Some(disk) = e.disk {
        out.one(
            "runnel_disk_free_bytes",
            "gauge",
            "Bytes still usable on the data directory's file system.",
            disk.free_bytes,
        );
        out.one(
            "runnel_disk_total_bytes",
            "gauge",
            "Size of the data directory's file system.",
            disk.total_bytes,
        );
    }
}

fn render_http(out: &mut Out, m: &Metrics) {
    out.family(
        "runnel_connections_total",
        "counter",
        "Connections accepted (over TLS: past the handshake), by protocol.",
    );
    for protocol in Protocol::ALL {
        out.sample(
            "runnel_connections_total",
            &format!("protocol=\"{}\"", protocol.label()),
            m.connections(protocol),
        );
    }
    out.family(
        "runnel_http_requests_total",
        "counter",
        "Requests answered, by route and status class.",
    );
    for route in Route::ALL {
        for (class, label) in CLASSES.iter().enumerate() {
            let n = m.requests(route, class);
            if n > 0 {
                out.sample(
                    "runnel_http_requests_total",
                    &format!("route=\"{}\",code=\"{label}\"", route.label()),
                    n,
                );
            }
        }
    }
    out.family(
        "runnel_http_request_duration_seconds",
        "histogram",
        "Time from a request's arrival to its response head (an SSE read's head comes at once; a long-poll's when it is answered).",
    );
    for route in Route::ALL {
        let snapshot = m.durations[route as usize].snapshot();
        if snapshot.count > 0 {
            out.histogram(
                "runnel_http_request_duration_seconds",
                &format!("route=\"{}\"", route.label()),
                &snapshot,
            );
        }
    }
    out.family(
        "runnel_append_ack_duration_seconds",
        "histogram",
        "Time from an append's body in hand to its acknowledgement (durable; in a cluster, committed by a quorum).",
    );
    out.histogram(
        "runnel_append_ack_duration_seconds",
        "",
        &m.append_ack.snapshot(),
    );
    out.family(
        "runnel_live_readers",
        "gauge",
        "Live readers open, by mode.",
    );
    out.sample(
        "runnel_live_readers",
        "mode=\"sse\"",
        m.live_readers(LiveMode::Sse),
    );
    out.sample(
        "runnel_live_readers",
        "mode=\"long_poll\"",
        m.live_readers(LiveMode::LongPoll),
    );
    out.family(
        "runnel_live_readers_refused_total",
        "counter",
        "Live readers turned away: at --max-live-readers (limit) or over --max-memory-bytes (memory).",
    );
    use std::sync::atomic::Ordering::Relaxed;
    out.sample(
        "runnel_live_readers_refused_total",
        "reason=\"limit\"",
        m.refused[0].load(Relaxed),
    );
    out.sample(
        "runnel_live_readers_refused_total",
        "reason=\"memory\"",
        m.refused[1].load(Relaxed),
    );
    out.family(
        "runnel_leader_retried_requests_total",
        "counter",
        "Requests that met a leadership change (no leader, a deposed or unreachable leader) and were retried inside the cluster: served, or refused at --leader-wait-ms.",
    );
    for (outcome, n) in ["served", "gave_up"].iter().zip(&m.leader_retried) {
        out.sample(
            "runnel_leader_retried_requests_total",
            &format!("outcome=\"{outcome}\""),
            n.load(Relaxed),
        );
    }
    out.one(
        "runnel_leader_retry_attempts_total",
        "counter",
        "Attempts beyond the first that requests retried across leadership changes took.",
        m.leader_retry_attempts.load(Relaxed),
    );
    out.one(
        "runnel_sse_events_total",
        "counter",
        "SSE events sent (data and control; keepalive comments not counted).",
        m.sse_events.load(Relaxed),
    );
    out.one(
        "runnel_sse_bytes_total",
        "counter",
        "SSE bytes sent.",
        m.sse_bytes.load(Relaxed),
    );
    out.one(
        "runnel_read_bytes_total",
        "counter",
        "Body bytes of catch-up and long-poll answers.",
        m.read_bytes.load(Relaxed),
    );
    out.family(
        "runnel_read_pages_total",
        "counter",
        "Pages read from the log for readers: copied from the log (miss), or shared with a reader of the same bytes (hit).",
    );
    let (hits, misses) = runnel_engine::recent_pages::counts();
    out.sample("runnel_read_pages_total", "result=\"hit\"", hits);
    out.sample("runnel_read_pages_total", "result=\"miss\"", misses);
    out.one(
        "runnel_connections_stalled_total",
        "counter",
        "Connections cut off because the peer accepted no bytes within --write-stall-timeout-ms (slow readers).",
        crate::listener::stalled_connections(),
    );
    out.one(
        "runnel_sse_hub_deliveries_total",
        "counter",
        "SSE events written to caught-up readers by their stream's hub (plain HTTP/1.1 connections), one per reader and write.",
        crate::fan_out::hub::deliveries(),
    );
    out.one(
        "runnel_sse_hub_slow_handbacks_total",
        "counter",
        "SSE readers a hub handed back to their own task because their socket took less than a whole event.",
        crate::fan_out::hub::slow_handbacks(),
    );
    out.one(
        "runnel_http2_connections_cancel_flood_total",
        "counter",
        "HTTP/2 connections closed because the client cancelled more requests than allowed (the rapid reset flood).",
        crate::cancel_budget::connections_closed(),
    );
}

fn render_engine(out: &mut Out, e: &NodeMetrics) {
    out.one(
        "runnel_log_bytes",
        "counter",
        "Bytes the log has made durable.",
        e.log_bytes,
    );
    out.one(
        "runnel_log_failed",
        "gauge",
        "1 once the log failed (IO error, full disk); it accepts no writes until a restart.",
        u8::from(e.log_failed),
    );
    out.one(
        "runnel_log_records_total",
        "counter",
        "Records written to the log.",
        e.syncs.records,
    );
    out.family(
        "runnel_log_sync_duration_seconds",
        "histogram",
        "Duration of the log's fsyncs (fdatasync).",
    );
    let mut buckets = e.sync_buckets();
    buckets.retain(|(le, _)| *le <= 0.02);
    let snapshot = Snapshot {
        buckets,
        count: e.syncs.syncs,
        sum_seconds: e.syncs.sync_time.as_secs_f64(),
    };
    out.histogram("runnel_log_sync_duration_seconds", "", &snapshot);
    out.one(
        "runnel_log_committer_cpu_seconds_total",
        "counter",
        "CPU time of the thread that writes and syncs the log, which every append of the node passes through.",
        e.syncs.committer_cpu.as_secs_f64(),
    );
    if !e.commit_busy.is_empty() {
        out.family(
            "runnel_group_commit_busy_seconds_total",
            "counter",
            "Time the group's commit task spent ordering, logging, applying and answering commands (single node).",
        );
        for (group, busy) in e.commit_busy.iter().enumerate() {
            out.sample(
                "runnel_group_commit_busy_seconds_total",
                &format!("group=\"{group}\""),
                busy.as_secs_f64(),
            );
        }
    }
    out.one(
        "runnel_streams",
        "gauge",
        "Streams held (live and soft-deleted).",
        e.streams,
    );
    if let Some(healing) = &e.healing {
        out.one(
            "runnel_healing_moves_total",
            "counter",
            "Replicas this node, as their group's leader, moved off members silent for longer than --dead-node-after.",
            healing.moves,
        );
        out.one(
            "runnel_healing_silent_members",
            "gauge",
            "Members of the groups this node leads that do not answer now.",
            healing.silent_members,
        );
        out.one(
            "runnel_rebalance_moves_total",
            "counter",
            "Replicas this node, as their group's leader, moved onto members that held none (continuous rebalancing).",
            healing.rebalance_moves,
        );
    }
    // One gauge family per figure, one sample per group (`None`: no
    // sample for that group).
    type PerGroup = fn(&GroupMetrics) -> Option<u64>;
    let families: [(&str, &str, &str, PerGroup); 10] = [
        (
            "gauge",
            "runnel_group_leader",
            "The node id this node believes leads the group (0: none known).",
            |g| Some(g.leader.unwrap_or(0)),
        ),
        (
            "gauge",
            "runnel_group_is_leader",
            "1 where this node leads the group.",
            |g| Some(u64::from(g.is_leader)),
        ),
        (
            "gauge",
            "runnel_group_term",
            "The group's Raft term as this node knows it.",
            |g| Some(g.term),
        ),
        (
            "gauge",
            "runnel_group_last_log_index",
            "Last entry in this node's copy of the group's log.",
            |g| Some(g.last_log_index),
        ),
        (
            "gauge",
            "runnel_group_apply_lag",
            "Entries in this node's log not applied yet.",
            |g| Some(g.last_log_index.saturating_sub(g.applied_index)),
        ),
        (
            "gauge",
            "runnel_group_max_follower_lag",
            "On the group's leader: entries the furthest-behind follower lacks.",
            |g| g.max_follower_lag,
        ),
        (
            "gauge",
            "runnel_group_votes",
            "0 while this node holds its vote in the group, catching up after losing its state.",
            |g| Some(u64::from(g.votes)),
        ),
        (
            "gauge",
            "runnel_group_pending_proposals",
            "Proposals queued on this node for the group, not yet submitted to Raft.",
            |g| Some(g.pending_proposals),
        ),
        (
            "counter",
            "runnel_group_proposals_committed_total",
            "Proposals this node submitted to the group that were committed.",
            |g| Some(g.proposals_committed),
        ),
        (
            "counter",
            "runnel_group_proposals_failed_total",
            "Proposals this node submitted to the group that failed (leadership lost, shutdown, replication failed).",
            |g| Some(g.proposals_failed),
        ),
    ];
    if !e.groups.is_empty() {
        for (kind, name, help, value) in families {
            out.family(name, kind, help);
            for g in &e.groups {
                if let Some(v) = value(g) {
                    out.sample(name, &format!("group=\"{}\"", g.group), v);
                }
            }
        }
    }
    if let Some(t) = &e.tiering {
        out.one(
            "runnel_tier_untiered_bytes",
            "gauge",
            "Committed bytes not yet in object storage (the tiering backlog).",
            t.untiered_bytes,
        );
        out.one(
            "runnel_tier_tiered_bytes",
            "gauge",
            "Bytes held in object storage.",
            t.tiered_bytes,
        );
        out.one(
            "runnel_tier_backlog_full",
            "gauge",
            "1 while appends are refused because the backlog reached --max-untiered-bytes.",
            u8::from(t.backlog_full),
        );
        out.one(
            "runnel_tier_upload_failures_total",
            "counter",
            "Chunk uploads that failed (retried later).",
            t.upload_failures,
        );
        out.one(
            "runnel_tier_read_failures_total",
            "counter",
            "Reads of tiered history that failed.",
            t.read_failures,
        );
        out.family(
            "runnel_object_store_requests_total",
            "counter",
            "Object store calls, by kind.",
        );
        out.sample(
            "runnel_object_store_requests_total",
            "kind=\"get\"",
            t.store_gets,
        );
        out.sample(
            "runnel_object_store_requests_total",
            "kind=\"put\"",
            t.store_puts,
        );
        out.one(
            "runnel_object_store_errors_total",
            "counter",
            "Object store calls that failed after their retries.",
            t.store_errors,
        );
        out.one(
            "runnel_object_store_request_seconds_total",
            "counter",
            "Time spent in object store calls (divided by the requests: their mean latency).",
            t.store_call_seconds,
        );
        out.family(
            "runnel_tier_cache_requests_total",
            "counter",
            "Block cache lookups, by result.",
        );
        out.sample(
            "runnel_tier_cache_requests_total",
            "result=\"hit\"",
            t.cache_hits,
        );
        out.sample(
            "runnel_tier_cache_requests_total",
            "result=\"miss\"",
            t.cache_misses,
        );
    }
}

/// The standard process metrics, from /proc (Linux).
fn render_process(out: &mut Out, m: &Metrics, e: &NodeMetrics) {
    let started = m
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    out.one(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch.",
        started,
    );
    if let Some(rss) = crate::memory::resident_bytes() {
        out.one(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            rss,
        );
    }
    if let Some(parts) = crate::memory::resident_parts() {
        out.family(
            "runnel_resident_memory_bytes",
            "gauge",
            "Resident memory by kind: anonymous (allocated), file (mapped files: the binary, and log segments read through mmap, which the kernel reclaims under pressure), shared.",
        );
        for (kind, bytes) in [
            ("anonymous", parts.anonymous),
            ("file", parts.file),
            ("shared", parts.shared),
        ] {
            out.sample(
                "runnel_resident_memory_bytes",
                &format!("kind=\"{kind}\""),
                bytes,
            );
        }
    }
    out.family(
        "runnel_memory_bytes",
        "gauge",
        "Anonymous resident memory by owner: the stream table, the per-append index, log pages kept for readers, the tiered-block cache (estimates from their tables); allocated by anything else (connections, requests, readers); resident but not allocated (the allocator's free pages and tables, thread stacks).",
    );
    for (owner, bytes) in crate::memory::breakdown(e).owners() {
        out.sample("runnel_memory_bytes", &format!("owner=\"{owner}\""), bytes);
    }
    if let Some(cpu) = cpu_seconds() {
        out.one(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time spent in seconds.",
            cpu,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        out.one(
            "process_open_fds",
            "gauge",
            "Open file descriptors.",
            fds.count(),
        );
    }
}

fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which may hold spaces.
    let fields: Vec<&str> = stat
        .get(stat.rfind(')')? + 2..)?
        .split_whitespace()
        .collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}
