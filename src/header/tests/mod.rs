//! The header parsers' tables and property tests, inside the crate: most of the parsers
//! they pin are crate-private (the public API is `request_deadline`, `scrape_deadline` and
//! `retry_after`).

mod ceiling;
mod mesh;
mod retry_after;
mod scrape;
