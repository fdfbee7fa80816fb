//! The lean walk (`render_to_write` into a buffer the worker keeps) renders exactly what
//! `render()` does, walk after walk on the same thread, plain and gzip.

use std::io::Read;
use std::time::Duration;

use flate2::read::GzDecoder;
use loopguard_demos::registry::{Encoding, Registry, WalkKind, render_lean, render_plain};

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    GzDecoder::new(bytes).read_to_end(&mut out).expect("gzip");
    out
}

/// A rendering's lines, sorted: the recorder renders series in no fixed order.
fn lines(rendering: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(rendering).expect("exposition text is UTF-8");
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines.sort_unstable();
    lines
}

#[test]
fn a_lean_walk_renders_what_render_does_walk_after_walk() {
    let registry = Registry::new(2_000, Duration::ZERO).expect("the recorder installs");
    let handle = registry.handle();
    // Nothing else in this binary changes the recorder: renderings hold the same lines.
    let want = lines(handle.render().as_bytes());
    assert!(want.len() > 2_000, "{} lines", want.len());
    for round in 0..4 {
        // The same thread each time: the kept buffer is reused (and must be cleared).
        let plain = render_lean(handle, Encoding::Identity).expect("a walk");
        assert!(lines(&plain) == want, "plain, round {round}");
        let gzip = render_lean(handle, Encoding::Gzip).expect("a walk");
        assert!(lines(&gunzip(&gzip)) == want, "gzip, round {round}");
        let before = render_plain(handle, Encoding::Gzip).expect("a walk");
        assert!(
            lines(&gunzip(&before)) == want,
            "the old walk, round {round}"
        );
    }
    // A scrape through the registry renders the same, and counts as one walk.
    let mut scraped = Vec::new();
    registry.scrape_into(&mut scraped).expect("a walk");
    assert!(lines(&scraped) == want);
    assert_eq!(registry.walks(WalkKind::Scrape), 1);
}
