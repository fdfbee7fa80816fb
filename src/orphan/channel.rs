//! [`OrphanHandler::channel`](super::OrphanHandler::channel): reports queued for a task on
//! the application's loop, on `async-channel`.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use async_channel::TrySendError;
use futures_lite::Stream;

use super::{Report, log_report};
use crate::sync::Wakers;

/// Makes a bounded report channel of `capacity` (at least one).
pub(super) fn bounded(capacity: usize) -> (Sender, OrphanReceiver) {
    let (tx, rx) = async_channel::bounded(capacity);
    let dropped = Arc::new(AtomicU64::new(0));
    let sender = Sender {
        tx,
        dropped: dropped.clone(),
    };
    // Boxed: the receiver is `!Unpin` (it keeps its listener inline), the stream is not.
    let rx = Box::pin(rx);
    let wakers = Wakers::default();
    (
        sender,
        OrphanReceiver {
            rx,
            dropped,
            wakers,
        },
    )
}

/// The handler's side; the channel closes when the last clone goes.
#[derive(Clone)]
pub(super) struct Sender {
    tx: async_channel::Sender<Report>,
    dropped: Arc<AtomicU64>,
}

impl Sender {
    /// Queues `report` without waiting: counted as dropped when the queue is full, logged
    /// when the receiver is gone. The channel decides both atomically, so a report racing
    /// the receiver's drop is either queued before the close (and drained by the drop) or
    /// refused after it (and logged here): never lost.
    pub(super) fn push(&self, report: Report) {
        match self.tx.try_send(report) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Closed(report)) => log_report(&report),
        }
    }
}

/// The loop side of [`OrphanHandler::channel`](super::OrphanHandler::channel): an async
/// receiver and a [`Stream`] of [`Report`]s.
///
/// The stream ends once every clone of the handler is gone (every pool and shield using it
/// was dropped) and the queue is drained. Dropping the receiver logs whatever is still
/// queued, and reports that arrive afterwards are logged instead of queued.
///
/// # Examples
///
/// ```
/// use futures_lite::StreamExt;
/// use loopguard::orphan::OrphanHandler;
/// use loopguard::pool::Pool;
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
    rx: Pin<Box<async_channel::Receiver<Report>>>,
    dropped: Arc<AtomicU64>,
    /// The task's waker, wrapped: the channel wakes it from the sending (worker) thread.
    wakers: Wakers,
}

impl fmt::Debug for OrphanReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrphanReceiver")
            .field("queued", &self.len())
            .field("capacity", &self.rx.capacity())
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
    /// let (_handler, mut reports) = loopguard::orphan::OrphanHandler::channel(4);
    /// assert!(reports.try_recv().is_none());
    /// ```
    pub fn try_recv(&mut self) -> Option<Report> {
        self.rx.try_recv().ok()
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
    /// let (handler, mut reports) = loopguard::orphan::OrphanHandler::channel(4);
    /// drop(handler);
    /// assert!(reports.recv().await.is_none());
    /// # });
    /// ```
    pub async fn recv(&mut self) -> Option<Report> {
        futures_lite::StreamExt::next(self).await
    }

    /// How many reports are queued now.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, reports) = loopguard::orphan::OrphanHandler::channel(4);
    /// assert_eq!(reports.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.rx.len()
    }

    /// Whether no report is queued now.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, reports) = loopguard::orphan::OrphanHandler::channel(4);
    /// assert!(reports.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// How many reports were dropped because the queue was full.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_handler, reports) = loopguard::orphan::OrphanHandler::channel(4);
    /// assert_eq!(reports.dropped(), 0);
    /// ```
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Stream for OrphanReceiver {
    type Item = Report;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Report>> {
        let this = self.get_mut();
        let waker = this.wakers.wrap(cx.waker());
        this.rx.as_mut().poll_next(&mut Context::from_waker(waker))
    }
}

impl Drop for OrphanReceiver {
    fn drop(&mut self) {
        // Closing first: from here on a sender's push fails and logs, so draining what was
        // queued before the close accounts for every report.
        self.rx.close();
        while let Ok(report) = self.rx.try_recv() {
            log_report(&report);
        }
    }
}
