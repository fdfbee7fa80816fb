//! The parsers: one value of one header in, a duration (or a reason to ignore it) out.
//! Pure functions of their bytes (and of `now` for an HTTP-date): nothing is counted or
//! logged here (see `ignored`), so the property tests can run them by the million.

use std::time::{Duration, SystemTime};

use crate::retry::Decision;

/// A timeout header loopguard reads: which one, its name, and how its values parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timeout {
    /// `X-Prometheus-Scrape-Timeout-Seconds`: decimal seconds.
    Scrape = 0,
    /// `x-envoy-expected-rq-timeout-ms`: whole milliseconds.
    Envoy = 1,
    /// `grpc-timeout`: 1 to 8 digits and a unit.
    Grpc = 2,
}

/// What one element of a timeout header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Said {
    /// A timeout: the caller waits this long (zero only for gRPC: already expired).
    Timeout(Duration),
    /// The header's own way of saying "no timeout" (Envoy's `0`): nothing to spend, and
    /// nothing wrong with it either.
    NoTimeout,
    /// Not a value of this header: ignored, and counted as ignored.
    Invalid,
}

impl Timeout {
    /// Every timeout header, in a fixed order (the `header` label values' order).
    pub(crate) const ALL: [Timeout; 3] = [Timeout::Scrape, Timeout::Envoy, Timeout::Grpc];

    /// The header's name as HTTP/2 and `http::HeaderName` write it (lowercase); also the
    /// `header` label of `loopguard_ignored_budget_headers_total`.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Timeout::Scrape => "x-prometheus-scrape-timeout-seconds",
            Timeout::Envoy => "x-envoy-expected-rq-timeout-ms",
            Timeout::Grpc => "grpc-timeout",
        }
    }

    /// The timeout header called `name` (compared case-insensitively), if it is one.
    pub(crate) fn named(name: &[u8]) -> Option<Timeout> {
        Timeout::ALL
            .into_iter()
            .find(|t| name.eq_ignore_ascii_case(t.name().as_bytes()))
    }

    /// What one element of a value of this header says.
    pub(crate) fn parse(self, element: &[u8]) -> Said {
        let parsed = match self {
            Timeout::Scrape => scrape_timeout(element).map(Said::Timeout),
            Timeout::Envoy => envoy(element),
            Timeout::Grpc => grpc_timeout(element).map(Said::Timeout),
        };
        parsed.unwrap_or(Said::Invalid)
    }

    /// Every element of one value (one header line) of this header, as a list: a proxy may
    /// fold several lines into one, comma-separated (RFC 9110, section 5.3), and a folded
    /// line means what its lines meant. Empty elements are skipped, as the RFC asks
    /// (section 5.6.1); a value with no element at all (empty, or only commas and spaces)
    /// is one invalid element. `said` hears each element and what it says.
    pub(crate) fn each(self, value: &[u8], mut said: impl FnMut(&[u8], Said)) {
        let mut any = false;
        for element in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if !element.is_empty() {
                any = true;
                said(element, self.parse(element));
            }
        }
        if !any {
            said(value, Said::Invalid);
        }
    }
}

/// The timeout in a scrape-timeout value: a finite, positive decimal number of seconds
/// (`"10"`, `"0.5"`, `"1e1"`), or `None`.
pub(crate) fn scrape_timeout(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value.trim_ascii()).ok()?;
    let seconds: f64 = text.parse().ok()?;
    if !(seconds.is_finite() && seconds > 0.0) {
        return None;
    }
    // Values too big for a `Duration` are an error here, not a panic.
    positive(Duration::try_from_secs_f64(seconds).ok()?)
}

/// The timeout in an Envoy value: a positive whole number of milliseconds (ASCII digits
/// only), or `None` (`0`, Envoy's "no timeout", included).
#[cfg(all(test, not(loopguard_loom)))]
pub(crate) fn envoy_timeout(value: &[u8]) -> Option<Duration> {
    match envoy(value)? {
        Said::Timeout(timeout) => Some(timeout),
        Said::NoTimeout | Said::Invalid => None,
    }
}

/// An Envoy value: whole milliseconds, `0` meaning the route has no timeout (Envoy's
/// convention for its timeouts).
fn envoy(value: &[u8]) -> Option<Said> {
    let millis = digits(value.trim_ascii(), 20)?;
    Some(match millis {
        0 => Said::NoTimeout,
        n => Said::Timeout(Duration::from_millis(n)),
    })
}

/// The timeout in a `grpc-timeout` value: 1 to 8 ASCII digits followed by a unit (`H`
/// hours, `M` minutes, `S` seconds, `m` milliseconds, `u` microseconds, `n` nanoseconds),
/// or `None`. Zero is a timeout: a deadline that has already passed, as gRPC means it.
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
    Some(timeout)
}

/// [`retry_after`](super::retry_after) as seen at `now`: an HTTP-date is counted from `now`.
pub(crate) fn retry_after_at(value: &[u8], now: SystemTime) -> Option<Duration> {
    let raw = value.trim_ascii();
    if raw.first().is_some_and(u8::is_ascii_digit) {
        // delay-seconds: 1*DIGIT; `digits` refuses anything else and any overflow.
        return digits(raw, 20).map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(std::str::from_utf8(raw).ok()?).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A `grpc-retry-pushback-ms` value as gRPC reads it (gRFC A6, and grpc-go's
/// `strconv.Atoi`): an optional sign and decimal digits that fit an `i64`. Non-negative:
/// retry after that many milliseconds; negative, or anything else: do not retry.
pub(crate) fn retry_pushback(value: &[u8]) -> Decision {
    let raw = value.trim_ascii();
    let (negative, number) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, raw),
    };
    // 19 digits hold every i64; `digits` refuses a sign or anything else inside.
    match digits(number, 19) {
        Some(millis) if !negative && i64::try_from(millis).is_ok() => {
            Decision::RetryAfter(Duration::from_millis(millis))
        }
        // `-0` is zero, as `Atoi` reads it.
        Some(0) => Decision::RetryAfter(Duration::ZERO),
        _ => Decision::Stop,
    }
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
