//! Where [`OrphanHandler::log()`](super::OrphanHandler::log) sends a report when no `log`
//! backend is installed: stderr, rate-limited, with a count of what the limit held back and,
//! once per process, how to send the reports elsewhere.
//!
//! An exception to "a library only emits": an orphaned failure is the one report nobody
//! asked for and nobody awaits, so with the facade's max level at `Off` (no logger, or one
//! told to log nothing) it would be seen by no one at all.
//!
//! The limit is a bucket of [`BURST`] lines refilled at one line per [`REFILL`], shared by
//! the whole process. Reports it holds back are counted, and the count is written before the
//! next line that gets through. Nothing here calls user code: the line is formatted from
//! loopguard's own [`Report`] and written straight to the stderr file descriptor (not
//! through `eprintln!`, which panics when stderr is closed, nor through the test harness's
//! capture). A failed write is ignored.

use std::fmt::Write as _;
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Report;
use crate::sync::lock;

/// Lines written at once before the limit applies.
pub(super) const BURST: u32 = 10;
/// Time that earns one more line, up to [`BURST`].
pub(super) const REFILL: Duration = Duration::from_secs(1);

/// The process-wide limit.
static LIMIT: Mutex<Bucket> = Mutex::new(Bucket::new());

/// What the limit decided for one report.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Write it, after a line counting `suppressed` reports held back since the last one
    /// written (if any), and with the routing hint if `hint` (the first line only).
    Write { suppressed: u64, hint: bool },
    /// Held back and counted.
    Suppress,
}

/// A token bucket of lines; its clock is passed in, so its rules are tested without waiting.
#[derive(Debug)]
pub(super) struct Bucket {
    tokens: u32,
    /// When the last refill was earned; `None` before the first report.
    refilled: Option<Instant>,
    suppressed: u64,
    hinted: bool,
}

impl Bucket {
    pub(super) const fn new() -> Bucket {
        Bucket {
            tokens: BURST,
            refilled: None,
            suppressed: 0,
            hinted: false,
        }
    }

    /// Decides for a report made at `now`.
    pub(super) fn admit(&mut self, now: Instant) -> Verdict {
        let since = *self.refilled.get_or_insert(now);
        let earned = now.saturating_duration_since(since).as_nanos() / REFILL.as_nanos();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(BURST);
            // A full bucket earns nothing while it waits: the next refill counts from now.
            self.refilled = Some(if self.tokens == BURST {
                now
            } else {
                since + REFILL * earned
            });
        }
        if self.tokens == 0 {
            self.suppressed = self.suppressed.saturating_add(1);
            return Verdict::Suppress;
        }
        self.tokens -= 1;
        let hint = !std::mem::replace(&mut self.hinted, true);
        Verdict::Write {
            suppressed: std::mem::take(&mut self.suppressed),
            hint,
        }
    }
}

/// The text written for one report the limit let through.
pub(super) fn lines(report: &Report, suppressed: u64, hint: bool) -> String {
    let mut text = String::with_capacity(160);
    if suppressed > 0 {
        let _ = writeln!(
            text,
            "loopguard: {suppressed} more orphan report(s) were not written to stderr \
             (at most {BURST} at once, then one every {}s); each was counted",
            REFILL.as_secs()
        );
    }
    let _ = writeln!(text, "loopguard: {report}");
    if hint {
        text.push_str(
            "loopguard: orphan reports go to stderr because no `log` logger is installed; \
             install one (env_logger, tracing-log, ...) to have them logged, or give the \
             pool or shield an OrphanHandler (PoolBuilder::on_orphan, Shield::with_handler) \
             to route them elsewhere\n",
        );
    }
    text
}

/// Writes `report` to stderr if the limit lets it through. Never panics, never blocks on
/// anything but the write itself.
pub(super) fn write(report: &Report) {
    let verdict = lock(&LIMIT).admit(Instant::now());
    let Verdict::Write { suppressed, hint } = verdict else {
        return;
    };
    let text = lines(report, suppressed, hint);
    // One write for the whole text, so lines from several threads do not interleave. A
    // closed or broken stderr gives an error, ignored: there is nowhere left to say it.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orphan::ReportKind;
    use std::sync::Arc;

    #[test]
    fn a_burst_then_one_line_per_refill_with_the_count_held_back() {
        let mut bucket = Bucket::new();
        let t0 = Instant::now();
        let first = bucket.admit(t0);
        assert_eq!(
            first,
            Verdict::Write {
                suppressed: 0,
                hint: true
            }
        );
        for _ in 1..BURST {
            let verdict = bucket.admit(t0);
            assert_eq!(
                verdict,
                Verdict::Write {
                    suppressed: 0,
                    hint: false
                }
            );
        }
        for _ in 0..5 {
            assert_eq!(bucket.admit(t0 + REFILL / 2), Verdict::Suppress);
        }
        let after = bucket.admit(t0 + REFILL);
        assert_eq!(
            after,
            Verdict::Write {
                suppressed: 5,
                hint: false
            }
        );
        assert_eq!(bucket.admit(t0 + REFILL), Verdict::Suppress);
        // Three refills earn three lines; the count restarts after each line written.
        let later = t0 + REFILL * 4;
        let written = (0..5)
            .filter(|_| matches!(bucket.admit(later), Verdict::Write { .. }))
            .count();
        assert_eq!(written, 3);
    }

    #[test]
    fn a_quiet_spell_refills_the_burst_but_no_more() {
        let mut bucket = Bucket::new();
        let t0 = Instant::now();
        for _ in 0..BURST {
            bucket.admit(t0);
        }
        let later = t0 + REFILL * 1000;
        let written = (0..2 * BURST)
            .filter(|_| matches!(bucket.admit(later), Verdict::Write { .. }))
            .count();
        assert_eq!(written, BURST as usize);
    }

    #[test]
    fn the_lines_count_what_was_held_back_and_hint_once() {
        let report = Report::new(
            Arc::from("walks"),
            ReportKind::Failed,
            "\"no route\"".to_string(),
            Duration::from_millis(5),
        );
        let plain = lines(&report, 0, false);
        assert_eq!(
            plain,
            "loopguard: orphaned work on `walks` failed after 0.005s: \"no route\"\n"
        );
        let full = lines(&report, 7, true);
        let full: Vec<&str> = full.lines().collect();
        assert_eq!(full.len(), 3, "{full:?}");
        assert!(full[0].starts_with("loopguard: 7 more orphan report(s) were not written"));
        assert!(full[1].ends_with("\"no route\""));
        assert!(full[2].contains("PoolBuilder::on_orphan"));
    }
}
