//! `Run`: the future of [`Pool::run`](crate::Pool::run), waiting for a slot in FIFO order.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::error::RunError;
use crate::gate::{Enqueued, Refused, WaitState, Waiter};
use crate::job::Job;
use crate::outcome::JobOutput;
use crate::shared::Shared;

enum State<F, T> {
    /// Not polled yet: no slot asked for.
    Start(F),
    /// Queued behind other waiters.
    Waiting(F, Arc<Waiter>),
    /// Admitted: the job runs or ran.
    Running(Job<T>),
    Done,
}

/// Future of [`Pool::run`](crate::Pool::run): waits for a slot, runs the job, resolves to
/// its output.
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
}

// The closure is never pinned: it is moved out to be run.
impl<F, T> Unpin for Run<F, T> {}

impl<F, T> Run<F, T> {
    pub(crate) fn new(shared: Arc<Shared>, job: F) -> Run<F, T> {
        Run {
            shared,
            state: State::Start(job),
            created: Instant::now(),
        }
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
            match std::mem::replace(&mut this.state, State::Done) {
                State::Start(job) => match this.shared.gate.try_acquire() {
                    Ok(()) => this.admit(job),
                    Err(Refused::Closed) => return Poll::Ready(Err(RunError::Closed)),
                    Err(Refused::Saturated) => {
                        let waiter = Waiter::new();
                        match this.shared.gate.enqueue(&waiter) {
                            Enqueued::Acquired => this.admit(job),
                            Enqueued::Queued => this.state = State::Waiting(job, waiter),
                            Enqueued::Closed => return Poll::Ready(Err(RunError::Closed)),
                        }
                    }
                },
                State::Waiting(job, waiter) => match waiter.poll_state(cx.waker()) {
                    WaitState::Waiting => {
                        this.state = State::Waiting(job, waiter);
                        return Poll::Pending;
                    }
                    WaitState::Granted if this.shared.gate.is_closed() => {
                        // Closing fails waiters; one granted a slot just before gives it back.
                        this.shared.finish_slot();
                        return Poll::Ready(Err(RunError::Closed));
                    }
                    WaitState::Granted => this.admit(job),
                    WaitState::Closed => return Poll::Ready(Err(RunError::Closed)),
                },
                State::Running(mut job) => {
                    return match Pin::new(&mut job).poll(cx) {
                        Poll::Ready(result) => Poll::Ready(result.map_err(RunError::from)),
                        Poll::Pending => {
                            this.state = State::Running(job);
                            Poll::Pending
                        }
                    };
                }
                State::Done => panic!("`Run` polled after completion"),
            }
        }
    }
}

impl<F, T> Run<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: JobOutput,
{
    fn admit(&mut self, job: F) {
        let job = self.shared.admit(job, self.created.elapsed());
        self.state = State::Running(job);
    }
}

impl<F, T> Drop for Run<F, T> {
    fn drop(&mut self) {
        if let State::Waiting(_, waiter) = &self.state {
            self.shared.gate.cancel(waiter);
        }
        // A running job is orphaned by dropping its `Job`.
    }
}
