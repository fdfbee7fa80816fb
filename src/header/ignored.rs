//! Ignored input is counted and said once: a timeout header whose value is not a value of
//! that header (`abc`, `-5`, `1e400`, a 20-digit number) counts in
//! `loopguard_ignored_budget_headers_total{header}`, and the first one of each header in
//! the process is logged (its value cut short), so a misconfigured proxy is seen. The
//! budget then falls back to the other headers and the server's default, as before.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::contain::{contain, log_contained};
use crate::emit::{IGNORED_BUDGET_HEADERS_TOTAL, LABEL_HEADER};

use super::parse::Timeout;

/// At most this many bytes of an ignored value go into the log line.
pub(crate) const SHOWN: usize = 32;

/// Whether each header's first ignored value has been logged.
static LOGGED: [AtomicBool; 3] = [
    AtomicBool::new(false),
    AtomicBool::new(false),
    AtomicBool::new(false),
];

/// Creates the three series with a zero, once per process, so that an alert on their
/// increase sees the first ignored value too.
pub(crate) fn create_series() {
    static CREATED: Once = Once::new();
    CREATED.call_once(|| {
        for header in Timeout::ALL {
            emit_count(header, 0);
        }
    });
}

/// Counts one ignored `value` of `header`, and logs it if it is the header's first.
pub(crate) fn report(header: Timeout, value: &[u8]) {
    emit_count(header, 1);
    if !LOGGED[header as usize].swap(true, Ordering::Relaxed) {
        let shown = shown(value);
        let name = header.name();
        log_contained!(
            warn,
            "ignored a {name} header that is not a valid timeout ({shown}): the budget comes \
             from the other headers or the server's default; further ones are only counted \
             (loopguard_ignored_budget_headers_total{{header=\"{name}\"}})"
        );
    }
}

/// `value` as the log shows it: at most [`SHOWN`] bytes, lossily decoded and escaped,
/// with the length of the whole when it was cut.
pub(crate) fn shown(value: &[u8]) -> String {
    let head = &value[..value.len().min(SHOWN)];
    let text = format!("{:?}", String::from_utf8_lossy(head));
    if value.len() > SHOWN {
        format!("{text}, cut from {} bytes", value.len())
    } else {
        text
    }
}

fn emit_count(header: Timeout, n: u64) {
    contain("the metrics recorder", || {
        ::metrics::counter!(IGNORED_BUDGET_HEADERS_TOTAL, LABEL_HEADER => header.name())
            .increment(n)
    });
}
