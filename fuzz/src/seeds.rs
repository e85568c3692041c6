//! The seed inputs of every target: valid inputs of each shape a target
//! reads, and near-valid ones (one field off), so that a short run starts
//! at the interesting code instead of rediscovering the formats. Written
//! to `fuzz/seeds/TARGET/` by `src/bin/make_seeds.rs`
//! (`scripts/fuzz.sh --seeds`); built only from the crates' own encoders,
//! never by hand.

use std::collections::{BTreeMap, BTreeSet};

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{
    BasicNode, CommittedLeaderId, EntryPayload, LogId, Membership, SnapshotMeta, StoredMembership,
    Vote,
};
use runnel_auth::grants::{GrantSpec, Grants};
use runnel_auth::policy::Policy;
use runnel_core::{
    AppendToStream, Body, Command, CreateStream, Entry, ForkFrom, ForkMaterial, InheritedChunk,
    Producer, PutSnapshot, Retention, StreamsState,
};
use runnel_wire::raft::frame::{request_frame, ListRequest, PeerRequest};
use runnel_wire::raft::hello::Hello;
use runnel_wire::raft::{AppRequest, TypeConfig};

use crate::entries;

/// The auth policy the credentials target checks against: the token "t"
/// may read `chat/`; HS256 JWTs under this secret.
pub const FUZZ_POLICY: &str = "[[tokens]]\n\
     sha256 = \"e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8\"\n\
     grants = [{ prefix = \"chat/\", allow = [\"read\"] }]\n\
     [jwt]\n\
     hs256_secret = \"fuzzing-secret-fuzzing-secret-0123\"\n";

/// One seed: the target it is for, its file name, its bytes.
pub struct Seed {
    pub target: &'static str,
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Every target's seeds.
pub fn all() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut add = |target: &'static str, list: Vec<(&str, Vec<u8>)>| {
        for (name, bytes) in list {
            seeds.push(Seed {
                target,
                name: name.to_string(),
                bytes,
            });
        }
    };
    add("http_head", http_heads());
    add("offsets_and_cursors", offsets_and_cursors());
    add("protocol_headers", protocol_headers());
    add("json_body", json_bodies());
    add("raft_frame", raft_frames());
    add("log_record", log_records());
    add("checkpoint", checkpoints());
    add("fork_material", fork_materials());
    add("credentials", credentials());
    seeds
}

fn text(list: &[(&'static str, &str)]) -> Vec<(&'static str, Vec<u8>)> {
    list.iter()
        .map(|(name, text)| (*name, text.as_bytes().to_vec()))
        .collect()
}

fn http_heads() -> Vec<(&'static str, Vec<u8>)> {
    text(&[
        ("sse", "GET /v1/stream/chat/a?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"),
        ("read", "GET /v1/stream/chat/a?offset=0000000000000000_0000000000000005 HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("long-poll", "GET /v1/stream/a?offset=now&live=long-poll&cursor=42 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
        ("head", "HEAD /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("append", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world"),
        ("append-producer", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nProducer-Id: p\r\nProducer-Epoch: 0\r\nProducer-Seq: 3\r\nStream-Seq: s1\r\nContent-Length: 7\r\n\r\n[1,2,3]"),
        ("append-close", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nStream-Closed: true\r\n\r\n"),
        ("create", "PUT /v1/stream/a%20b HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nStream-TTL: 3600\r\nContent-Length: 2\r\n\r\nhi"),
        ("delete", "DELETE /v1/stream/a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n\r\n"),
        ("chunked", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        ("expect", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\nx"),
        ("http10", "GET /v1/stream/a HTTP/1.0\r\n\r\n"),
        ("pipelined", "GET /v1/stream/a HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/stream/b HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("no-host", "GET /v1/stream/a HTTP/1.1\r\n\r\n"),
        ("two-lengths", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"),
        ("short-body", "POST /v1/stream/a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"),
        ("bad-header", "GET /v1/stream/a HTTP/1.1\r\nHost: x\r\nbad header\r\n\r\n"),
        ("partial", "GET /v1/stream/a HTT"),
    ])
}

fn offsets_and_cursors() -> Vec<(&'static str, Vec<u8>)> {
    text(&[
        ("offset-zero", "0000000000000000_0000000000000000"),
        ("offset", "0000000000000000_0000000000123456"),
        ("offset-epoch", "0000000000000001_0000000000000000"),
        ("offset-short", "0000000000000000_000000000000000"),
        ("start", "-1"),
        ("now", "now"),
        ("cursor", "1000"),
        ("cursor-max", "18446744073709551615"),
        ("query", "offset=-1&live=sse&cursor=12"),
        (
            "query-escaped",
            "offset=0000000000000000_0000000000000001&live=long-poll&x=y+z%20",
        ),
        ("query-repeated", "offset=-1&offset=now"),
        ("name", "chat/room-1"),
        ("name-escaped", "a%2Fb%20c%E2%9C%93"),
        ("name-bad-escape", "a%zz"),
        ("name-control", "a%0Ab"),
    ])
}

fn protocol_headers() -> Vec<(&'static str, Vec<u8>)> {
    let join = |values: [&str; 7]| {
        let parts: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
        crate::join(&parts, 0xff)
    };
    vec![
        (
            "all",
            join([
                "p1",
                "0",
                "7",
                "3600",
                "2030-01-01T00:00:00Z",
                "true",
                "s-1",
            ]),
        ),
        (
            "offset-time",
            join([
                "producer",
                "12",
                "0",
                "0",
                "2024-02-29T12:00:00.123+02:00",
                "false",
                "",
            ]),
        ),
        (
            "far-expiry",
            join([
                "p",
                "1",
                "1",
                "9007199254740991",
                "9999-12-31T23:59:59.999Z",
                "TRUE",
                "z",
            ]),
        ),
        (
            "early-expiry",
            join(["p", "1", "1", "1", "0000-01-01T00:00:00Z", "False", "a"]),
        ),
        (
            "leading-zero",
            join(["p", "01", "1", "1", "2030-01-01T00:00:00Z", "true", "a"]),
        ),
        (
            "too-large",
            join([
                "p",
                "9007199254740992",
                "1",
                "1",
                "2030-01-01T00:00:00Z",
                "true",
                "a",
            ]),
        ),
        (
            "no-seq",
            join(["p", "1", "", "1", "2030-01-01T00:00:00Z", "true", "a"]),
        ),
        (
            "bad-time",
            join(["p", "1", "1", "1", "2030-13-01T00:00:00Z", "yes", "a"]),
        ),
        (
            "spaces",
            join([
                " p ",
                " 1",
                "2 ",
                "\t3",
                " 2030-01-01T00:00:00Z ",
                " true ",
                " s ",
            ]),
        ),
    ]
}

fn json_bodies() -> Vec<(&'static str, Vec<u8>)> {
    text(&[
        ("object", r#"{"a":1,"b":[true,null,"x"]}"#),
        ("array", "[1,2,3]"),
        ("empty-array", "[]"),
        ("nested", r#"[[1],{"a":[2]},"s"]"#),
        ("string", r#""h\u00e9llo \ud83d\ude00""#),
        (
            "numbers",
            "[-0,1e308,-1.5E-3,123456789012345678901234567890]",
        ),
        ("spaced", " \n[ {\"a\" : 1} ,\t2 ] "),
        ("unclosed", r#"{"a":"#),
        ("trailing", "[1,]"),
    ])
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn membership() -> Membership<u64, BasicNode> {
    // Voters 1 and 2, learner 3, each known by its Raft address.
    let voters: BTreeSet<u64> = [1, 2].into();
    let nodes: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|node| (node, BasicNode::new(format!("127.0.0.1:{}", 4437 + node))))
        .collect();
    Membership::new(vec![voters], nodes)
}

fn raft_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut batch = AppRequest::default();
    for entry in sample_entries().iter().take(4) {
        batch.push(entry);
    }
    let entries = vec![
        openraft::Entry::<TypeConfig> {
            log_id: log_id(2, 5),
            payload: EntryPayload::Blank,
        },
        openraft::Entry::<TypeConfig> {
            log_id: log_id(2, 6),
            payload: EntryPayload::Normal(batch),
        },
        openraft::Entry::<TypeConfig> {
            log_id: log_id(2, 7),
            payload: EntryPayload::Membership(membership()),
        },
    ];
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(log_id(1, 4)),
        entries,
        leader_commit: Some(log_id(1, 4)),
    };
    let heartbeat = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    let snapshot = InstallSnapshotRequest::<TypeConfig> {
        vote: Vote::new_committed(3, 2),
        meta: SnapshotMeta {
            last_log_id: Some(log_id(3, 40)),
            last_membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
            snapshot_id: "3-40-1".into(),
        },
        offset: 0,
        data: b"snapshot bytes".to_vec(),
        done: true,
    };
    let requests = [
        ("append", PeerRequest::Append(append)),
        ("heartbeat", PeerRequest::Append(heartbeat)),
        (
            "vote",
            PeerRequest::Vote(VoteRequest::new(Vote::new(4, 3), Some(log_id(3, 40)))),
        ),
        ("snapshot", PeerRequest::Snapshot(snapshot)),
        ("probe", PeerRequest::Probe),
        ("read-index", PeerRequest::ReadIndex),
        ("handoff", PeerRequest::Handoff(1)),
        ("leader", PeerRequest::Leader),
        (
            "list",
            PeerRequest::List(ListRequest {
                prefix: "chat/".into(),
                after: Some("chat/a".into()),
                limit: 100,
                names: None,
            }),
        ),
        (
            "list-names",
            PeerRequest::List(ListRequest {
                prefix: String::new(),
                after: None,
                limit: 2,
                names: Some(vec!["a".into(), "b/c".into()]),
            }),
        ),
        (
            "hello",
            PeerRequest::Hello(Hello {
                node: 2,
                cluster_id: Some("prod-1".into()),
                cluster_version: 2,
            }),
        ),
        (
            "hello-no-cluster",
            PeerRequest::Hello(Hello {
                node: 7,
                cluster_id: None,
                cluster_version: 1,
            }),
        ),
    ];
    let mut seeds: Vec<(&'static str, Vec<u8>)> = requests
        .iter()
        .map(|(name, request)| {
            let body = request.encode().expect("a seed encodes");
            // The listener reads frames without their length prefix.
            let frame = request_frame(9, request.kind(), 3, &body)[4..].to_vec();
            (*name, frame)
        })
        .collect();
    // A later hello version with fields this one skips.
    let mut later = request_frame(0, 7, 0, &[2, 3, 0, 0, 0, 0, 0, 0, 0, 4])[4..].to_vec();
    later.extend_from_slice(b"prodlater");
    seeds.push(("hello-later-version", later));
    seeds.push(("unknown-kind", request_frame(1, 42, 0, b"?")[4..].to_vec()));
    seeds
}

/// Entries of every kind a seed needs: streams of both content kinds,
/// producers, forks, snapshots, trims, pins, cluster metadata.
fn sample_entries() -> Vec<Entry> {
    let at = |now_ms: i64, command: Command| Entry { now_ms, command };
    let body = |data: &[u8], message_ends: Vec<u32>| Body {
        data: data.to_vec(),
        message_ends,
    };
    vec![
        at(
            1_000,
            Command::Create(CreateStream {
                name: "chat/a".into(),
                content_type: Some("text/plain".into()),
                ttl_secs: Some(3600),
                body: body(b"hello", Vec::new()),
                ..CreateStream::default()
            }),
        ),
        at(
            1_001,
            Command::Append(AppendToStream {
                name: "chat/a".into(),
                content_type: Some("text/plain".into()),
                body: body(b" world", Vec::new()),
                producer: Some(Producer {
                    id: "p".into(),
                    epoch: 0,
                    seq: 0,
                }),
                stream_seq: Some("s1".into()),
                close: false,
            }),
        ),
        at(
            1_002,
            Command::Create(CreateStream {
                name: "events".into(),
                content_type: Some("application/json".into()),
                expires_at_ms: Some(9_000_000),
                compaction: true,
                retention: Retention {
                    max_bytes: Some(1 << 20),
                    max_age_secs: Some(60),
                },
                body: body(b"{\"a\":1}[2]", vec![7, 10]),
                ..CreateStream::default()
            }),
        ),
        at(
            1_003,
            Command::Create(CreateStream {
                name: "chat/fork".into(),
                content_type: Some("text/plain".into()),
                fork: Some(ForkFrom {
                    source: "chat/a".into(),
                    offset: Some(5),
                    sub_offset: 0,
                }),
                ..CreateStream::default()
            }),
        ),
        at(
            1_004,
            Command::PutSnapshot(PutSnapshot {
                name: "events".into(),
                offset: 10,
                content_type: "application/json".into(),
                digest: [7; 32],
                server_made: false,
                body: body(b"{\"state\":1}", Vec::new()),
            }),
        ),
        at(
            1_005,
            Command::Pin {
                name: "chat/a".into(),
                token: "pin-1".into(),
                offset: Some(3),
                sub_offset: 0,
            },
        ),
        at(
            1_006,
            Command::Trim {
                name: "events".into(),
                before: 7,
            },
        ),
        at(
            1_007,
            Command::Append(AppendToStream {
                name: "chat/a".into(),
                content_type: None,
                body: body(b"!", Vec::new()),
                producer: None,
                stream_seq: None,
                close: true,
            }),
        ),
        at(
            1_008,
            Command::SetClusterId {
                id: "prod-1".into(),
            },
        ),
        at(1_009, Command::RetireNode { node: 4 }),
        at(
            1_010,
            Command::SetReplication {
                factor: 3,
                initial: true,
            },
        ),
        at(
            1_011,
            Command::PreferLeaders {
                leaders: vec![(1, 2), (2, 3)],
                initial: false,
            },
        ),
        at(
            1_012,
            Command::Unpin {
                name: "chat/a".into(),
                token: "pin-1".into(),
            },
        ),
        at(
            1_013,
            Command::DeleteSnapshot {
                name: "events".into(),
                offset: 10,
            },
        ),
        at(
            1_014,
            Command::Delete {
                name: "chat/fork".into(),
            },
        ),
        at(1_015, Command::Expire { ids: vec![1, 9] }),
    ]
}

fn log_records() -> Vec<(&'static str, Vec<u8>)> {
    let names = [
        "create",
        "append-producer",
        "create-json",
        "create-fork",
        "put-snapshot",
        "pin",
        "trim",
        "append-close",
        "set-cluster-id",
        "retire-node",
        "set-replication",
        "prefer-leaders",
        "unpin",
        "delete-snapshot",
        "delete",
        "expire",
    ];
    let entries = sample_entries();
    assert_eq!(entries.len(), names.len());
    let mut seeds: Vec<(&'static str, Vec<u8>)> = names
        .iter()
        .zip(&entries)
        .map(|(n, e)| (*n, e.encode()))
        .collect();
    let mut cut = entries[1].encode();
    cut.truncate(cut.len() / 2);
    seeds.push(("append-cut-short", cut));
    let mut version = entries[0].encode();
    version[0] = 2;
    seeds.push(("create-unknown-version", version));
    let inherited = Entry {
        now_ms: 2_000,
        command: Command::Create(CreateStream {
            name: "copy".into(),
            content_type: Some("text/plain".into()),
            inherit: Some(runnel_core::Inherited {
                token: "pin-2".into(),
                material: fork_material(),
            }),
            ..CreateStream::default()
        }),
    };
    seeds.push(("create-inherited", inherited.encode()));
    seeds
}

fn checkpoints() -> Vec<(&'static str, Vec<u8>)> {
    let entries = sample_entries();
    let mut seeds = vec![
        // As entry sequences: the states they build round-trip.
        ("entries-all", entries::encode(&entries)),
        ("entries-streams", entries::encode(&entries[..5])),
        ("entries-cluster", entries::encode(&entries[8..12])),
        // As checkpoints: of an empty state, of the states above, and
        // damaged.
        ("checkpoint-empty", StreamsState::new().encode_checkpoint()),
    ];
    let all = entries::apply(&entries).encode_checkpoint();
    seeds.push(("checkpoint-all", all.clone()));
    seeds.push((
        "checkpoint-streams",
        entries::apply(&entries[..5]).encode_checkpoint(),
    ));
    let mut cut = all.clone();
    cut.truncate(all.len() - 3);
    seeds.push(("checkpoint-cut-short", cut));
    let mut old = all;
    old[0] = 2;
    seeds.push(("checkpoint-version-2", old));
    seeds
}

fn fork_material() -> ForkMaterial {
    ForkMaterial {
        content_type: "application/json".into(),
        ttl_secs: Some(60),
        expires_at_ms: None,
        earliest: 0,
        point: 10,
        chunks: vec![
            InheritedChunk {
                start: 0,
                len: 7,
                message_ends: vec![7],
                at_ms: 1_000,
            },
            InheritedChunk {
                start: 7,
                len: 3,
                message_ends: Vec::new(),
                at_ms: 1_001,
            },
        ],
    }
}

fn fork_materials() -> Vec<(&'static str, Vec<u8>)> {
    let material = fork_material();
    let whole = material.encode(b"{\"a\":1}[2]");
    let mut short = whole.clone();
    short.pop();
    let empty = ForkMaterial {
        content_type: "text/plain".into(),
        ttl_secs: None,
        expires_at_ms: Some(5_000),
        earliest: 3,
        point: 3,
        chunks: Vec::new(),
    };
    vec![
        ("two-chunks", whole),
        ("data-short", short),
        ("no-chunks", empty.encode(&[])),
    ]
}

fn credentials() -> Vec<(&'static str, Vec<u8>)> {
    let policy = Policy::parse(FUZZ_POLICY).expect("the fuzz policy parses");
    let verifier = policy.jwt.as_ref().expect("a JWT secret");
    let reads = |prefix: &str| {
        Grants::parse(&[GrantSpec {
            prefix: prefix.into(),
            allow: vec!["read".into()],
        }])
        .expect("read grants parse")
    };
    // Valid until 2100, so the seeds stay valid.
    const NOW: u64 = 1_800_000_000;
    const LATER: u64 = 4_102_444_800;
    let jwt = verifier
        .mint("fuzz", &reads("chat/"), NOW, LATER)
        .expect("an HS256 secret mints");
    let narrow = verifier
        .mint("fuzz", &reads("chat/room/"), NOW, LATER)
        .expect("mints");
    let expired = verifier
        .mint("fuzz", &reads("chat/"), NOW, NOW + 1)
        .expect("mints");
    let with = |header: &str, query: &str| {
        let mut bytes = header.as_bytes().to_vec();
        if !query.is_empty() {
            bytes.push(0);
            bytes.extend_from_slice(query.as_bytes());
        }
        bytes
    };
    let mut tampered = jwt.clone();
    tampered.pop();
    tampered.push('A');
    vec![
        ("token", with("Bearer t", "")),
        ("token-and-prefix", with("Bearer t", "chat/")),
        ("jwt", with(&format!("Bearer {jwt}"), "chat/")),
        ("jwt-narrow", with(&format!("Bearer {narrow}"), "chat/room/")),
        ("jwt-expired", with(&format!("Bearer {expired}"), "")),
        ("jwt-tampered", with(&format!("Bearer {tampered}"), "")),
        ("jwt-in-query", with("", &format!("access_token={jwt}"))),
        ("token-in-query", with("", "offset=-1&access_token=t")),
        ("both", with("Bearer t", &format!("access_token={jwt}"))),
        ("basic", with("Basic dTpw", "")),
        ("alg-none", with("Bearer eyJhbGciOiJub25lIn0.eyJleHAiOjQxMDI0NDQ4MDAsImdyYW50cyI6W3sicHJlZml4IjoiIiwiYWxsb3ciOlsiYWRtaW4iXX1dfQ.", "")),
    ]
}
