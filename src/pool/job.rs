//! A job from admission to delivery: what a pool runs ([`IntoJob`]), the one admission path
//! ([`admit`]), the worker's side of a job, and its handle ([`Job`]).
//!
//! The closure, its slot (a [`JobSlot`]: the job's own [`Permit`], or a share of a
//! request's lent to it) and its outcome live in one allocation, shared by the worker (as a
//! [`Task`]) and by the `Job` handle. Completion travels worker → [`Handoff`] → permit →
//! caller: the worker runs the closure, stores the outcome (or reports it, when the `Job`
//! is gone), tells the recorder, drops the permit (the release), and only then makes the
//! outcome takeable and wakes the caller.

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::core::Core;
use super::deliver::deliver;
use super::error::{Saturated, TryRunError};
use super::workers::Task;
use crate::contain::{drop_quietly, panic_message};
use crate::emit::JobOutcome;
use crate::failure::{self, Classifier, Fallible, Panicked};
use crate::gate::Refused;
use crate::gate::limit::Limit;
use crate::gate::permit::Permit;
use crate::handoff::{Finished, Handoff, Taken};
use crate::sync::lock;

/// The sealed side of [`IntoJob`]: what a worker calls. Not nameable outside the crate, so
/// the two implementations below are the only ones.
mod sealed {
    use crate::failure::Classifier;

    pub trait Sealed<T> {
        /// What `split` gives on success: `IntoJob::Value`.
        type Value;

        /// What `split` gives on a failure: `IntoJob::Error`.
        type Error;

        /// Runs the job on the worker's thread.
        fn run_job(self) -> T;

        /// Which outputs are failures an orphaned job reports.
        fn classify() -> Classifier<T>;

        /// The output as [`try_run_within`](crate::pool::Pool::try_run_within) resolves
        /// to it: a plain job's output is its value; a `Fallible` job's `Err` is its own
        /// error.
        fn split(output: T) -> Result<Self::Value, Self::Error>;
    }
}

/// What a [`Pool`](super::Pool) runs: a closure `FnOnce() -> T + Send + 'static` whose
/// output `T` is `Send + 'static`, or such a closure returning `Result<T, E>` wrapped in
/// [`Fallible`] to have an orphaned `Err` reported.
///
/// Implemented for exactly those two; there is nothing to implement yourself.
///
/// # Examples
///
/// ```
/// use loopguard::Fallible;
/// use loopguard::pool::Pool;
///
/// # futures_lite::future::block_on(async {
/// struct Snapshot { series: usize } // any output type: no trait to implement
///
/// let pool = Pool::builder().workers(1).build()?;
/// let snapshot = pool.run(|| Snapshot { series: 3 }).await.unwrap();
/// assert_eq!(snapshot.series, 3);
///
/// let read = pool.run(Fallible(|| std::fs::read_to_string("/proc/self/stat"))).await;
/// assert!(read.unwrap().is_ok());
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a job a pool can run",
    label = "not a `FnOnce() -> T + Send + 'static` closure, nor `Fallible(..)` of one returning `Result<T, E: Debug>`",
    note = "a job is a closure `move || ...` that owns what it uses (`Send + 'static`) and returns a `Send + 'static` value",
    note = "in `Fallible(|| ...)` the closure must return `Result<T, E>` whose error type `E` is `Debug + Send + 'static`: add `#[derive(Debug)]` to `E`, or return `Err(e.to_string())`; without `Fallible` a `Result` of any error type is a plain output"
)]
///
/// The output is a type parameter rather than an associated type so that the futures
/// holding a job ([`Run`](super::Run)) name it directly: `Run<F, T>` stays `Send` inside
/// any async fn, however many borrows that fn holds.
pub trait IntoJob<T>:
    sealed::Sealed<T, Value = <Self as IntoJob<T>>::Value, Error = <Self as IntoJob<T>>::Error>
    + Send
    + 'static
{
    /// What [`Pool::try_run_within`](super::Pool::try_run_within) resolves to when the job
    /// succeeds: the output `T` of a plain closure, the `Ok` value of a [`Fallible`] one.
    type Value;

    /// The job's own error, [`WithinError::Failed`](super::WithinError::Failed) under
    /// [`Pool::try_run_within`](super::Pool::try_run_within): the `Err` type of a
    /// [`Fallible`] closure, [`Infallible`](std::convert::Infallible) for a plain one.
    type Error;
}

impl<F, T> IntoJob<T> for F
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    type Value = T;
    type Error = std::convert::Infallible;
}

impl<F, T> sealed::Sealed<T> for F
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    type Value = T;
    type Error = std::convert::Infallible;

    fn run_job(self) -> T {
        self()
    }

    fn classify() -> Classifier<T> {
        failure::never::<T>
    }

    fn split(output: T) -> Result<T, std::convert::Infallible> {
        Ok(output)
    }
}

// Not offered as a fix when a plain closure fails (say, it captures an `Rc`): rustc then
// names the capture instead of suggesting `Fallible`.
#[diagnostic::do_not_recommend]
impl<F, T, E> IntoJob<Result<T, E>> for Fallible<F>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: fmt::Debug + Send + 'static,
{
    type Value = T;
    type Error = E;
}

#[diagnostic::do_not_recommend]
impl<F, T, E> sealed::Sealed<Result<T, E>> for Fallible<F>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: fmt::Debug + Send + 'static,
{
    type Value = T;
    type Error = E;

    fn run_job(self) -> Result<T, E> {
        (self.0)()
    }

    fn classify() -> Classifier<Result<T, E>> {
        failure::when_err::<T, E>
    }

    fn split(output: Result<T, E>) -> Result<T, E> {
        output
    }
}

/// The one admission path: a caller holding `permit` (taken from the pool's limit at once,
/// or after a wait of `waited`, already in the limit's own record) hands `work` to a
/// worker.
pub(crate) fn admit<W: IntoJob<T>, T: Send + 'static>(
    core: &Arc<Core>,
    work: W,
    permit: Permit,
    waited: Duration,
) -> Job<T> {
    let job = dispatch(core, work, JobSlot::Own(permit));
    // The recorder is user code: it hears of the wait once the job is on its way.
    core.limit.emit_wait(waited);
    job
}

/// Runs `work` on a permit someone else holds (a request admitted by the tower layer on
/// this pool's limit): no admission; the job keeps its share of that permit until it is
/// done, and its time is the permit's sample of the `Retry-After` basis.
#[cfg(feature = "tower")]
pub(crate) fn run_on_lent<W: IntoJob<T>, T: Send + 'static>(
    core: &Arc<Core>,
    work: W,
    lent: Lent,
) -> Job<T> {
    dispatch(core, work, JobSlot::Lent(lent))
}

fn dispatch<W: IntoJob<T>, T: Send + 'static>(core: &Arc<Core>, work: W, slot: JobSlot) -> Job<T> {
    let cell = Arc::new(Cell {
        core: core.clone(),
        work: Mutex::new(Some((work, slot))),
        handoff: Handoff::new(W::classify(), core.reporter.clone()),
    });
    core.workers.dispatch(cell.clone());
    Job { cell }
}

/// Admits `work` if a slot is free and nobody waits, or refuses it at once: on the
/// saturated path a load of the gate's word and an add to the refusal count, then relaxed
/// loads of the lent flag and of the mean job time; no lock, no allocation, the job handed
/// back.
#[inline]
pub(crate) fn try_admit<W: IntoJob<T>, T: Send + 'static>(
    limit: &Arc<Limit>,
    core: &Arc<Core>,
    work: W,
) -> Result<Job<T>, TryRunError<W>> {
    // A refusal is counted only: the recorder hears of refusals in batches, when a job
    // finishes or the gauges are published.
    match limit.try_acquire(true) {
        Ok(permit) => {
            limit.note_wait(Duration::ZERO);
            Ok(admit(core, work, permit, Duration::ZERO))
        }
        // A handler whose own request holds one of the slots is told to use that one (one
        // thread-local read, on the refusal path only).
        Err(Refused::Saturated) if super::held::holds(limit) => Err(TryRunError::OwnSlot(work)),
        Err(Refused::Saturated) => {
            let retry_after = limit.retry_after();
            Err(TryRunError::Saturated(Saturated::new(work, retry_after)))
        }
        Err(Refused::Closed) => Err(TryRunError::Closed(work)),
    }
}

/// One admitted job: the closure and its slot until a worker takes them (it drops the slot
/// once the outcome is stored), then its outcome.
struct Cell<W, T> {
    core: Arc<Core>,
    work: Mutex<Option<(W, JobSlot)>>,
    handoff: Handoff<T>,
}

/// The slot a job runs on: the worker drops it once the outcome is stored (the release).
pub(crate) enum JobSlot {
    /// The job was admitted for itself: its own permit.
    Own(Permit),
    /// The job runs on a permit someone else holds: its share of it.
    #[cfg(feature = "tower")]
    Lent(Lent),
}

impl JobSlot {
    /// The job ran for `elapsed`: the permit's sample of the basis.
    fn job_ran(&self, elapsed: Duration) {
        match self {
            JobSlot::Own(permit) => permit.job_ran(elapsed),
            #[cfg(feature = "tower")]
            JobSlot::Lent(lent) => lent.permit.job_ran(elapsed),
        }
    }
}

/// A request's permit lent to one job (`Slot::try_run`): the job holds a share of it until
/// it is done, then frees the request's slot for its next job (`running` back to false)
/// and lets go of its share; the permit goes back when the last share (the job's, or the
/// response body's) is dropped.
#[cfg(feature = "tower")]
pub(crate) struct Lent {
    permit: Arc<Permit>,
    running: Arc<crate::sync::atomic::AtomicBool>,
}

#[cfg(feature = "tower")]
impl Lent {
    /// `permit`, lent to a job; `running` (set by the lender) is cleared when the job is
    /// done with it.
    pub(crate) fn new(permit: Arc<Permit>, running: Arc<crate::sync::atomic::AtomicBool>) -> Lent {
        Lent { permit, running }
    }
}

#[cfg(feature = "tower")]
impl Drop for Lent {
    fn drop(&mut self) {
        // Before the share (a field) goes.
        self.running
            .store(false, crate::sync::atomic::Ordering::Release);
    }
}

/// Takes a job's closure and slot out of its cell: the lock is released when this returns,
/// so whatever dropping the slot runs (the release, the next waiter's waker) finds it free.
fn take_work<S>(work: &Mutex<Option<S>>) -> Option<S> {
    lock(work).take()
}

/// What a `Job<T>` sees of its cell.
trait HandoffCell<T>: Send + Sync {
    fn handoff(&self) -> &Handoff<T>;
}

impl<W: IntoJob<T>, T: Send + 'static> HandoffCell<T> for Cell<W, T> {
    fn handoff(&self) -> &Handoff<T> {
        &self.handoff
    }
}

impl<W: IntoJob<T>, T: Send + 'static> Task for Cell<W, T> {
    fn run(self: Arc<Self>, worker: usize) {
        // The slot goes back once the outcome is delivered (dropped below), or if anything
        // below unwinds.
        let Some((work, slot)) = take_work(&self.work) else {
            // A cell is dispatched once; there is nothing to run twice.
            return;
        };
        let core = &*self.core;
        let started = Instant::now();
        core.workers.job_started(worker, started);
        let result = catch_unwind(AssertUnwindSafe(|| work.run_job())).map_err(|payload| {
            let message = panic_message(&*payload);
            drop_quietly(payload);
            Panicked::new(message)
        });
        let elapsed = started.elapsed();
        core.workers.job_ended(worker);
        let outcome = match &result {
            Err(_) => JobOutcome::Panicked,
            Ok(_) if self.handoff.is_failure(&result) => JobOutcome::Error,
            Ok(_) => JobOutcome::Ok,
        };
        core.stats.count_job(outcome, elapsed);
        // The job's time is its permit's sample of the `Retry-After` basis, taken when the
        // permit goes back.
        slot.job_ran(elapsed);
        // The outcome is stored first (or, if the `Job` is gone, a failure is reported: the
        // orphan handler runs with the slot still held), but the caller cannot take it yet.
        // The recorder is user code: it hears of the job before the slot goes back (a panic
        // there is contained), so a pool that reads idle has told it about every job. Then
        // the permit goes back (its `Drop` samples the basis, hands the slot to the oldest
        // waiter and notifies idleness), and only then is the caller woken: a caller woken
        // by its outcome (or polled for any other reason) always finds the slot free, so a
        // scraper that scrapes again at once is never refused by its own finished walk. The
        // pool reads idle to `wait_idle` only once the outcome is takeable too. `deliver`
        // keeps that order even if a step unwinds.
        deliver(&core.limit, &self.handoff, result, elapsed, slot, || {
            core.stats.emit_job(outcome, elapsed);
            core.limit.flush_rejected();
        });
    }
}

/// The handle of an admitted job.
///
/// Awaiting it gives the job's output, or [`Panicked`] if the job panicked. The job holds a
/// slot by [the slot rule](super::Pool#the-slot-rule).
///
/// # Cancel safety
///
/// Dropping a `Job` *orphans* the job; it never cancels it. The thread finishes the job and
/// the slot stays held until then, so a caller that leaves cannot make room for new work
/// while the old work still occupies a thread. If the orphaned job fails (panics, or
/// returns an `Err` from [`Fallible`] work), the failure goes to the pool's
/// [`OrphanHandler`](crate::orphan::OrphanHandler) exactly once.
///
/// # Panics
///
/// Polling a `Job` again after it returned `Poll::Ready` panics.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::pool::Pool::builder().name("render").workers(2).build()?;
/// let job = pool.try_run(|| "# HELP up 1\n".repeat(2)).expect("a free slot");
/// assert_eq!(job.await.unwrap().lines().count(), 2);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "dropping a Job orphans it: the job runs on and only failures are reported"]
pub struct Job<T> {
    cell: Arc<dyn HandoffCell<T>>,
}

impl<T> Job<T> {
    /// Whether the job has finished and its outcome is ready to be taken.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// let job = pool.try_run(|| 1).unwrap();
    /// pool.wait_idle().await;
    /// assert!(job.is_finished());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn is_finished(&self) -> bool {
        self.cell.handoff().is_finished()
    }

    /// Takes the outcome with how long the job ran, for a caller that may still refuse it.
    pub(crate) fn poll_outcome(&mut self, cx: &mut Context<'_>) -> Poll<Finished<T>> {
        self.cell
            .handoff()
            .poll_take(cx, "Job")
            .map(|taken| match taken {
                Taken::Outcome(result, elapsed) => (result, elapsed),
                // A worker delivers every job it takes, and every admitted job is taken.
                Taken::Abandoned => (
                    Err(Panicked::new("the job was lost before it ran".to_string())),
                    Duration::ZERO,
                ),
            })
    }

    /// Reports an outcome taken with [`poll_outcome`](Job::poll_outcome) and then refused.
    pub(crate) fn report_refused(&self, result: Result<T, Panicked>, elapsed: Duration) {
        self.cell.handoff().report_refused(result, elapsed);
    }
}

impl<T> Future for Job<T> {
    type Output = Result<T, Panicked>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().poll_outcome(cx).map(|(result, _)| result)
    }
}

impl<T> Drop for Job<T> {
    fn drop(&mut self) {
        self.cell.handoff().orphan();
    }
}

impl<T> fmt::Debug for Job<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("finished", &self.is_finished())
            .finish()
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use futures_lite::future::block_on;

    use super::{take_work, try_admit};
    use crate::Fallible;
    use crate::orphan::OrphanHandler;
    use crate::pool::Pool;

    /// The path `Run` and `TryRunWithin` take when an outcome they took turns out late: a
    /// failure reaches the orphan handler, once, with its elapsed time; a success does
    /// not. (Reached from them only when the deadline passes within one poll, between the
    /// poll's own check and the outcome's arrival: no deterministic test reaches it there.)
    #[test]
    fn an_outcome_refused_after_it_was_taken_is_reported_once_if_it_failed() {
        let (handler, mut reports) = OrphanHandler::channel(4);
        let pool = Pool::builder()
            .name("refused")
            .workers(1)
            .on_orphan(handler)
            .build()
            .unwrap();
        let failing = Fallible(|| Err::<u8, _>("late"));
        let mut job =
            try_admit(pool.limit(), pool.core(), failing).unwrap_or_else(|_| panic!("a free slot"));
        let (result, elapsed) = block_on(poll_fn(|cx| job.poll_outcome(cx)));
        assert!(result.as_ref().is_ok_and(Result::is_err));
        let elapsed = Duration::from_secs(7).max(elapsed);
        job.report_refused(result, elapsed);
        drop(job);
        let report = reports.try_recv().expect("the refused failure is reported");
        assert_eq!(report.message(), "\"late\"");
        assert_eq!(report.elapsed(), elapsed);
        block_on(pool.wait_idle());
        assert!(
            reports.try_recv().is_none(),
            "reported once: not again when dropped"
        );

        let mut job =
            try_admit(pool.limit(), pool.core(), || 1_u8).unwrap_or_else(|_| panic!("a free slot"));
        let (result, elapsed) = block_on(poll_fn(|cx| job.poll_outcome(cx)));
        job.report_refused(result, elapsed);
        drop(job);
        block_on(pool.wait_idle());
        assert!(
            reports.try_recv().is_none(),
            "one report, and none for a success"
        );
    }

    /// A job's slot (its permit, or the last share of a lent one) is dropped outside the
    /// cell's lock: whatever its drop runs (the release, the next waiter's waker) finds the
    /// lock free.
    #[test]
    fn a_lent_slot_is_let_go_outside_the_cells_lock() {
        use std::any::Any;
        use std::sync::{Arc, Mutex, Weak};

        type Lent = Mutex<Option<Box<dyn Any + Send>>>;
        struct Share {
            cell: Weak<Lent>,
            free: Arc<Mutex<Option<bool>>>,
        }
        impl Drop for Share {
            fn drop(&mut self) {
                let cell = self.cell.upgrade().expect("the cell outlives its share");
                *self.free.lock().unwrap() = Some(cell.try_lock().is_ok());
            }
        }
        let free = Arc::new(Mutex::new(None));
        let lent: Arc<Lent> = Arc::new_cyclic(|cell| {
            let share = Share {
                cell: cell.clone(),
                free: free.clone(),
            };
            Mutex::new(Some(Box::new(share) as Box<dyn Any + Send>))
        });
        drop(take_work(&lent));
        assert_eq!(
            *free.lock().unwrap(),
            Some(true),
            "dropped under the cell's lock"
        );
        assert!(lent.lock().unwrap().is_none());
    }
}
