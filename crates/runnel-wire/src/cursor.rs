//! Stream cursors, for caches that collapse long-polls (docs/caching.md).
//!
//! A cursor counts 20-second intervals since 2024-10-09T00:00:00Z, as the
//! protocol says, scaled so that it also names the position a reader goes
//! to next: `interval * 10^8 + (position mod 10^8)`. Readers that reach
//! the same position in the same interval get the same cursor whatever
//! cursor they came with, so a cache keyed by (offset, cursor) holds them
//! in one wait, and chains of readers that joined at different moments
//! merge at the next event. When the client's cursor is not behind that
//! value, the answer is the client's plus one: cursors only ever grow, so
//! a cached empty answer cannot loop forever.
//!
//! Cursors stay below 2^53 (JavaScript's exact integers) until 2081.

/// 2024-10-09T00:00:00Z in Unix milliseconds.
const EPOCH_MS: i64 = 1_728_432_000_000;
const INTERVAL_MS: i64 = 20_000;
/// Positions a cursor tells apart within one interval.
const POSITIONS: u64 = 100_000_000;

/// The interval `now_ms` falls in.
pub fn current_interval(now_ms: i64) -> u64 {
    ((now_ms - EPOCH_MS).max(0) / INTERVAL_MS) as u64
}

/// The cursor of an answer at `now_ms` whose reader goes to `position`
/// next, for a client that sent `client`.
pub fn next_cursor(now_ms: i64, client: Option<&str>, position: u64) -> String {
    next_cursor_value(now_ms, client, position).to_string()
}

/// [`next_cursor`] as a number.
pub fn next_cursor_value(now_ms: i64, client: Option<&str>, position: u64) -> u64 {
    let base = current_interval(now_ms)
        .saturating_mul(POSITIONS)
        .saturating_add(position % POSITIONS);
    match client.and_then(|c| c.parse::<u64>().ok()) {
        Some(c) if c >= base => c.saturating_add(1),
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_names_the_interval_and_the_next_position() {
        let now = EPOCH_MS + 45_000;
        assert_eq!(current_interval(now), 2);
        assert_eq!(next_cursor(now, None, 7), "200000007");
        // A client behind gets the same value as one without a cursor: two
        // readers at one position share the cursor whatever their history.
        assert_eq!(next_cursor(now, Some("1"), 7), "200000007");
        assert_eq!(next_cursor(now, Some("100000090"), 7), "200000007");
        assert_eq!(next_cursor(now, Some("garbage"), 7), "200000007");
        // A client not behind always moves on.
        assert_eq!(next_cursor(now, Some("200000007"), 7), "200000008");
        assert_eq!(next_cursor(now, Some("900000000"), 7), "900000001");
        // The old protocol numbering (interval counts) is always behind.
        assert_eq!(next_cursor(now, Some("2"), 0), "200000000");
        // Before the epoch, interval 0.
        assert_eq!(next_cursor(0, None, 5), "5");
    }

    #[test]
    fn cursors_are_exact_javascript_numbers_until_2081() {
        // 2081-01-01 and 2082-01-01 in Unix milliseconds.
        let (year_2081, year_2082) = (3_502_915_200_000, 3_534_451_200_000);
        assert!(next_cursor_value(year_2081, None, POSITIONS - 1) < 1 << 53);
        assert!(next_cursor_value(year_2082, None, 0) > 1 << 53);
    }
}
