//! `Run`: the future of [`Pool::run`](super::Pool::run) and
//! [`Pool::run_within`](super::Pool::run_within): waits for a slot in FIFO order, within a
//! deadline, then runs the job.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use async_io::Timer;

use super::core::Core;
use super::error::RunError;
use super::job::{self, IntoJob, Job};
use super::wait::{Ended, SlotWait, Started};
use crate::deadline::{Deadline, Expired};

enum Stage<W, T> {
    /// Not polled yet: no slot asked for.
    Start(W),
    /// Queued behind other waiters (and counted as demand).
    Queued(W),
    /// Admitted: the job runs or ran.
    Running(Job<T>),
    Done,
}

/// Future of [`Pool::run`](super::Pool::run) and
/// [`Pool::run_within`](super::Pool::run_within): waits for a slot, runs the job, resolves
/// to its output.
///
/// Nothing happens until it is first polled. See [`Pool::run`](super::Pool::run) for the
/// cancel-safety contract.
///
/// # Panics
///
/// Polling it again after it returned `Poll::Ready` panics.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::pool::Pool::builder().build()?;
/// let run: loopguard::pool::Run<_, u8> = pool.run(|| 3);
/// assert_eq!(run.await, Ok(3));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Run<W, T> {
    core: Arc<Core>,
    stage: Stage<W, T>,
    wait: SlotWait,
    created: Instant,
    deadline: Deadline,
    timer: Option<Timer>,
}

// The closure is never pinned: it is moved out to be run. The timer is `Unpin`.
impl<W, T> Unpin for Run<W, T> {}

impl<W: IntoJob<T>, T: Send + 'static> Run<W, T> {
    pub(crate) fn new(core: Arc<Core>, work: W, deadline: Deadline) -> Run<W, T> {
        Run {
            core,
            stage: Stage::Start(work),
            wait: SlotWait::new(),
            created: Instant::now(),
            deadline,
            timer: None,
        }
    }

    /// Ends the operation at expiry, whatever its stage: nothing new starts, a waiter
    /// leaves the queue (handing back a slot granted meanwhile), a running job is orphaned.
    fn expire(&mut self) -> RunError {
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Queued(_) => self.core.abandon_wait(&mut self.wait),
            Stage::Running(job) => drop(job),
            Stage::Start(_) | Stage::Done => {}
        }
        RunError::Expired(Expired)
    }

    /// Arms the deadline's timer; returns `true` if it has already fired.
    fn timer_fired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(at) = self.deadline.instant() else {
            return false;
        };
        let timer = self.timer.get_or_insert_with(|| Timer::at(at));
        Pin::new(timer).poll(cx).is_ready()
    }

    /// Advances the state machine as far as it goes without waiting. User code (the
    /// waker's clone) only runs with the stage in place, so a panic there leaves a queued
    /// caller queued, for `Drop` to withdraw.
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RunError>> {
        loop {
            match &mut self.stage {
                Stage::Start(_) => match self.wait.start(&self.core.gate) {
                    Started::Acquired => self.admit(false),
                    Started::Queued => {
                        self.core.queued();
                        self.stage = match std::mem::replace(&mut self.stage, Stage::Done) {
                            Stage::Start(work) => Stage::Queued(work),
                            _ => unreachable!("matched `Start`"),
                        };
                    }
                    Started::Closed => {
                        self.stage = Stage::Done;
                        return Poll::Ready(Err(RunError::Closed));
                    }
                },
                Stage::Queued(_) => match self.wait.poll(&self.core.gate, cx.waker()) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ended::Granted) => self.admit(true),
                    Poll::Ready(ended) => {
                        self.stage = Stage::Done;
                        if ended == Ended::ClosedHolding {
                            self.core.release_slot();
                        } else {
                            self.core.wait_closed();
                        }
                        return Poll::Ready(Err(RunError::Closed));
                    }
                },
                Stage::Running(job) => {
                    let Poll::Ready((result, elapsed)) = job.poll_outcome(cx) else {
                        return Poll::Pending;
                    };
                    let Stage::Running(job) = std::mem::replace(&mut self.stage, Stage::Done)
                    else {
                        unreachable!("matched `Running`")
                    };
                    if self.deadline.is_expired() {
                        // Completed, but too late to count as a result. The caller gets
                        // `Expired`, so a failure among late results is nobody's: report it.
                        job.report_refused(result, elapsed);
                        return Poll::Ready(Err(RunError::Expired(Expired)));
                    }
                    return Poll::Ready(result.map_err(RunError::from));
                }
                Stage::Done => unreachable!("checked by poll"),
            }
        }
    }

    /// The caller holds a slot: hand the work to a worker.
    fn admit(&mut self, queued: bool) {
        let work = match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Start(work) | Stage::Queued(work) => work,
            _ => unreachable!("admitted twice"),
        };
        let job = job::admit(&self.core, work, self.created.elapsed(), queued);
        self.stage = Stage::Running(job);
    }
}

impl<W, T> fmt::Debug for Run<W, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match &self.stage {
            Stage::Start(_) => "start",
            Stage::Queued(_) => "queued",
            Stage::Running(_) => "running",
            Stage::Done => "done",
        };
        f.debug_struct("Run")
            .field("pool", &&*self.core.name)
            .field("stage", &stage)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<W: IntoJob<T>, T: Send + 'static> Future for Run<W, T> {
    type Output = Result<T, RunError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if matches!(this.stage, Stage::Done) {
                panic!("`Run` polled after completion");
            }
            if this.deadline.is_expired() {
                return Poll::Ready(Err(this.expire()));
            }
            match this.step(cx) {
                Poll::Ready(output) => return Poll::Ready(output),
                Poll::Pending if this.timer_fired(cx) => continue,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<W, T> Drop for Run<W, T> {
    fn drop(&mut self) {
        if let Stage::Queued(_) = self.stage {
            self.core.abandon_wait(&mut self.wait);
        }
        // A running job is orphaned by dropping its `Job`.
    }
}
