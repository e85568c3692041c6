//! Delivery, by the control group's leader alone: it learns which streams
//! moved from the node's activity feed, links streams that patterns match,
//! issues wakes when linked streams have work past their cursors, POSTs
//! signed webhooks (retrying with backoff), appends pull-wake events, and
//! ends wakes whose lease ran out. Everything it decides is committed to
//! the control group first, so a new leader continues from the state: on
//! taking over it re-issues every unclaimed wake in flight under a new
//! generation (the old leader's POST may never have left, and a late
//! answer to it is fenced).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use futures::StreamExt;
use http::header::CONTENT_TYPE;
use http::{HeaderName, Method};
use rand::Rng;
use runnel_core::subscription::{Delivery, Retry, Seen, SubCommand, SubOutcome, Subscription};
use runnel_core::CoreError;
use runnel_engine::{now_ms, EngineError, Route};
use serde_json::json;

use super::handlers::{
    effective_base, fresh_seen, mint_callback_token, minted, seen, signer, subscription, tail_of,
};
use super::{is_reserved, remote, render};
use crate::error::ApiError;
use crate::headers::STREAM_PREFIX;
use crate::{App, AppState};

/// Marks the server's own append of a wake event, forwarded to the wake
/// stream's leader: only cluster nodes may make it.
pub const INTERNAL_APPEND: HeaderName = HeaderName::from_static("runnel-internal-append");

/// How often the leader re-reads every linked stream's tail, whatever the
/// activity feed said (a feed entry can be missed around a leader change).
const RECONCILE_EVERY: Duration = Duration::from_secs(10);
/// The longest the loop sleeps with nothing to do.
const IDLE_WAIT: Duration = Duration::from_millis(500);
/// The shortest gap between two passes while streams keep moving, so a
/// busy stream costs one pass per gap, not one per append.
const MIN_PASS_GAP: Duration = Duration::from_millis(5);

/// Subscription commands in flight at once: the control group commits
/// them together.
const CONCURRENT_PROPOSALS: usize = 64;

/// What the control leader's loop remembers between passes (forgotten
/// when leadership changes: a new leader re-issues what was in flight).
#[derive(Default)]
struct LeaderState {
    /// The wake generation and attempt each webhook was last sent for.
    posted: HashMap<String, (u64, u32)>,
    /// Subscriptions to check for pending work: those linking streams
    /// that moved, and those whose wake just ended.
    dirty: HashSet<String>,
    /// When a wake event last failed to be appended, per subscription
    /// (it is tried again after [`ANNOUNCE_RETRY`]).
    failed_announces: HashMap<String, Instant>,
}

/// How long after a failed wake-event append it is tried again.
const ANNOUNCE_RETRY: Duration = Duration::from_secs(2);

/// The delivery loop of a server; it ends when the server is dropped.
pub async fn deliver(app: Weak<App>) {
    let mut led: Option<u64> = None;
    let mut state = LeaderState::default();
    let mut reconciled = Instant::now();
    let mut polled = Instant::now();
    loop {
        let Some(app) = AppState::upgrade(&app) else {
            return;
        };
        let activity = Arc::clone(app.node.activity());
        let term = app.node.control_term();
        let mut reconcile_now = false;
        if term != led {
            state = LeaderState::default();
            app.subscriptions
                .announced
                .lock()
                .expect("announced lock")
                .clear();
            if term.is_some() {
                take_over(&app).await;
                reconcile_now = true;
            }
            led = term;
        }
        // The feed records only while there is something to deliver (the
        // write path then skips it); turned on, it may have missed moves.
        let mut subscribed = false;
        app.node
            .with_subscriptions(&mut |subs| subscribed = !subs.is_empty());
        let watch = led.is_some() && subscribed;
        if watch != activity.watching() {
            activity.watch(watch);
            reconcile_now |= watch;
        }
        if reconcile_now {
            state.dirty.extend(reconcile(&app).await);
            reconciled = Instant::now();
        }
        // Streams in groups this node holds no copy of move unseen by the
        // feed: their leaders are asked.
        let elsewhere = watch && !app.node.every_node_holds_every_group();
        let wait = if led.is_some() {
            let mut changed: Vec<String> = activity.take().iter().map(|s| s.to_string()).collect();
            if elsewhere && polled.elapsed() >= remote::POLL {
                changed.extend(remote::poll(&app).await);
                polled = Instant::now();
            }
            if !changed.is_empty() {
                state.dirty.extend(link_and_unlink(&app, changed).await);
            }
            let reconcile_every = if elsewhere && has_patterns(&app) {
                remote::PATTERN_EVERY
            } else {
                RECONCILE_EVERY
            };
            if reconciled.elapsed() >= reconcile_every {
                state.dirty.extend(reconcile(&app).await);
                reconciled = Instant::now();
            }
            let wait = pass(&app, &mut state).await;
            if elsewhere {
                wait.min(remote::POLL)
            } else {
                wait
            }
        } else {
            IDLE_WAIT
        };
        drop(app);
        tokio::time::sleep(MIN_PASS_GAP).await;
        let _ = tokio::time::timeout(wait, activity.changed()).await;
    }
}

/// A fresh wake id.
pub fn new_wake_id() -> String {
    let bytes: [u8; 12] = rand::thread_rng().gen();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("w_{hex}")
}

/// The tails of `sub`'s linked streams on this node.
pub fn snapshot(app: &AppState, sub: &Subscription) -> BTreeMap<String, u64> {
    sub.links
        .keys()
        .filter_map(|s| tail_of(app, s).map(|t| (s.clone(), t)))
        .collect()
}

/// Issues a wake for `id` if none is in flight, no retry is waiting and a
/// linked stream has work; answers whether it did.
pub async fn wake_if_pending(app: &AppState, id: &str) -> Result<bool, ApiError> {
    let sub = subscription(app, id)?;
    if sub.wake.is_some() || sub.retry.is_some_and(|r| r.next_at_ms > now_ms() as u64) {
        return Ok(false);
    }
    let snapshot = snapshot(app, &sub);
    if sub.pending(|s| snapshot.get(s).copied()).is_empty() {
        return Ok(false);
    }
    let lease_until_ms = wake_lease(&sub);
    let outcome = app
        .node
        .propose_control(SubCommand::Wake {
            id: id.to_string(),
            wake_id: new_wake_id(),
            snapshot,
            lease_until_ms,
        })
        .await;
    match outcome {
        Ok(SubOutcome::Woke { .. }) => {
            if let Delivery::PullWake { .. } = sub.config.delivery {
                announce(app, &subscription(app, id)?).await;
            }
            app.node.activity().kick();
            Ok(true)
        }
        Ok(_) => Ok(false),
        Err(runnel_engine::EngineError::Core(runnel_core::CoreError::Subscription(
            runnel_core::subscription::SubError::NoPendingWork,
        ))) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// When a wake issued now ends unless extended: a webhook's lease runs
/// from the wake, a pull-wake's only from its claim.
fn wake_lease(sub: &Subscription) -> Option<u64> {
    match sub.config.delivery {
        Delivery::Webhook { .. } => Some(now_ms() as u64 + sub.config.lease_ttl_ms),
        Delivery::PullWake { .. } => None,
    }
}

/// A new leader's first act: every unclaimed wake in flight is issued
/// again under the next generation.
async fn take_over(app: &AppState) {
    let mut in_flight = Vec::new();
    app.node.with_subscriptions(&mut |subs| {
        in_flight = subs.iter().filter(|s| s.wake.is_some()).cloned().collect();
    });
    for sub in in_flight {
        let Some(wake) = sub.wake.as_ref().filter(|w| w.holder.is_none()) else {
            continue;
        };
        let lease_until_ms = wake_lease(&sub);
        let reissued = app
            .node
            .propose_control(SubCommand::Reissue {
                id: sub.id.clone(),
                generation: wake.generation,
                wake_id: new_wake_id(),
                lease_until_ms,
            })
            .await;
        if let Err(e) = reissued {
            tracing::warn!(subscription = %sub.id, error = %e, "could not re-issue a wake");
        }
    }
}

/// Links and unlinks streams the activity feed named: a link to another
/// incarnation of the name than the stream now there (deleted, created or
/// re-created) is brought up to date, and a stream with data that a
/// pattern matches is linked before its first byte. Answers the
/// subscriptions that link the streams now.
async fn link_and_unlink(app: &AppState, changed: Vec<String>) -> HashSet<String> {
    let states: Vec<(String, Option<Seen>)> = changed
        .into_iter()
        .filter(|name| !is_reserved(name))
        .map(|name| {
            let seen = seen(app, &name);
            (name, seen)
        })
        .collect();
    let mut stale = Vec::new();
    let mut unlinked = Vec::new();
    let mut linking = HashSet::new();
    app.node.with_subscriptions(&mut |subs| {
        for (stream, seen) in &states {
            let now = seen.map(|s| s.id);
            if subs
                .linking(stream)
                .any(|s| s.links.get(stream).is_some_and(|l| l.incarnation != now))
            {
                stale.push(stream.clone());
            } else if let Some(seen) = seen.filter(|s| s.tail > 0) {
                if subs
                    .iter()
                    .any(|s| s.config.watches_by_pattern(stream) && !s.links.contains_key(stream))
                {
                    unlinked.push((stream.clone(), seen.id));
                }
            }
            linking.extend(subs.linking(stream).map(|s| s.id.clone()));
        }
    });
    // Per stream, in order: a link brought to the stream's incarnation,
    // then the links the pattern still lacks.
    let mut commands: Vec<Vec<SubCommand>> = unlinked
        .into_iter()
        .map(|(stream, id)| vec![SubCommand::Discover { stream, id }])
        .collect();
    for stream in stale {
        // Rare (a stream deleted, created or re-created under a linked
        // name): read it again with every acknowledged write, so a copy
        // that lags is not taken for a deletion.
        let seen = fresh_seen(app, &stream).await;
        let mut for_stream = vec![SubCommand::Incarnation {
            stream: stream.clone(),
            id: seen.map(|s| s.id),
        }];
        if let Some(seen) = seen.filter(|s| s.tail > 0) {
            for_stream.push(SubCommand::Discover {
                stream,
                id: seen.id,
            });
        }
        commands.push(for_stream);
    }
    let linked: Vec<Vec<String>> = futures::stream::iter(commands)
        .map(|for_stream| async move {
            let mut linked = Vec::new();
            for command in for_stream {
                if let Some(SubOutcome::Linked(ids)) = propose(app, command).await {
                    linked.extend(ids);
                }
            }
            linked
        })
        .buffer_unordered(CONCURRENT_PROPOSALS)
        .collect()
        .await;
    linking.extend(linked.into_iter().flatten());
    linking
}

/// Reads every linked stream, and every stream a pattern matches, as if
/// the feed had named them all.
async fn reconcile(app: &AppState) -> HashSet<String> {
    let mut streams: HashSet<String> = HashSet::new();
    let mut patterns = Vec::new();
    app.node.with_subscriptions(&mut |subs| {
        for sub in subs.iter() {
            streams.extend(sub.links.keys().cloned());
            patterns.extend(sub.config.pattern.clone());
        }
    });
    if !patterns.is_empty() {
        let matching =
            remote::streams_where(app, &|name| patterns.iter().any(|p| p.matches(name))).await;
        streams.extend(matching);
    }
    let streams: Vec<String> = streams.into_iter().collect();
    remote::fetch(app, &streams).await;
    link_and_unlink(app, streams).await
}

/// Whether a subscription watches streams by a pattern.
fn has_patterns(app: &AppState) -> bool {
    let mut any = false;
    app.node
        .with_subscriptions(&mut |subs| any = subs.iter().any(|s| s.config.pattern.is_some()));
    any
}

async fn propose(app: &AppState, command: SubCommand) -> Option<SubOutcome> {
    match app.node.propose_control(command).await {
        Ok(outcome) => Some(outcome),
        Err(e) => {
            tracing::debug!(error = %e, "subscription command refused");
            None
        }
    }
}

/// What a pass decided for one subscription.
enum Action {
    /// Wake it if work is pending.
    Check(String),
    Expire {
        id: String,
        generation: u64,
    },
    Post {
        sub: Box<Subscription>,
        attempt: u32,
    },
    Announce(Box<Subscription>),
}

/// One pass over every subscription: lapsed leases end, `dirty` ones and
/// those whose retry is due are woken if work is pending, webhooks due
/// are POSTed, pull-wakes announced. Answers how long the loop may sleep
/// before the next deadline.
async fn pass(app: &AppState, state: &mut LeaderState) -> Duration {
    let LeaderState {
        posted,
        dirty,
        failed_announces,
    } = state;
    let now = now_ms() as u64;
    let mut next_deadline = now + IDLE_WAIT.as_millis() as u64;
    let mut actions = Vec::new();
    let announced = app
        .subscriptions
        .announced
        .lock()
        .expect("announced lock")
        .clone();
    app.node.with_subscriptions(&mut |subs| {
        // Forget deleted subscriptions.
        if posted.len() > subs.len() || failed_announces.len() > subs.len() {
            posted.retain(|id, _| subs.get(id).is_some());
            failed_announces.retain(|id, _| subs.get(id).is_some());
        }
        if announced.len() > subs.len() {
            let mut kept = app.subscriptions.announced.lock().expect("announced lock");
            kept.retain(|id, _| subs.get(id).is_some());
        }
        for sub in subs.iter() {
            let retry_due = sub.retry.is_none_or(|r| r.next_at_ms <= now);
            if let Some(retry) = sub.retry.filter(|r| r.next_at_ms > now) {
                next_deadline = next_deadline.min(retry.next_at_ms);
            }
            let Some(wake) = &sub.wake else {
                if retry_due && (dirty.contains(&sub.id) || sub.retry.is_some()) {
                    actions.push(Action::Check(sub.id.clone()));
                }
                continue;
            };
            if let Some(until) = wake.lease_until_ms {
                if until <= now {
                    actions.push(Action::Expire {
                        id: sub.id.clone(),
                        generation: wake.generation,
                    });
                    continue;
                }
                next_deadline = next_deadline.min(until);
            }
            if wake.holder.is_some() {
                continue;
            }
            match &sub.config.delivery {
                Delivery::Webhook { .. } => {
                    // Each attempt once: a success after retries clears the
                    // attempt count, which must not send the wake again.
                    let attempt = sub.retry.map_or(0, |r| r.attempt);
                    let sent = posted
                        .get(&sub.id)
                        .is_some_and(|(g, a)| *g == wake.generation && *a >= attempt);
                    if retry_due && !sent {
                        posted.insert(sub.id.clone(), (wake.generation, attempt));
                        actions.push(Action::Post {
                            sub: Box::new(sub.clone()),
                            attempt,
                        });
                    }
                }
                Delivery::PullWake { .. } => {
                    let backing_off = failed_announces
                        .get(&sub.id)
                        .is_some_and(|at| at.elapsed() < ANNOUNCE_RETRY);
                    if announced.get(&sub.id) != Some(&wake.generation) && !backing_off {
                        actions.push(Action::Announce(Box::new(sub.clone())));
                    }
                }
            }
        }
    });
    dirty.clear();
    let mut acted = false;
    let mut checks = Vec::new();
    for action in actions {
        match action {
            Action::Check(id) => checks.push(id),
            Action::Expire { id, generation } => {
                let expire = SubCommand::ExpireLease {
                    id: id.clone(),
                    generation,
                    now_ms: now,
                };
                propose(app, expire).await;
                dirty.insert(id);
                acted = true;
            }
            Action::Post { sub, attempt } => {
                tokio::spawn(post(app.clone(), *sub, attempt));
            }
            Action::Announce(sub) => {
                if announce(app, &sub).await {
                    failed_announces.remove(&sub.id);
                } else {
                    failed_announces.insert(sub.id.clone(), Instant::now());
                }
            }
        }
    }
    let woke: Vec<bool> = futures::stream::iter(checks)
        .map(|id| async move {
            wake_if_pending(app, &id).await.unwrap_or_else(|e| {
                tracing::debug!(subscription = %id, error = ?e, "no wake");
                false
            })
        })
        .buffer_unordered(CONCURRENT_PROPOSALS)
        .collect()
        .await;
    acted |= woke.into_iter().any(|w| w);
    if acted {
        Duration::ZERO
    } else {
        Duration::from_millis(next_deadline.saturating_sub(now_ms() as u64))
    }
}

/// The next attempt after `attempt` failures: 1 s doubling to 60 s, with
/// 20% jitter either way.
fn backoff_ms(attempt: u32) -> u64 {
    let base = 1000u64
        .saturating_mul(1 << attempt.saturating_sub(1).min(6))
        .min(60_000);
    let jitter: f64 = rand::thread_rng().gen_range(0.8..1.2);
    (base as f64 * jitter) as u64
}

/// POSTs the wake in flight of `sub` to its webhook; a `done` answer acks
/// the wake's snapshot, a failure schedules the next attempt.
async fn post(app: AppState, sub: Subscription, attempt: u32) {
    let (Delivery::Webhook { url }, Some(wake)) = (&sub.config.delivery, &sub.wake) else {
        return;
    };
    let signer = match signer(&app).await {
        Ok(signer) => signer,
        Err(e) => {
            tracing::warn!(error = ?e, "no signing keys for a webhook");
            return;
        }
    };
    let base = effective_base(&app, &sub);
    let body = json!({
        "subscription_id": sub.id,
        "wake_id": wake.wake_id,
        "generation": wake.generation,
        "streams": render::wake_streams(&sub, |s| minted(&app, s)),
        "callback_url": format!(
            "{base}{STREAM_PREFIX}__ds/subscriptions/{}/callback",
            encode_segment(&sub.id)
        ),
        "callback_token": mint_callback_token(&signer, &sub.id, wake.generation),
    });
    let bytes = body.to_string().into_bytes();
    let header = signer.signature_header(now_ms() as u64 / 1000, &bytes);
    let failure = match app
        .subscriptions
        .webhooks
        .deliver(url, bytes, &header)
        .await
    {
        Ok(answer) if answer.status.is_success() => {
            if sub.retry.is_some() {
                let (id, generation) = (sub.id.clone(), wake.generation);
                propose(&app, SubCommand::Delivered { id, generation }).await;
            }
            if answer.done {
                // Against the cursors as they are now: a callback may have
                // moved one past the snapshot meanwhile.
                let links = subscription(&app, &sub.id)
                    .map(|s| s.links)
                    .unwrap_or_default();
                let acks = wake
                    .snapshot
                    .iter()
                    .filter(|(s, t)| {
                        links
                            .get(*s)
                            .is_some_and(|l| l.acked.is_none_or(|a| **t >= a))
                    })
                    .map(|(s, t)| (s.clone(), *t))
                    .collect();
                propose(
                    &app,
                    SubCommand::Ack {
                        id: sub.id.clone(),
                        generation: wake.generation,
                        wake_id: wake.wake_id.clone(),
                        acks,
                        done: true,
                        lease_until_ms: now_ms() as u64 + sub.config.lease_ttl_ms,
                    },
                )
                .await;
                let _ = wake_if_pending(&app, &sub.id).await;
            }
            None
        }
        Ok(answer) => Some(format!("the webhook answered {}", answer.status)),
        Err(e) => Some(e.to_string()),
    };
    if let Some(reason) = failure {
        let attempt = attempt + 1;
        let delay = backoff_ms(attempt);
        tracing::warn!(subscription = %sub.id, attempt, delay_ms = delay, %reason, "webhook delivery failed");
        let retry = Retry {
            attempt,
            next_at_ms: now_ms() as u64 + delay,
        };
        let (id, generation) = (sub.id.clone(), wake.generation);
        propose(
            &app,
            SubCommand::ScheduleRetry {
                id,
                generation,
                retry,
            },
        )
        .await;
    }
    app.node.activity().kick();
}

/// Appends the wake event of `sub`'s wake in flight to its wake stream,
/// as the server itself (through the stream's leader).
/// Answers whether it was appended (or the wake stream does not exist, so
/// there is nothing to retry).
pub async fn announce(app: &AppState, sub: &Subscription) -> bool {
    let (Delivery::PullWake { wake_stream }, Some(wake)) = (&sub.config.delivery, &sub.wake) else {
        return true;
    };
    let stream = wake
        .snapshot
        .iter()
        .find(|(s, t)| sub.links.get(*s).is_some_and(|l| l.pending_at(**t)))
        .or_else(|| wake.snapshot.iter().next())
        .map(|(s, _)| s.clone());
    let event = json!({
        "type": "wake",
        "subscription_id": sub.id,
        "stream": stream,
        "generation": wake.generation,
        "ts": now_ms(),
    });
    let data = Bytes::from(event.to_string());
    // A wake stream is the application's to create: without one the wake
    // stays in flight for claims, and is not announced again.
    let missing = || -> Result<(), WakeError> {
        tracing::warn!(subscription = %sub.id, %wake_stream, "the wake stream does not exist");
        Ok(())
    };
    let appended = match app.node.route(wake_stream) {
        Route::Local => {
            match super::super::handlers::append_json(app, wake_stream.clone(), data).await {
                Ok(()) => Ok(()),
                Err(ApiError::Engine(EngineError::Core(CoreError::NotFound))) => missing(),
                Err(e) => Err(WakeError::Append(e)),
            }
        }
        Route::Forward { node, addr } => {
            let uri = format!("{STREAM_PREFIX}{}", encode_path(wake_stream));
            let request = Request::builder()
                .method(Method::POST)
                .uri(uri)
                .header(CONTENT_TYPE, "application/json")
                .header(INTERNAL_APPEND, "wake")
                .body(Body::from(data))
                .expect("a valid request");
            let response = crate::handlers::forward(app, node, &addr, request).await;
            match response.status() {
                status if status.is_success() => Ok(()),
                http::StatusCode::NOT_FOUND => missing(),
                status => Err(WakeError::LeaderAnswered(status)),
            }
        }
        Route::NoLeader => Err(WakeError::NoLeader),
    };
    if let Err(reason) = appended {
        tracing::warn!(subscription = %sub.id, %reason, "wake event not appended; will retry");
        return false;
    }
    app.subscriptions
        .announced
        .lock()
        .expect("announced lock")
        .insert(sub.id.clone(), wake.generation);
    true
}

/// Why a wake event was not appended to its stream (it is tried again).
#[derive(Debug, thiserror::Error)]
enum WakeError {
    #[error("{0:?}")]
    Append(ApiError),
    #[error("the wake stream's leader answered {0}")]
    LeaderAnswered(http::StatusCode),
    #[error("the wake stream's group has no leader")]
    NoLeader,
}

/// Percent-encodes what a path segment may not hold.
fn encode_segment(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// [`encode_segment`] for each segment of a stream name.
fn encode_path(name: &str) -> String {
    name.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}
