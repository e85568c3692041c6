//! Request rate limits per credential and per client address: one token
//! bucket per key, refilled continuously, in a bounded table.
//!
//! The table is sharded so that concurrent requests rarely meet on one
//! lock, and bounded so that a client cycling through addresses cannot
//! grow it without end: a full shard first drops the buckets that have
//! refilled (their clients are idle, and a fresh bucket is a full one),
//! and only then, if it is still full, starts over.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// A sustained rate and the burst allowed above it.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    pub requests_per_sec: f64,
    /// Requests allowed at once after a quiet spell [default: one
    /// second's worth].
    #[serde(default)]
    pub burst: Option<f64>,
}

/// A rate limit that limits nothing, or everything.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("a rate limit needs requests_per_sec > 0 and burst >= 1 (got {0:?})")]
pub struct RateLimitError(pub RateSpec);

impl RateSpec {
    pub fn validate(&self) -> Result<(), RateLimitError> {
        let rate_ok = self.requests_per_sec.is_finite() && self.requests_per_sec > 0.0;
        let burst_ok = self.burst.is_none_or(|b| b.is_finite() && b >= 1.0);
        if !(rate_ok && burst_ok) {
            return Err(RateLimitError(*self));
        }
        Ok(())
    }

    fn burst(&self) -> f64 {
        self.burst.unwrap_or(self.requests_per_sec).max(1.0)
    }
}

/// What a bucket is kept for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RateKey {
    Address(IpAddr),
    Credential(Arc<str>),
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

const SHARDS: usize = 16;
/// Buckets per shard at most.
const SHARD_CAPACITY: usize = 4096;

pub struct RateLimiter {
    shards: [Mutex<HashMap<RateKey, Bucket>>; SHARDS],
}

impl Default for RateLimiter {
    fn default() -> Self {
        RateLimiter {
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

impl RateLimiter {
    /// Takes one request from `key`'s bucket; `Err` with how long until
    /// the next one is allowed when it is empty.
    pub fn take(&self, key: RateKey, spec: &RateSpec, now: Instant) -> Result<(), Duration> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        let shard = &self.shards[hasher.finish() as usize % SHARDS];
        let mut buckets = shard.lock().unwrap_or_else(|e| e.into_inner());
        let burst = spec.burst();
        if buckets.len() >= SHARD_CAPACITY && !buckets.contains_key(&key) {
            buckets.retain(|_, b| refilled(b, spec, now) < burst);
            if buckets.len() >= SHARD_CAPACITY {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        bucket.tokens = refilled(bucket, spec, now).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / spec.requests_per_sec,
            ))
        }
    }
}

fn refilled(bucket: &Bucket, spec: &RateSpec, now: Instant) -> f64 {
    let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
    bucket.tokens + elapsed * spec.requests_per_sec
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_PER_SEC: RateSpec = RateSpec {
        requests_per_sec: 10.0,
        burst: Some(3.0),
    };

    fn ip(n: u8) -> RateKey {
        RateKey::Address(IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let limiter = RateLimiter::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take(ip(1), &TEN_PER_SEC, t0).is_ok());
        }
        let wait = limiter.take(ip(1), &TEN_PER_SEC, t0).unwrap_err();
        assert!(
            wait > Duration::from_millis(90) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        // Another key has its own bucket.
        assert!(limiter.take(ip(2), &TEN_PER_SEC, t0).is_ok());
        // 100 ms later one more request is allowed, and only one.
        let t1 = t0 + Duration::from_millis(100);
        assert!(limiter.take(ip(1), &TEN_PER_SEC, t1).is_ok());
        assert!(limiter.take(ip(1), &TEN_PER_SEC, t1).is_err());
        // A long pause refills up to the burst, not beyond.
        let t2 = t1 + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limiter.take(ip(1), &TEN_PER_SEC, t2).is_ok());
        }
        assert!(limiter.take(ip(1), &TEN_PER_SEC, t2).is_err());
    }

    #[test]
    fn the_table_stays_bounded() {
        let limiter = RateLimiter::default();
        let t0 = Instant::now();
        for n in 0..(SHARDS * SHARD_CAPACITY * 2) as u32 {
            let key = RateKey::Address(IpAddr::from(n.to_be_bytes()));
            let _ = limiter.take(key, &TEN_PER_SEC, t0);
        }
        let held: usize = limiter.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(held <= SHARDS * SHARD_CAPACITY, "{held}");
    }

    #[test]
    fn specs_are_validated() {
        assert!(TEN_PER_SEC.validate().is_ok());
        for bad in [
            RateSpec {
                requests_per_sec: 0.0,
                burst: None,
            },
            RateSpec {
                requests_per_sec: f64::NAN,
                burst: None,
            },
            RateSpec {
                requests_per_sec: 5.0,
                burst: Some(0.5),
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
