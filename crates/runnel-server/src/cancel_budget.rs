//! How many requests one HTTP/2 connection may cancel: the guard against
//! the "rapid reset" flood that does not depend on timing.
//!
//! hyper's own limit counts streams a client resets *before the server
//! accepts them*; a server that keeps up with the flood accepts every
//! stream first, sees each reset afterwards and never reaches that limit
//! (CI once let a client open and cancel 29,610 long-polls on one
//! connection). This budget counts what the flood costs us instead: a
//! request whose handler was dropped because the client reset its stream
//! before the answer was ready. Every connection may cancel
//! `--http2-cancel-burst` requests at once (1,000) and earns back
//! `--http2-cancels-per-sec` (250) each second, far above what a browser
//! or a proxy multiplexing its clients does; a connection over budget is
//! closed.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

static CLOSED: AtomicU64 = AtomicU64::new(0);

/// How many HTTP/2 connections were closed for cancelling too many
/// requests, for `/metrics`.
pub fn connections_closed() -> u64 {
    CLOSED.load(Relaxed)
}

/// One connection's budget of cancellations (a token bucket).
pub(crate) struct CancelBudget {
    bucket: Mutex<Bucket>,
    exhausted: Notify,
    /// Cancellations a connection may make at once.
    burst: f64,
    /// Cancellations a connection earns back each second.
    refill_per_sec: f64,
}

struct Bucket {
    tokens: f64,
    refilled_at: Instant,
    exhausted: bool,
}

impl CancelBudget {
    pub(crate) fn new(now: Instant, burst: u32, refill_per_sec: u32) -> Arc<Self> {
        let burst = f64::from(burst.max(1));
        Arc::new(Self {
            bucket: Mutex::new(Bucket {
                tokens: burst,
                refilled_at: now,
                exhausted: false,
            }),
            exhausted: Notify::new(),
            burst,
            refill_per_sec: f64::from(refill_per_sec),
        })
    }

    /// Counts one request the client cancelled at `now`; the first one
    /// over budget wakes [`CancelBudget::exhausted`].
    pub(crate) fn cancelled(&self, now: Instant) {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        if bucket.exhausted {
            return;
        }
        let earned = now
            .saturating_duration_since(bucket.refilled_at)
            .as_secs_f64()
            * self.refill_per_sec;
        bucket.tokens = (bucket.tokens + earned).min(self.burst);
        bucket.refilled_at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return;
        }
        bucket.exhausted = true;
        CLOSED.fetch_add(1, Relaxed);
        // `notify_one` keeps the wake-up for a waiter that comes later.
        self.exhausted.notify_one();
    }

    /// Resolves once the connection has cancelled more than its budget.
    pub(crate) async fn exhausted(&self) {
        self.exhausted.notified().await
    }

    /// Watches one request: dropped before [`Watched::answered`], it
    /// counts as cancelled.
    pub(crate) fn watch(self: &Arc<Self>) -> Watched {
        Watched {
            budget: Some(self.clone()),
        }
    }
}

/// One request in flight on a budgeted connection.
pub(crate) struct Watched {
    budget: Option<Arc<CancelBudget>>,
}

impl Watched {
    /// The handler produced its answer: the request was not cancelled.
    pub(crate) fn answered(mut self) {
        self.budget = None;
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(budget) = self.budget.take() {
            budget.cancelled(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const BURST: f64 = 1_000.0;
    const REFILL_PER_SEC: f64 = 250.0;

    fn budget(now: Instant) -> Arc<CancelBudget> {
        CancelBudget::new(now, BURST as u32, REFILL_PER_SEC as u32)
    }

    fn is_exhausted(budget: &CancelBudget) -> bool {
        budget.bucket.lock().unwrap().exhausted
    }

    #[test]
    fn a_burst_within_budget_is_allowed_and_the_next_cancel_is_not() {
        let start = Instant::now();
        let budget = budget(start);
        for _ in 0..BURST as usize {
            budget.cancelled(start);
        }
        assert!(!is_exhausted(&budget));
        budget.cancelled(start);
        assert!(is_exhausted(&budget));
    }

    #[test]
    fn cancels_at_the_refill_rate_are_allowed_forever() {
        let start = Instant::now();
        let budget = budget(start);
        let step = Duration::from_secs_f64(1.0 / REFILL_PER_SEC);
        for i in 0..100_000u32 {
            budget.cancelled(start + step * i);
        }
        assert!(!is_exhausted(&budget));
    }

    #[test]
    fn a_flood_faster_than_the_refill_is_cut_off_soon_after_the_burst() {
        let start = Instant::now();
        let budget = budget(start);
        // 2,000 cancels a second: the budget runs out after about
        // BURST / (2000 - REFILL) seconds.
        let step = Duration::from_micros(500);
        let mut allowed = 0;
        while !is_exhausted(&budget) {
            budget.cancelled(start + step * allowed);
            allowed += 1;
            assert!(allowed < 10_000, "never cut off");
        }
        let expected = (BURST * 2000.0 / (2000.0 - REFILL_PER_SEC)) as u32;
        assert!(allowed.abs_diff(expected) <= 2, "{allowed} vs {expected}");
    }

    #[tokio::test]
    async fn requests_answered_cost_nothing_and_dropped_ones_count() {
        let budget = budget(Instant::now());
        for _ in 0..(2 * BURST as usize) {
            budget.watch().answered();
        }
        assert!(!is_exhausted(&budget));
        for _ in 0..=(BURST as usize) {
            drop(budget.watch());
        }
        assert!(is_exhausted(&budget));
        // The wake-up was kept for a waiter that comes after it.
        tokio::time::timeout(Duration::from_secs(5), budget.exhausted())
            .await
            .expect("the exhausted budget wakes its waiter");
    }
}
