//! `Retry-After` as a server sends it: delay-seconds or an HTTP-date in any of the three
//! forms RFC 9110 allows. Tables of real and hostile values, and property tests that parsing
//! never panics, reads back what was written, and counts a date from the given `now`.

use std::time::{Duration, SystemTime};

use crate::header::parse::retry_after_at;
use crate::header::{RETRY_AFTER_HEADER, retry_after};
use proptest::prelude::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// 06 Nov 1994 08:49:37 GMT, the RFC's example date.
fn rfc_now() -> SystemTime {
    SystemTime::UNIX_EPOCH + secs(784_111_777)
}

#[test]
fn header_name() {
    assert!(RETRY_AFTER_HEADER.eq_ignore_ascii_case("retry-after"));
}

#[test]
fn delay_seconds() {
    let now = rfc_now();
    let table: &[(&[u8], Duration)] = &[
        (b"120", secs(120)),
        (b"1", secs(1)),
        (b"0", Duration::ZERO), // come back at once
        (b"000", Duration::ZERO),
        (b"007", secs(7)),
        (b" 5 ", secs(5)),
        (b"\t5\r\n", secs(5)),
        (b"18446744073709551615", secs(u64::MAX)), // the largest u64 fits a Duration
    ];
    for (raw, want) in table {
        let got = retry_after_at(raw, now);
        assert_eq!(got, Some(*want), "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn http_dates_in_every_form() {
    let now = rfc_now();
    let table: &[(&[u8], Option<Duration>)] = &[
        // IMF-fixdate, the form to send.
        (b"Sun, 06 Nov 1994 08:51:37 GMT", Some(secs(120))),
        (b"Sun, 06 Nov 1994 08:49:37 GMT", Some(Duration::ZERO)),
        (b"Mon, 07 Nov 1994 08:49:37 GMT", Some(secs(86_400))),
        // Obsolete RFC 850 and asctime forms, which recipients must accept.
        (b"Sunday, 06-Nov-94 08:50:37 GMT", Some(secs(60))),
        (b"Sun Nov  6 08:49:47 1994", Some(secs(10))),
        // In the past: try again at once.
        (b"Thu, 01 Jan 1970 00:00:00 GMT", Some(Duration::ZERO)),
        (b"Sat, 05 Nov 1994 08:49:37 GMT", Some(Duration::ZERO)),
        (b"  Sun, 06 Nov 1994 08:51:37 GMT  ", Some(secs(120))),
    ];
    for (raw, want) in table {
        let got = retry_after_at(raw, now);
        assert_eq!(got, *want, "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn hostile_values_are_ignored() {
    let ignored: &[&[u8]] = &[
        b"",
        b"   ",
        b"-1",
        b"+5",
        b"1.5",
        b"1e3",
        b"5s",
        b"5 6",
        b"0x10",
        b"NaN",
        b"inf",
        b"18446744073709551616", // overflows u64
        b"999999999999999999999999",
        b"Sun, 06 Nov 1994 08:49:37",     // no zone
        b"Sun, 06 Nov 1994 08:49:37 UTC", // only GMT is allowed
        b"Sun, 31 Feb 1994 08:49:37 GMT", // no such day
        b"Sun, 06 Nov 1994 25:49:37 GMT",
        b"Sun, 06 Nov 10000 08:49:37 GMT",
        b"soon",
        b"\xff\xfe",
        "１２０".as_bytes(), // full-width digits
    ];
    for raw in ignored {
        assert_eq!(
            retry_after_at(raw, rfc_now()),
            None,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn a_date_is_counted_from_the_real_clock() {
    let later = SystemTime::now() + secs(30);
    let hint = retry_after(httpdate::fmt_http_date(later).as_bytes()).expect("a valid date");
    // Whole seconds on the wire: up to a second is lost to the rounding of the date.
    assert!(hint <= secs(30) && hint >= secs(28), "{hint:?}");
    assert_eq!(retry_after(b"42"), Some(secs(42)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn never_panics_on_any_bytes(raw in proptest::collection::vec(any::<u8>(), 0..48)) {
        let _ = retry_after_at(&raw, rfc_now());
        let _ = retry_after(&raw);
    }

    #[test]
    fn never_panics_on_date_like_text(raw in "[A-Za-z]{3}, [0-9]{1,3} [A-Za-z]{3} [0-9]{1,6} [0-9:]{1,9} GMT") {
        let _ = retry_after_at(raw.as_bytes(), rfc_now());
    }

    #[test]
    fn delay_seconds_read_back(n in any::<u64>(), pad in 0usize..4) {
        let text = format!("{}{n}{}", " ".repeat(pad), "\t".repeat(pad));
        prop_assert_eq!(retry_after_at(text.as_bytes(), rfc_now()), Some(secs(n)));
    }

    #[test]
    fn a_written_date_reads_back(ahead in 0u64..10 * 365 * 86_400, behind in 0u64..86_400) {
        let now = rfc_now();
        let date = httpdate::fmt_http_date(now + secs(ahead));
        prop_assert_eq!(retry_after_at(date.as_bytes(), now), Some(secs(ahead)));
        let past = httpdate::fmt_http_date(now - secs(behind));
        prop_assert_eq!(retry_after_at(past.as_bytes(), now), Some(Duration::ZERO));
    }
}
