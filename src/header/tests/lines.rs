//! Every line of every timeout header counts, and a line folded from several (`10S, 1S`)
//! is read as the list it is: the budget is the earliest of every element, an invalid
//! element is ignored (and reported) on its own. Tables of the audit's cases, and
//! property tests over headers sent several times, folded, shuffled and mixed with
//! garbage.

use std::time::Duration;

use crate::header::{
    ENVOY_TIMEOUT_HEADER, GRPC_TIMEOUT_HEADER, SCRAPE_TIMEOUT_HEADER, Timeout, budget,
    request_budget, request_deadline, scrape_timeout,
};
use proptest::prelude::*;

use super::{DEFAULT, OFFSET, durations, ms, quiet};

/// `request_budget` of `headers`, and every ignored (header, element) it reported.
fn budget_and_ignored(
    headers: &[(String, String)],
    default: Duration,
    offset: Duration,
) -> (Duration, Vec<(Timeout, String)>) {
    let mut ignored = Vec::new();
    let got = request_budget(
        headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        default,
        offset,
        |header, element: &[u8]| {
            ignored.push((header, String::from_utf8_lossy(element).into_owned()))
        },
    );
    (got, ignored)
}

fn lines(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_header_sent_twice_is_a_ceiling_at_its_earliest_line() {
    // The audit's three: the second line is the shorter one, and the first used to win.
    let table = [
        (GRPC_TIMEOUT_HEADER, "10S", "1S", ms(500)),
        (ENVOY_TIMEOUT_HEADER, "15000", "250", ms(125)),
        (SCRAPE_TIMEOUT_HEADER, "10", "0.5", ms(250)),
    ];
    for (name, first, second, want) in table {
        let twice = lines(&[(name, first), (name, second)]);
        assert_eq!(
            budget_and_ignored(&twice, DEFAULT, OFFSET).0,
            want,
            "{name}"
        );
        // In either order, and folded into one line by a proxy.
        let reversed = lines(&[(name, second), (name, first)]);
        assert_eq!(
            budget_and_ignored(&reversed, DEFAULT, OFFSET).0,
            want,
            "{name}"
        );
        let folded = format!("{first}, {second}");
        let folded = lines(&[(name, &folded)]);
        assert_eq!(
            budget_and_ignored(&folded, DEFAULT, OFFSET).0,
            want,
            "{name}"
        );
        // The public deadline spends the same.
        let left = request_deadline([(name, first), (name, second)], DEFAULT, OFFSET)
            .remaining()
            .expect("a real deadline");
        assert!(left <= want, "{name}: {left:?}");
    }
}

#[test]
fn a_folded_line_is_read_element_by_element() {
    // (value of grpc-timeout, budget, ignored elements)
    let table: &[(&str, Duration, &[&str])] = &[
        ("10S, 1S", ms(500), &[]),
        ("10S,1S", ms(500), &[]),
        ("  10S ,\t1S  ", ms(500), &[]),
        ("1S, 10S", ms(500), &[]),
        ("10S, abc", ms(9_500), &["abc"]), // an invalid element is ignored on its own
        ("abc, 10S, -5", ms(9_500), &["abc", "-5"]),
        ("10S,,1S,", ms(500), &[]), // empty elements are skipped (RFC 9110, 5.6.1)
        (", ,", DEFAULT, &[", ,"]), // no element at all: one ignored value
        ("", DEFAULT, &[""]),
        ("10S, 0S", Duration::ZERO, &[]), // a zero element has expired
    ];
    for (value, want, ignored) in table {
        let headers = lines(&[(GRPC_TIMEOUT_HEADER, value)]);
        let (got, seen) = budget_and_ignored(&headers, DEFAULT, OFFSET);
        assert_eq!(got, *want, "{value:?}");
        let want_ignored: Vec<_> = ignored
            .iter()
            .map(|e| (Timeout::Grpc, e.to_string()))
            .collect();
        assert_eq!(seen, want_ignored, "{value:?}");
    }
}

#[test]
fn garbage_is_reported_for_each_header() {
    // The newcomer's garbage: every one is ignored and reported, for every header.
    for header in Timeout::ALL {
        for garbage in ["abc", "-5", "1e400", "99999999999999999999"] {
            let headers = lines(&[(header.name(), garbage)]);
            let (got, seen) = budget_and_ignored(&headers, DEFAULT, OFFSET);
            assert_eq!(got, DEFAULT, "{header:?} {garbage}");
            assert_eq!(seen, [(header, garbage.to_string())], "{header:?}");
        }
    }
    // Envoy's zero is its own "no timeout": ignored, not reported.
    let headers = lines(&[(ENVOY_TIMEOUT_HEADER, "0")]);
    assert_eq!(
        budget_and_ignored(&headers, DEFAULT, OFFSET),
        (DEFAULT, vec![])
    );
    // Other headers are never looked at.
    let headers = lines(&[("x-timeout", "abc"), ("grpc-timeout-ms", "1")]);
    assert_eq!(
        budget_and_ignored(&headers, DEFAULT, OFFSET),
        (DEFAULT, vec![])
    );
}

/// A valid element of one of the three headers, in its own format, and its timeout.
fn valid() -> impl Strategy<Value = (Timeout, String, Duration)> {
    prop_oneof![
        (1u64..10_000_000).prop_map(|n| {
            let value = format!("{}.{:03}", n / 1000, n % 1000);
            let timeout = scrape_timeout(value.as_bytes()).expect("a valid scrape timeout");
            (Timeout::Scrape, value, timeout)
        }),
        (1u64..10_000_000).prop_map(|n| (Timeout::Envoy, n.to_string(), ms(n))),
        (0u64..99_999_999).prop_map(|n| (Timeout::Grpc, format!("{n}m"), ms(n))),
        (0u64..99_999_999).prop_map(|n| (Timeout::Grpc, format!("{n}u"), Duration::from_micros(n))),
    ]
}

/// An element no timeout header accepts (and that has no comma of its own).
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("abc".to_string()),
        Just("-5".to_string()),
        Just("1e400".to_string()),
        Just("99999999999999999999".to_string()),
        Just("NaN".to_string()),
        Just("0x10".to_string()),
        "[a-z]{1,6}".prop_map(|s| s),
    ]
}

/// One element of a request: a valid timeout, or garbage under one of the three names.
#[derive(Clone, Debug)]
enum Element {
    Valid(Timeout, String, Duration),
    Garbage(Timeout, String),
}

impl Element {
    fn header(&self) -> Timeout {
        match self {
            Element::Valid(h, ..) | Element::Garbage(h, _) => *h,
        }
    }

    fn text(&self) -> &str {
        match self {
            Element::Valid(_, v, _) | Element::Garbage(_, v) => v,
        }
    }
}

fn element() -> impl Strategy<Value = Element> {
    prop_oneof![
        3 => valid().prop_map(|(h, v, t)| Element::Valid(h, v, t)),
        1 => (0usize..3, garbage()).prop_map(|(i, g)| Element::Garbage(Timeout::ALL[i], g)),
    ]
}

/// `elements` as header lines: each element folded into the line before it when `fold`
/// says so and the header is the same, with some whitespace, under a name in any case.
fn as_lines(elements: &[Element], fold: &[bool], upper: &[bool]) -> Vec<(String, String)> {
    let mut out: Vec<(Timeout, String, String)> = Vec::new();
    for (i, e) in elements.iter().enumerate() {
        let name = if upper[i % upper.len()] {
            e.header().name().to_ascii_uppercase()
        } else {
            e.header().name().to_string()
        };
        match out.last_mut() {
            Some((h, _, value)) if *h == e.header() && fold[i % fold.len()] => {
                value.push_str(if i % 2 == 0 { ", " } else { "," });
                value.push_str(e.text());
            }
            _ => out.push((e.header(), name, format!(" {} ", e.text()))),
        }
    }
    out.into_iter().map(|(_, n, v)| (n, v)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn the_budget_is_the_earliest_element_of_every_line(
        elements in proptest::collection::vec(element(), 0..10),
        fold in proptest::collection::vec(any::<bool>(), 1..10),
        upper in proptest::collection::vec(any::<bool>(), 1..10),
        default in durations(), offset in durations(),
    ) {
        let earliest = elements
            .iter()
            .filter_map(|e| match e {
                Element::Valid(_, _, t) => Some(*t),
                Element::Garbage(..) => None,
            })
            .min();
        let want = budget(earliest, default, offset);
        let mut want_ignored: Vec<(Timeout, String)> = elements
            .iter()
            .filter_map(|e| match e {
                Element::Garbage(h, g) => Some((*h, g.clone())),
                Element::Valid(..) => None,
            })
            .collect();
        want_ignored.sort_by(|a, b| (a.0 as u8, &a.1).cmp(&(b.0 as u8, &b.1)));

        // Folded as `fold` says, one line per element, and every line reversed: the same.
        let separate = vec![false; 1];
        let mut reversed = elements.clone();
        reversed.reverse();
        for headers in [
            as_lines(&elements, &fold, &upper),
            as_lines(&elements, &separate, &upper),
            as_lines(&reversed, &fold, &upper),
        ] {
            let (got, mut ignored) = budget_and_ignored(&headers, default, offset);
            prop_assert_eq!(got, want, "{:?}", headers);
            ignored.sort_by(|a, b| (a.0 as u8, &a.1).cmp(&(b.0 as u8, &b.1)));
            prop_assert_eq!(&ignored, &want_ignored);
            // A ceiling: never above any timeout sent, never above the default.
            if let Some(earliest) = earliest {
                prop_assert!(got <= earliest);
            }
            prop_assert!(got <= default);
        }
    }

    #[test]
    fn never_panics_on_any_lines(
        lines in proptest::collection::vec(
            (0usize..4, proptest::collection::vec(any::<u8>(), 0..24)), 0..6),
        default in durations(), offset in durations(),
    ) {
        let names = [SCRAPE_TIMEOUT_HEADER, ENVOY_TIMEOUT_HEADER, GRPC_TIMEOUT_HEADER, "x-other"];
        let headers: Vec<(&str, &[u8])> =
            lines.iter().map(|(i, v)| (names[*i], v.as_slice())).collect();
        let got = request_budget(headers, default, offset, quiet);
        prop_assert!(got <= default);
    }
}
