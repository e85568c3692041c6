//! Random command sequences against the subscription state machine, over
//! a small universe (two ids, three streams, small offsets), checking
//! after every command what must always hold: generations and cursors
//! only move forward, a refused command changes nothing, fencing refuses
//! exactly the stale, and the index of linked streams matches the links.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const IDS: [&str; 2] = ["a", "b"];
const STREAMS: [&str; 3] = ["x/1", "x/2", "y"];

fn config(kind: u8) -> Config {
    let policy = UrlPolicy {
        allow_loopback_http: true,
        allowed_hosts: Vec::new(),
    };
    let json = match kind % 3 {
        0 => {
            r#"{"type":"webhook","pattern":"x/*","webhook":{"url":"http://127.0.0.1:9/h"},"lease_ttl_ms":1000}"#
        }
        1 => r#"{"type":"pull-wake","pattern":"**","wake_stream":"w","lease_ttl_ms":1000}"#,
        _ => r#"{"type":"webhook","streams":["y"],"webhook":{"url":"http://127.0.0.1:9/h"}}"#,
    };
    Config::parse(json.as_bytes(), &policy).unwrap()
}

fn id(i: u8) -> String {
    IDS[i as usize % IDS.len()].to_string()
}

fn stream(i: u8) -> String {
    STREAMS[i as usize % STREAMS.len()].to_string()
}

fn tails(seed: u8) -> Vec<(String, Option<Seen>)> {
    STREAMS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = (seed as u64 >> i) % 4;
            let seen = (t != 0).then_some(Seen {
                id: t % 2,
                tail: t * 10,
            });
            (s.to_string(), seen)
        })
        .collect()
}

fn snapshot(seed: u8) -> BTreeMap<String, u64> {
    tails(seed.wrapping_add(1))
        .into_iter()
        .map(|(s, t)| (s, t.map_or(0, |t| t.tail) + 5))
        .collect()
}

/// A command drawn from a few bytes; the current state picks real wake
/// ids and generations half the time, so fencing is hit both ways.
fn command(subs: &Subscriptions, bytes: [u8; 4], now: u64) -> SubCommand {
    let [kind, a, b, c] = bytes;
    let sub = subs.get(&id(a));
    let (generation, wake_id) = match (sub.and_then(|s| s.wake.as_ref()), c % 2) {
        (Some(w), 0) => (w.generation, w.wake_id.clone()),
        _ => (u64::from(c % 4), format!("w{}", c % 3)),
    };
    match kind % 13 {
        0 => SubCommand::Put {
            id: id(a),
            config: config(b),
            tails: tails(c),
            now_ms: now,
            base_url: String::new(),
        },
        1 => SubCommand::Delete {
            id: id(a),
            now_ms: now,
        },
        2 => SubCommand::AddStreams {
            id: id(a),
            tails: vec![(
                stream(b),
                (c % 4 != 0).then_some(Seen {
                    id: u64::from(c % 2),
                    tail: u64::from(c % 3) * 10,
                }),
            )],
        },
        3 => SubCommand::RemoveStream {
            id: id(a),
            stream: stream(b),
        },
        4 => SubCommand::Discover {
            stream: stream(b),
            id: u64::from(c % 2),
        },
        5 => SubCommand::Incarnation {
            stream: stream(b),
            id: (c % 3 != 0).then_some(u64::from(c % 2)),
        },
        6 => SubCommand::Wake {
            id: id(a),
            wake_id: format!("w{now}"),
            snapshot: snapshot(c),
            lease_until_ms: Some(now + 1000),
        },
        7 => SubCommand::Ack {
            id: id(a),
            generation,
            wake_id,
            acks: vec![(stream(b), u64::from(c % 5) * 10)],
            done: b % 2 == 0,
            lease_until_ms: now + 1000,
        },
        8 => SubCommand::Claim {
            id: id(a),
            worker: format!("worker-{}", b % 2),
            new_wake: (c % 3 != 0).then(|| (format!("w{now}"), snapshot(c))),
            now_ms: now,
            lease_until_ms: now + 1000,
        },
        9 => SubCommand::Release {
            id: id(a),
            generation,
            wake_id,
        },
        10 => SubCommand::ExpireLease {
            id: id(a),
            generation,
            now_ms: now,
        },
        11 => SubCommand::Reissue {
            id: id(a),
            generation,
            wake_id: format!("r{now}"),
            lease_until_ms: Some(now + 1000),
        },
        _ => SubCommand::ScheduleRetry {
            id: id(a),
            generation,
            retry: Retry {
                attempt: u32::from(b % 4),
                next_at_ms: now + 500,
            },
        },
    }
}

/// The last generation each id reached, live or deleted.
fn generations(subs: &Subscriptions) -> BTreeMap<String, u64> {
    let mut all: BTreeMap<String, u64> = subs
        .tombstones
        .iter()
        .map(|(id, t)| (id.clone(), t.generation))
        .collect();
    all.extend(subs.iter().map(|s| (s.id.clone(), s.generation)));
    all
}

proptest! {
    #[test]
    fn invariants_hold_after_every_command(
        steps in proptest::collection::vec(any::<[u8; 4]>(), 1..60)
    ) {
        let mut subs = Subscriptions::default();
        for (n, bytes) in steps.into_iter().enumerate() {
            let now = 1_000 * (n as u64 + 1);
            let command = command(&subs, bytes, now);
            let before = subs.clone();
            let result = subs.apply(command.clone());
            if result.is_err() {
                prop_assert_eq!(&subs, &before, "a refused {:?} changed state", command);
                continue;
            }
            // Generations only grow, across deletes too.
            let (old, new) = (generations(&before), generations(&subs));
            for (id, generation) in &old {
                prop_assert!(new.get(id).is_some_and(|g| g >= generation), "{:?}", command);
            }
            for sub in subs.iter() {
                // A wake in flight is the latest generation.
                if let Some(wake) = &sub.wake {
                    prop_assert_eq!(wake.generation, sub.generation);
                }
                // Cursors never step back while a stream stays linked to
                // one incarnation.
                if let Some(was) = before.get(&sub.id) {
                    for (stream, link) in &sub.links {
                        let Some(earlier) = was.links.get(stream) else { continue };
                        if earlier.incarnation == link.incarnation {
                            prop_assert!(link.acked >= earlier.acked, "{:?}", command);
                        }
                    }
                }
                // A sub never links its own wake stream.
                prop_assert!(!sub.links.keys().any(|s| sub.config.is_own_wake_stream(s)));
            }
            // Fencing: an ack answering anything but the wake in flight is
            // refused (checked above: then nothing changed).
            if let SubCommand::Ack { id, generation, wake_id, .. } = &command {
                let wake = before.get(id).and_then(|s| s.wake.as_ref());
                prop_assert!(wake.is_some_and(|w| w.generation == *generation && w.wake_id == *wake_id));
            }
            // The index matches the links, and rebuilding it changes nothing.
            let mut rebuilt = subs.clone();
            rebuilt.rebuild_index();
            prop_assert_eq!(&rebuilt, &subs);
            for stream in STREAMS {
                let indexed = subs.linking(stream).count();
                let scanned = subs.iter().filter(|s| s.links.contains_key(stream)).count();
                prop_assert_eq!(indexed, scanned);
            }
        }
    }
}
