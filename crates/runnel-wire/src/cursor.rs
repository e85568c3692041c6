//! Stream cursors for CDN collapsing: the number of 20-second intervals
//! since 2024-10-09T00:00:00Z. When a client's cursor is not behind the
//! current interval, the answer jumps ahead by a random 1-3600 seconds'
//! worth of intervals, so cursors only ever grow and a cached empty answer
//! cannot loop forever.

use rand::Rng;

/// 2024-10-09T00:00:00Z in Unix milliseconds.
const EPOCH_MS: i64 = 1_728_432_000_000;
const INTERVAL_MS: i64 = 20_000;

/// The interval `now_ms` falls in: the cursor a client without one gets.
pub fn current_interval(now_ms: i64) -> u64 {
    ((now_ms - EPOCH_MS).max(0) / INTERVAL_MS) as u64
}

pub fn next_cursor(now_ms: i64, client: Option<&str>) -> String {
    let current = current_interval(now_ms);
    let client = client.and_then(|c| c.parse::<u64>().ok());
    let cursor = match client {
        Some(c) if c >= current => {
            let jitter_secs: u64 = rand::thread_rng().gen_range(1..=3600);
            c.saturating_add((jitter_secs * 1000 / INTERVAL_MS as u64).max(1))
        }
        _ => current,
    };
    cursor.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_counts_intervals_and_always_moves_past_the_client() {
        let now = EPOCH_MS + 45_000;
        assert_eq!(next_cursor(now, None), "2");
        assert_eq!(current_interval(now), 2);
        assert_eq!(next_cursor(now, Some("1")), "2");
        for _ in 0..100 {
            let next: u64 = next_cursor(now, Some("2")).parse().unwrap();
            assert!((3..=2 + 180).contains(&next));
        }
        assert_eq!(next_cursor(now, Some("garbage")), "2");
    }
}
