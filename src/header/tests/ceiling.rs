//! A budget a caller declared is a ceiling: whatever the offset, no budget is above any
//! timeout a request sent (Prometheus', Envoy's or gRPC's), and an offset that would use
//! a timeout up spends half of it, never the server's default. Tables of the cases that
//! used to fall back to the default, and property tests over all three headers.

use std::time::Duration;

use crate::header::{
    ENVOY_TIMEOUT_HEADER, GRPC_TIMEOUT_HEADER, SCRAPE_TIMEOUT_HEADER, budget, request_budget,
    request_deadline, scrape_budget, scrape_timeout,
};
use proptest::prelude::*;

use super::{durations, ms, quiet};

const DEFAULT: Duration = Duration::from_secs(30);

#[test]
fn an_offset_that_uses_the_timeout_up_spends_half_of_it() {
    // (timeout, offset, budget) with a 30 s default.
    let table = [
        (ms(400), ms(500), ms(200)), // the Envoy caller: 200 ms, not 30 s
        (ms(500), ms(500), ms(250)), // an offset equal to the timeout
        (ms(999), ms(500), Duration::from_micros(499_500)), // 499 ms would be under half
        (ms(1_000), ms(500), ms(500)), // exactly half: the two rules agree
        (ms(1_001), ms(500), ms(501)), // less than half: timeout - offset
        (ms(10_000), ms(500), ms(9_500)),
        (ms(400), Duration::MAX, ms(200)), // however large the offset
        (Duration::from_nanos(1), ms(500), Duration::from_nanos(1)), // positive, rounded up
        (Duration::from_nanos(3), ms(500), Duration::from_nanos(2)),
        (ms(400), Duration::ZERO, ms(400)), // no offset: the whole timeout
        (ms(60_000), ms(500), DEFAULT),     // a longer timeout: the default caps it
    ];
    for (timeout, offset, want) in table {
        let got = budget(Some(timeout), DEFAULT, offset);
        assert_eq!(got, want, "timeout {timeout:?}, offset {offset:?}");
        assert!(got <= timeout);
    }
}

#[test]
fn every_header_is_a_ceiling() {
    let offset = ms(500);
    // Each header alone, at a timeout the offset would use up.
    let alone: [(&str, &[u8], Duration); 3] = [
        (SCRAPE_TIMEOUT_HEADER, b"0.4", ms(200)),
        (ENVOY_TIMEOUT_HEADER, b"400", ms(200)),
        (GRPC_TIMEOUT_HEADER, b"400m", ms(200)),
    ];
    for (name, value, want) in alone {
        let headers = [(name, value)];
        assert_eq!(
            request_budget(headers, DEFAULT, offset, quiet),
            want,
            "{name}"
        );
    }
    // A short Envoy timeout beside a long scrape timeout: the short one still caps it
    // (once the short one fell back to the default and the scrape's 9.5 s was spent).
    let headers = [(SCRAPE_TIMEOUT_HEADER, "10"), (ENVOY_TIMEOUT_HEADER, "300")];
    assert_eq!(request_budget(headers, DEFAULT, offset, quiet), ms(150));
    let left = request_deadline(headers, DEFAULT, offset)
        .remaining()
        .expect("a real deadline");
    assert!(left <= ms(150), "{left:?}");
    let left = request_deadline([(ENVOY_TIMEOUT_HEADER, "400")], DEFAULT, offset)
        .remaining()
        .expect("a real deadline");
    assert!(left <= ms(200), "{left:?}");
    assert_eq!(scrape_budget(Some(b"0.4"), DEFAULT, offset, quiet), ms(200));
}

/// A timeout as a header can say it: positive.
fn positive() -> impl Strategy<Value = Duration> {
    durations().prop_map(|d| d.max(Duration::from_nanos(1)))
}

/// A valid value of one of the three headers, in its own format, and the timeout it says.
fn timeouts() -> impl Strategy<Value = (&'static str, String, Duration)> {
    prop_oneof![
        // Seconds as a decimal: the timeout is what the header's own parser reads (a
        // float may round a millisecond by a nanosecond).
        (1u64..10_000_000).prop_map(|n| {
            let value = format!("{}.{:03}", n / 1000, n % 1000);
            let timeout = scrape_timeout(value.as_bytes()).expect("a valid scrape timeout");
            (SCRAPE_TIMEOUT_HEADER, value, timeout)
        }),
        (1u64..10_000_000).prop_map(|n| (ENVOY_TIMEOUT_HEADER, n.to_string(), ms(n))),
        (1u64..99_999_999).prop_map(|n| (GRPC_TIMEOUT_HEADER, format!("{n}m"), ms(n))),
        (1u64..99_999_999).prop_map(|n| (
            GRPC_TIMEOUT_HEADER,
            format!("{n}n"),
            Duration::from_nanos(n)
        )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn no_budget_is_above_any_header(sent in proptest::collection::vec(timeouts(), 1..6),
                                     default in durations(), offset in durations()) {
        // Every line counts, a header's second line as much as its first.
        let mut headers: Vec<(&str, Vec<u8>)> = Vec::new();
        let mut ceilings = Vec::new();
        for (name, value, timeout) in sent {
            headers.push((name, value.into_bytes()));
            ceilings.push(timeout);
        }
        let got = request_budget(headers, default, offset, quiet);
        for ceiling in &ceilings {
            prop_assert!(got <= *ceiling, "{got:?} above a header's {ceiling:?}");
        }
        prop_assert!(got <= default);
        if !default.is_zero() {
            prop_assert!(!got.is_zero(), "a positive default and a timeout leave a budget");
        }
    }

    #[test]
    fn a_longer_timeout_never_gets_a_shorter_budget(a in positive(), b in positive(),
                                                    default in durations(),
                                                    offset in durations()) {
        let (short, long) = if a <= b { (a, b) } else { (b, a) };
        let (s, l) = (budget(Some(short), default, offset), budget(Some(long), default, offset));
        prop_assert!(s <= l, "{short:?} -> {s:?}, {long:?} -> {l:?}");
        prop_assert!(s <= short && l <= long);
        prop_assert!(s >= (short / 2).min(default), "at least half of the timeout is spent");
    }
}
