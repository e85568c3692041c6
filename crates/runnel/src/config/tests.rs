//! `runnel serve` settings: flags over the file over defaults, and the
//! errors for what is wrong.

use super::*;

#[test]
fn flags_win_over_the_file_and_defaults_fill_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runnel.toml");
    std::fs::write(
        &path,
        "listen = \"127.0.0.1:9000\"\nlong_poll_timeout_ms = 500\nsync = \"never\"\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        long_poll_timeout_ms: Some(700),
        ..ServeArgs::default()
    };
    let s = args.resolve().unwrap();
    assert_eq!(s.listen, "127.0.0.1:9000".parse().unwrap());
    assert_eq!(s.server.long_poll_timeout, Duration::from_millis(700));
    assert_eq!(s.engine.sync, SyncMode::Never);
    assert_eq!(s.engine.data_dir, PathBuf::from("runnel-data"));
}

#[test]
fn a_single_node_keeps_its_data_directorys_group_count() {
    let dir = tempfile::tempdir().unwrap();
    let args = |groups: Option<u32>| ServeArgs {
        data_dir: Some(dir.path().to_path_buf()),
        groups,
        ..ServeArgs::default()
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    assert_eq!(
        args(None).resolve().unwrap().engine.groups,
        runnel_engine::single_node_groups(cores),
        "a new data directory takes the default for this machine"
    );
    std::fs::write(dir.path().join("runnel.meta"), "format = 1\ngroups = 3\n").unwrap();
    assert_eq!(args(None).resolve().unwrap().engine.groups, 3);
    assert_eq!(
        args(Some(5)).resolve().unwrap().engine.groups,
        5,
        "a flag still wins (and the node refuses to open a directory of another count)"
    );
}

#[test]
fn the_caches_keep_to_shares_of_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let args = |max_memory_bytes: Option<u64>, cache_bytes: Option<u64>| ServeArgs {
        data_dir: Some(dir.path().to_path_buf()),
        groups: Some(2),
        max_memory_bytes,
        cache_bytes,
        ..ServeArgs::default()
    };
    let engine = |a: ServeArgs| a.resolve().unwrap().engine;
    let unbounded = engine(args(None, None));
    let default_cache = unbounded.tier.as_ref().expect("tiering is on").cache_bytes;
    assert_eq!(default_cache, 256 << 20);
    assert_eq!(unbounded.read_pages_bytes, 8 << 20);
    // 64 MiB: a quarter for tiered blocks, a sixteenth for two groups' pages.
    let bounded = engine(args(Some(64 << 20), None));
    assert_eq!(bounded.tier.unwrap().cache_bytes, 16 << 20);
    assert_eq!(bounded.read_pages_bytes, 2 << 20);
    // A large budget never grows a cache past its default.
    let large = engine(args(Some(64 << 30), None));
    assert_eq!(large.tier.unwrap().cache_bytes, default_cache);
    assert_eq!(large.read_pages_bytes, 8 << 20);
    // --cache-bytes sizes the block cache itself.
    let sized = engine(args(Some(64 << 20), Some(100 << 20)));
    assert_eq!(sized.tier.unwrap().cache_bytes, 100 << 20);
}

#[test]
fn the_cache_policy_is_configurable() {
    use runnel_server::cache::{CacheMode, CachePolicy};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runnel.toml");
    std::fs::write(
        &path,
        "cache_control = \"private\"\ncache_tail_max_age_secs = 0\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        cache_long_poll_max_age_secs: Some(5),
        ..ServeArgs::default()
    };
    let cache = args.resolve().unwrap().server.cache;
    assert_eq!(
        cache,
        CachePolicy {
            mode: CacheMode::Private,
            tail_max_age: 0,
            long_poll_max_age: 5,
            ..CachePolicy::default()
        }
    );
    let args = ServeArgs {
        cache_control: Some("public".into()),
        ..ServeArgs::default()
    };
    let Err(why) = args.resolve() else {
        panic!("cache-control public must be refused");
    };
    assert!(why.contains("cdn, private or off"), "{why}");
}

#[test]
fn unknown_keys_and_bad_values_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "lisen = \"x\"\n").unwrap();
    let args = ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    };
    assert!(args.resolve().is_err());
    let args = ServeArgs {
        sync: Some("sometimes".into()),
        ..ServeArgs::default()
    };
    assert!(args.resolve().is_err());
}

#[test]
fn peers_give_the_cluster_and_the_default_listen_address() {
    let args = ServeArgs {
        node_id: Some(2),
        peers: Some("1=127.0.0.1:5001, 2=127.0.0.1:5003,3=127.0.0.1:5005".into()),
        ..ServeArgs::default()
    };
    let s = args.resolve().unwrap();
    let cluster = s.cluster.expect("cluster settings");
    assert_eq!(cluster.node_id, 2);
    assert_eq!(cluster.peers.len(), 3);
    assert_eq!(s.listen, "127.0.0.1:5003".parse().unwrap());
    assert_eq!(
        (s.engine.groups - 1) % 3,
        0,
        "data groups spread evenly over 3 nodes"
    );

    for (node_id, peers) in [
        (Some(4), Some("1=127.0.0.1:5001")),
        (Some(1), Some("1=127.0.0.1:5001,1=127.0.0.1:5002")),
        (Some(1), Some("1=localhost")),
        (None, Some("1=127.0.0.1:5001")),
        (Some(1), None),
    ] {
        let args = ServeArgs {
            node_id,
            peers: peers.map(String::from),
            ..ServeArgs::default()
        };
        assert!(
            args.resolve().is_err(),
            "{node_id:?} {peers:?} must be refused"
        );
    }
}

#[test]
fn a_cluster_id_is_for_members_and_must_be_valid() {
    let member = |cluster_id: &str| ServeArgs {
        node_id: Some(1),
        peers: Some("1=127.0.0.1:5001".into()),
        cluster_id: Some(cluster_id.into()),
        ..ServeArgs::default()
    };
    let settings = member("prod-eu.1").resolve().unwrap();
    assert_eq!(
        settings.cluster.unwrap().cluster_id.as_deref(),
        Some("prod-eu.1")
    );
    let err = member("prod eu").resolve().err().unwrap();
    assert!(err.contains("--cluster-id"), "{err}");
    let single = ServeArgs {
        cluster_id: Some("prod".into()),
        ..ServeArgs::default()
    };
    let err = single.resolve().err().unwrap();
    assert!(err.contains("for cluster members"), "{err}");
}

#[test]
fn zones_come_from_the_peers_and_the_zone_flag_must_agree() {
    let member = |peers: &str, zone: Option<&str>| ServeArgs {
        node_id: Some(2),
        peers: Some(peers.into()),
        zone: zone.map(String::from),
        ..ServeArgs::default()
    };
    let zoned = "1=127.0.0.1:5001@a,2=127.0.0.1:5003@b,3=127.0.0.1:5005@c";
    for flag in [None, Some("b")] {
        let cluster = member(zoned, flag).resolve().unwrap().cluster.unwrap();
        assert_eq!(cluster.peers[&2], "127.0.0.1:5003");
        let zones: Vec<(u64, &str)> = cluster
            .zones
            .iter()
            .map(|(n, z)| (*n, z.as_str()))
            .collect();
        assert_eq!(zones, [(1, "a"), (2, "b"), (3, "c")]);
        assert_eq!(cluster.zone.as_deref(), Some("b"));
    }
    // A node whose peers name no zones (one added later) gives its own,
    // which does not place the cluster's founders.
    let plain = "1=127.0.0.1:5001,2=127.0.0.1:5003";
    let cluster = member(plain, Some("b")).resolve().unwrap().cluster.unwrap();
    assert!(cluster.zones.is_empty());
    assert_eq!(cluster.zone.as_deref(), Some("b"));
    let cluster = member(plain, None).resolve().unwrap().cluster.unwrap();
    assert_eq!((cluster.zones.len(), cluster.zone), (0, None));
    for (peers, flag, why) in [
        (zoned, Some("c"), "--peers puts node 2 in zone b"),
        ("1=127.0.0.1:5001@a,2=127.0.0.1:5003", None, "but not for 2"),
        (
            "1=127.0.0.1:5001@a b,2=127.0.0.1:5003@b",
            None,
            "zone holds only",
        ),
        (
            "1=127.0.0.1:5001@,2=127.0.0.1:5003@b",
            None,
            "1 to 64 characters",
        ),
        (plain, Some(""), "--zone"),
    ] {
        let err = member(peers, flag).resolve().err().unwrap();
        assert!(err.contains(why), "{peers} {flag:?}: {err}");
    }
    let single = ServeArgs {
        zone: Some("a".into()),
        ..ServeArgs::default()
    };
    let err = single.resolve().err().unwrap();
    assert!(err.contains("--zone is for cluster members"), "{err}");
}
