//! Subscriptions and wakes as the protocol's JSON shows them.

use runnel_core::subscription::{Delivery, Link, Seen, Subscription};
use runnel_core::Offset;
use serde_json::{json, Value};

/// The path under the base URL where the signing keys are published.
pub const JWKS_PATH: &str = "/v1/stream/__ds/jwks.json";

/// An offset as the protocol writes it, minted with the stream's
/// incarnation: `-1` before the first byte.
pub fn offset(position: Option<u64>, incarnation: u64) -> String {
    position.map_or_else(
        || "-1".to_string(),
        |p| Offset(p).token_in(incarnation).as_str().to_string(),
    )
}

fn link_type(link: &Link) -> &'static str {
    if link.kind.explicit {
        "explicit"
    } else {
        "glob"
    }
}

/// `GET /__ds/subscriptions/{id}` (and the answer to its PUT). `minted`
/// gives a stream's head and the incarnation of its offsets (`None` for a
/// stream that does not exist).
pub fn subscription(
    sub: &Subscription,
    base: &str,
    kid: Option<&str>,
    minted: impl Fn(&str) -> Option<(Seen, u64)>,
) -> Value {
    let streams: Vec<Value> = sub
        .links
        .iter()
        .map(|(path, link)| {
            let incarnation = minted(path).map_or(0, |(_, i)| i);
            json!({
                "path": path,
                "link_type": link_type(link),
                "acked_offset": offset(link.acked, incarnation),
            })
        })
        .collect();
    let (kind, webhook, wake_stream) = match &sub.config.delivery {
        Delivery::Webhook { url } => (
            "webhook",
            json!({
                "url": url,
                "signing": {
                    "alg": "ed25519",
                    "kid": kid,
                    "jwks_url": format!("{base}{JWKS_PATH}"),
                },
            }),
            Value::Null,
        ),
        Delivery::PullWake { wake_stream } => ("pull-wake", Value::Null, json!(wake_stream)),
    };
    let created_at = chrono::DateTime::from_timestamp_millis(sub.created_at_ms as i64)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    json!({
        "id": sub.id,
        "subscription_id": sub.id,
        "type": kind,
        "pattern": sub.config.pattern.as_ref().map(|p| p.as_str()),
        "streams": streams,
        "webhook": webhook,
        "wake_stream": wake_stream,
        "lease_ttl_ms": sub.config.lease_ttl_ms,
        "created_at": created_at,
        "status": sub.status(),
        "description": sub.config.description,
    })
}

/// The linked streams of a wake: each with its cursor, its tail in the
/// wake's snapshot (or from `minted`, for streams the snapshot lacks) and
/// whether work is pending; offsets minted with the incarnation `minted`
/// gives (see [`subscription`]).
pub fn wake_streams(
    sub: &Subscription,
    minted: impl Fn(&str) -> Option<(Seen, u64)>,
) -> Vec<Value> {
    let snapshot = sub.wake.as_ref().map(|w| &w.snapshot);
    sub.links
        .iter()
        .map(|(path, link)| {
            let head = minted(path);
            let incarnation = head.map_or(0, |(_, i)| i);
            let tail = snapshot
                .and_then(|s| s.get(path).copied())
                .or(head.map(|(seen, _)| seen.tail));
            json!({
                "path": path,
                "link_type": link_type(link),
                "acked_offset": offset(link.acked, incarnation),
                "tail_offset": offset(tail, incarnation),
                "has_pending": tail.is_some_and(|t| link.pending_at(t)),
            })
        })
        .collect()
}
