//! Signing material of the subscriptions: the Ed25519 key that signs
//! webhook bodies (published as a JWKS, picked by `kid`), and the HMAC key
//! that signs callback and claim tokens. Both are generated once by the
//! control group's first leader and replicated in its state
//! (`runnel_core::subscription::Keys`), so signatures and tokens verify
//! across restarts and failovers.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};
use ring::{digest, hmac};
use runnel_core::subscription::{Keys, SubError};
use serde::{Deserialize, Serialize};

/// Fresh keys for a control group that has none.
pub fn generate() -> Keys {
    let rng = SystemRandom::new();
    let signing = Ed25519KeyPair::generate_pkcs8(&rng).expect("the system RNG works");
    let mut token_key = vec![0u8; 32];
    rng.fill(&mut token_key).expect("the system RNG works");
    Keys {
        signing_pkcs8: signing.as_ref().to_vec(),
        retired: Vec::new(),
        token_key,
    }
}

/// The usable form of [`Keys`].
pub struct Signer {
    pair: Ed25519KeyPair,
    kid: String,
    /// Public keys published: the current one first (for ever), then
    /// retired ones until the time given (ms since the epoch).
    published: Vec<(String, Vec<u8>, Option<u64>)>,
    token_key: hmac::Key,
}

/// The subscription signing key in the control group cannot sign.
#[derive(Debug, thiserror::Error)]
#[error("the subscription signing key is unusable: {0}")]
pub struct UnusableKey(ring::error::KeyRejected);

impl Signer {
    pub fn new(keys: &Keys) -> Result<Signer, UnusableKey> {
        let pair = Ed25519KeyPair::from_pkcs8(&keys.signing_pkcs8).map_err(UnusableKey)?;
        let public = pair.public_key().as_ref().to_vec();
        let kid = kid_of(&public);
        let mut published = vec![(kid.clone(), public, None)];
        published.extend(
            keys.retired
                .iter()
                .map(|(public, until)| (kid_of(public), public.clone(), Some(*until))),
        );
        Ok(Signer {
            pair,
            kid,
            published,
            token_key: hmac::Key::new(hmac::HMAC_SHA256, &keys.token_key),
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The current public key (what a rotation keeps published).
    pub fn public_key(&self) -> Vec<u8> {
        self.pair.public_key().as_ref().to_vec()
    }

    /// The `Webhook-Signature` header for `body` sent at `unix_secs`.
    pub fn signature_header(&self, unix_secs: u64, body: &[u8]) -> String {
        let mut signed = format!("{unix_secs}.").into_bytes();
        signed.extend_from_slice(body);
        let signature = self.pair.sign(&signed);
        format!(
            "t={unix_secs},kid={},ed25519={}",
            self.kid,
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        )
    }

    /// `GET /__ds/jwks.json` at `now_ms`.
    pub fn jwks(&self, now_ms: u64) -> serde_json::Value {
        let keys: Vec<_> = self
            .published
            .iter()
            .filter(|(_, _, until)| until.is_none_or(|until| until > now_ms))
            .map(|(kid, public, _)| {
                serde_json::json!({
                    "kty": "OKP",
                    "crv": "Ed25519",
                    "kid": kid,
                    "use": "sig",
                    "alg": "EdDSA",
                    "x": URL_SAFE_NO_PAD.encode(public),
                })
            })
            .collect();
        serde_json::json!({ "keys": keys })
    }

    /// A token for wake `generation` of subscription `id`, valid until
    /// `expires_unix_secs`.
    pub fn mint_token(&self, id: &str, generation: u64, expires_unix_secs: u64) -> String {
        let claims = TokenClaims {
            sub: id.to_string(),
            generation,
            exp: expires_unix_secs,
        };
        let payload =
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).expect("claims serialize"));
        let tag = hmac::sign(&self.token_key, payload.as_bytes());
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// Checks a token's signature, subscription and expiry; answers the
    /// generation it was minted for (fencing checks that against the
    /// subscription's).
    pub fn verify_token(&self, token: &str, id: &str, now_unix_secs: u64) -> Result<u64, SubError> {
        let invalid = |why: &str| SubError::TokenInvalid(why.to_string());
        let (payload, tag) = token
            .split_once('.')
            .ok_or_else(|| invalid("malformed token"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| invalid("malformed token"))?;
        hmac::verify(&self.token_key, payload.as_bytes(), &tag)
            .map_err(|_| invalid("the token's signature does not verify"))?;
        let claims: TokenClaims = URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|json| serde_json::from_slice(&json).ok())
            .ok_or_else(|| invalid("malformed token"))?;
        if claims.sub != id {
            return Err(invalid("the token is for another subscription"));
        }
        if claims.exp <= now_unix_secs {
            return Err(SubError::TokenExpired);
        }
        Ok(claims.generation)
    }
}

#[derive(Serialize, Deserialize)]
struct TokenClaims {
    sub: String,
    generation: u64,
    exp: u64,
}

/// `ds_` and the RFC 7638 thumbprint of the public key: stable, and the
/// same on every node.
fn kid_of(public: &[u8]) -> String {
    let canonical = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(public)
    );
    let hash = digest::digest(&digest::SHA256, canonical.as_bytes());
    format!("ds_{}", URL_SAFE_NO_PAD.encode(hash.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, ED25519};

    #[test]
    fn signatures_verify_with_the_published_key_and_kids_are_stable() {
        let keys = generate();
        let signer = Signer::new(&keys).unwrap();
        assert!(signer.kid().starts_with("ds_"));
        assert_eq!(Signer::new(&keys).unwrap().kid(), signer.kid());
        let header = signer.signature_header(1_700_000_000, b"{\"a\":1}");
        let (t, rest) = header
            .strip_prefix("t=")
            .unwrap()
            .split_once(",kid=")
            .unwrap();
        let (kid, sig) = rest.split_once(",ed25519=").unwrap();
        assert_eq!((t, kid), ("1700000000", signer.kid()));
        let jwks = signer.jwks(0);
        let x = jwks["keys"][0]["x"].as_str().unwrap();
        let public = URL_SAFE_NO_PAD.decode(x).unwrap();
        let verify = |message: &[u8]| {
            UnparsedPublicKey::new(&ED25519, &public)
                .verify(message, &URL_SAFE_NO_PAD.decode(sig).unwrap())
                .is_ok()
        };
        assert!(verify(b"1700000000.{\"a\":1}"));
        assert!(!verify(b"1700000001.{\"a\":1}"), "the time is signed");
        assert_ne!(Signer::new(&generate()).unwrap().kid(), signer.kid());
    }

    #[test]
    fn retired_keys_are_published_until_their_time() {
        let old = Signer::new(&generate()).unwrap();
        let mut keys = generate();
        keys.retired.push((old.public_key(), 1_000));
        let signer = Signer::new(&keys).unwrap();
        let kids = |now| -> Vec<String> {
            signer.jwks(now)["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| k["kid"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(kids(999), [signer.kid(), old.kid()]);
        assert_eq!(kids(1_000), [signer.kid()]);
    }

    #[test]
    fn tokens_are_scoped_to_their_subscription_and_expire() {
        let signer = Signer::new(&generate()).unwrap();
        let token = signer.mint_token("sub-1", 7, 1_000);
        assert_eq!(signer.verify_token(&token, "sub-1", 999), Ok(7));
        assert_eq!(
            signer.verify_token(&token, "sub-1", 1_000),
            Err(SubError::TokenExpired)
        );
        let err = signer.verify_token(&token, "sub-2", 999).unwrap_err();
        assert_eq!(err.code(), "TOKEN_INVALID");
        // Another key's token, or a payload changed under the tag.
        let other = Signer::new(&generate())
            .unwrap()
            .mint_token("sub-1", 7, 1_000);
        assert!(signer.verify_token(&other, "sub-1", 999).is_err());
        let (_, tag) = token.split_once('.').unwrap();
        let forged = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode(br#"{"sub":"sub-1","generation":8,"exp":1000}"#)
        );
        assert!(signer.verify_token(&forged, "sub-1", 999).is_err());
        assert!(signer.verify_token("garbage", "sub-1", 999).is_err());
    }
}
