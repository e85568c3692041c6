//! JSON Web Tokens (RFC 7519) as credentials: compact JWS tokens signed
//! with HS256 (a shared secret), or RS256, ES256 or EdDSA (Ed25519) with
//! a public key from a JWKS file; signatures checked with `ring`.
//!
//! A token's `grants` claim says what it may do, in the auth file's form
//! (`[{"prefix": "chat/", "allow": ["read"]}]`); `exp` is required, `nbf`,
//! `iss` and `aud` are checked when present or configured. With an HS256
//! secret the server also mints short-lived read-only tokens itself, for
//! browsers' `EventSource`, which cannot send headers.

use std::path::PathBuf;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::{hmac, signature};
use serde::Deserialize;

use crate::grants::{GrantError, GrantSpec, Grants};

/// The `[jwt]` section of the auth file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Verifies (and mints) HS256 tokens.
    #[serde(default)]
    pub hs256_secret: Option<String>,
    /// A JWK set with the public keys of RS256, ES256 and EdDSA tokens.
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// When set, tokens must carry this `iss`.
    #[serde(default)]
    pub issuer: Option<String>,
    /// When set, tokens must carry this `aud`.
    #[serde(default)]
    pub audience: Option<String>,
    /// Longest remaining lifetime of a token sent in the query string.
    #[serde(default = "default_query_ttl")]
    pub query_token_max_ttl_secs: u64,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
}

fn default_query_ttl() -> u64 {
    900
}

fn default_leeway() -> u64 {
    30
}

/// A verified token's claims.
#[derive(Debug, Clone)]
pub struct Claims {
    pub subject: Option<String>,
    pub expires_at: u64,
    pub grants: Grants,
}

enum VerifyingKey {
    Hmac(hmac::Key),
    Rsa {
        kid: Option<String>,
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// An uncompressed P-256 point.
    P256 {
        kid: Option<String>,
        point: Vec<u8>,
    },
    Ed25519 {
        kid: Option<String>,
        x: Vec<u8>,
    },
}

impl VerifyingKey {
    fn alg(&self) -> &'static str {
        match self {
            VerifyingKey::Hmac(_) => "HS256",
            VerifyingKey::Rsa { .. } => "RS256",
            VerifyingKey::P256 { .. } => "ES256",
            VerifyingKey::Ed25519 { .. } => "EdDSA",
        }
    }

    fn kid(&self) -> Option<&str> {
        match self {
            VerifyingKey::Hmac(_) => None,
            VerifyingKey::Rsa { kid, .. }
            | VerifyingKey::P256 { kid, .. }
            | VerifyingKey::Ed25519 { kid, .. } => kid.as_deref(),
        }
    }

    fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        match self {
            VerifyingKey::Hmac(key) => hmac::verify(key, message, sig).is_ok(),
            VerifyingKey::Rsa { n, e, .. } => signature::RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, sig)
                .is_ok(),
            VerifyingKey::P256 { point, .. } => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, sig)
                    .is_ok()
            }
            VerifyingKey::Ed25519 { x, .. } => {
                signature::UnparsedPublicKey::new(&signature::ED25519, x)
                    .verify(message, sig)
                    .is_ok()
            }
        }
    }
}

pub struct JwtVerifier {
    keys: Vec<VerifyingKey>,
    signing: Option<hmac::Key>,
    issuer: Option<String>,
    audience: Option<String>,
    pub query_token_max_ttl_secs: u64,
    leeway_secs: u64,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

#[derive(Deserialize)]
struct Payload {
    exp: Option<f64>,
    #[serde(default)]
    nbf: Option<f64>,
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    aud: Option<Audience>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    grants: Option<Vec<GrantSpec>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// Why the `[jwt]` section of the auth file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JwtConfigError {
    #[error("jwt.hs256_secret must be at least 32 bytes")]
    ShortSecret,
    #[error("jwt.jwks_file {path}: {source}")]
    ReadJwks {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("jwt.jwks_file {path}: {source}")]
    Jwks { path: PathBuf, source: JwksError },
    #[error("the [jwt] section needs hs256_secret or jwks_file")]
    NoKeys,
}

/// Why a JWK set cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("not a JWK set: {0}")]
    NotASet(serde_json::Error),
    #[error("a key lacks {0}")]
    Missing(&'static str),
    #[error("a key's {0} is not base64url")]
    NotBase64(&'static str),
    #[error("unsupported key type {kty} {crv} (RSA, EC P-256 and OKP Ed25519 are)")]
    Unsupported { kty: String, crv: String },
}

/// Why a token is refused (the client is told, after "invalid token: ").
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("not a compact JWT")]
    NotCompact,
    #[error("a token part is not base64url")]
    NotBase64,
    #[error("a token part is not the expected JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the signature is not base64url")]
    SignatureNotBase64,
    #[error("no configured {0} key verifies the signature")]
    BadSignature(String),
    #[error("the token has no exp")]
    NoExpiry,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token's issuer (iss) is not the configured one")]
    WrongIssuer,
    #[error("the token's audience (aud) is not this server")]
    WrongAudience,
    #[error("the token has no grants claim")]
    NoGrants,
    #[error("the token's grants: {0}")]
    Grants(GrantError),
}

impl JwtVerifier {
    pub fn new(config: &JwtConfig) -> Result<JwtVerifier, JwtConfigError> {
        let mut keys = Vec::new();
        let signing = match &config.hs256_secret {
            Some(secret) if secret.len() < 32 => return Err(JwtConfigError::ShortSecret),
            Some(secret) => {
                let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
                keys.push(VerifyingKey::Hmac(key.clone()));
                Some(key)
            }
            None => None,
        };
        if let Some(path) = &config.jwks_file {
            let text =
                std::fs::read_to_string(path).map_err(|source| JwtConfigError::ReadJwks {
                    path: path.clone(),
                    source,
                })?;
            keys.extend(parse_jwks(&text).map_err(|source| JwtConfigError::Jwks {
                path: path.clone(),
                source,
            })?);
        }
        if keys.is_empty() {
            return Err(JwtConfigError::NoKeys);
        }
        Ok(JwtVerifier {
            keys,
            signing,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            query_token_max_ttl_secs: config.query_token_max_ttl_secs,
            leeway_secs: config.leeway_secs,
        })
    }

    /// The claims of `token` if its signature, times, issuer and audience
    /// hold at `now` (seconds since the epoch).
    pub fn verify(&self, token: &str, now: u64) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::NotCompact);
        };
        let header: Header = decode_json(header)?;
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| TokenError::SignatureNotBase64)?;
        let signed = &token[..header_and_payload_len(token)];
        let mut candidates = self.keys.iter().filter(|key| key.alg() == header.alg);
        let verified = match header.kid.as_deref() {
            Some(kid) => candidates
                .filter(|key| key.kid().is_none_or(|k| k == kid))
                .any(|key| key.verify(signed.as_bytes(), &sig)),
            None => candidates.any(|key| key.verify(signed.as_bytes(), &sig)),
        };
        if !verified {
            return Err(TokenError::BadSignature(header.alg));
        }
        let payload: Payload = decode_json(payload)?;
        let exp = payload.exp.ok_or(TokenError::NoExpiry)?;
        if !exp.is_finite() || exp + (self.leeway_secs as f64) <= now as f64 {
            return Err(TokenError::Expired);
        }
        if payload
            .nbf
            .is_some_and(|nbf| nbf > (now + self.leeway_secs) as f64)
        {
            return Err(TokenError::NotYetValid);
        }
        if let Some(issuer) = &self.issuer {
            if payload.iss.as_deref() != Some(issuer) {
                return Err(TokenError::WrongIssuer);
            }
        }
        if let Some(audience) = &self.audience {
            let ok = match &payload.aud {
                Some(Audience::One(a)) => a == audience,
                Some(Audience::Many(all)) => all.contains(audience),
                None => false,
            };
            if !ok {
                return Err(TokenError::WrongAudience);
            }
        }
        let grants = Grants::parse(&payload.grants.ok_or(TokenError::NoGrants)?)
            .map_err(TokenError::Grants)?;
        Ok(Claims {
            subject: payload.sub,
            expires_at: exp as u64,
            grants,
        })
    }

    /// Whether this server can mint tokens (an HS256 secret is set).
    pub fn can_mint(&self) -> bool {
        self.signing.is_some()
    }

    /// An HS256 token with `grants` for `subject`, valid until `expires_at`.
    pub fn mint(
        &self,
        subject: &str,
        grants: &Grants,
        now: u64,
        expires_at: u64,
    ) -> Option<String> {
        let key = self.signing.as_ref()?;
        let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let mut payload = serde_json::json!({
            "sub": subject,
            "iat": now,
            "exp": expires_at,
            "grants": grants.specs(),
        });
        if let Some(issuer) = &self.issuer {
            payload["iss"] = issuer.as_str().into();
        }
        if let Some(audience) = &self.audience {
            payload["aud"] = audience.as_str().into();
        }
        let payload = URL_SAFE_NO_PAD.encode(payload.to_string());
        let signed = format!("{header}.{payload}");
        let sig = URL_SAFE_NO_PAD.encode(hmac::sign(key, signed.as_bytes()).as_ref());
        Some(format!("{signed}.{sig}"))
    }
}

/// Whether `token` has the shape of a compact JWT (three base64url parts).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ")
        && token.bytes().filter(|b| *b == b'.').count() == 2
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::NotBase64)?;
    serde_json::from_slice(&bytes).map_err(TokenError::NotJson)
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

fn parse_jwks(text: &str) -> Result<Vec<VerifyingKey>, JwksError> {
    let set: Jwks = serde_json::from_str(text).map_err(JwksError::NotASet)?;
    let part = |value: &Option<String>, what: &'static str| -> Result<Vec<u8>, JwksError> {
        let value = value.as_deref().ok_or(JwksError::Missing(what))?;
        URL_SAFE_NO_PAD
            .decode(value)
            .map_err(|_| JwksError::NotBase64(what))
    };
    set.keys
        .iter()
        .map(|key| {
            let kid = key.kid.clone();
            match (key.kty.as_str(), key.crv.as_deref()) {
                ("RSA", _) => Ok(VerifyingKey::Rsa {
                    kid,
                    n: part(&key.n, "n")?,
                    e: part(&key.e, "e")?,
                }),
                ("EC", Some("P-256")) => {
                    let mut point = vec![4];
                    point.extend(part(&key.x, "x")?);
                    point.extend(part(&key.y, "y")?);
                    Ok(VerifyingKey::P256 { kid, point })
                }
                ("OKP", Some("Ed25519")) => Ok(VerifyingKey::Ed25519 {
                    kid,
                    x: part(&key.x, "x")?,
                }),
                (kty, crv) => Err(JwksError::Unsupported {
                    kty: kty.to_string(),
                    crv: crv.unwrap_or("").to_string(),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Operation;
    use ring::rand::SystemRandom;
    use ring::signature::KeyPair;

    const NOW: u64 = 1_800_000_000;
    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn hs256(issuer: Option<&str>) -> JwtVerifier {
        JwtVerifier::new(&JwtConfig {
            hs256_secret: Some(SECRET.into()),
            jwks_file: None,
            issuer: issuer.map(str::to_string),
            audience: None,
            query_token_max_ttl_secs: 900,
            leeway_secs: 0,
        })
        .unwrap()
    }

    fn encode(header: serde_json::Value, payload: serde_json::Value) -> String {
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        )
    }

    fn reader_claims(exp: u64) -> serde_json::Value {
        serde_json::json!({"sub": "u1", "exp": exp, "grants": [{"prefix": "chat/", "allow": ["read"]}]})
    }

    #[test]
    fn minted_tokens_verify_and_carry_their_grants() {
        let verifier = hs256(Some("runnel"));
        let grants = Grants::parse(&[GrantSpec {
            prefix: "chat/".into(),
            allow: vec!["read".into()],
        }])
        .unwrap();
        let token = verifier.mint("u1", &grants, NOW, NOW + 60).unwrap();
        assert!(looks_like_jwt(&token));
        let claims = verifier.verify(&token, NOW).unwrap();
        assert_eq!(claims.subject.as_deref(), Some("u1"));
        assert_eq!(claims.expires_at, NOW + 60);
        assert!(claims.grants.allows(Operation::Read, "chat/x"));
        assert!(!claims.grants.allows(Operation::Append, "chat/x"));
        assert!(verifier.verify(&token, NOW + 60).is_err(), "expired");
        // Another issuer's verifier refuses it.
        assert!(hs256(Some("other")).verify(&token, NOW).is_err());
    }

    #[test]
    fn tampered_tokens_are_refused() {
        let verifier = hs256(None);
        let grants = Grants::parse(&[GrantSpec {
            prefix: "chat/".into(),
            allow: vec!["read".into()],
        }])
        .unwrap();
        let token = verifier.mint("u1", &grants, NOW, NOW + 60).unwrap();
        let (signed, sig) = token.rsplit_once('.').unwrap();
        let (header, _) = signed.split_once('.').unwrap();
        let wider = URL_SAFE_NO_PAD.encode(
            serde_json::json!({"exp": NOW + 60, "grants": [{"prefix": "", "allow": ["admin"]}]})
                .to_string(),
        );
        for bad in [
            format!("{header}.{wider}.{sig}"),
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode([0u8; 32])),
            format!("{signed}."),
            signed.to_string(),
            // alg none, and HS256 under another secret
            format!(
                "{}.",
                encode(serde_json::json!({"alg": "none"}), reader_claims(NOW + 60))
            ),
            {
                let other =
                    hmac::Key::new(hmac::HMAC_SHA256, b"another secret of thirty-two bytes");
                let signed = encode(serde_json::json!({"alg": "HS256"}), reader_claims(NOW + 60));
                let sig = URL_SAFE_NO_PAD.encode(hmac::sign(&other, signed.as_bytes()).as_ref());
                format!("{signed}.{sig}")
            },
        ] {
            assert!(verifier.verify(&bad, NOW).is_err(), "{bad}");
        }
    }

    #[test]
    fn claims_are_checked() {
        let verifier = hs256(None);
        let key = hmac::Key::new(hmac::HMAC_SHA256, SECRET.as_bytes());
        let sign = |payload: serde_json::Value| {
            let signed = encode(serde_json::json!({"alg": "HS256"}), payload);
            let sig = URL_SAFE_NO_PAD.encode(hmac::sign(&key, signed.as_bytes()).as_ref());
            format!("{signed}.{sig}")
        };
        assert!(verifier.verify(&sign(reader_claims(NOW + 1)), NOW).is_ok());
        for (payload, why) in [
            (serde_json::json!({"grants": []}), "no exp"),
            (serde_json::json!({"exp": NOW + 10}), "no grants"),
            (
                serde_json::json!({"exp": NOW + 10, "nbf": NOW + 5, "grants": []}),
                "nbf",
            ),
            (
                serde_json::json!({"exp": NOW + 10, "grants": [{"prefix": "", "allow": ["fly"]}]}),
                "bad grant",
            ),
        ] {
            assert!(verifier.verify(&sign(payload), NOW).is_err(), "{why}");
        }
    }

    #[test]
    fn ed25519_and_p256_keys_from_a_jwks() {
        let rng = SystemRandom::new();
        let ed = signature::Ed25519KeyPair::from_pkcs8(
            signature::Ed25519KeyPair::generate_pkcs8(&rng)
                .unwrap()
                .as_ref(),
        )
        .unwrap();
        let ec_alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let ec_pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(ec_alg, &rng).unwrap();
        let ec = signature::EcdsaKeyPair::from_pkcs8(ec_alg, ec_pkcs8.as_ref(), &rng).unwrap();
        let point = ec.public_key().as_ref();
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let jwks = serde_json::json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": b64(ed.public_key().as_ref())},
            {"kty": "EC", "crv": "P-256", "kid": "ec", "x": b64(&point[1..33]), "y": b64(&point[33..])},
        ]});
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        std::fs::write(&path, jwks.to_string()).unwrap();
        let verifier = JwtVerifier::new(&JwtConfig {
            hs256_secret: None,
            jwks_file: Some(path),
            issuer: None,
            audience: Some("runnel".into()),
            query_token_max_ttl_secs: 900,
            leeway_secs: 0,
        })
        .unwrap();
        let mut claims = reader_claims(NOW + 60);
        claims["aud"] = "runnel".into();

        let signed = encode(
            serde_json::json!({"alg": "EdDSA", "kid": "ed"}),
            claims.clone(),
        );
        let token = format!("{signed}.{}", b64(ed.sign(signed.as_bytes()).as_ref()));
        assert!(verifier.verify(&token, NOW).is_ok());

        let signed = encode(
            serde_json::json!({"alg": "ES256", "kid": "ec"}),
            claims.clone(),
        );
        let sig = ec.sign(&rng, signed.as_bytes()).unwrap();
        let token = format!("{signed}.{}", b64(sig.as_ref()));
        assert!(verifier.verify(&token, NOW).is_ok());
        // The right signature under the wrong kid, or the wrong audience.
        let wrong_kid = token.replacen(
            &URL_SAFE_NO_PAD.encode(serde_json::json!({"alg": "ES256", "kid": "ec"}).to_string()),
            &URL_SAFE_NO_PAD.encode(serde_json::json!({"alg": "ES256", "kid": "ed"}).to_string()),
            1,
        );
        assert!(verifier.verify(&wrong_kid, NOW).is_err());
        claims["aud"] = "someone-else".into();
        let signed = encode(serde_json::json!({"alg": "EdDSA"}), claims);
        let token = format!("{signed}.{}", b64(ed.sign(signed.as_bytes()).as_ref()));
        assert!(verifier.verify(&token, NOW).is_err());
    }

    /// An RS256 token signed by `openssl dgst -sha256 -sign` with a
    /// throwaway 2048-bit key made for this test, and that key's JWK.
    const RSA_N: &str = "5fYJ1YRGS-tfwavqN9P9t-3CAyjOgAjS4qxQoSwKyssl1Rm92VVpI-nakEfUbPfia7fxjbUHBImRwCGLKdUxDmHZ--MVebgJb997vwov-Xc64-IcM_8wNRMSPeGGI05xmzvA4JQAWScVBOcmWkuNDcq-Wflhyn1bIOr3o0I04O3esme6HqD5tyOkVeMJORwQEjpP1b0Aasv6zaQyfjn-Wss18Y8l8Kbal2LaUXer7JymbEcuK614yXcojo7HRE1gu4gBAGuUKAYrSyglhgCX1Q1s5SalWYWP39x8M1P43nvS9Nm0a6FDo2diM7CqJnWLiUGurlAhQXINHkncWkXN5w";
    const RSA_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InJzYSJ9.eyJzdWIiOiJ1MSIsImV4cCI6MTgwMDAwMDA2MCwiZ3JhbnRzIjpbeyJwcmVmaXgiOiJjaGF0LyIsImFsbG93IjpbInJlYWQiXX1dfQ.neB3oEeDQLqeT5n-xj84s7YNewOGE20PTsOkWAU4lfU1QxypwK5pSQVNUlxvjY39TUDgNc1z6-dU252JUXsyqmNtrnE-n_L7O36Zj-H7Tg7VoLnNNcGVhTn5Krwgwf-lAPLOSoYBDZwqy7mCRIpQcA2COtbEi6MKT1V6ss-XfWVTcojqsSiXFnybmmxOatnD-2J8TMQW1TYwqjrkVYwM2K4Pr7Q2vV2NpzgzxAmftGOx46qUq032ome2-_tVGXwU8xdN8GroV_TAHafH-j7S4MCGSfQ1KsEcKAY1YRI153zD0AuzM_6r38QcOAQCT1TikAWzYgnNzIED8lGtjbChVw";

    #[test]
    fn rs256_tokens_from_openssl_verify() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jwks.json");
        let jwks =
            serde_json::json!({"keys": [{"kty": "RSA", "kid": "rsa", "n": RSA_N, "e": "AQAB"}]});
        std::fs::write(&path, jwks.to_string()).unwrap();
        let verifier = JwtVerifier::new(&JwtConfig {
            hs256_secret: None,
            jwks_file: Some(path),
            issuer: None,
            audience: None,
            query_token_max_ttl_secs: 900,
            leeway_secs: 0,
        })
        .unwrap();
        let claims = verifier.verify(RSA_TOKEN, NOW).unwrap();
        assert!(claims.grants.allows(Operation::Read, "chat/a"));
        let mut damaged = RSA_TOKEN.to_string();
        damaged.replace_range(40..41, "A");
        assert!(verifier.verify(&damaged, NOW).is_err());
    }

    #[test]
    fn short_secrets_and_empty_sections_are_refused() {
        let config = |secret: Option<&str>| JwtConfig {
            hs256_secret: secret.map(str::to_string),
            jwks_file: None,
            issuer: None,
            audience: None,
            query_token_max_ttl_secs: 900,
            leeway_secs: 0,
        };
        assert!(JwtVerifier::new(&config(Some("short"))).is_err());
        assert!(JwtVerifier::new(&config(None)).is_err());
    }
}
