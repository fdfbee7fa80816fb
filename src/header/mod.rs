//! Budgets from request headers: how long the caller will wait, as it says itself.
//!
//! Callers that time out say so in a header, and an answer after that moment is work
//! nobody will read:
//!
//! | header | sent by | format |
//! |---|---|---|
//! | [`SCRAPE_TIMEOUT_HEADER`] | Prometheus, on every scrape | seconds, decimal (`10`, `0.5`) |
//! | `x-envoy-expected-rq-timeout-ms` | Envoy (Istio), on routed requests | whole milliseconds (`15000`); `0` is Envoy's "no timeout" |
//! | `grpc-timeout` | gRPC clients | 1 to 8 digits and a unit `H` `M` `S` `m` `u` `n` (`500m`); `0S` has already expired |
//!
//! Each is outside input, parsed with the same rules: a value counts when it is a finite,
//! positive duration that fits a [`Duration`] (surrounding ASCII whitespace allowed), or a
//! gRPC zero, which gRPC sends for a deadline that has already passed: the budget is then
//! zero, a deadline expired on arrival (nothing should start for it), never the server's
//! default. Anything else (empty, negative, not a number, out of range, not UTF-8, a zero
//! of the other two) is ignored. Parsing never panics.
//!
//! # Every line, every element
//!
//! A budget a caller declared is a ceiling, however it is sent. Every line of every
//! timeout header counts, and a line is read as a comma-separated list, because a proxy
//! may fold several lines into one (RFC 9110, section 5.3: `grpc-timeout: 10S, 1S` is the
//! two lines `10S` and `1S`). The budget is the earliest of all of them: each element
//! counts on its own, an invalid one is ignored like an invalid line, and empty elements
//! are skipped (RFC 9110, section 5.6.1). A decimal comma is no exception: a scrape
//! timeout of `1,5` reads as 1 s and 5 s, and 1 s is spent, within the 1.5 s such a caller
//! meant.
//!
//! # Ignored input is counted and said once
//!
//! Each ignored value (an element that is not a value of its header, or a line with no
//! element at all) counts in `loopguard_ignored_budget_headers_total{header}`, the header
//! being one of the three names above in lowercase (a fixed set: other headers are never
//! looked at); the three series are created with a zero at the first call of
//! [`request_deadline`] or [`scrape_deadline`]. The first ignored value of each header in
//! the process is also logged (a `warn` through the `log` facade, target `loopguard`), its
//! value cut to 32 bytes and escaped, so a misconfigured proxy is seen without a flood. An
//! Envoy `0` is Envoy's own "no timeout": ignored, not counted.
//!
//! # Budgets
//!
//! A budget is `min(default, timeout - offset)`: the server's own default, cut by what the
//! caller said less an `offset` kept for encoding, sending and parsing the answer. The
//! offset never takes more than half of the caller's timeout, so a budget is never above
//! any timeout the caller sent: a `400 ms` timeout with a `500 ms` offset is a `200 ms`
//! budget, never the server's default (spending half serves a short caller when an
//! answer is quick, say a cached one; refusing at once never could).
//! [`request_deadline`] spends the earliest of all three headers at once.
//!
//! The other way round, a server that turns a caller away says when to come back:
//! [`retry_after`] reads HTTP's `Retry-After`, [`retry_pushback`] gRPC's
//! `grpc-retry-pushback-ms`, with the same never-panic rules, for a
//! [`Retry`](crate::retry::Retry) rule to honour.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use loopguard::header::{request_deadline, SCRAPE_TIMEOUT_HEADER};
//!
//! // Any header map works: give its (name, value) pairs, every line of every header.
//! // (With `http`, that is `request_deadline(request.headers(), ..)`.)
//! let headers = [
//!     (SCRAPE_TIMEOUT_HEADER, "10"),
//!     ("x-envoy-expected-rq-timeout-ms", "3000"),
//!     ("grpc-timeout", "20S, 8S"), // folded by a proxy: two timeouts
//! ];
//! let deadline = request_deadline(headers, Duration::from_secs(30), Duration::from_millis(500));
//! // Envoy's 3 s is the earliest: 2.5 s left after the offset.
//! assert!(deadline.remaining().unwrap() <= Duration::from_millis(2500));
//! ```

use std::time::{Duration, SystemTime};

use crate::deadline::Deadline;
use crate::retry::Decision;

mod ignored;
mod parse;

pub(crate) use parse::{Said, Timeout};
#[cfg(all(test, not(loopguard_loom)))]
pub(crate) use parse::{envoy_timeout, grpc_timeout, scrape_timeout};

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
#[cfg(all(test, not(loopguard_loom)))]
pub(crate) const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";

/// The request header in which a gRPC client sends its deadline as a timeout.
#[cfg(all(test, not(loopguard_loom)))]
pub(crate) const GRPC_TIMEOUT_HEADER: &str = "grpc-timeout";

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
/// The budget is greater than zero whenever `default` and the timeout are, and never
/// exceeds either; a zero timeout (gRPC's expired deadline) is a zero budget.
pub(crate) fn budget(timeout: Option<Duration>, default: Duration, offset: Duration) -> Duration {
    match timeout {
        // `timeout - timeout / 2` is at least half the timeout, rounded up: positive for
        // any positive timeout, and never above it.
        Some(timeout) => (timeout - offset.min(timeout / 2)).min(default),
        None => default,
    }
}

/// The earliest timeout in `values`, every element of every value of `header`; each
/// ignored one goes to `ignored`.
fn earliest<V: AsRef<[u8]>>(
    header: Timeout,
    values: impl IntoIterator<Item = V>,
    ignored: &mut impl FnMut(Timeout, &[u8]),
) -> Option<Duration> {
    let mut earliest: Option<Duration> = None;
    for value in values {
        header.each(value.as_ref(), |element, said| match said {
            Said::Timeout(t) => earliest = Some(earliest.map_or(t, |e| e.min(t))),
            Said::NoTimeout => {}
            Said::Invalid => ignored(header, element),
        });
    }
    earliest
}

/// The budget of one scrape: [`budget`] of the earliest scrape timeout in `values` (every
/// line of the request's [`SCRAPE_TIMEOUT_HEADER`]).
pub(crate) fn scrape_budget<V: AsRef<[u8]>>(
    values: impl IntoIterator<Item = V>,
    default: Duration,
    offset: Duration,
    mut ignored: impl FnMut(Timeout, &[u8]),
) -> Duration {
    budget(
        earliest(Timeout::Scrape, values, &mut ignored),
        default,
        offset,
    )
}

/// The budget of one scrape as a deadline from now: `min(default, timeout - offset)` for
/// the earliest timeout in `values` (every line of the request's
/// [`SCRAPE_TIMEOUT_HEADER`], each read as a list), the offset taking at most half of that
/// timeout; `default` when there is none or none is valid.
///
/// Call it when the request arrives, before any queue, so the wait for a slot spends the
/// same budget as the work. Ignored values are counted and the first one logged (see the
/// [module docs](self#ignored-input-is-counted-and-said-once)). For a request that may
/// also carry Envoy's or gRPC's timeout, use [`request_deadline`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::header::scrape_deadline;
///
/// let (default, offset) = (Duration::from_secs(30), Duration::from_millis(500));
/// let deadline = scrape_deadline(Some(b"10"), default, offset);
/// assert!(deadline.remaining().unwrap() <= Duration::from_millis(9500));
/// // Two lines (or one folded line): the earlier one counts.
/// let deadline = scrape_deadline(["10", "2"], default, offset);
/// assert!(deadline.remaining().unwrap() <= Duration::from_millis(1500));
/// ```
pub fn scrape_deadline<V: AsRef<[u8]>>(
    values: impl IntoIterator<Item = V>,
    default: Duration,
    offset: Duration,
) -> Deadline {
    ignored::create_series();
    Deadline::after(scrape_budget(values, default, offset, ignored::report))
}

/// The budget of a request that may carry any of the three headers: [`budget`] of the
/// earliest timeout among every element of every line of them, so never above any timeout
/// the request sent. `headers` are the request's (name, value) pairs; names are compared
/// case-insensitively, and other headers are skipped. Each ignored value goes to
/// `ignored`.
pub(crate) fn request_budget<N, V>(
    headers: impl IntoIterator<Item = (N, V)>,
    default: Duration,
    offset: Duration,
    mut ignored: impl FnMut(Timeout, &[u8]),
) -> Duration
where
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    let mut timeout: Option<Duration> = None;
    for (name, value) in headers {
        let Some(header) = Timeout::named(name.as_ref()) else {
            continue;
        };
        if let Some(t) = earliest(header, [value], &mut ignored) {
            timeout = Some(timeout.map_or(t, |e| e.min(t)));
        }
    }
    // `budget` grows with the timeout: the earliest timeout gives the earliest budget.
    budget(timeout, default, offset)
}

/// The earliest budget of all three headers (Prometheus', Envoy's, gRPC's), each less
/// `offset` (at most half of it) and at most `default`, as a deadline from now. Call it
/// when the request arrives, before any queue.
///
/// `headers` are the request's (name, value) pairs, one per header line, as any header
/// map iterates them: `request.headers()` for an `http::HeaderMap` (its iterator gives
/// every line of a header sent more than once), or a slice of pairs. Every line of each
/// timeout header counts, each read as a comma-separated list (see the
/// [module docs](self#every-line-every-element)); names are compared case-insensitively
/// and other headers are skipped. A gRPC zero (`grpc-timeout: 0S`) is a deadline that has
/// already expired. Ignored values are counted and the first of each header logged.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::header::request_deadline;
///
/// let (default, offset) = (Duration::from_secs(30), Duration::from_millis(500));
/// // A header sent twice: the earlier line is the ceiling, not the first one.
/// let headers = [("grpc-timeout", "10S"), ("grpc-timeout", "1S")];
/// let deadline = request_deadline(headers, default, offset);
/// assert!(deadline.remaining().unwrap() <= Duration::from_millis(500));
/// // gRPC's zero: the caller's deadline has already passed.
/// assert!(request_deadline([("grpc-timeout", "0S")], default, offset).is_expired());
/// // Garbage is ignored (and counted): the server's default.
/// let deadline = request_deadline([("grpc-timeout", "soon")], default, offset);
/// assert!(deadline.remaining().unwrap() > Duration::from_secs(29));
/// ```
pub fn request_deadline<N, V>(
    headers: impl IntoIterator<Item = (N, V)>,
    default: Duration,
    offset: Duration,
) -> Deadline
where
    N: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    ignored::create_series();
    Deadline::after(request_budget(headers, default, offset, ignored::report))
}

/// The response header in which a server says how long to wait before trying again
/// (RFC 9110, section 10.2.3): whole seconds (`120`) or an HTTP-date.
#[cfg(all(test, not(loopguard_loom)))]
pub(crate) const RETRY_AFTER_HEADER: &str = "Retry-After";

/// The response metadata in which a gRPC server says when to retry, or not to.
#[cfg(all(test, not(loopguard_loom)))]
pub(crate) const RETRY_PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

/// How long to wait, from now, as a `Retry-After` value says: delay-seconds (1
/// to 20 ASCII digits, `0` included: try again at once) or an HTTP-date (the three forms
/// RFC 9110 allows, parsed by [`httpdate`]; a date in the past means at once). Anything else
/// (empty, signed, fractional, overflowing, not UTF-8) is `None`. Never panics.
///
/// What a server asks for is not capped here (a date 68 years ahead is 68 years): a
/// [`Retry`](crate::retry::Retry) caps the hints it honours
/// ([`Retry::max_retry_after`](crate::retry::Retry::max_retry_after)).
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
    parse::retry_after_at(value, SystemTime::now())
}

/// What a gRPC server's `grpc-retry-pushback-ms` says, as gRPC reads it (gRFC A6): a
/// non-negative whole number of milliseconds is [`Decision::RetryAfter`] that long; a
/// negative number, or anything that is not a number (empty, fractional, overflowing an
/// `i64`, a folded list of two values), is [`Decision::Stop`], "do not retry". Surrounding
/// ASCII whitespace and a leading `+` are allowed. Never panics.
///
/// A response without the header has no pushback: keep your own rule's answer then
/// ([`Decision::Retry`] for a retryable status). A response with several values is not
/// retried by gRPC either: answer `Decision::Stop` for it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::header::retry_pushback;
/// use loopguard::retry::{Decision, Retry};
///
/// assert_eq!(retry_pushback(b"250"), Decision::RetryAfter(Duration::from_millis(250)));
/// assert_eq!(retry_pushback(b"-1"), Decision::Stop);
/// assert_eq!(retry_pushback(b"soon"), Decision::Stop);
///
/// /// An `UNAVAILABLE` answer and its trailer, if the server sent one.
/// #[derive(Debug)]
/// struct Unavailable { pushback: Option<Vec<u8>> }
///
/// let policy = Retry::new().decide(|e: &Unavailable| match &e.pushback {
///     Some(value) => retry_pushback(value),
///     None => Decision::Retry,
/// });
/// # let _ = policy;
/// ```
pub fn retry_pushback(value: &[u8]) -> Decision {
    parse::retry_pushback(value)
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests;
