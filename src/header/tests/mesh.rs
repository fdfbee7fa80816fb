//! The budgets a mesh and gRPC send: `x-envoy-expected-rq-timeout-ms`, `grpc-timeout`, and
//! the earliest of all three headers. Tables of real and hostile values, and property tests
//! that parsing never panics, never exceeds the default, and spends the earliest budget.

use std::time::Duration;

use crate::header::{
    ENVOY_TIMEOUT_HEADER, GRPC_TIMEOUT_HEADER, SCRAPE_TIMEOUT_HEADER, budget, envoy_timeout,
    grpc_timeout, request_budget, request_deadline, scrape_timeout,
};
use proptest::prelude::*;

use super::{DEFAULT, OFFSET, durations, ms, quiet};

#[test]
fn header_names() {
    assert_eq!(ENVOY_TIMEOUT_HEADER, "x-envoy-expected-rq-timeout-ms");
    assert_eq!(GRPC_TIMEOUT_HEADER, "grpc-timeout");
}

#[test]
fn envoy_values() {
    let counts: &[(&[u8], Duration)] = &[
        (b"15000", ms(15_000)), // Envoy's usual form
        (b"1", ms(1)),
        (b" 250 ", ms(250)),
        (b"\t250", ms(250)),
        (b"0015", ms(15)),
        (b"18446744073709551615", ms(u64::MAX)), // the largest u64 fits a Duration
    ];
    for (raw, want) in counts {
        let got = envoy_timeout(raw);
        assert_eq!(got, Some(*want), "{:?}", String::from_utf8_lossy(raw));
    }
    let ignored: &[&[u8]] = &[
        b"",
        b" ",
        b"0",
        b"000",
        b"-1",
        b"+15",
        b"1.5",
        b"1e3",
        b"15000ms",
        b"15 000",
        b"0x10",
        b"NaN",
        b"18446744073709551616", // overflows u64
        b"99999999999999999999999",
        b"\xff",
        "１５".as_bytes(),
    ];
    for raw in ignored {
        assert_eq!(
            envoy_timeout(raw),
            None,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn grpc_values() {
    let counts: &[(&[u8], Duration)] = &[
        (b"1H", Duration::from_secs(3600)),
        (b"2M", Duration::from_secs(120)),
        (b"10S", Duration::from_secs(10)),
        (b"500m", ms(500)),
        (b"250u", Duration::from_micros(250)),
        (b"7n", Duration::from_nanos(7)),
        (b"99999999H", Duration::from_secs(99_999_999 * 3600)), // 8 digits, the most
        (b" 5S ", Duration::from_secs(5)),
        // Zero: a deadline that has already passed, as gRPC means it.
        (b"0S", Duration::ZERO),
        (b"00000m", Duration::ZERO),
        (b"0n", Duration::ZERO),
        (b"0H", Duration::ZERO),
    ];
    for (raw, want) in counts {
        let got = grpc_timeout(raw);
        assert_eq!(got, Some(*want), "{:?}", String::from_utf8_lossy(raw));
    }
    let ignored: &[&[u8]] = &[
        b"",
        b"S",
        b"10",         // no unit
        b"0",          // no unit
        b"-1S",        // sign
        b"-0S",        // sign
        b"+1S",        // sign
        b"1.5S",       // fraction
        b"1s",         // lower-case s is not a unit
        b"1h",         // nor h
        b"1 S",        // space inside
        b"123456789S", // 9 digits
        b"1SS",
        b"\xffS",
        "１S".as_bytes(),
    ];
    for raw in ignored {
        assert_eq!(
            grpc_timeout(raw),
            None,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn budgets_and_deadlines() {
    assert_eq!(budget(envoy_timeout(b"2000"), DEFAULT, OFFSET), ms(1_500));
    assert_eq!(budget(envoy_timeout(b"500"), DEFAULT, OFFSET), ms(250));
    assert_eq!(budget(envoy_timeout(b"60000"), DEFAULT, OFFSET), DEFAULT);
    assert_eq!(
        budget(grpc_timeout(b"1S"), DEFAULT, Duration::ZERO),
        ms(1_000)
    );
    let d = request_deadline([(ENVOY_TIMEOUT_HEADER, "2000")], DEFAULT, OFFSET);
    let left = d.remaining().expect("a real deadline");
    assert!(left <= ms(1_500) && left > ms(500), "{left:?}");
    let d = request_deadline([(GRPC_TIMEOUT_HEADER, "nonsense")], DEFAULT, OFFSET);
    assert!(d.remaining().expect("a real deadline") <= DEFAULT);
}

#[test]
fn a_zero_grpc_timeout_has_already_expired() {
    // gRPC sends a zero for a deadline that passed before the request was sent: the budget
    // is zero, whatever the other headers and the default say, never the default.
    for value in ["0S", "0m", "0n", "000M"] {
        let headers = [(SCRAPE_TIMEOUT_HEADER, "10"), (GRPC_TIMEOUT_HEADER, value)];
        assert_eq!(
            request_budget(headers, DEFAULT, OFFSET, quiet),
            Duration::ZERO,
            "{value}"
        );
        let deadline = request_deadline(headers, DEFAULT, OFFSET);
        assert!(deadline.is_expired(), "{value}: {deadline:?}");
        assert_eq!(deadline.remaining(), Some(Duration::ZERO));
    }
    // Envoy's zero is its "no timeout", and Prometheus never sends one: neither expires.
    let headers = [(ENVOY_TIMEOUT_HEADER, "0"), (SCRAPE_TIMEOUT_HEADER, "0")];
    assert_eq!(request_budget(headers, DEFAULT, OFFSET, quiet), DEFAULT);
}

#[test]
fn the_earliest_header_wins() {
    let headers = [
        ("x-prometheus-scrape-timeout-seconds", "10"),
        ("X-Envoy-Expected-Rq-Timeout-Ms", "3000"),
        ("grpc-timeout", "5S"),
        ("x-unrelated", "1"),
    ];
    assert_eq!(request_budget(headers, DEFAULT, OFFSET, quiet), ms(2_500));
    // A malformed header does not count; the others still do.
    let headers = [
        (SCRAPE_TIMEOUT_HEADER, "10"),
        (ENVOY_TIMEOUT_HEADER, "-1"),
        (GRPC_TIMEOUT_HEADER, "3"),
    ];
    assert_eq!(request_budget(headers, DEFAULT, OFFSET, quiet), ms(9_500));
    // None at all: the default.
    let none: [(&str, &str); 0] = [];
    assert_eq!(request_budget(none, DEFAULT, OFFSET, quiet), DEFAULT);
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..24),
        "[0-9]{0,10}[HMSmun]?".prop_map(String::into_bytes),
        "[ +-]?[0-9]{0,22}".prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn envoy_never_panics_and_stays_in_budget(raw in bytes(), default in durations(),
                                              offset in durations()) {
        let got = budget(envoy_timeout(&raw), default, offset);
        prop_assert!(got <= default);
        if !default.is_zero() {
            prop_assert!(!got.is_zero());
        }
        // Whatever counts is exactly its digits in milliseconds.
        if let Some(t) = envoy_timeout(&raw) {
            let text = std::str::from_utf8(raw.trim_ascii()).unwrap();
            prop_assert_eq!(t, Duration::from_millis(text.parse::<u64>().unwrap()));
        }
    }

    #[test]
    fn grpc_never_panics_and_stays_in_budget(raw in bytes(), default in durations(),
                                             offset in durations()) {
        let got = budget(grpc_timeout(&raw), default, offset);
        prop_assert!(got <= default);
        // Only a zero timeout (already expired) gives a zero budget from a positive default.
        if !default.is_zero() && grpc_timeout(&raw) != Some(Duration::ZERO) {
            prop_assert!(!got.is_zero());
        }
        if let Some(t) = grpc_timeout(&raw) {
            prop_assert!(got <= t);
            prop_assert!(raw.trim_ascii().len() <= 9);
            let digits = &raw.trim_ascii()[..raw.trim_ascii().len() - 1];
            prop_assert_eq!(t.is_zero(), digits.iter().all(|&d| d == b'0'));
        }
    }

    #[test]
    fn the_combined_budget_is_the_minimum(scrape in bytes(), envoy in bytes(), grpc in bytes(),
                                          default in durations(), offset in durations()) {
        // Values without a comma (a comma makes a list: `lines` tests those).
        let no_comma = |v: Vec<u8>| -> Vec<u8> {
            v.into_iter().map(|b| if b == b',' { b';' } else { b }).collect()
        };
        let (scrape, envoy, grpc) = (no_comma(scrape), no_comma(envoy), no_comma(grpc));
        let headers: [(&str, &[u8]); 3] = [
            (SCRAPE_TIMEOUT_HEADER, &scrape),
            (ENVOY_TIMEOUT_HEADER, &envoy),
            (GRPC_TIMEOUT_HEADER, &grpc),
        ];
        let combined = request_budget(headers, default, offset, quiet);
        let each = [
            budget(scrape_timeout(&scrape), default, offset),
            budget(envoy_timeout(&envoy), default, offset),
            budget(grpc_timeout(&grpc), default, offset),
        ];
        prop_assert_eq!(combined, each.into_iter().min().unwrap());
    }
}
