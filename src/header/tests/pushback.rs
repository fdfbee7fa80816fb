//! `grpc-retry-pushback-ms` as gRPC reads it (gRFC A6, grpc-go's `strconv.Atoi`): a
//! non-negative number of milliseconds is "retry after", a negative one or anything that
//! is not a number is "do not retry". Tables of real and hostile values, and property tests
//! that parsing never panics and reads back what was written.

use std::time::Duration;

use crate::header::{RETRY_PUSHBACK_HEADER, retry_pushback};
use crate::retry::Decision;
use proptest::prelude::*;

use super::ms;

#[test]
fn header_name() {
    assert_eq!(RETRY_PUSHBACK_HEADER, "grpc-retry-pushback-ms");
}

#[test]
fn delays() {
    let table: &[(&[u8], Duration)] = &[
        (b"0", Duration::ZERO), // retry at once
        (b"250", ms(250)),
        (b"1000", ms(1_000)),
        (b"007", ms(7)),
        (b"+5", ms(5)), // Atoi takes a plus sign
        (b"-0", Duration::ZERO),
        (b" 250 ", ms(250)),
        (b"\t250\r\n", ms(250)),
        (b"9223372036854775807", ms(i64::MAX as u64)), // the largest i64
    ];
    for (raw, want) in table {
        assert_eq!(
            retry_pushback(raw),
            Decision::RetryAfter(*want),
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn do_not_retry() {
    let table: &[&[u8]] = &[
        // Negative: the server asks not to be retried.
        b"-1",
        b"-250",
        b"-9223372036854775808",
        // Not a number: gRPC does not retry either.
        b"",
        b"   ",
        b"-",
        b"+",
        b"1.5",
        b"1e3",
        b"250ms",
        b"2 50",
        b"0x10",
        b"--1",
        b"+-1",
        b"NaN",
        b"9223372036854775808", // overflows i64
        b"99999999999999999999",
        b"250, 100", // two values folded: gRPC does not retry on several
        b"\xff",
        "２５０".as_bytes(),
    ];
    for raw in table {
        assert_eq!(
            retry_pushback(raw),
            Decision::Stop,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn never_panics_on_any_bytes(raw in proptest::collection::vec(any::<u8>(), 0..32)) {
        let _ = retry_pushback(&raw);
    }

    #[test]
    fn reads_back_what_was_written(n in any::<i64>(), plus in any::<bool>(), pad in 0usize..3) {
        let sign = if plus && n >= 0 { "+" } else { "" };
        let text = format!("{}{sign}{n}{}", " ".repeat(pad), "\t".repeat(pad));
        let want = match u64::try_from(n) {
            Ok(millis) => Decision::RetryAfter(Duration::from_millis(millis)),
            Err(_) => Decision::Stop,
        };
        prop_assert_eq!(retry_pushback(text.as_bytes()), want);
    }

    #[test]
    fn only_digits_with_one_sign_are_delays(raw in "[ +\\-0-9a-z.,]{0,22}") {
        if let Decision::RetryAfter(after) = retry_pushback(raw.as_bytes()) {
            let text = raw.trim_ascii();
            let number = text.strip_prefix(['+', '-']).unwrap_or(text);
            prop_assert!(!number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()));
            let millis: u64 = number.parse().unwrap();
            prop_assert_eq!(after, Duration::from_millis(millis));
            prop_assert!(!text.starts_with('-') || millis == 0);
        }
    }
}
