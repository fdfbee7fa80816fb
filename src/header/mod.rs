//! Budgets from request headers: how long the caller will wait, as it says itself.
//!
//! Callers that time out say so in a header, and an answer after that moment is work
//! nobody will read:
//!
//! | header | sent by | format |
//! |---|---|---|
//! | [`SCRAPE_TIMEOUT_HEADER`] | Prometheus, on every scrape | seconds, decimal (`10`, `0.5`) |
//! | `x-envoy-expected-rq-timeout-ms` | Envoy (Istio), on routed requests | whole milliseconds (`15000`) |
//! | `grpc-timeout` | gRPC clients | 1 to 8 digits and a unit `H` `M` `S` `m` `u` `n` (`500m`) |
//!
//! Each is outside input, parsed with the same rules: a value counts only when it is a
//! finite, positive duration that fits a [`Duration`] (surrounding ASCII whitespace
//! allowed); anything else (missing, empty, zero, negative, not a number, out of range,
//! not UTF-8) is ignored. Parsing never panics.
//!
//! A budget is `min(default, timeout - offset)`: the server's own default, cut by what the
//! caller said less an `offset` kept for encoding, sending and parsing the answer. The
//! offset never takes more than half of the caller's timeout, so a budget is never above
//! any timeout the caller sent: a `400 ms` timeout with a `500 ms` offset is a `200 ms`
//! budget, never the server's default (spending half serves a short caller when an
//! answer is quick, say a cached one; refusing at once never could).
//! [`request_deadline`] spends the earliest of all three headers at once.
//!
//! The other way round, a server that turns a caller away says when to come back in
//! `Retry-After`; [`retry_after`] reads it, with the same never-panic rules, for a
//! [`Retry`](crate::retry::Retry) rule to honour.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use loopguard::header::{request_deadline, SCRAPE_TIMEOUT_HEADER};
//!
//! // Any header map works: give a lookup by name (compare names case-insensitively).
//! let headers = [(SCRAPE_TIMEOUT_HEADER, "10"), ("x-envoy-expected-rq-timeout-ms", "3000")];
//! let lookup = |name: &str| {
//!     headers
//!         .iter()
//!         .find(|(n, _)| n.eq_ignore_ascii_case(name))
//!         .map(|(_, v)| v.as_bytes())
//! };
//! let deadline = request_deadline(lookup, Duration::from_secs(30), Duration::from_millis(500));
//! // Envoy's 3 s is the earliest: 2.5 s left after the offset.
//! assert!(deadline.remaining().unwrap() <= Duration::from_millis(2500));
//! ```

use std::time::{Duration, SystemTime};

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

/// The request header in which Envoy sends the time it will wait for the upstream, in
/// whole milliseconds.
pub(crate) const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";

/// The request header in which a gRPC client sends its deadline as a timeout.
pub(crate) const GRPC_TIMEOUT_HEADER: &str = "grpc-timeout";

/// The timeout in an [`SCRAPE_TIMEOUT_HEADER`] value: a finite, positive decimal number of
/// seconds (`"10"`, `"0.5"`, `"1e1"`), or `None`.
pub(crate) fn scrape_timeout(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value.trim_ascii()).ok()?;
    let seconds: f64 = text.parse().ok()?;
    if !(seconds.is_finite() && seconds > 0.0) {
        return None;
    }
    // Values too big for a `Duration` are an error here, not a panic.
    positive(Duration::try_from_secs_f64(seconds).ok()?)
}

/// The timeout in an [`ENVOY_TIMEOUT_HEADER`] value: a positive whole number of
/// milliseconds (ASCII digits only), or `None`.
pub(crate) fn envoy_timeout(value: &[u8]) -> Option<Duration> {
    let millis = digits(value.trim_ascii(), 20)?;
    positive(Duration::from_millis(millis))
}

/// The timeout in a [`GRPC_TIMEOUT_HEADER`] value: 1 to 8 ASCII digits followed by a unit
/// (`H` hours, `M` minutes, `S` seconds, `m` milliseconds, `u` microseconds, `n`
/// nanoseconds), positive, or `None`.
pub(crate) fn grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, number) = value.trim_ascii().split_last()?;
    let amount = digits(number, 8)?;
    let timeout = match unit {
        b'H' => Duration::from_secs(amount.checked_mul(3600)?),
        b'M' => Duration::from_secs(amount.checked_mul(60)?),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    };
    positive(timeout)
}

/// How long to spend on a request whose caller sent `timeout`: `min(default, timeout -
/// offset)`, where the offset takes at most half of the timeout; `default` when there is
/// no timeout.
///
/// # Ceilings
///
/// A timeout the caller sent is a ceiling: the budget never exceeds it, whatever the
/// offset. When the offset would use more than half of it (a `400 ms` timeout against a
/// `500 ms` offset), the budget is the timeout's second half, rounded up to the
/// nanosecond: the first half is kept for sending the answer, as the offset would have
/// been. That is also how the budget grows with the timeout: continuously, never
/// shrinking when the caller allows more (`0.4 s` gives 200 ms, `0.75 s` 375 ms, `1 s`
/// 500 ms, `10 s` 9.5 s with a 500 ms offset).
///
/// Why not the server's default, as blackbox_exporter does? Behind a mesh that retries, a
/// 400 ms caller given a 30 s budget starts a walk it gave up on long ago, and its retry
/// on another replica starts another. Why not refuse at once? A short caller is often
/// served in time (a cached answer, a quick job, an idle pool); half its time is a fair
/// guess, and a request that cannot finish in it is refused when the budget runs out.
///
/// The budget is greater than zero whenever `default` is (a timeout is positive), and
/// never exceeds `default`.
pub(crate) fn budget(timeout: Option<Duration>, default: Duration, offset: Duration) -> Duration {
    match timeout {
        // `timeout - timeout / 2` is at least half the timeout, rounded up: positive for
        // any positive timeout, and never above it.
        Some(timeout) => (timeout - offset.min(timeout / 2)).min(default),
        None => default,
    }
}

/// The budget for one scrape: [`budget`] of the [`scrape_timeout`] in `value`, the raw
/// [`SCRAPE_TIMEOUT_HEADER`] value if the request had one.
pub(crate) fn scrape_budget(value: Option<&[u8]>, default: Duration, offset: Duration) -> Duration {
    budget(value.and_then(scrape_timeout), default, offset)
}

/// The budget of one scrape as a deadline from now: `min(default, timeout - offset)` for
/// the timeout in `value` (the raw [`SCRAPE_TIMEOUT_HEADER`] value, if the request had one),
/// the offset taking at most half of that timeout; `default` when there is none or it is
/// invalid.
///
/// Call it when the request arrives, before any queue, so the wait for a slot spends the
/// same budget as the work.
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

/// A deadline from now: [`budget`] of the [`envoy_timeout`] in `value`, the raw
/// [`ENVOY_TIMEOUT_HEADER`] value if the request had one.
#[cfg(test)]
pub(crate) fn envoy_deadline(
    value: Option<&[u8]>,
    default: Duration,
    offset: Duration,
) -> Deadline {
    Deadline::after(budget(value.and_then(envoy_timeout), default, offset))
}

/// A deadline from now: [`budget`] of the [`grpc_timeout`] in `value`, the raw
/// [`GRPC_TIMEOUT_HEADER`] value if the request had one.
#[cfg(test)]
pub(crate) fn grpc_deadline(value: Option<&[u8]>, default: Duration, offset: Duration) -> Deadline {
    Deadline::after(budget(value.and_then(grpc_timeout), default, offset))
}

/// The budget of a request that may carry any of the three headers: [`budget`] of the
/// earliest valid timeout among them, so never above any timeout the request sent.
/// `lookup` returns a header's raw value by name (matching names case-insensitively, as
/// HTTP header maps do).
pub(crate) fn request_budget<'a>(
    lookup: impl Fn(&str) -> Option<&'a [u8]>,
    default: Duration,
    offset: Duration,
) -> Duration {
    type Parse = fn(&[u8]) -> Option<Duration>;
    let parsers: [(&str, Parse); 3] = [
        (SCRAPE_TIMEOUT_HEADER, scrape_timeout),
        (ENVOY_TIMEOUT_HEADER, envoy_timeout),
        (GRPC_TIMEOUT_HEADER, grpc_timeout),
    ];
    parsers
        .iter()
        .map(|(name, parse)| budget(lookup(name).and_then(parse), default, offset))
        .min()
        .unwrap_or(default)
}

/// The earliest budget of all three headers (Prometheus', Envoy's, gRPC's), each less
/// `offset` (at most half of it) and at most `default`, as a deadline from now. Call it
/// when the request arrives, before any queue.
///
/// # Examples
///
/// See the [module docs](self).
pub fn request_deadline<'a>(
    lookup: impl Fn(&str) -> Option<&'a [u8]>,
    default: Duration,
    offset: Duration,
) -> Deadline {
    Deadline::after(request_budget(lookup, default, offset))
}

/// The response header in which a server says how long to wait before trying again
/// (RFC 9110, section 10.2.3): whole seconds (`120`) or an HTTP-date.
#[cfg(test)]
pub(crate) const RETRY_AFTER_HEADER: &str = "Retry-After";

/// How long to wait, from now, as a `Retry-After` value says: delay-seconds (1
/// to 20 ASCII digits, `0` included: try again at once) or an HTTP-date (the three forms
/// RFC 9110 allows, parsed by [`httpdate`]; a date in the past means at once). Anything else
/// (empty, signed, fractional, overflowing, not UTF-8) is `None`. Never panics.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use loopguard::header::retry_after;
///
/// assert_eq!(retry_after(b"120"), Some(Duration::from_secs(120)));
/// assert_eq!(retry_after(b"0"), Some(Duration::ZERO));
/// assert_eq!(retry_after(b"Thu, 01 Jan 1970 00:00:00 GMT"), Some(Duration::ZERO));
/// let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(60));
/// assert!(retry_after(later.as_bytes()).unwrap() <= Duration::from_secs(60));
/// assert_eq!(retry_after(b"-1"), None);
/// assert_eq!(retry_after(b"1.5"), None);
/// ```
pub fn retry_after(value: &[u8]) -> Option<Duration> {
    retry_after_at(value, SystemTime::now())
}

/// [`retry_after`] as seen at `now`: an HTTP-date is counted from `now`.
pub(crate) fn retry_after_at(value: &[u8], now: SystemTime) -> Option<Duration> {
    let raw = value.trim_ascii();
    if raw.first().is_some_and(u8::is_ascii_digit) {
        // delay-seconds: 1*DIGIT; `digits` refuses anything else and any overflow.
        return digits(raw, 20).map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(std::str::from_utf8(raw).ok()?).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// 1 to `max` ASCII digits as a number, or `None` (no sign, no other character, no
/// overflow).
fn digits(raw: &[u8], max: usize) -> Option<u64> {
    if raw.is_empty() || raw.len() > max || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    raw.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

fn positive(timeout: Duration) -> Option<Duration> {
    (!timeout.is_zero()).then_some(timeout)
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests;
