//! The one reporter behind every pool and shield: an origin, a handler and a count.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{OrphanHandler, Report, ReportKind};
use crate::contain::{contain, drop_contained};
use crate::emit::{self, Counted, ORPHANED_FAILURES_TOTAL};
use crate::failure::{Classifier, Panicked};

/// Where the outcomes of one pool's (or shield's) orphaned work go.
pub(crate) struct Reporter {
    origin: Arc<str>,
    handler: OrphanHandler,
    /// `loopguard_orphaned_failures_total{pool=origin}` (`{shield=origin}` for a shield).
    orphaned: Counted,
}

impl fmt::Debug for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reporter")
            .field("origin", &self.origin)
            .field("handler", &self.handler)
            .finish_non_exhaustive()
    }
}

impl Reporter {
    /// A reporter for work of `origin`, registering its orphaned-failures series under the
    /// label `kind` (`emit::LABEL_POOL` or `emit::LABEL_SHIELD`) set to `origin`.
    pub(crate) fn new(kind: &'static str, origin: Arc<str>, handler: OrphanHandler) -> Reporter {
        let label = origin.to_string();
        let metric = emit::register(
            || ::metrics::counter!(ORPHANED_FAILURES_TOTAL, kind => label),
            ::metrics::Counter::noop,
        );
        Reporter {
            origin,
            handler,
            orphaned: Counted::new(metric),
        }
    }

    pub(crate) fn origin(&self) -> &str {
        &self.origin
    }

    /// Orphaned failures reported so far.
    pub(crate) fn orphaned(&self) -> u64 {
        self.orphaned.get()
    }

    /// An outcome nobody will take: reported if it is a failure, dropped otherwise.
    /// `elapsed` is how long the work ran. Never panics.
    pub(crate) fn orphaned_outcome<T>(
        &self,
        result: Result<T, Panicked>,
        classify: Classifier<T>,
        elapsed: Duration,
    ) {
        let described = describe(&result, classify);
        // The output's `Drop` is user code: contained and traced like every other call.
        drop_contained("the Drop of an output nobody took", result);
        if let Some((kind, message)) = described {
            // Counted first, so a handler that looks at the pool's counters sees this one;
            // the recorder, user code, hears about it last.
            self.orphaned.count();
            self.report(kind, message, elapsed);
            self.orphaned.emit();
        }
    }

    /// Hands one report to the handler. Never panics.
    pub(crate) fn report(&self, kind: ReportKind, message: String, elapsed: Duration) {
        let report = Report::new(self.origin.clone(), kind, message, elapsed);
        self.handler.report(report);
    }
}

/// What to report about an outcome: `None` when it is no failure. The classifier's
/// verdict and the error's `Debug` are user code: a panic in them still yields a report.
fn describe<T>(
    result: &Result<T, Panicked>,
    classify: Classifier<T>,
) -> Option<(ReportKind, String)> {
    let described = contain("a failure's Debug", || match result {
        Err(panicked) => Some((ReportKind::Panicked, panicked.message().to_string())),
        Ok(value) => classify(value).map(|error| (ReportKind::Failed, format!("{error:?}"))),
    });
    described.unwrap_or_else(|| {
        let message = "a failed output whose description panicked".to_string();
        Some((ReportKind::Failed, message))
    })
}
