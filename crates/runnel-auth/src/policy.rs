//! The auth file (`--auth-file`, TOML) and what it becomes: who may do
//! what, and how often.
//!
//! ```toml
//! # Nodes of a cluster share this key; they send it with requests they
//! # forward or make to each other. Keep the file private (mode 0600).
//! cluster_key = "a long random string"
//! # What requests without credentials may do (nothing by default).
//! anonymous_grants = [{ prefix = "public/", allow = ["read"] }]
//!
//! [[tokens]]
//! name = "chat-backend"            # shown in logs instead of the token
//! sha256 = "<hex SHA-256 of the token>"
//! grants = [{ prefix = "chat/", allow = ["read", "append", "create"] }]
//! rate_limit = { requests_per_sec = 2000, burst = 4000 }   # optional
//!
//! [jwt]
//! hs256_secret = "at least 32 bytes"
//! jwks_file = "/etc/runnel/jwks.json"
//!
//! [rate_limits]
//! per_token = { requests_per_sec = 1000, burst = 2000 }
//! per_ip = { requests_per_sec = 500 }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::grants::{GrantError, GrantSpec, Grants};
use crate::jwt::{JwtConfig, JwtConfigError, JwtVerifier};
use crate::rate::{RateLimitError, RateSpec};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    #[serde(default)]
    cluster_key: Option<String>,
    #[serde(default)]
    anonymous_grants: Vec<GrantSpec>,
    #[serde(default)]
    tokens: Vec<TokenEntry>,
    #[serde(default)]
    jwt: Option<JwtConfig>,
    #[serde(default)]
    rate_limits: RateLimits,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    #[serde(default)]
    name: Option<String>,
    sha256: String,
    grants: Vec<GrantSpec>,
    #[serde(default)]
    rate_limit: Option<RateSpec>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    #[serde(default)]
    pub per_token: Option<RateSpec>,
    #[serde(default)]
    pub per_ip: Option<RateSpec>,
}

/// Who made a request, once its credential checked out.
#[derive(Debug)]
pub struct Principal {
    /// A name for logs and rate limits; never the credential.
    pub name: Arc<str>,
    pub grants: Grants,
    pub rate_limit: Option<RateSpec>,
    /// A token from the query string may only be a short-lived read-only
    /// JWT: this is when a JWT expires.
    pub expires_at: Option<u64>,
}

/// The auth file, loaded and checked.
pub struct Policy {
    /// Tokens by the SHA-256 of their text.
    pub tokens: HashMap<[u8; 32], Arc<Principal>>,
    pub anonymous: Arc<Principal>,
    pub jwt: Option<JwtVerifier>,
    /// SHA-256 of the cluster key.
    pub cluster_key_hash: Option<[u8; 32]>,
    /// The key itself, which this node sends to its peers.
    pub cluster_key: Option<http::HeaderValue>,
    pub rate_limits: RateLimits,
}

/// Why the auth file cannot be used (at start, the server does not
/// start; on a reload, the policy in force stays).
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    #[error("auth file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("auth file {path}: {source}")]
    Invalid { path: PathBuf, source: PolicyError },
}

/// What is wrong in an auth file's text.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error("tokens[{0}].sha256 is not 64 hex digits")]
    TokenHash(usize),
    #[error("tokens[{n}]: {source}")]
    TokenGrants { n: usize, source: GrantError },
    #[error("tokens[{n}]: {source}")]
    TokenRate { n: usize, source: RateLimitError },
    #[error("tokens[{0}] repeats another token's sha256")]
    RepeatedToken(usize),
    #[error(transparent)]
    RateLimit(#[from] RateLimitError),
    #[error("cluster_key must be at least 32 bytes")]
    ShortClusterKey,
    #[error("cluster_key must be printable ASCII")]
    ClusterKeyNotAscii,
    #[error("anonymous_grants: {0}")]
    AnonymousGrants(GrantError),
    #[error(transparent)]
    Jwt(#[from] JwtConfigError),
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, AuthConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::parse(&text).map_err(|source| AuthConfigError::Invalid {
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let file: AuthFile = toml::from_str(text)?;
        let mut tokens = HashMap::new();
        for (n, entry) in file.tokens.iter().enumerate() {
            let hash = parse_sha256(&entry.sha256).ok_or(PolicyError::TokenHash(n))?;
            let grants = Grants::parse(&entry.grants)
                .map_err(|source| PolicyError::TokenGrants { n, source })?;
            if let Some(limit) = &entry.rate_limit {
                limit
                    .validate()
                    .map_err(|source| PolicyError::TokenRate { n, source })?;
            }
            let name = entry
                .name
                .clone()
                .unwrap_or_else(|| format!("token-{}", &entry.sha256[..8]));
            let principal = Principal {
                name: name.into(),
                grants,
                rate_limit: entry.rate_limit,
                expires_at: None,
            };
            if tokens.insert(hash, Arc::new(principal)).is_some() {
                return Err(PolicyError::RepeatedToken(n));
            }
        }
        for limit in [&file.rate_limits.per_token, &file.rate_limits.per_ip]
            .into_iter()
            .flatten()
        {
            limit.validate()?;
        }
        let cluster_key = match file.cluster_key {
            Some(key) if key.len() < 32 => return Err(PolicyError::ShortClusterKey),
            Some(key) => Some(
                http::HeaderValue::from_str(&key).map_err(|_| PolicyError::ClusterKeyNotAscii)?,
            ),
            None => None,
        };
        Ok(Policy {
            tokens,
            anonymous: Arc::new(Principal {
                name: "anonymous".into(),
                grants: Grants::parse(&file.anonymous_grants)
                    .map_err(PolicyError::AnonymousGrants)?,
                rate_limit: None,
                expires_at: None,
            }),
            jwt: file.jwt.as_ref().map(JwtVerifier::new).transpose()?,
            cluster_key_hash: cluster_key.as_ref().map(|k| sha256(k.as_bytes())),
            cluster_key,
            rate_limits: file.rate_limits,
        })
    }
}

pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16);
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Operation;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_whole_file_parses() {
        let text = format!(
            r#"
            cluster_key = "{key}"
            anonymous_grants = [{{ prefix = "public/", allow = ["read"] }}]
            [[tokens]]
            name = "writer"
            sha256 = "{writer}"
            grants = [{{ prefix = "chat/", allow = ["read", "append"] }}]
            rate_limit = {{ requests_per_sec = 5, burst = 10 }}
            [[tokens]]
            sha256 = "{admin}"
            grants = [{{ prefix = "", allow = ["admin"] }}]
            [rate_limits]
            per_ip = {{ requests_per_sec = 100 }}
            "#,
            key = "k".repeat(32),
            writer = hex(&sha256(b"writer-token")),
            admin = hex(&sha256(b"admin-token")).to_uppercase(),
        );
        let policy = Policy::parse(&text).unwrap();
        let writer = &policy.tokens[&sha256(b"writer-token")];
        assert_eq!(&*writer.name, "writer");
        assert!(writer.grants.allows(Operation::Append, "chat/x"));
        assert_eq!(writer.rate_limit.unwrap().requests_per_sec, 5.0);
        let admin = &policy.tokens[&sha256(b"admin-token")];
        assert!(admin.name.starts_with("token-"));
        assert!(admin.grants.allows_server_admin());
        assert!(policy.anonymous.grants.allows(Operation::Read, "public/x"));
        assert!(!policy.anonymous.grants.allows(Operation::Read, "chat/x"));
        assert_eq!(
            policy.cluster_key_hash,
            Some(sha256("k".repeat(32).as_bytes()))
        );
        assert!(policy.rate_limits.per_ip.is_some() && policy.rate_limits.per_token.is_none());
    }

    #[test]
    fn mistakes_are_refused_with_where_they_are() {
        let token = |sha: &str, allow: &str| {
            format!("[[tokens]]\nsha256 = \"{sha}\"\ngrants = [{{ prefix = \"\", allow = [{allow}] }}]\n")
        };
        let good = hex(&sha256(b"t"));
        for (text, expected) in [
            (token("abc", "\"read\""), "tokens[0].sha256"),
            (token(&good, "\"fly\""), "tokens[0]"),
            (
                token(&good, "\"read\"") + &token(&good, "\"read\""),
                "repeats",
            ),
            ("cluster_key = \"short\"".to_string(), "cluster_key"),
            ("unknown = 1".to_string(), "unknown"),
            (
                "[rate_limits]\nper_ip = { requests_per_sec = 0 }".to_string(),
                "rate limit",
            ),
            ("[jwt]\nhs256_secret = \"short\"".to_string(), "32 bytes"),
        ] {
            let err = Policy::parse(&text)
                .err()
                .unwrap_or_else(|| panic!("{text}"))
                .to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
