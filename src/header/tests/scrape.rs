//! `X-Prometheus-Scrape-Timeout-Seconds` parsing: a table of real and hostile values,
//! and a property test that it never panics and never exceeds the default.

use std::time::Duration;

use crate::header::{SCRAPE_TIMEOUT_HEADER, Timeout, scrape_budget, scrape_deadline};
use proptest::prelude::*;

use super::{DEFAULT, OFFSET, durations, ms, quiet};

#[test]
fn header_name() {
    assert_eq!(SCRAPE_TIMEOUT_HEADER, "X-Prometheus-Scrape-Timeout-Seconds");
}

#[test]
fn values_that_count() {
    // (header, expected budget) with default 30 s and offset 0.5 s.
    let table: &[(&[u8], Duration)] = &[
        (b"10", ms(9_500)),  // Prometheus' usual form
        (b"0.5", ms(250)),   // the offset would use it all: half of it is spent
        (b"0.4", ms(200)),   // shorter than the offset: half of it, never the default
        (b"1", ms(500)),     // the offset takes exactly half
        (b"0.75", ms(375)),  // the offset would take more than half: half is spent
        (b"1.5", ms(1_000)), // the offset takes less than half: timeout - offset
        (b"9.5", ms(9_000)), // fractional seconds
        (b"1e1", ms(9_500)), // exponent form
        (b"1E1", ms(9_500)),
        (b"+10", ms(9_500)),
        (b" 10", ms(9_500)), // surrounding whitespace
        (b"10 ", ms(9_500)),
        (b"\t10\t", ms(9_500)),
        (b"10.000000001", ms(9_500) + Duration::from_nanos(1)),
        (b"30.5", DEFAULT), // exactly the default after the offset
        (b"31", DEFAULT),   // more than the default: the default caps it
        (b"120", DEFAULT),
        (b"1e9", DEFAULT),
        // A comma makes a list (a folded header): a decimal comma reads as two timeouts,
        // and the earlier one, within the 1.5 s meant, is spent.
        (b"1,5", ms(500)),
        (b"10, 0.4", ms(200)),
        (b"10,", ms(9_500)), // an empty element is skipped, not ignored
    ];
    for (raw, want) in table {
        let mut ignored = Vec::new();
        let got = scrape_budget(Some(raw), DEFAULT, OFFSET, |h, v: &[u8]| {
            ignored.push((h, v.to_vec()))
        });
        assert_eq!(got, *want, "header {:?}", String::from_utf8_lossy(raw));
        assert!(ignored.is_empty(), "{ignored:?}");
    }
}

#[test]
fn values_that_are_ignored() {
    let table: &[&[u8]] = &[
        b"",
        b"   ",
        b"0",
        b"0.0",
        b"-0",
        b"-1",
        b"-0.5",
        b"1e-12", // rounds to zero nanoseconds
        b"NaN",
        b"nan",
        b"inf",
        b"-inf",
        b"Infinity",
        b"1e400", // parses to infinity
        b"1e20",  // finite but too big for a Duration
        b"1.8446744073709552e19",
        b"abc",
        b"10s",
        b"0x10",
        b"1 0",
        b"10\0",
        b"\xff\xfe",
        b"1\xc3",
        "１０".as_bytes(), // full-width digits
    ];
    for raw in table {
        // Each is ignored, and reported as ignored: the whole value, trimmed (a value with
        // no element, empty or blank, is reported as it came).
        let mut ignored = Vec::new();
        let got = scrape_budget(Some(raw), DEFAULT, OFFSET, |h, v: &[u8]| {
            ignored.push((h, v.to_vec()))
        });
        assert_eq!(got, DEFAULT, "header {:?}", String::from_utf8_lossy(raw));
        let want = if raw.trim_ascii().is_empty() {
            raw.to_vec()
        } else {
            raw.trim_ascii().to_vec()
        };
        assert_eq!(ignored, [(Timeout::Scrape, want)]);
    }
    assert_eq!(
        scrape_budget(None::<&[u8]>, DEFAULT, OFFSET, quiet),
        DEFAULT
    );
}

#[test]
fn zero_offset_and_zero_default() {
    assert_eq!(
        scrape_budget(Some(b"10"), DEFAULT, Duration::ZERO, quiet),
        ms(10_000)
    );
    assert_eq!(
        scrape_budget(Some(b"10"), Duration::ZERO, OFFSET, quiet),
        Duration::ZERO
    );
    // An offset longer than the timeout takes half of it; the default is never spent.
    assert_eq!(
        scrape_budget(Some(b"10"), DEFAULT, Duration::MAX, quiet),
        ms(5_000)
    );
}

#[test]
fn deadline_from_the_header() {
    let d = scrape_deadline(Some(b"10"), DEFAULT, OFFSET);
    let left = d.remaining().expect("a real deadline");
    assert!(left <= ms(9_500) && left > ms(8_500), "{left:?}");
    let d = scrape_deadline(Some(b"nope"), DEFAULT, OFFSET);
    assert!(d.remaining().expect("a real deadline") <= DEFAULT);
    // Every line counts: the earliest.
    let d = scrape_deadline(["10", "0.4"], DEFAULT, OFFSET);
    assert!(d.remaining().expect("a real deadline") <= ms(200));
}

fn check(raw: &[u8], default: Duration, offset: Duration) -> Result<(), TestCaseError> {
    let got = scrape_budget(Some(raw), default, offset, quiet);
    prop_assert!(got <= default, "{got:?} > {default:?}");
    if !default.is_zero() {
        prop_assert!(!got.is_zero());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn arbitrary_bytes(raw in proptest::collection::vec(any::<u8>(), 0..32),
                       default in durations(), offset in durations()) {
        check(&raw, default, offset)?;
    }

    #[test]
    fn arbitrary_floats(x in any::<f64>(), exp in any::<bool>(), pad in 0usize..3,
                        default in durations(), offset in durations()) {
        let text = if exp { format!("{x:e}") } else { format!("{x}") };
        let raw = format!("{:pad$}{text}{:pad$}", "", "");
        check(raw.as_bytes(), default, offset)?;
        // A value that counts gives exactly min(default, value - offset) while the offset
        // takes at most half of it, and never more than the value itself.
        if let Some(value) = Duration::try_from_secs_f64(x).ok().filter(|v| !v.is_zero()) {
            let got = scrape_budget(Some(raw.as_bytes()), default, offset, quiet);
            prop_assert!(got <= value, "{got:?} above the caller's {value:?}");
            if offset <= value / 2 {
                prop_assert_eq!(got, (value - offset).min(default));
            }
        }
    }
}
