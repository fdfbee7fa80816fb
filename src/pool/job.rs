//! `Job<T>`: the hand-off of one job's outcome between its worker thread and the loop.
//!
//! The closure and the outcome live in one allocation (`Cell`), shared by the worker (as a
//! `Task`) and by the `Job` handle. Its state moves under one mutex, so completion and
//! drop cannot both claim the outcome: whichever comes second sees what the first did.
//!
//! | first            | second        | who reports a failure              |
//! |------------------|---------------|------------------------------------|
//! | worker delivers  | `Job` awaited | nobody: the caller gets it         |
//! | worker delivers  | `Job` dropped | the dropping thread                |
//! | `Job` dropped    | worker ends   | the worker thread                  |

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::Panicked;
use crate::outcome::JobOutput;
use crate::shared::Shared;
use crate::sync::{drop_quietly, lock, panic_message, wake_quietly};

/// Where the outcome of a job stands.
enum Slot<T> {
    /// Not finished; the waker of whoever awaits the `Job`.
    Pending(Option<Waker>),
    /// Finished and delivered, not yet taken.
    Ready(Result<T, Panicked>, Duration),
    /// The `Job` was dropped before the job finished.
    Orphaned,
    /// The caller took the outcome.
    Taken,
}

struct State<F, T> {
    job: Option<F>,
    slot: Slot<T>,
}

/// One admitted job: the closure until a worker takes it, then its outcome.
pub(crate) struct Cell<F, T> {
    shared: Arc<Shared>,
    state: Mutex<State<F, T>>,
}

/// What a worker thread sees of a job.
pub(crate) trait Task: Send + Sync {
    /// Runs the job, delivers or reports its outcome. Never unwinds.
    fn run(self: Arc<Self>, worker: usize);
}

/// What a `Job<T>` sees of a job.
trait Outcome<T>: Send + Sync {
    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Result<T, Panicked>>;
    fn orphan(&self);
    fn is_finished(&self) -> bool;
}

impl<F, T> Cell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: JobOutput,
{
    /// Wraps `job` for a slot already acquired, hands it to a worker and returns its handle.
    pub(crate) fn submit(shared: &Arc<Shared>, job: F) -> Job<T> {
        let cell = Arc::new(Cell {
            shared: shared.clone(),
            state: Mutex::new(State {
                job: Some(job),
                slot: Slot::Pending(None),
            }),
        });
        shared.dispatch(cell.clone());
        Job { outcome: cell }
    }
}

impl<F, T> Task for Cell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: JobOutput,
{
    fn run(self: Arc<Self>, worker: usize) {
        // The slot goes back when this returns, or if anything below unwinds.
        let _slot = SlotGuard(&self.shared);
        let job = lock(&self.state).job.take();
        let Some(job) = job else {
            // Unreachable: a cell is dispatched once.
            return;
        };
        let started = Instant::now();
        self.shared.job_started(worker, started);
        let result = catch_unwind(AssertUnwindSafe(job)).map_err(|payload| {
            let message = panic_message(&*payload);
            drop_quietly(payload);
            Panicked::new(message)
        });
        let elapsed = started.elapsed();
        // `JobOutput::failure` may be user code: a panic in it counts as an error.
        let outcome =
            catch_unwind(AssertUnwindSafe(|| classify(&result))).unwrap_or(Classified::Error);
        self.shared.job_ended(worker, elapsed, outcome);

        let mut state = lock(&self.state);
        match std::mem::replace(&mut state.slot, Slot::Taken) {
            Slot::Pending(waker) => {
                state.slot = Slot::Ready(result, elapsed);
                drop(state);
                if let Some(waker) = waker {
                    // A waker that panics must not take the worker down.
                    wake_quietly(waker);
                }
            }
            _ => {
                drop(state);
                self.shared.report_orphan(result, elapsed);
            }
        }
    }
}

/// Gives a job's slot back when dropped: after delivery, or while unwinding.
struct SlotGuard<'a>(&'a Shared);

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.0.finish_slot();
    }
}

/// The outcome label of a finished job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Classified {
    Ok,
    Error,
    Panicked,
}

fn classify<T: JobOutput>(result: &Result<T, Panicked>) -> Classified {
    match result {
        Ok(value) if value.failure().is_some() => Classified::Error,
        Ok(_) => Classified::Ok,
        Err(_) => Classified::Panicked,
    }
}

impl<F, T> Outcome<T> for Cell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: JobOutput,
{
    fn poll_outcome(&self, cx: &mut Context<'_>) -> Poll<Result<T, Panicked>> {
        let mut state = lock(&self.state);
        match &mut state.slot {
            Slot::Pending(waker) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Slot::Ready(..) => match std::mem::replace(&mut state.slot, Slot::Taken) {
                Slot::Ready(result, _) => Poll::Ready(result),
                _ => unreachable!(),
            },
            Slot::Orphaned | Slot::Taken => panic!("`Job` polled after completion"),
        }
    }

    fn orphan(&self) {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut state.slot, Slot::Taken) {
            Slot::Pending(_) => state.slot = Slot::Orphaned,
            Slot::Ready(result, elapsed) => {
                drop(state);
                self.shared.report_orphan(result, elapsed);
            }
            Slot::Orphaned | Slot::Taken => {}
        }
    }

    fn is_finished(&self) -> bool {
        matches!(lock(&self.state).slot, Slot::Ready(..) | Slot::Taken)
    }
}

/// The handle of an admitted job.
///
/// Awaiting it gives the job's output, or [`Panicked`] if the job panicked. The job has a
/// slot of its pool from admission until its worker thread has finished it and delivered
/// (or reported) its outcome.
///
/// # Cancel safety
///
/// Dropping a `Job` *orphans* the job; it never cancels it. The thread finishes the job and
/// the slot stays held until then, so a caller that leaves cannot make room for new work
/// while the old work still occupies a thread. If the orphaned job fails (panics, or
/// returns an `Err`), the failure goes to the pool's [`OrphanHandler`] exactly once.
///
/// # Panics
///
/// Polling a `Job` again after it returned `Poll::Ready` panics.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::Pool::builder().name("render").workers(2).build()?;
/// let job = pool.try_run(|| "# HELP up 1\n".repeat(2)).expect("a free slot");
/// assert_eq!(job.await.unwrap().lines().count(), 2);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
///
/// [`OrphanHandler`]: crate::OrphanHandler
#[must_use = "dropping a Job orphans it: the job runs on and only failures are reported"]
pub struct Job<T> {
    outcome: Arc<dyn Outcome<T>>,
}

impl<T> Job<T> {
    /// Whether the job has finished and its outcome is ready to be taken.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// # let pool = loopguard::Pool::builder().build()?;
    /// let job = pool.try_run(|| 1).unwrap();
    /// pool.wait_idle().await;
    /// assert!(job.is_finished());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn is_finished(&self) -> bool {
        self.outcome.is_finished()
    }
}

impl<T> Future for Job<T> {
    type Output = Result<T, Panicked>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.outcome.poll_outcome(cx)
    }
}

impl<T> Drop for Job<T> {
    fn drop(&mut self) {
        self.outcome.orphan();
    }
}

impl<T> fmt::Debug for Job<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("finished", &self.is_finished())
            .finish()
    }
}
