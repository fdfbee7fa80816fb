//! One channel for failures nobody is waiting for.
//!
//! A [`Job`](crate::Job) handle that is dropped *orphans*
//! its work: the work runs on, but nobody will see its outcome. If that outcome is a failure
//! (a panic, or an `Err`), it is handed to the [`OrphanHandler`] of the pool exactly once.
//! The same handler hears about jobs that run past the pool's stuck threshold.
//!
//! Three forms of handler exist:
//!
//! - [`OrphanHandler::log()`], the default: logs each report through the [`log`] facade
//!   (failures at `error`, stuck jobs at `warn`). `log` rather than `tracing` because it is
//!   the smallest common denominator: `env_logger`, `simplelog` and `tracing` (through
//!   `tracing-log`) all receive its records, and it adds one tiny dependency.
//! - [`OrphanHandler::new()`], a `Send + Sync` closure. It runs on the thread that observes
//!   the orphaned failure: the pool's worker thread when the job finishes after its `Job` was
//!   dropped, or the thread that drops the `Job` when the job had already finished.
//! - [`OrphanHandler::channel()`], a bounded queue drained by a task on the application's own
//!   loop through an [`OrphanReceiver`], like asyncio's loop exception handler. The task may
//!   hold `!Send` state and run on a `LocalExecutor`. When the queue is full, reports are
//!   dropped and counted ([`OrphanReceiver::dropped`]); once the receiver is gone, reports
//!   fall back to the log handler so nothing is lost silently.
//!
//! Whatever the form, a handler that panics is caught: the panic is logged, the worker goes
//! on, and the job's slot is released as usual.
//!
//! Every orphaned failure is also counted by the pool ([`Pool::orphaned_failures`]) and in
//! the `loopguard_orphaned_failures_total` metric, independent of the handler.
//!
//! [`Pool::orphaned_failures`]: crate::Pool::orphaned_failures

use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use event_listener::{Event, EventListener};
use futures_lite::Stream;

use crate::error::Panicked;
use crate::outcome::JobOutput;
use crate::sync::{drop_quietly, lock};

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
/// use loopguard::{OrphanHandler, Pool, ReportKind};
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
/// drop(pool.try_run(|| -> Result<(), String> { Err("disk full".into()) }));
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
    /// # use loopguard::{OrphanHandler, Pool};
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
    /// # use loopguard::{OrphanHandler, ReportKind};
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
    /// # use loopguard::OrphanHandler;
    /// let handler = OrphanHandler::new(|report| eprintln!("{}", report.message()));
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }

    /// How long the work ran before it failed, or, for a stuck job, how long it had been
    /// running when it was reported.
    ///
    /// # Examples
    ///
    /// ```
    /// # use loopguard::OrphanHandler;
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
/// use loopguard::{OrphanHandler, Pool};
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
    Channel(Arc<Sender>),
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
    /// # Examples
    ///
    /// ```
    /// # use loopguard::{OrphanHandler, Pool};
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
    /// use loopguard::OrphanHandler;
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
    /// use loopguard::{OrphanHandler, Pool};
    ///
    /// # futures_lite::future::block_on(async {
    /// let (handler, mut reports) = OrphanHandler::channel(64);
    /// let pool = Pool::builder().on_orphan(handler).build()?;
    ///
    /// drop(pool.try_run(|| -> Result<u32, &str> { Err("no route") }));
    /// let report = reports.recv().await.expect("a report");
    /// assert_eq!(report.message(), "\"no route\"");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn channel(capacity: usize) -> (OrphanHandler, OrphanReceiver) {
        let shared = Arc::new(ChannelShared {
            queue: std::sync::Mutex::new(VecDeque::new()),
            capacity: capacity.max(1),
            dropped: AtomicU64::new(0),
            senders_gone: AtomicBool::new(false),
            receiver_gone: AtomicBool::new(false),
            event: Event::new(),
        });
        let handler = OrphanHandler {
            kind: HandlerKind::Channel(Arc::new(Sender {
                shared: shared.clone(),
            })),
        };
        let receiver = OrphanReceiver {
            shared,
            listener: None,
        };
        (handler, receiver)
    }

    /// Delivers one report. Never panics, never blocks on the receiver.
    pub(crate) fn report(&self, report: Report) {
        match &self.kind {
            HandlerKind::Log => log_report(&report),
            HandlerKind::Callback(f) => {
                if catch_unwind(AssertUnwindSafe(|| f(&report))).is_err() {
                    log::error!(target: "loopguard", "orphan handler panicked while handling: {report}");
                }
            }
            HandlerKind::Channel(sender) => sender.shared.push(report),
        }
    }
}

fn log_report(report: &Report) {
    match report.kind {
        ReportKind::Stuck => log::warn!(target: "loopguard", "{report}"),
        _ => log::error!(target: "loopguard", "{report}"),
    }
}

struct ChannelShared {
    queue: std::sync::Mutex<VecDeque<Report>>,
    capacity: usize,
    dropped: AtomicU64,
    senders_gone: AtomicBool,
    receiver_gone: AtomicBool,
    event: Event,
}

impl ChannelShared {
    fn push(&self, report: Report) {
        if self.receiver_gone.load(Ordering::Acquire) {
            log_report(&report);
            return;
        }
        {
            let mut queue = lock(&self.queue);
            if queue.len() >= self.capacity {
                drop(queue);
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
            queue.push_back(report);
        }
        self.event.notify(1);
    }
}

/// The sending side; the last clone to go closes the channel.
struct Sender {
    shared: Arc<ChannelShared>,
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.shared.senders_gone.store(true, Ordering::Release);
        self.shared.event.notify(usize::MAX);
    }
}

/// The loop side of [`OrphanHandler::channel`]: an async receiver and a [`Stream`] of
/// [`Report`]s.
///
/// The stream ends once every clone of the handler is gone (every pool and shield using it
/// was dropped) and the queue is drained.
///
/// # Examples
///
/// ```
/// use futures_lite::StreamExt;
/// use loopguard::{OrphanHandler, Pool};
///
/// # futures_lite::future::block_on(async {
/// let (handler, mut reports) = OrphanHandler::channel(16);
/// let pool = Pool::builder().on_orphan(handler).build()?;
/// drop(pool.try_run(|| -> u32 { panic!("walk failed") }));
/// let report = reports.next().await.unwrap();
/// assert_eq!(report.message(), "walk failed");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct OrphanReceiver {
    shared: Arc<ChannelShared>,
    listener: Option<EventListener>,
}

impl fmt::Debug for OrphanReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrphanReceiver")
            .field("queued", &self.len())
            .field("capacity", &self.shared.capacity)
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl OrphanReceiver {
    /// Takes a queued report without waiting.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, mut reports) = loopguard::OrphanHandler::channel(4);
    /// assert!(reports.try_recv().is_none());
    /// ```
    pub fn try_recv(&mut self) -> Option<Report> {
        lock(&self.shared.queue).pop_front()
    }

    /// Waits for the next report. Resolves to `None` once every handler clone is gone and
    /// the queue is empty.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a report is only taken from the queue when the future resolves.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let (handler, mut reports) = loopguard::OrphanHandler::channel(4);
    /// drop(handler);
    /// assert!(reports.recv().await.is_none());
    /// # });
    /// ```
    pub async fn recv(&mut self) -> Option<Report> {
        futures_lite::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// How many reports are queued now.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, reports) = loopguard::OrphanHandler::channel(4);
    /// assert_eq!(reports.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        lock(&self.shared.queue).len()
    }

    /// Whether no report is queued now.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, reports) = loopguard::OrphanHandler::channel(4);
    /// assert!(reports.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many reports were dropped because the queue was full.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, reports) = loopguard::OrphanHandler::channel(4);
    /// assert_eq!(reports.dropped(), 0);
    /// ```
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Report>> {
        loop {
            if let Some(report) = self.try_recv() {
                self.listener = None;
                return Poll::Ready(Some(report));
            }
            if self.shared.senders_gone.load(Ordering::Acquire) {
                // A last report may have been pushed just before the flag was set.
                let last = self.try_recv();
                self.listener = None;
                return Poll::Ready(last);
            }
            match self.listener.as_mut() {
                None => self.listener = Some(self.shared.event.listen()),
                Some(listener) => {
                    if Pin::new(listener).poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.listener = None;
                }
            }
        }
    }
}

use std::future::Future as _;

impl Stream for OrphanReceiver {
    type Item = Report;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Report>> {
        self.get_mut().poll_recv(cx)
    }
}

impl Drop for OrphanReceiver {
    fn drop(&mut self) {
        self.shared.receiver_gone.store(true, Ordering::Release);
        let left: Vec<Report> = lock(&self.shared.queue).drain(..).collect();
        for report in &left {
            log_report(report);
        }
    }
}

/// What to report about an outcome nobody awaits: `None` when it is no failure. The
/// outcome's `failure()` and its error's `Debug` are user code: a panic in them still yields
/// a report rather than unwinding into a worker or losing the failure.
pub(crate) fn describe_failure<T: JobOutput>(
    result: &Result<T, Panicked>,
) -> Option<(ReportKind, String)> {
    let described = catch_unwind(AssertUnwindSafe(|| match result {
        Err(panicked) => Some((ReportKind::Panicked, panicked.message().to_string())),
        Ok(value) => value
            .failure()
            .map(|error| (ReportKind::Failed, format!("{error:?}"))),
    }));
    described.unwrap_or_else(|payload| {
        drop_quietly(payload);
        let message = "a failed output whose description panicked".to_string();
        Some((ReportKind::Failed, message))
    })
}
