//! `TryRunWithin`: the future of [`Pool::try_run_within`](super::Pool::try_run_within):
//! fail fast at the first poll, then the job within a deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::core::Core;
use super::error::WithinError;
use super::job::{self, IntoJob, Job};
use crate::deadline::{Deadline, DeadlineTimer, Spent, poll_timer};

enum Phase<W, T> {
    /// Not polled yet: nothing admitted.
    Start(W),
    /// Admitted: the job runs or ran.
    Running(Job<T>),
    Done,
}

/// Future of [`Pool::try_run_within`](super::Pool::try_run_within): admits the job at its
/// first poll or refuses at once, then resolves to the job's output within the deadline:
/// a plain job's output, or a [`Fallible`](crate::Fallible) job's `Ok` value with its `Err`
/// in [`WithinError::Failed`] (flat, so that a scrape is one `match`).
///
/// The late rule is the one of [`Run`](super::Run): an output delivered after the deadline
/// is refused ([`WithinError::Expired`], [`Phase::Running`](crate::deadline::Phase::Running)); a refused failure goes to the orphan handler,
/// once; a refused success is dropped (its `Drop` contained).
///
/// # Cancel safety
///
/// Dropping it before its first poll drops the job unrun; after admission it orphans the
/// job, exactly like dropping a [`Job`].
///
/// # Panics
///
/// Polling it again after it returned `Poll::Ready` panics.
///
/// # Examples
///
/// ```
/// use loopguard::deadline::Deadline;
/// use loopguard::pool::{Pool, TryRunWithin};
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().build()?;
/// let walk: TryRunWithin<_, u8> = pool.try_run_within(Deadline::never(), || 3);
/// assert_eq!(walk.await.ok(), Some(3));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "futures do nothing unless polled: the job is not even admitted"]
pub struct TryRunWithin<W, T> {
    core: Arc<Core>,
    phase: Phase<W, T>,
    deadline: Deadline,
    timer: Option<DeadlineTimer>,
}

// The closure is never pinned: it is moved out to be run. The timer is `Unpin`.
impl<W, T> Unpin for TryRunWithin<W, T> {}

impl<W: IntoJob<T>, T: Send + 'static> TryRunWithin<W, T> {
    pub(crate) fn new(core: Arc<Core>, work: W, deadline: Deadline) -> TryRunWithin<W, T> {
        TryRunWithin {
            core,
            phase: Phase::Start(work),
            deadline,
            timer: None,
        }
    }
}

impl<W, T> fmt::Debug for TryRunWithin<W, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match &self.phase {
            Phase::Start(_) => "start",
            Phase::Running(_) => "running",
            Phase::Done => "done",
        };
        f.debug_struct("TryRunWithin")
            .field("pool", &&**self.core.limit.name())
            .field("phase", &phase)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<W: IntoJob<T>, T: Send + 'static> Future for TryRunWithin<W, T> {
    /// A plain job's output, or a [`Fallible`](crate::Fallible) job's `Ok` value with its
    /// `Err` in [`WithinError::Failed`]: `Result<T, WithinError<W>>` for a plain job.
    type Output = Result<<W as IntoJob<T>>::Value, WithinError<W, <W as IntoJob<T>>::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            // Nothing new starts after expiry; a running job is orphaned by its drop.
            if !matches!(this.phase, Phase::Done) && this.deadline.is_expired() {
                let spent = match std::mem::replace(&mut this.phase, Phase::Done) {
                    Phase::Running(_) => Spent::RUNNING,
                    _ => Spent::IN_LINE,
                };
                return Poll::Ready(Err(WithinError::Expired(spent)));
            }
            match &mut this.phase {
                Phase::Start(_) => {
                    let Phase::Start(work) = std::mem::replace(&mut this.phase, Phase::Done) else {
                        unreachable!("matched `Start`")
                    };
                    match job::try_admit(&this.core.limit, &this.core, work) {
                        Ok(job) => this.phase = Phase::Running(job),
                        Err(refused) => return Poll::Ready(Err(refused.into())),
                    }
                }
                Phase::Running(job) => {
                    if let Poll::Ready((result, elapsed)) = job.poll_outcome(cx) {
                        let Phase::Running(job) = std::mem::replace(&mut this.phase, Phase::Done)
                        else {
                            unreachable!("matched `Running`")
                        };
                        if this.deadline.is_expired() {
                            // Too late to count: the caller gets `Expired`, so a failure
                            // among late results is nobody's but the handler's.
                            job.report_refused(result, elapsed);
                            return Poll::Ready(Err(WithinError::Expired(Spent::RUNNING)));
                        }
                        return Poll::Ready(match result {
                            Ok(output) => W::split(output).map_err(WithinError::Failed),
                            Err(panicked) => Err(WithinError::Panicked(panicked)),
                        });
                    }
                    match this.deadline.instant() {
                        Some(at) if poll_timer(&mut this.timer, at, cx) => continue,
                        _ => return Poll::Pending,
                    }
                }
                Phase::Done => panic!("`TryRunWithin` polled after completion"),
            }
        }
    }
}
