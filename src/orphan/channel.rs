//! [`OrphanHandler::channel`](super::OrphanHandler::channel): reports queued for a task on
//! the application's loop.
//!
//! A small bounded queue of loopguard's own rather than a general channel, because the one
//! waker it stores (the receiving task's) is called by loopguard from a worker thread: the
//! wake runs after the lock is released and is contained, so a waker that panics or calls
//! back into the queue loses no report and kills no worker.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

// Under the crate's loom cfg (unit tests only) the queue's lock is loom's (see
// `crate::sync`), so `channel/loom_model.rs` explores push, receive, the receiver's drop
// and the last sender's drop racing; normal builds never see loom.
use crate::sync::{Mutex, lock};

use futures_lite::Stream;

use super::{Report, log_report};
use crate::waker_slot::{Taken, Visit, WakerSlot, register};

/// The queue both sides share.
struct Queue {
    state: Mutex<State>,
    capacity: usize,
}

struct State {
    reports: VecDeque<Report>,
    /// The receiver is gone: pushes are logged instead.
    closed: bool,
    /// Live handler clones; the stream ends when none is left and the queue is empty.
    senders: usize,
    /// Reports refused because the queue was full.
    dropped: u64,
    /// The receiving task, while it waits.
    waker: WakerSlot,
}

/// Makes a bounded report channel of `capacity` (at least one).
pub(super) fn bounded(capacity: usize) -> (Sender, OrphanReceiver) {
    let capacity = capacity.max(1);
    let queue = Arc::new(Queue {
        state: Mutex::new(State {
            reports: VecDeque::with_capacity(capacity.min(1024)),
            closed: false,
            senders: 1,
            dropped: 0,
            waker: WakerSlot::new(),
        }),
        capacity,
    });
    (
        Sender {
            queue: queue.clone(),
        },
        OrphanReceiver { queue },
    )
}

/// The handler's side; the stream ends when the last clone goes.
pub(super) struct Sender {
    queue: Arc<Queue>,
}

impl Clone for Sender {
    fn clone(&self) -> Sender {
        lock(&self.queue.state).senders += 1;
        Sender {
            queue: self.queue.clone(),
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let waker = {
            let mut state = lock(&self.queue.state);
            state.senders -= 1;
            if state.senders == 0 {
                state.waker.take()
            } else {
                Taken::default()
            }
        };
        waker.wake();
    }
}

impl Sender {
    /// Queues `report` without waiting: counted as dropped when the queue is full, logged
    /// when the receiver is gone. Both are decided under the queue's lock, so a report
    /// racing the receiver's drop is either queued before the close (and drained by the
    /// drop) or refused after it (and logged here): never lost.
    pub(super) fn push(&self, report: Report) {
        let mut state = lock(&self.queue.state);
        if state.closed {
            drop(state);
            log_report(&report);
        } else if state.reports.len() >= self.queue.capacity {
            state.dropped += 1;
        } else {
            state.reports.push_back(report);
            let waker = state.waker.take();
            drop(state);
            waker.wake();
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
    queue: Arc<Queue>,
}

impl fmt::Debug for OrphanReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrphanReceiver")
            .field("queued", &self.len())
            .field("capacity", &self.queue.capacity)
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
        lock(&self.queue.state).reports.pop_front()
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
        lock(&self.queue.state).reports.len()
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
        self.len() == 0
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
        lock(&self.queue.state).dropped
    }
}

impl Stream for OrphanReceiver {
    type Item = Report;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Report>> {
        let queue = &*self.queue;
        // Through `register`: the task's waker is cloned outside the lock (user code), and
        // the one it replaces is dropped after it, contained.
        register(&queue.state, cx.waker(), |state| {
            if let Some(report) = state.reports.pop_front() {
                Visit::Done(Poll::Ready(Some(report)))
            } else if state.senders == 0 {
                Visit::Done(Poll::Ready(None))
            } else {
                Visit::Store(&mut state.waker, Poll::Pending)
            }
        })
    }
}

impl Drop for OrphanReceiver {
    fn drop(&mut self) {
        // Closing first: from here on a sender's push logs, so draining what was queued
        // before the close accounts for every report.
        let (queued, waker) = {
            let mut state = lock(&self.queue.state);
            state.closed = true;
            (std::mem::take(&mut state.reports), state.waker.take())
        };
        drop(waker);
        for report in &queued {
            log_report(report);
        }
    }
}

/// Exhaustive interleavings of push, receive and both sides' drops, under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;
