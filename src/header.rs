//! A scrape budget from Prometheus' scrape-timeout header.
//!
//! Prometheus tells a target how long it will wait for a scrape in the
//! [`SCRAPE_TIMEOUT_HEADER`] request header, in seconds (`"10"`, `"0.5"`). An exporter
//! that answers within that time, less a margin for encoding and the network, serves
//! the scrape instead of finishing work nobody will read.
//!
//! The header is outside input: a value that is not a positive, finite number of
//! seconds, or that the margin uses up, is ignored and the server's own default
//! budget stands. Parsing never panics.

use std::time::Duration;

use crate::deadline::Deadline;

/// The request header in which Prometheus sends its scrape timeout, in seconds.
///
/// HTTP header names are case-insensitive; compare accordingly.
///
/// # Examples
///
/// ```
/// use loopguard::header::SCRAPE_TIMEOUT_HEADER;
///
/// assert!(SCRAPE_TIMEOUT_HEADER.eq_ignore_ascii_case("x-prometheus-scrape-timeout-seconds"));
/// ```
pub const SCRAPE_TIMEOUT_HEADER: &str = "X-Prometheus-Scrape-Timeout-Seconds";

/// The budget for one scrape: `min(default, header - offset)`.
///
/// `value` is the raw header value, if the request had one. It counts only when it
/// is a finite, positive number of seconds (surrounding ASCII whitespace allowed) that
/// fits a [`Duration`] and exceeds `offset`. Anything else (missing, empty, zero,
/// negative, NaN, infinite, out of range, not a number, not UTF-8, or a value that
/// `offset` uses up) leaves `default`.
///
/// The result never exceeds `default`, and is greater than zero whenever `default`
/// is.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::header::scrape_budget;
///
/// let default = Duration::from_secs(30);
/// let margin = Duration::from_millis(500);
///
/// assert_eq!(scrape_budget(Some(b"10"), default, margin), Duration::from_millis(9500));
/// assert_eq!(scrape_budget(Some(b"120"), default, margin), default);
/// assert_eq!(scrape_budget(Some(b"0.25"), default, margin), default);
/// assert_eq!(scrape_budget(Some(b"soon"), default, margin), default);
/// assert_eq!(scrape_budget(None, default, margin), default);
/// ```
pub fn scrape_budget(value: Option<&[u8]>, default: Duration, offset: Duration) -> Duration {
    match value
        .and_then(parse_seconds)
        .and_then(|t| t.checked_sub(offset))
    {
        Some(budget) if !budget.is_zero() => budget.min(default),
        _ => default,
    }
}

/// A deadline [`scrape_budget()`] from now.
///
/// Call it when the request arrives, before any queue, so the wait for a slot
/// spends the same budget as the work.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::header::scrape_deadline;
///
/// let deadline = scrape_deadline(Some(b"10"), Duration::from_secs(30), Duration::from_millis(500));
/// assert!(deadline.remaining().unwrap() <= Duration::from_millis(9500));
/// ```
pub fn scrape_deadline(value: Option<&[u8]>, default: Duration, offset: Duration) -> Deadline {
    Deadline::after(scrape_budget(value, default, offset))
}

/// A positive, finite number of seconds that fits a `Duration`, or `None`.
fn parse_seconds(raw: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(raw.trim_ascii()).ok()?;
    let seconds: f64 = text.parse().ok()?;
    if !(seconds.is_finite() && seconds > 0.0) {
        return None;
    }
    // Values too big for a `Duration` are an error here, not a panic.
    let duration = Duration::try_from_secs_f64(seconds).ok()?;
    (!duration.is_zero()).then_some(duration)
}
