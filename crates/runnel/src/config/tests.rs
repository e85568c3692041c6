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
