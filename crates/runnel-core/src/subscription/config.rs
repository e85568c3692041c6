//! A subscription's configuration as `PUT /__ds/subscriptions/{id}`
//! gives it: parsed, validated and normalized, so that two requests for
//! the same subscription compare equal (idempotent create) however their
//! JSON was written.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::glob::Glob;
use super::SubError;

/// How a subscription wakes its workers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Delivery {
    /// A signed POST to this URL.
    Webhook { url: String },
    /// A wake event appended to this stream, which workers claim.
    PullWake { wake_stream: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub delivery: Delivery,
    pub pattern: Option<Glob>,
    /// Explicitly linked streams, sorted, without repeats.
    pub streams: Vec<String>,
    pub lease_ttl_ms: u64,
    pub description: Option<String>,
}

pub const DEFAULT_LEASE_TTL_MS: u64 = 30_000;
pub const MIN_LEASE_TTL_MS: u64 = 1_000;
pub const MAX_LEASE_TTL_MS: u64 = 600_000;

/// Where webhooks may go besides public `https://` hosts.
#[derive(Debug, Clone, Default)]
pub struct UrlPolicy {
    /// `http://localhost` and `http://127.0.0.x` (development).
    pub allow_loopback_http: bool,
    /// Hosts allowed whatever their address (exact, case-insensitive).
    pub allowed_hosts: Vec<String>,
}

impl Config {
    /// Parses a request body (JSON) under `policy`.
    pub fn parse(body: &[u8], policy: &UrlPolicy) -> Result<Config, SubError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            pattern: Option<String>,
            #[serde(default)]
            streams: Option<Vec<String>>,
            #[serde(default)]
            webhook: Option<RawWebhook>,
            #[serde(default)]
            wake_stream: Option<String>,
            #[serde(default)]
            lease_ttl_ms: Option<u64>,
            #[serde(default)]
            description: Option<String>,
        }
        #[derive(Deserialize)]
        struct RawWebhook {
            url: String,
        }
        let raw: Raw = serde_json::from_slice(body)
            .map_err(|e| SubError::invalid(format!("subscription body: {e}")))?;
        let delivery = match (raw.kind.as_str(), raw.webhook, raw.wake_stream) {
            ("webhook", Some(webhook), None) => {
                check_webhook_url(&webhook.url, policy)?;
                Delivery::Webhook { url: webhook.url }
            }
            ("webhook", None, _) => {
                return Err(SubError::invalid(
                    "a webhook subscription needs webhook.url",
                ))
            }
            ("pull-wake", None, Some(stream)) if !stream.trim_matches('/').is_empty() => {
                Delivery::PullWake {
                    wake_stream: stream.trim_matches('/').to_string(),
                }
            }
            ("pull-wake", None, _) => {
                return Err(SubError::invalid(
                    "a pull-wake subscription needs wake_stream",
                ))
            }
            ("webhook", _, Some(_)) | ("pull-wake", Some(_), _) => {
                return Err(SubError::invalid(
                    "webhook goes with type webhook, wake_stream with type pull-wake",
                ))
            }
            (other, _, _) => {
                return Err(SubError::invalid(format!(
                    "type must be webhook or pull-wake, not {other:?}"
                )))
            }
        };
        let pattern = match raw.pattern {
            None => None,
            Some(p) => Some(Glob::parse(&p).ok_or_else(|| {
                SubError::invalid(format!("pattern {p:?} is empty or has an empty segment"))
            })?),
        };
        let mut streams: Vec<String> = raw
            .streams
            .unwrap_or_default()
            .into_iter()
            .map(|s| s.trim_matches('/').to_string())
            .collect();
        if streams.iter().any(String::is_empty) {
            return Err(SubError::invalid("streams may not hold an empty name"));
        }
        streams.sort();
        streams.dedup();
        if pattern.is_none() && streams.is_empty() {
            return Err(SubError::invalid(
                "a subscription needs a pattern or streams",
            ));
        }
        if let Delivery::PullWake { wake_stream } = &delivery {
            if wake_stream.split('/').next() == Some("__ds") {
                return Err(SubError::invalid(
                    "a wake stream cannot be under the reserved __ds/",
                ));
            }
            if streams.binary_search(wake_stream).is_ok() {
                return Err(SubError::invalid(
                    "a subscription cannot watch its own wake stream",
                ));
            }
        }
        let lease_ttl_ms = raw.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_TTL_MS);
        if !(MIN_LEASE_TTL_MS..=MAX_LEASE_TTL_MS).contains(&lease_ttl_ms) {
            return Err(SubError::invalid(format!(
                "lease_ttl_ms must be between {MIN_LEASE_TTL_MS} and {MAX_LEASE_TTL_MS}"
            )));
        }
        Ok(Config {
            delivery,
            pattern,
            streams,
            lease_ttl_ms,
            description: raw.description,
        })
    }

    /// Whether `stream` is this subscription's by its pattern.
    pub fn pattern_matches(&self, stream: &str) -> bool {
        self.pattern.as_ref().is_some_and(|p| p.matches(stream))
    }

    /// Whether `stream` is the one this subscription's wake events go to.
    pub fn is_own_wake_stream(&self, stream: &str) -> bool {
        matches!(&self.delivery, Delivery::PullWake { wake_stream } if wake_stream == stream)
    }

    /// Whether the pattern links `stream`: it matches, and the stream is
    /// not the subscription's own wake stream (its wake events would wake
    /// it again).
    pub fn watches_by_pattern(&self, stream: &str) -> bool {
        self.pattern_matches(stream) && !self.is_own_wake_stream(stream)
    }
}

/// Refuses webhook targets a server must not call: anything but
/// `https://`, save `http://localhost` and `http://127.0.0.x` when the
/// policy allows them, and IP literals of local networks (private,
/// loopback, link-local, CGNAT, unique-local, the metadata address),
/// unless the host is on the policy's allowlist. Names are checked
/// again, by address, when a connection is made ([`is_public`]).
pub fn check_webhook_url(url: &str, policy: &UrlPolicy) -> Result<(), SubError> {
    let rejected = |why: &str| SubError::UrlRejected(format!("{url}: {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| rejected("not an absolute URL"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(rejected("credentials in a webhook URL are not allowed"));
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    }
    .to_ascii_lowercase();
    if host.is_empty() {
        return Err(rejected("no host"));
    }
    let allowed = policy
        .allowed_hosts
        .iter()
        .any(|h| h.eq_ignore_ascii_case(&host));
    let loopback_dev = host == "localhost"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.octets()[..3] == [127, 0, 0]);
    match scheme.to_ascii_lowercase().as_str() {
        "http" if loopback_dev && policy.allow_loopback_http => return Ok(()),
        "http" if allowed => return Ok(()),
        "http" => return Err(rejected("webhooks go to https:// targets")),
        "https" => {}
        _ => return Err(rejected("webhooks go to https:// targets")),
    }
    if allowed {
        return Ok(());
    }
    if host == "localhost" || host.ends_with(".localhost") {
        return Err(rejected("a local host"));
    }
    match host.parse::<IpAddr>() {
        // IPv6 literals carry IPv4 addresses in too many forms (mapped,
        // compatible, NAT64, 6to4...); a public target has a name.
        Ok(IpAddr::V6(_)) => Err(rejected("IPv6 literals are not accepted; use a host name")),
        Ok(ip) if !is_public(ip) => Err(rejected("a private, local or reserved address")),
        _ => Ok(()),
    }
}

/// Whether `ip` is an address a webhook may reach: not loopback,
/// private, link-local (the cloud metadata address among them), CGNAT,
/// unspecified, broadcast, multicast, documentation, benchmarking,
/// reserved or unique-local; an IPv6 address that carries an IPv4 one
/// (mapped, compatible, NAT64, 6to4) is judged by the IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (18..20).contains(&b)))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded = |hi: u16, lo: u16| {
                let [a, b] = hi.to_be_bytes();
                let [c, d] = lo.to_be_bytes();
                std::net::Ipv4Addr::new(a, b, c, d)
            };
            let carried =
                if s[..4] == [0; 4] && matches!((s[4], s[5]), (0, 0) | (0, 0xffff) | (0xffff, 0)) {
                    // Compatible (::a.b.c.d, with :: and ::1), mapped
                    // (::ffff:a.b.c.d) and translated (::ffff:0:a.b.c.d).
                    Some(embedded(s[6], s[7]))
                } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                    Some(embedded(s[6], s[7]))
                } else if s[0] == 0x2002 {
                    Some(embedded(s[1], s[2]))
                } else {
                    None
                };
            if let Some(v4) = carried {
                return is_public(IpAddr::V4(v4));
            }
            let first = s[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}
