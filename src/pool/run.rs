//! `Run`: the future of [`Pool::run`](crate::Pool::run) and
//! [`Pool::run_within`](crate::Pool::run_within): waits for a slot in FIFO order, within a
//! deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use async_io::Timer;

use crate::deadline::{Deadline, Expired};
use crate::error::RunError;
use crate::gate::{Enqueued, Refused, WaitState, Waiter, WaiterRef};
use crate::job::Job;
use crate::outcome::JobOutput;
use crate::shared::Shared;

enum State<F, T> {
    /// Not polled yet: no slot asked for.
    Start(F),
    /// Queued behind other waiters (and counted as demand).
    Waiting(F, WaiterRef),
    /// Admitted: the job runs or ran.
    Running(Job<T>),
    Done,
}

/// Future of [`Pool::run`](crate::Pool::run) and [`Pool::run_within`](crate::Pool::run_within):
/// waits for a slot, runs the job, resolves to its output.
///
/// Nothing happens until it is first polled. See [`Pool::run`](crate::Pool::run) for the
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
/// let pool = loopguard::Pool::builder().build()?;
/// let run: loopguard::futures::Run<_, u8> = pool.run(|| 3);
/// assert_eq!(run.await, Ok(3));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Run<F, T> {
    shared: Arc<Shared>,
    state: State<F, T>,
    created: Instant,
    deadline: Deadline,
    timer: Option<Timer>,
}

// The closure is never pinned: it is moved out to be run. The timer is `Unpin`.
impl<F, T> Unpin for Run<F, T> {}

impl<F, T> Run<F, T> {
    pub(crate) fn new(shared: Arc<Shared>, job: F, deadline: Deadline) -> Run<F, T> {
        Run {
            shared,
            state: State::Start(job),
            created: Instant::now(),
            deadline,
            timer: None,
        }
    }

    /// Ends the operation at expiry, whatever its state: nothing new starts, a waiter
    /// leaves the queue (handing back a slot granted meanwhile), a running job is orphaned.
    fn expire(&mut self) -> RunError {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Waiting(_, waiter) => self.shared.abandon_wait(&waiter),
            State::Running(job) => drop(job),
            State::Start(_) | State::Done => {}
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
}

impl<F, T> fmt::Debug for Run<F, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Start(_) => "start",
            State::Waiting(..) => "waiting",
            State::Running(_) => "running",
            State::Done => "done",
        };
        f.debug_struct("Run")
            .field("pool", &self.shared.name())
            .field("state", &state)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<F, T> Future for Run<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: JobOutput,
{
    type Output = Result<T, RunError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if matches!(this.state, State::Done) {
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

impl<F, T> Run<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: JobOutput,
{
    /// Advances the state machine as far as it goes without waiting.
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RunError>> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Start(job) => match self.shared.gate.try_acquire() {
                    Ok(()) => self.admit(job, false),
                    Err(Refused::Closed) => return Poll::Ready(Err(RunError::Closed)),
                    Err(Refused::Saturated) => {
                        let waiter = Waiter::new();
                        match self.shared.gate.enqueue(&waiter) {
                            Enqueued::Acquired => self.admit(job, false),
                            Enqueued::Queued => {
                                self.shared.queued();
                                self.state = State::Waiting(job, waiter);
                            }
                            Enqueued::Closed => return Poll::Ready(Err(RunError::Closed)),
                        }
                    }
                },
                State::Waiting(job, waiter) => match waiter.poll_state(cx.waker()) {
                    WaitState::Waiting => {
                        self.state = State::Waiting(job, waiter);
                        return Poll::Pending;
                    }
                    WaitState::Granted if self.shared.gate.is_closed() => {
                        // Closing fails waiters; one granted a slot just before gives it back.
                        self.shared.finish_slot();
                        return Poll::Ready(Err(RunError::Closed));
                    }
                    WaitState::Granted => self.admit(job, true),
                    WaitState::Closed => {
                        self.shared.wait_closed();
                        return Poll::Ready(Err(RunError::Closed));
                    }
                },
                State::Running(mut job) => {
                    return match Pin::new(&mut job).poll(cx) {
                        Poll::Ready(late) if self.deadline.is_expired() => {
                            // Completed, but too late to count as a result. The caller gets
                            // `Expired`, so a failure among late results is nobody's: report it.
                            self.shared.report_orphan(late, self.created.elapsed());
                            Poll::Ready(Err(RunError::Expired(Expired)))
                        }
                        Poll::Ready(result) => Poll::Ready(result.map_err(RunError::from)),
                        Poll::Pending => {
                            self.state = State::Running(job);
                            Poll::Pending
                        }
                    };
                }
                State::Done => unreachable!("checked by poll"),
            }
        }
    }

    fn admit(&mut self, job: F, queued: bool) {
        let job = self.shared.admit(job, self.created.elapsed(), queued);
        self.state = State::Running(job);
    }
}

impl<F, T> Drop for Run<F, T> {
    fn drop(&mut self) {
        if let State::Waiting(_, waiter) = &self.state {
            self.shared.abandon_wait(waiter);
        }
        // A running job is orphaned by dropping its `Job`.
    }
}
