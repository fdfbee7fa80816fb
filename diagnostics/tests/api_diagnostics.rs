//! Compile-fail tests: each common slip gets an error that names its cause and says what to
//! write (`tests/ui/*.rs`, the expected output beside each in a `.stderr` file).
//!
//! rustc's wording changes between releases, so the `.stderr` files are pinned to the
//! toolchain CI uses, Rust 1.95: on another one the test says so and checks nothing.
//! Regenerate them with `TRYBUILD=overwrite cargo test -p loopguard-diagnostics` and read the
//! diff.

const PINNED: &str = "rustc 1.95.";

#[test]
fn common_slips_name_their_cause() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    if !version.starts_with(PINNED) || version.contains("nightly") || version.contains("beta") {
        eprintln!("skipped: the .stderr files are pinned to {PINNED}x stable, this is {version}");
        return;
    }
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
