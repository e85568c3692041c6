//! The subscription state machine, command by command.

use std::collections::BTreeMap;

use super::config::{check_webhook_url, is_public};
use super::*;

fn dev() -> UrlPolicy {
    UrlPolicy {
        allow_loopback_http: true,
        allowed_hosts: Vec::new(),
    }
}

fn config(json: &str) -> Config {
    Config::parse(json.as_bytes(), &dev()).unwrap()
}

fn webhook(pattern: &str) -> Config {
    config(&format!(
        r#"{{"type":"webhook","pattern":"{pattern}","webhook":{{"url":"http://127.0.0.1:9/hook"}},"lease_ttl_ms":1000}}"#
    ))
}

fn pull(pattern: &str) -> Config {
    config(&format!(
        r#"{{"type":"pull-wake","pattern":"{pattern}","wake_stream":"wake/pool","lease_ttl_ms":1000}}"#
    ))
}

fn put(
    subs: &mut Subscriptions,
    id: &str,
    config: Config,
    tails: &[(&str, Option<u64>)],
) -> Result<SubOutcome, SubError> {
    subs.apply(SubCommand::Put {
        id: id.into(),
        config,
        tails: tails.iter().map(|(s, t)| (s.to_string(), at(*t))).collect(),
        now_ms: 1,
        base_url: "http://127.0.0.1:1".into(),
    })
}

/// A stream seen at `tail` (incarnation 1), or not at all.
fn at(tail: Option<u64>) -> Option<Seen> {
    tail.map(|tail| Seen { id: 1, tail })
}

fn snapshot(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
    entries.iter().map(|(s, t)| (s.to_string(), *t)).collect()
}

#[test]
fn configurations_parse_normalized_and_checked() {
    let a = config(
        r#"{"type":"webhook","streams":["b","/a","b"],"webhook":{"url":"https://example.com/h"}}"#,
    );
    let b = config(
        r#"{"webhook":{"url":"https://example.com/h"},"streams":["a","b"],"type":"webhook","lease_ttl_ms":30000}"#,
    );
    assert_eq!(a, b, "order, repeats, slashes and defaults do not matter");
    assert_eq!(a.streams, ["a", "b"]);
    assert_eq!(a.lease_ttl_ms, 30_000);
    let refused = |json: &str| Config::parse(json.as_bytes(), &dev()).unwrap_err();
    for (json, code) in [
        (
            r#"{"type":"webhook","webhook":{"url":"https://e.com"}}"#,
            "INVALID_REQUEST",
        ),
        (r#"{"type":"push","pattern":"a"}"#, "INVALID_REQUEST"),
        (r#"{"type":"pull-wake","pattern":"a"}"#, "INVALID_REQUEST"),
        (r#"{"type":"webhook","pattern":"a"}"#, "INVALID_REQUEST"),
        (
            r#"{"type":"webhook","pattern":"a//b","webhook":{"url":"https://e.com"}}"#,
            "INVALID_REQUEST",
        ),
        (
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"https://e.com"},"lease_ttl_ms":999}"#,
            "INVALID_REQUEST",
        ),
        (
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"https://e.com"},"lease_ttl_ms":600001}"#,
            "INVALID_REQUEST",
        ),
        (
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"https://e.com"},"extra":1}"#,
            "INVALID_REQUEST",
        ),
        (
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"http://10.0.0.1/hook"}}"#,
            "WEBHOOK_URL_REJECTED",
        ),
        ("not json", "INVALID_REQUEST"),
    ] {
        assert_eq!(refused(json).code(), code, "{json}");
    }
}

#[test]
fn webhook_targets_must_be_public_https() {
    let policy = dev();
    for ok in [
        "https://example.com/hook",
        "https://93.184.216.34:8443/x",
        "http://127.0.0.1:3000/hook",
        "http://localhost:8080/",
    ] {
        assert!(check_webhook_url(ok, &policy).is_ok(), "{ok}");
    }
    for bad in [
        "http://example.com/hook",
        "ftp://example.com/x",
        "https://10.0.0.1/hook",
        "https://172.16.5.4/",
        "https://192.168.1.1/",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/",
        "https://0.0.0.0/",
        "https://127.0.0.1/",
        "https://localhost/",
        "https://a.localhost/",
        "https://[::1]/",
        "https://[fd00::1]/",
        "https://[fe80::1]/",
        "https://[::ffff:10.0.0.1]/",
        "https://[2606:4700::1111]/x",
        "https://198.18.0.1/",
        "https://240.0.0.1/",
        "https://user:pw@example.com/",
        "http://127.0.1.1/",
        "example.com/hook",
    ] {
        let err = check_webhook_url(bad, &policy).unwrap_err();
        assert_eq!(err.code(), "WEBHOOK_URL_REJECTED", "{bad}");
    }
    // Without the development exception, loopback HTTP goes too; an
    // allowlisted host passes whatever its address.
    let strict = UrlPolicy::default();
    assert!(check_webhook_url("http://127.0.0.1:3000/hook", &strict).is_err());
    let listed = UrlPolicy {
        allow_loopback_http: false,
        allowed_hosts: vec!["hooks.internal".into(), "10.1.2.3".into()],
    };
    assert!(check_webhook_url("https://hooks.internal/x", &listed).is_ok());
    assert!(check_webhook_url("https://10.1.2.3/x", &listed).is_ok());
    assert!(!is_public("10.1.2.3".parse().unwrap()));
    assert!(is_public("8.8.8.8".parse().unwrap()));
    // Addresses a name may resolve to: IPv6 forms carrying a private
    // IPv4 address are judged by it.
    for private in [
        "::a00:1",
        "::ffff:0:a00:1",
        "64:ff9b::a00:1",
        "2002:a00:1::1",
        "::1",
        "fe80::1",
    ] {
        assert!(!is_public(private.parse().unwrap()), "{private}");
    }
    for public in ["2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1"] {
        assert!(is_public(public.parse().unwrap()), "{public}");
    }
}

#[test]
fn create_is_idempotent_and_backfills_at_the_tail() {
    let mut subs = Subscriptions::default();
    let tails = [
        ("events/a", Some(40)),
        ("events/b", Some(0)),
        ("other/c", Some(9)),
    ];
    assert_eq!(
        put(&mut subs, "s", webhook("events/*"), &tails),
        Ok(SubOutcome::Created)
    );
    let sub = subs.get("s").unwrap();
    assert_eq!(sub.links.len(), 2, "only matching streams are linked");
    assert_eq!(
        sub.links["events/a"].acked,
        Some(40),
        "history is not replayed"
    );
    let tail = |s: &str| Some(if s == "events/a" { 40 } else { 0 });
    assert!(sub.pending(tail).is_empty());
    assert_eq!(
        put(&mut subs, "s", webhook("events/*"), &[]),
        Ok(SubOutcome::Confirmed)
    );
    assert_eq!(
        put(&mut subs, "s", webhook("events/**"), &[]),
        Err(SubError::ConfigMismatch)
    );

    let explicit = config(
        r#"{"type":"webhook","streams":["manual/a"],"webhook":{"url":"http://127.0.0.1:9/h"}}"#,
    );
    assert_eq!(
        put(&mut subs, "e", explicit, &[("manual/a", None)]),
        Ok(SubOutcome::Created)
    );
    let link = &subs.get("e").unwrap().links["manual/a"];
    assert!(link.kind.explicit && !link.kind.glob);
    assert_eq!(
        link.acked,
        Some(0),
        "a stream that does not exist yet starts at 0"
    );
}

#[test]
fn explicit_links_come_and_go_and_glob_links_stay() {
    let mut subs = Subscriptions::default();
    put(
        &mut subs,
        "s",
        webhook("events/*"),
        &[("events/a", Some(5))],
    )
    .unwrap();
    let add = |subs: &mut Subscriptions, stream: &str, tail| {
        subs.apply(SubCommand::AddStreams {
            id: "s".into(),
            tails: vec![(stream.into(), at(tail))],
        })
    };
    add(&mut subs, "manual/b", Some(7)).unwrap();
    add(&mut subs, "events/a", Some(9)).unwrap();
    let links = &subs.get("s").unwrap().links;
    assert_eq!(links["manual/b"].acked, Some(7));
    assert_eq!(
        links["events/a"].acked,
        Some(5),
        "an existing cursor is kept"
    );
    assert!(links["events/a"].kind.explicit && links["events/a"].kind.glob);
    let remove = |subs: &mut Subscriptions, stream: &str| {
        subs.apply(SubCommand::RemoveStream {
            id: "s".into(),
            stream: stream.into(),
        })
    };
    remove(&mut subs, "manual/b").unwrap();
    remove(&mut subs, "events/a").unwrap();
    remove(&mut subs, "never/linked").unwrap();
    let links = &subs.get("s").unwrap().links;
    assert!(!links.contains_key("manual/b"));
    assert!(links["events/a"].kind.glob && !links["events/a"].kind.explicit);
}

#[test]
fn a_discovered_stream_is_pending_from_its_first_byte() {
    let mut subs = Subscriptions::default();
    put(&mut subs, "s", webhook("events/*"), &[]).unwrap();
    put(&mut subs, "t", webhook("other/*"), &[]).unwrap();
    let linked = subs
        .apply(SubCommand::Discover {
            stream: "events/new".into(),
            id: 1,
        })
        .unwrap();
    assert_eq!(linked, SubOutcome::Linked(vec!["s".into()]));
    let sub = subs.get("s").unwrap();
    assert_eq!(sub.links["events/new"].acked, None);
    assert_eq!(sub.pending(|_| Some(12)), snapshot(&[("events/new", 12)]));
    // Seen again: nothing changes.
    let again = subs.apply(SubCommand::Discover {
        stream: "events/new".into(),
        id: 1,
    });
    assert_eq!(again, Ok(SubOutcome::Linked(vec![])));
    subs.apply(SubCommand::Incarnation {
        stream: "events/new".into(),
        id: None,
    })
    .unwrap();
    assert!(
        subs.get("s").unwrap().links.is_empty(),
        "a glob link to a deleted stream goes"
    );
}

/// Streams deleted and created again under a name are told apart by
/// their incarnation: an explicit link to a stream not created yet waits
/// for it, a deleted stream's explicit link waits for the next one, and a
/// re-created stream is new from its first byte.
#[test]
fn links_follow_the_incarnations_of_a_name() {
    let mut subs = Subscriptions::default();
    let explicit = config(
        r#"{"type":"webhook","pattern":"events/*","streams":["manual/a"],"webhook":{"url":"http://127.0.0.1:9/h"}}"#,
    );
    put(&mut subs, "s", explicit, &[("events/b", Some(30))]).unwrap();
    let incarnation = |subs: &mut Subscriptions, stream: &str, id: Option<u64>| {
        subs.apply(SubCommand::Incarnation {
            stream: stream.into(),
            id,
        })
        .unwrap();
    };
    let link =
        |subs: &Subscriptions, stream: &str| subs.get("s").unwrap().links.get(stream).cloned();
    // Not created yet: the link stays, at the start.
    incarnation(&mut subs, "manual/a", None);
    assert_eq!(link(&subs, "manual/a").unwrap().acked, Some(0));
    // Created: the cursor is the new stream's.
    incarnation(&mut subs, "manual/a", Some(7));
    let a = link(&subs, "manual/a").unwrap();
    assert_eq!((a.incarnation, a.acked), (Some(7), Some(0)));
    // Deleted: the explicit link waits for the next stream of the name.
    incarnation(&mut subs, "manual/a", None);
    let a = link(&subs, "manual/a").unwrap();
    assert_eq!((a.incarnation, a.acked), (None, None));
    // Re-created behind the cursor's back: all of it is new.
    incarnation(&mut subs, "events/b", Some(2));
    let b = link(&subs, "events/b").unwrap();
    assert_eq!((b.incarnation, b.acked), (Some(2), None));
    assert!(b.pending_at(1));
    // An explicit link added to a stream the pattern matches, then
    // removed, leaves the glob link.
    subs.apply(SubCommand::AddStreams {
        id: "s".into(),
        tails: vec![("events/c".into(), Some(Seen { id: 3, tail: 4 }))],
    })
    .unwrap();
    subs.apply(SubCommand::RemoveStream {
        id: "s".into(),
        stream: "events/c".into(),
    })
    .unwrap();
    let c = link(&subs, "events/c").unwrap();
    assert!(c.kind.glob && !c.kind.explicit);
    assert_eq!(c.acked, Some(4));
}

/// A pull-wake subscription never watches its own wake stream (its wake
/// events would wake it again), and refuses to link it explicitly.
#[test]
fn a_subscription_never_watches_its_own_wake_stream() {
    let mut subs = Subscriptions::default();
    put(
        &mut subs,
        "s",
        pull("**"),
        &[("wake/pool", Some(3)), ("a", Some(1))],
    )
    .unwrap();
    assert!(!subs.get("s").unwrap().links.contains_key("wake/pool"));
    subs.apply(SubCommand::Discover {
        stream: "wake/pool".into(),
        id: 1,
    })
    .unwrap();
    assert!(!subs.get("s").unwrap().links.contains_key("wake/pool"));
    let err = subs
        .apply(SubCommand::AddStreams {
            id: "s".into(),
            tails: vec![("wake/pool".into(), None)],
        })
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST");
    let refused = Config::parse(
        br#"{"type":"pull-wake","streams":["w"],"wake_stream":"w"}"#,
        &dev(),
    );
    assert!(refused.is_err());
    let reserved = Config::parse(
        br#"{"type":"pull-wake","pattern":"a/*","wake_stream":"__ds/x"}"#,
        &dev(),
    );
    assert!(reserved.is_err());
}

fn woken(subs: &mut Subscriptions, id: &str, wake_id: &str, snap: &[(&str, u64)]) -> u64 {
    match subs.apply(SubCommand::Wake {
        id: id.into(),
        wake_id: wake_id.into(),
        snapshot: snapshot(snap),
        lease_until_ms: Some(1_000),
    }) {
        Ok(SubOutcome::Woke { generation }) => generation,
        other => panic!("{other:?}"),
    }
}

fn ack(
    subs: &mut Subscriptions,
    generation: u64,
    wake_id: &str,
    acks: &[(&str, u64)],
    done: bool,
) -> Result<SubOutcome, SubError> {
    subs.apply(SubCommand::Ack {
        id: "s".into(),
        generation,
        wake_id: wake_id.into(),
        acks: acks.iter().map(|(s, o)| (s.to_string(), *o)).collect(),
        done,
        lease_until_ms: 5_000,
    })
}

#[test]
fn wakes_are_fenced_by_generation_and_wake_id() {
    let mut subs = Subscriptions::default();
    put(
        &mut subs,
        "s",
        webhook("events/*"),
        &[("events/a", Some(10))],
    )
    .unwrap();
    // Nothing pending: no wake.
    let idle = subs.apply(SubCommand::Wake {
        id: "s".into(),
        wake_id: "w0".into(),
        snapshot: snapshot(&[("events/a", 10)]),
        lease_until_ms: None,
    });
    assert_eq!(idle, Err(SubError::NoPendingWork));
    let g1 = woken(&mut subs, "s", "w1", &[("events/a", 20)]);
    assert_eq!(g1, 1);
    // One wake at a time.
    let second = subs.apply(SubCommand::Wake {
        id: "s".into(),
        wake_id: "w2".into(),
        snapshot: snapshot(&[("events/a", 30)]),
        lease_until_ms: None,
    });
    assert_eq!(second, Ok(SubOutcome::Unchanged));
    assert_eq!(
        ack(&mut subs, g1, "other", &[], false),
        Err(SubError::Fenced)
    );
    assert_eq!(
        ack(&mut subs, g1 + 1, "w1", &[], false),
        Err(SubError::Fenced)
    );
    // Acks are all or nothing: an unlinked stream or a step back refuses
    // the whole callback.
    let err = ack(&mut subs, g1, "w1", &[("events/a", 20), ("nope", 1)], false).unwrap_err();
    assert_eq!(err.code(), "INVALID_OFFSET");
    assert_eq!(subs.get("s").unwrap().links["events/a"].acked, Some(10));
    let err = ack(&mut subs, g1, "w1", &[("events/a", 5)], false).unwrap_err();
    assert_eq!(err.code(), "INVALID_OFFSET");
    // A callback without done extends the lease; with done it ends the
    // wake, and its replay is fenced.
    ack(&mut subs, g1, "w1", &[("events/a", 15)], false).unwrap();
    assert_eq!(
        subs.get("s").unwrap().wake.as_ref().unwrap().lease_until_ms,
        Some(5_000)
    );
    ack(&mut subs, g1, "w1", &[("events/a", 20)], true).unwrap();
    let sub = subs.get("s").unwrap();
    assert_eq!(
        (sub.wake.as_ref(), sub.links["events/a"].acked),
        (None, Some(20))
    );
    assert_eq!(
        ack(&mut subs, g1, "w1", &[("events/a", 20)], true),
        Err(SubError::Fenced)
    );
    // Work that arrived after the snapshot wakes again, one generation up.
    assert_eq!(subs.get("s").unwrap().pending(|_| Some(30)).len(), 1);
    assert_eq!(woken(&mut subs, "s", "w3", &[("events/a", 30)]), 2);
}

/// Subscription `s` on `events/*` with `events/a` linked at 0, and wake
/// `w1` in flight for it at 3; answers the wake's generation.
fn one_wake_in_flight() -> (Subscriptions, u64) {
    let mut subs = Subscriptions::default();
    put(
        &mut subs,
        "s",
        webhook("events/*"),
        &[("events/a", Some(0))],
    )
    .unwrap();
    let g = woken(&mut subs, "s", "w1", &[("events/a", 3)]);
    (subs, g)
}

#[test]
fn leases_run_out_and_retries_mark_the_subscription_failed() {
    let (mut subs, g) = one_wake_in_flight();
    let retry = Retry {
        attempt: 1,
        next_at_ms: 2_000,
    };
    subs.apply(SubCommand::ScheduleRetry {
        id: "s".into(),
        generation: g,
        retry,
    })
    .unwrap();
    assert_eq!(subs.get("s").unwrap().status(), "failed");
    subs.apply(SubCommand::Delivered {
        id: "s".into(),
        generation: g,
    })
    .unwrap();
    assert_eq!(subs.get("s").unwrap().status(), "active");
    let expire = |subs: &mut Subscriptions, now_ms| {
        subs.apply(SubCommand::ExpireLease {
            id: "s".into(),
            generation: g,
            now_ms,
        })
    };
    assert_eq!(expire(&mut subs, 999), Ok(SubOutcome::Unchanged), "not yet");
    assert_eq!(expire(&mut subs, 1_000), Ok(SubOutcome::Changed));
    let sub = subs.get("s").unwrap();
    assert!(sub.wake.is_none());
    assert_eq!(
        sub.links["events/a"].acked,
        Some(0),
        "the work stays pending"
    );
    // A late callback of the lapsed wake is fenced.
    assert_eq!(
        ack(&mut subs, g, "w1", &[("events/a", 3)], true),
        Err(SubError::Fenced)
    );
}

#[test]
fn pull_wake_claims_are_exclusive_until_their_lease_runs_out() {
    let mut subs = Subscriptions::default();
    put(&mut subs, "p", pull("events/*"), &[("events/a", Some(0))]).unwrap();
    let claim = |subs: &mut Subscriptions, worker: &str, new_wake: Option<(&str, u64)>, now_ms| {
        subs.apply(SubCommand::Claim {
            id: "p".into(),
            worker: worker.into(),
            new_wake: new_wake.map(|(w, tail)| (w.to_string(), snapshot(&[("events/a", tail)]))),
            now_ms,
            lease_until_ms: now_ms + 1_000,
        })
    };
    assert_eq!(
        claim(&mut subs, "w1", None, 0),
        Err(SubError::NoPendingWork)
    );
    let claimed = claim(&mut subs, "w1", Some(("k1", 4)), 0).unwrap();
    assert_eq!(
        claimed,
        SubOutcome::Claimed {
            generation: 1,
            wake_id: "k1".into()
        }
    );
    assert_eq!(
        claim(&mut subs, "w2", Some(("k2", 4)), 500),
        Err(SubError::AlreadyClaimed {
            holder: "w1".into(),
            generation: 1
        })
    );
    // The lease lapsed: another worker claims under a new wake.
    let reclaimed = claim(&mut subs, "w2", Some(("k2", 6)), 1_000).unwrap();
    assert_eq!(
        reclaimed,
        SubOutcome::Claimed {
            generation: 2,
            wake_id: "k2".into()
        }
    );
    let release = |subs: &mut Subscriptions, generation, wake_id: &str| {
        subs.apply(SubCommand::Release {
            id: "p".into(),
            generation,
            wake_id: wake_id.into(),
        })
    };
    assert_eq!(release(&mut subs, 1, "k1"), Err(SubError::Fenced));
    assert_eq!(release(&mut subs, 2, "k2"), Ok(SubOutcome::Changed));
    // Webhook subscriptions are not claimed.
    put(&mut subs, "s", webhook("events/*"), &[]).unwrap();
    let err = subs
        .apply(SubCommand::Claim {
            id: "s".into(),
            worker: "w".into(),
            new_wake: None,
            now_ms: 0,
            lease_until_ms: 1,
        })
        .unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST");
}

#[test]
fn a_deleted_subscription_fences_its_wakes_and_keeps_its_generation() {
    let (mut subs, g) = one_wake_in_flight();
    subs.apply(SubCommand::Delete {
        id: "s".into(),
        now_ms: 1,
    })
    .unwrap();
    assert_eq!(
        ack(&mut subs, g, "w1", &[("events/a", 3)], true),
        Err(SubError::NotFound("s".into()))
    );
    assert_eq!(
        subs.apply(SubCommand::Delete {
            id: "s".into(),
            now_ms: 1
        }),
        Err(SubError::NotFound("s".into()))
    );
    put(
        &mut subs,
        "s",
        webhook("events/*"),
        &[("events/a", Some(3))],
    )
    .unwrap();
    assert_eq!(woken(&mut subs, "s", "w2", &[("events/a", 5)]), g + 1);
}

#[test]
fn keys_are_set_once() {
    let mut subs = Subscriptions::default();
    let keys = |n: u8| Keys {
        signing_pkcs8: vec![n],
        retired: Vec::new(),
        token_key: vec![n],
    };
    assert_eq!(
        subs.apply(SubCommand::SetKeys { keys: keys(1) }),
        Ok(SubOutcome::Changed)
    );
    assert_eq!(
        subs.apply(SubCommand::SetKeys { keys: keys(2) }),
        Ok(SubOutcome::Unchanged)
    );
    assert_eq!(subs.keys().unwrap().signing_pkcs8, [1]);
}

#[test]
fn rotated_keys_stay_published_until_their_time() {
    let mut subs = Subscriptions::default();
    let rotate = |subs: &mut Subscriptions, n: u8, now_ms: u64| {
        subs.apply(SubCommand::RotateKeys {
            signing_pkcs8: vec![n],
            current_public: vec![n - 1],
            keep_until_ms: now_ms + 100,
            now_ms,
        })
    };
    assert_eq!(
        rotate(&mut subs, 2, 0).unwrap_err().code(),
        "INVALID_REQUEST"
    );
    subs.apply(SubCommand::SetKeys {
        keys: Keys {
            signing_pkcs8: vec![1],
            retired: Vec::new(),
            token_key: vec![7],
        },
    })
    .unwrap();
    rotate(&mut subs, 2, 0).unwrap();
    rotate(&mut subs, 3, 50).unwrap();
    let keys = subs.keys().unwrap();
    assert_eq!(keys.signing_pkcs8, [3]);
    assert_eq!(keys.retired, [(vec![1], 100), (vec![2], 150)]);
    assert_eq!(keys.token_key, [7], "tokens already issued stay valid");
    // The first retired key's time passed by the next rotation.
    rotate(&mut subs, 4, 120).unwrap();
    assert_eq!(
        subs.keys().unwrap().retired,
        [(vec![2], 150), (vec![3], 220)]
    );
}

#[test]
fn a_reissued_wake_fences_the_old_generation_but_a_claim_is_kept() {
    let (mut subs, g1) = one_wake_in_flight();
    let reissue = |subs: &mut Subscriptions, generation: u64, wake_id: &str| {
        subs.apply(SubCommand::Reissue {
            id: "s".into(),
            generation,
            wake_id: wake_id.into(),
            lease_until_ms: Some(9_000),
        })
    };
    assert_eq!(
        reissue(&mut subs, g1, "w2"),
        Ok(SubOutcome::Woke { generation: g1 + 1 })
    );
    let wake = subs.get("s").unwrap().wake.clone().unwrap();
    assert_eq!(wake.snapshot, snapshot(&[("events/a", 3)]), "the same work");
    assert_eq!(
        ack(&mut subs, g1, "w1", &[("events/a", 3)], true),
        Err(SubError::Fenced)
    );
    // A stale reissue (the generation moved on) changes nothing.
    assert_eq!(reissue(&mut subs, g1, "w3"), Ok(SubOutcome::Unchanged));
    ack(&mut subs, g1 + 1, "w2", &[("events/a", 3)], true).unwrap();

    // A claimed pull-wake stays with its worker.
    let mut subs = Subscriptions::default();
    put(&mut subs, "s", pull("events/*"), &[("events/a", Some(0))]).unwrap();
    let claimed = subs
        .apply(SubCommand::Claim {
            id: "s".into(),
            worker: "w-1".into(),
            new_wake: Some(("w1".into(), snapshot(&[("events/a", 3)]))),
            now_ms: 0,
            lease_until_ms: 1_000,
        })
        .unwrap();
    let SubOutcome::Claimed { generation, .. } = claimed else {
        panic!("{claimed:?}")
    };
    assert_eq!(
        reissue(&mut subs, generation, "w2"),
        Ok(SubOutcome::Unchanged)
    );
}

/// The index of linked streams, kept in step command by command, equals
/// one rebuilt from scratch (as after a checkpoint is loaded) and answers
/// what scanning every subscription answers.
#[test]
fn the_index_of_linked_streams_follows_every_change() {
    let mut subs = Subscriptions::default();
    let check = |subs: &Subscriptions| {
        let json = serde_json::to_string(subs).unwrap();
        let mut rebuilt: Subscriptions = serde_json::from_str(&json).unwrap();
        rebuilt.rebuild_index();
        assert_eq!(&rebuilt, subs);
        for stream in ["a/1", "a/2", "b/1", "m"] {
            let mut indexed: Vec<&str> = subs.linking(stream).map(|s| s.id.as_str()).collect();
            let mut scanned: Vec<&str> = subs
                .iter()
                .filter(|s| s.links.contains_key(stream))
                .map(|s| s.id.as_str())
                .collect();
            indexed.sort_unstable();
            scanned.sort_unstable();
            assert_eq!(indexed, scanned, "{stream}");
        }
    };
    put(&mut subs, "s", webhook("a/*"), &[("a/1", Some(3))]).unwrap();
    put(
        &mut subs,
        "t",
        webhook("**"),
        &[("a/1", Some(3)), ("b/1", None)],
    )
    .unwrap();
    check(&subs);
    subs.apply(SubCommand::Discover {
        stream: "a/2".into(),
        id: 1,
    })
    .unwrap();
    subs.apply(SubCommand::AddStreams {
        id: "s".into(),
        tails: vec![("m".into(), None)],
    })
    .unwrap();
    check(&subs);
    subs.apply(SubCommand::RemoveStream {
        id: "s".into(),
        stream: "m".into(),
    })
    .unwrap();
    subs.apply(SubCommand::Incarnation {
        stream: "a/1".into(),
        id: None,
    })
    .unwrap();
    check(&subs);
    subs.apply(SubCommand::Delete {
        id: "t".into(),
        now_ms: 1,
    })
    .unwrap();
    check(&subs);
    assert_eq!(subs.linking("a/2").count(), 1);
    assert_eq!(subs.linking("b/1").count(), 0);
}
