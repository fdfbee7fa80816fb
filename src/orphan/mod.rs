//! One channel for failures nobody is waiting for.
//!
//! Dropping the handle of offloaded work (a [`Job`](crate::pool::Job), a
//! [`Shielded`](crate::shield::Shielded)) *orphans* it: the work runs on, but nobody will
//! see its outcome. If that outcome is a failure (a panic, or an `Err` of work marked
//! [`Fallible`](crate::Fallible)), it is handed to the [`OrphanHandler`] of the pool or
//! shield exactly once. The same handler hears about jobs that run past the pool's stuck
//! threshold.
//!
//! Three forms of handler exist:
//!
//! - [`OrphanHandler::log()`], the default: logs each report through the [`log`] facade
//!   (failures at `error`, stuck jobs at `warn`). `log` rather than `tracing` because it is
//!   the smallest common denominator: `env_logger`, `simplelog` and `tracing` (through
//!   `tracing-log`) all receive its records, and it adds one tiny dependency. With no
//!   logger installed (the facade's max level is `Off`, the case in a small service that
//!   never set one up), it writes each report to stderr instead: an orphaned failure is the
//!   one report nobody awaits, so nobody would see it otherwise. Those lines are
//!   rate-limited (ten at once, then one a second; a line counts the ones held back) and
//!   the first is followed, once per process, by a line saying how to route them
//!   elsewhere.
//! - [`OrphanHandler::new()`], a `Send + Sync` closure. It runs on the thread that observes
//!   the orphaned failure: the pool's worker thread (or the shield's runner) when the work
//!   finishes after its handle was dropped, or the thread that drops the handle when the
//!   work had already finished.
//! - [`OrphanHandler::channel()`], a bounded queue drained by a task on the application's own
//!   loop through an [`OrphanReceiver`], like asyncio's loop exception handler. The task may
//!   hold `!Send` state and run on a `LocalExecutor`. When the queue is full, reports are
//!   dropped and counted ([`OrphanReceiver::dropped`]); once the receiver is gone, reports
//!   are logged instead, so nothing is lost silently.
//!
//! # Panics in a handler
//!
//! A handler, and the logger behind [`OrphanHandler::log()`], is code loopguard does not
//! own. A panic in it is caught where the handler is called: the report is then lost to
//! that handler, but the worker goes on, the work's slot is released as usual, the failure
//! is still counted, and the panic leaves a trace (see
//! [`telemetry::contained_panics`](crate::telemetry::contained_panics)).
//!
//! Every orphaned failure is counted by its pool or shield
//! ([`Pool::orphaned_failures`](crate::pool::Pool::orphaned_failures),
//! [`Shield::orphaned_failures`](crate::shield::Shield::orphaned_failures)) before the
//! handler is called, and in the `loopguard_orphaned_failures_total` metric after it.

mod channel;
mod reporter;
mod stderr;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::contain::{contain, log_contained};

pub use self::channel::OrphanReceiver;
pub(crate) use self::reporter::Reporter;

/// What went wrong with orphaned or stuck work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReportKind {
    /// The work panicked; the message is the panic message.
    Panicked,
    /// The work returned an `Err`; the message is its `Debug` form.
    Failed,
    /// The work has been running longer than the pool's stuck threshold. It is still
    /// running and still holds its slot. Reported once per job, whether or not its `Job`
    /// is awaited.
    Stuck,
}

/// A report about work whose outcome nobody is waiting for, or which seems stuck.
///
/// # Examples
///
/// ```
/// use loopguard::orphan::{OrphanHandler, ReportKind};
/// use loopguard::pool::Pool;
/// use loopguard::Fallible;
/// use std::sync::mpsc;
///
/// let (tx, rx) = mpsc::channel();
/// let tx = std::sync::Mutex::new(tx);
/// let pool = Pool::builder()
///     .name("walks")
///     .on_orphan(OrphanHandler::new(move |report| {
///         let _ = tx.lock().unwrap().send((report.kind(), report.message().to_string()));
///     }))
///     .build()?;
///
/// drop(pool.try_run(Fallible(|| -> Result<(), String> { Err("disk full".into()) })));
/// let (kind, message) = rx.recv().unwrap();
/// assert_eq!(kind, ReportKind::Failed);
/// assert_eq!(message, "\"disk full\"");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Report {
    origin: Arc<str>,
    kind: ReportKind,
    message: String,
    elapsed: Duration,
}

impl Report {
    pub(crate) fn new(
        origin: Arc<str>,
        kind: ReportKind,
        message: String,
        elapsed: Duration,
    ) -> Report {
        Report {
            origin,
            kind,
            message,
            elapsed,
        }
    }

    /// The name of the pool (or shield) the work belonged to.
    ///
    /// # Examples
    ///
    /// ```
    /// # use loopguard::orphan::OrphanHandler;
    /// # use loopguard::pool::Pool;
    /// let pool = Pool::builder()
    ///     .name("walks")
    ///     .on_orphan(OrphanHandler::new(|report| assert_eq!(report.origin(), "walks")))
    ///     .build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// What went wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// # use loopguard::orphan::{OrphanHandler, ReportKind};
    /// let handler = OrphanHandler::new(|report| {
    ///     if report.kind() == ReportKind::Stuck {
    ///         eprintln!("still running: {report}");
    ///     }
    /// });
    /// ```
    pub fn kind(&self) -> ReportKind {
        self.kind
    }

    /// The panic message, the `Debug` form of the error, or a description of the stuck job.
    ///
    /// # Examples
    ///
    /// ```
    /// # use loopguard::orphan::OrphanHandler;
    /// let handler = OrphanHandler::new(|report| eprintln!("{}", report.message()));
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How long the work had run when the report was made: for a failure, its run time
    /// (on its worker thread, or from a shield runner's first poll) up to the failure; for
    /// a stuck job, its age. Time spent waiting for a slot is never included.
    ///
    /// # Examples
    ///
    /// ```
    /// # use loopguard::orphan::OrphanHandler;
    /// let handler = OrphanHandler::new(|report| eprintln!("after {:?}", report.elapsed()));
    /// ```
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ReportKind::Panicked => "panicked",
            ReportKind::Failed => "failed",
            ReportKind::Stuck => "is stuck",
        };
        write!(
            f,
            "orphaned work on `{}` {} after {:.3}s: {}",
            self.origin,
            what,
            self.elapsed.as_secs_f64(),
            self.message
        )
    }
}

type Callback = dyn Fn(&Report) + Send + Sync;

/// Where reports about orphaned failures and stuck jobs go. Cheap to clone; clones share
/// the destination.
///
/// See the [module docs](crate::orphan) for the three forms and the thread each runs on.
///
/// # Examples
///
/// ```
/// use loopguard::orphan::OrphanHandler;
/// use loopguard::pool::Pool;
///
/// let pool = Pool::builder()
///     .on_orphan(OrphanHandler::new(|report| eprintln!("{report}")))
///     .build()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct OrphanHandler {
    kind: HandlerKind,
}

#[derive(Clone)]
enum HandlerKind {
    Log,
    Callback(Arc<Callback>),
    Channel(channel::Sender),
}

impl Default for OrphanHandler {
    fn default() -> Self {
        OrphanHandler::log()
    }
}

impl fmt::Debug for OrphanHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            HandlerKind::Log => "log",
            HandlerKind::Callback(_) => "callback",
            HandlerKind::Channel(_) => "channel",
        };
        f.debug_struct("OrphanHandler")
            .field("kind", &kind)
            .finish()
    }
}

impl OrphanHandler {
    /// The default handler: logs each report through the [`log`] facade, failures at
    /// `error` level and stuck jobs at `warn`, with target `loopguard`.
    ///
    /// With no logger installed ([`log::max_level()`] is `Off`) it writes each report to
    /// stderr instead, as a line starting `loopguard: orphaned work on`, at most ten at
    /// once and then one a second (a line then says how many were held back; each report
    /// is counted either way). After the first such line comes, once per process, a line
    /// saying how to route reports elsewhere: install a logger, or give the pool or shield
    /// a handler of its own ([`OrphanHandler::new`], [`OrphanHandler::channel`]).
    ///
    /// # Caveats
    ///
    /// A logger installed with its max level at `Off` (told to log nothing) counts as no
    /// logger: reports go to stderr. To drop them on purpose, say so with a handler:
    /// `OrphanHandler::new(|_| {})`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use loopguard::orphan::OrphanHandler;
    /// # use loopguard::pool::Pool;
    /// let pool = Pool::builder().on_orphan(OrphanHandler::log()).build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn log() -> OrphanHandler {
        OrphanHandler {
            kind: HandlerKind::Log,
        }
    }

    /// A handler that calls `f` for each report, on the thread that observes the failure
    /// (see the [module docs](crate::orphan)). A panic in `f` is caught and logged.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::orphan::OrphanHandler;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let counter = seen.clone();
    /// let handler = OrphanHandler::new(move |_report| {
    ///     counter.fetch_add(1, Ordering::Relaxed);
    /// });
    /// ```
    pub fn new<F>(f: F) -> OrphanHandler
    where
        F: Fn(&Report) + Send + Sync + 'static,
    {
        OrphanHandler {
            kind: HandlerKind::Callback(Arc::new(f)),
        }
    }

    /// A handler that queues reports for a task on the application's loop, with room for
    /// `capacity` reports (at least one). Reports that find the queue full are dropped and
    /// counted; once the receiver is dropped, reports are logged instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::orphan::OrphanHandler;
    /// use loopguard::pool::Pool;
    /// use loopguard::Fallible;
    ///
    /// # futures_lite::future::block_on(async {
    /// let (handler, mut reports) = OrphanHandler::channel(64);
    /// let pool = Pool::builder().on_orphan(handler).build()?;
    ///
    /// drop(pool.try_run(Fallible(|| -> Result<u32, &str> { Err("no route") })));
    /// let report = reports.recv().await.expect("a report");
    /// assert_eq!(report.message(), "\"no route\"");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn channel(capacity: usize) -> (OrphanHandler, OrphanReceiver) {
        let (sender, receiver) = channel::bounded(capacity.max(1));
        let handler = OrphanHandler {
            kind: HandlerKind::Channel(sender),
        };
        (handler, receiver)
    }

    /// Delivers one report on the calling thread. Never panics (user code is contained),
    /// never blocks on the receiver.
    pub(crate) fn report(&self, report: Report) {
        match &self.kind {
            HandlerKind::Log => log_report(&report),
            HandlerKind::Callback(f) => {
                contain("an orphan handler", || f(&report));
            }
            HandlerKind::Channel(sender) => sender.push(report),
        }
    }
}

/// Logs a report, at `warn` for a stuck job and `error` for a failure; with no logger to
/// hear it (the facade's max level is `Off`), writes it to stderr instead, rate-limited.
pub(crate) fn log_report(report: &Report) {
    if log::max_level() == log::LevelFilter::Off {
        stderr::write(report);
        return;
    }
    match report.kind {
        ReportKind::Stuck => log_contained!(warn, "{report}"),
        _ => log_contained!(error, "{report}"),
    };
}
