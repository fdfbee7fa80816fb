//! loopguard's compile-fail tests live in `tests/`: this library is empty.
#![forbid(unsafe_code)]
