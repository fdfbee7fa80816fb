//! The header parsers' tables and property tests, inside the crate: most of the parsers
//! they pin are crate-private (the public API is `request_deadline`, `scrape_deadline`,
//! `retry_after` and `retry_pushback`).

use std::time::Duration;

use proptest::prelude::*;

use crate::header::Timeout;

mod ceiling;
mod lines;
mod mesh;
mod pushback;
mod retry_after;
mod scrape;

/// An `ignored` callback that drops what it hears.
fn quiet(_: Timeout, _: &[u8]) {}

/// The server's own budget in the tables.
const DEFAULT: Duration = Duration::from_secs(30);
/// The offset kept for the answer in the tables.
const OFFSET: Duration = Duration::from_millis(500);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Durations of every scale: milliseconds, any nanoseconds, any seconds, and the edges.
fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..120_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::ZERO),
        Just(Duration::MAX),
    ]
}
