//! Access control for Runnel: who a request comes from, what it may do,
//! and how often. The server uses it only when it runs with
//! `--auth-file`; this crate owns every decision, the server only turns a
//! [`Refusal`] into its HTTP status (in `runnel-server`'s `error.rs`).
//!
//! - [`policy`]: the auth file: bearer tokens (stored as SHA-256 hashes),
//!   grants for requests without credentials, JWT keys, rate limits, and
//!   the key cluster nodes share.
//! - [`grants`]: operations on stream-name prefixes.
//! - [`jwt`]: JWT verification, and minting of short-lived read tokens.
//! - [`rate`]: token buckets per credential and per client address.
//!
//! [`Auth::check`] is the one decision: 401 without valid credentials,
//! 403 without the grant, 429 over a rate limit. Every node checks the
//! caller's own credential, forwarded requests included (a forward keeps
//! the `Authorization` header and the query), so no node can be used to
//! get around a check. Requests between nodes also carry the cluster key
//! ([`CLUSTER_KEY`]): it exempts a forward from the rate limits the
//! node it came through already applied, and it is the only credential
//! for the nodes' internal `$pin` requests.
//!
//! Credentials never reach a log line: principals are logged by name.
//!
//! A leaf crate (it depends on `http`, `ring` and the parsers only), so
//! that the credentials fuzz target (`fuzz/fuzz_targets/credentials.rs`)
//! builds without the server.

pub mod grants;
pub mod jwt;
pub mod policy;
pub mod rate;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, Method};

pub use grants::Operation;
pub use jwt::TokenError;
pub use policy::AuthConfigError;
use policy::{sha256, Policy, Principal};
use rate::{RateKey, RateLimiter};

/// Carries the cluster key on requests between nodes.
pub const CLUSTER_KEY: HeaderName = HeaderName::from_static("runnel-cluster-key");
/// The query parameter that carries a read token (RFC 6750's name), for
/// clients that cannot send headers (browsers' `EventSource`).
pub const QUERY_TOKEN: &str = "access_token";

/// The address a connection came from, as its request's extension.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub IpAddr);

/// What a request offers as credentials.
#[derive(Debug, Default)]
pub struct Credentials<'a> {
    pub method: Option<&'a Method>,
    pub authorization: Option<&'a [u8]>,
    pub query: Option<&'a str>,
    pub cluster_key: Option<&'a [u8]>,
    pub peer: Option<IpAddr>,
}

impl<'a> Credentials<'a> {
    pub fn of<B>(request: &'a http::Request<B>) -> Credentials<'a> {
        let h = request.headers();
        Credentials {
            method: Some(request.method()),
            authorization: h
                .get(http::header::AUTHORIZATION)
                .map(HeaderValue::as_bytes),
            query: request.uri().query(),
            cluster_key: h.get(&CLUSTER_KEY).map(HeaderValue::as_bytes),
            peer: request.extensions().get::<PeerAddr>().map(|p| p.0),
        }
    }
}

/// What a request needs.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// These operations on these streams.
    Streams(&'a [(Operation, &'a str)]),
    /// Status and metrics: `admin` on every stream.
    ServerAdmin,
    /// An internal request between nodes.
    Node,
    /// Minting a read token for the streams under this prefix.
    ReadTokenFor(&'a str),
}

/// Why a request is refused.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// 401: no credentials where some are needed, or bad ones.
    Unauthenticated(String),
    /// 403: valid credentials without the grant.
    Forbidden(String),
    /// 429: over a rate limit; retry after this long.
    RateLimited(Duration),
}

/// JWTs verified recently, by the SHA-256 of their text.
const JWT_CACHE_CAPACITY: usize = 4096;

pub struct Auth {
    path: Option<PathBuf>,
    policy: RwLock<Arc<Policy>>,
    limiter: RateLimiter,
    jwt_cache: Mutex<HashMap<[u8; 32], Arc<Principal>>>,
    /// Refusals so far, by kind (401, 403, 429), for `/metrics`.
    refusals: [AtomicU64; 3],
}

impl Auth {
    /// Access control by the auth file at `path`.
    pub fn load(path: &Path) -> Result<Auth, AuthConfigError> {
        let policy = Policy::load(path)?;
        Ok(Auth::new(policy, Some(path.to_path_buf())))
    }

    pub fn new(policy: Policy, path: Option<PathBuf>) -> Auth {
        Auth {
            path,
            policy: RwLock::new(Arc::new(policy)),
            limiter: RateLimiter::default(),
            jwt_cache: Mutex::default(),
            refusals: Default::default(),
        }
    }

    /// Requests refused so far: unauthenticated (401), forbidden (403),
    /// rate limited (429).
    pub fn refusals(&self) -> [u64; 3] {
        self.refusals
            .each_ref()
            .map(|count| count.load(Ordering::Relaxed))
    }

    /// Reads the auth file again; on any error the policy in force stays
    /// and the error says why.
    pub fn reload(&self) -> Result<(), AuthConfigError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let policy = Policy::load(path)?;
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        self.jwt_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        Ok(())
    }

    fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The key this node sends with requests to its peers.
    pub fn cluster_key(&self) -> Option<HeaderValue> {
        self.policy().cluster_key.clone()
    }

    /// Whether a request without credentials may read stream `name`.
    pub fn readable_by_anyone(&self, name: &str) -> bool {
        self.policy().anonymous.grants.allows(Operation::Read, name)
    }

    /// Whether `credentials` allow `access` now.
    pub fn check(
        &self,
        credentials: &Credentials<'_>,
        access: Access<'_>,
    ) -> Result<Arc<Principal>, Refusal> {
        let decided = self.decide(credentials, access);
        if let Err(refusal) = &decided {
            let kind = match refusal {
                Refusal::Unauthenticated(_) => 0,
                Refusal::Forbidden(_) => 1,
                Refusal::RateLimited(_) => 2,
            };
            self.refusals[kind].fetch_add(1, Ordering::Relaxed);
        }
        decided
    }

    fn decide(
        &self,
        credentials: &Credentials<'_>,
        access: Access<'_>,
    ) -> Result<Arc<Principal>, Refusal> {
        let policy = self.policy();
        let from_node = match credentials.cluster_key {
            None => false,
            Some(key) if policy.cluster_key_hash == Some(sha256(key)) => true,
            Some(_) => {
                return Err(Refusal::Unauthenticated(
                    "the cluster key does not match this node's".into(),
                ))
            }
        };
        if let Access::Node = access {
            return if from_node {
                Ok(Arc::clone(&policy.anonymous))
            } else {
                Err(Refusal::Forbidden(
                    "internal: only cluster nodes make this request".into(),
                ))
            };
        }
        let now = Instant::now();
        if let (false, Some(limit), Some(ip)) =
            (from_node, &policy.rate_limits.per_ip, credentials.peer)
        {
            self.limiter
                .take(RateKey::Address(ip), limit, now)
                .map_err(Refusal::RateLimited)?;
        }
        let principal = self.authenticate(&policy, credentials)?;
        let is_anonymous = Arc::ptr_eq(&principal, &policy.anonymous);
        if !from_node && !is_anonymous {
            if let Some(limit) = principal.rate_limit.or(policy.rate_limits.per_token) {
                self.limiter
                    .take(
                        RateKey::Credential(Arc::clone(&principal.name)),
                        &limit,
                        now,
                    )
                    .map_err(Refusal::RateLimited)?;
            }
        }
        let refuse = |what: String| {
            if is_anonymous {
                Refusal::Unauthenticated(format!("credentials needed to {what}"))
            } else {
                Refusal::Forbidden(format!("{} may not {what}", principal.name))
            }
        };
        match access {
            Access::Streams(needs) => {
                for (op, stream) in needs {
                    if !principal.grants.allows(*op, stream) {
                        return Err(refuse(format!("{} the stream {stream:?}", op.name())));
                    }
                }
            }
            Access::ServerAdmin => {
                if !principal.grants.allows_server_admin() {
                    return Err(refuse(
                        "see status or metrics (admin on every stream)".into(),
                    ));
                }
            }
            Access::ReadTokenFor(prefix) => {
                if !principal.grants.allows_all_under(Operation::Read, prefix) {
                    return Err(refuse(format!("read every stream under {prefix:?}")));
                }
            }
            Access::Node => unreachable!("answered above"),
        }
        Ok(principal)
    }

    /// Who `credentials` name: a token from the file, a JWT, or nobody
    /// (the anonymous grants).
    fn authenticate(
        &self,
        policy: &Policy,
        credentials: &Credentials<'_>,
    ) -> Result<Arc<Principal>, Refusal> {
        let bad = |why: &str| Refusal::Unauthenticated(why.to_string());
        let in_query = credentials.query.and_then(query_token);
        let token = match (credentials.authorization, in_query) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    "credentials in both the Authorization header and the query string",
                ))
            }
            (Some(header), None) => bearer(header)
                .ok_or_else(|| bad("the Authorization header must be \"Bearer <token>\""))?,
            (None, Some(token)) => {
                if credentials.method != Some(&Method::GET) {
                    return Err(bad("a token in the query string is accepted on GET only"));
                }
                token
            }
            (None, None) => return Ok(Arc::clone(&policy.anonymous)),
        };
        let hash = sha256(token.as_bytes());
        if let Some(principal) = policy.tokens.get(&hash) {
            if in_query.is_some() {
                return Err(bad(
                    "a token in the query string must be a short-lived read-only JWT",
                ));
            }
            return Ok(Arc::clone(principal));
        }
        let verifier = match &policy.jwt {
            Some(verifier) if jwt::looks_like_jwt(token) => verifier,
            _ => return Err(bad("unknown token")),
        };
        let now = unix_now();
        let principal = self.verified_jwt(verifier, token, hash, now)?;
        if in_query.is_some() {
            let lifetime = principal.expires_at.unwrap_or(u64::MAX).saturating_sub(now);
            if !principal.grants.read_only() {
                return Err(bad("a token in the query string must grant read only"));
            }
            if lifetime > verifier.query_token_max_ttl_secs {
                return Err(bad(&format!(
                    "a token in the query string must expire within {} s",
                    verifier.query_token_max_ttl_secs
                )));
            }
        }
        Ok(principal)
    }

    fn verified_jwt(
        &self,
        verifier: &jwt::JwtVerifier,
        token: &str,
        hash: [u8; 32],
        now: u64,
    ) -> Result<Arc<Principal>, Refusal> {
        let mut cache = self.jwt_cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(principal) = cache.get(&hash) {
            if principal.expires_at.is_some_and(|exp| exp > now) {
                return Ok(Arc::clone(principal));
            }
            cache.remove(&hash);
        }
        drop(cache);
        let claims = verifier
            .verify(token, now)
            .map_err(|why| Refusal::Unauthenticated(format!("invalid token: {why}")))?;
        let principal = Arc::new(Principal {
            name: format!("jwt:{}", claims.subject.as_deref().unwrap_or("-")).into(),
            grants: claims.grants,
            rate_limit: None,
            expires_at: Some(claims.expires_at),
        });
        let mut cache = self.jwt_cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= JWT_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(hash, Arc::clone(&principal));
        Ok(principal)
    }

    /// A read-only token for the streams under `prefix`, valid for
    /// `ttl` (at most the configured query-token lifetime), for a caller
    /// already allowed to read them. `None` without an HS256 secret.
    pub fn mint_read_token(
        &self,
        subject: &str,
        prefix: &str,
        ttl: Duration,
    ) -> Option<(String, u64)> {
        let policy = self.policy();
        let verifier = policy.jwt.as_ref().filter(|v| v.can_mint())?;
        let now = unix_now();
        let ttl = ttl.as_secs().clamp(1, verifier.query_token_max_ttl_secs);
        let grants = grants::Grants::parse(&[grants::GrantSpec {
            prefix: prefix.to_string(),
            allow: vec!["read".into()],
        }])
        .ok()?;
        let token = verifier.mint(subject, &grants, now, now + ttl)?;
        Some((token, now + ttl))
    }
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(header: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(header).ok()?;
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The token in a query string's `access_token` parameter. Tokens are
/// base64url or hex, so they need no percent-decoding.
fn query_token(query: &str) -> Option<&str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(QUERY_TOKEN)?.strip_prefix('='))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
