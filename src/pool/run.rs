//! `Run`: the future of [`Pool::run`](super::Pool::run) and
//! [`Pool::run_within`](super::Pool::run_within): waits for a slot in FIFO order, within a
//! deadline, then runs the job.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use super::core::Core;
use super::error::RunError;
use super::job::{self, IntoJob, Job};
use crate::deadline::{Deadline, DeadlineTimer, Spent, poll_timer};
use crate::gate::permit::{Acquire, Permit};

enum Phase<W, T> {
    /// Waiting for a slot (not asked for before the first poll): the gate's one
    /// [`Acquire`] future says where it stands.
    Waiting(W),
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
    /// First, so that it is dropped first: a caller still in line leaves it (a slot
    /// granted meanwhile goes on) before the closure, user code, is dropped.
    acquire: Acquire,
    core: Arc<Core>,
    phase: Phase<W, T>,
    /// The caller in line was checked against [`refuse_in_line`](Run::refuse_in_line).
    checked: bool,
    deadline: Deadline,
    timer: Option<DeadlineTimer>,
    /// Refuse at once a wait that cannot be served before the deadline.
    refuse_early: bool,
}

// The closure is never pinned: it is moved out to be run. The timer is `Unpin`.
impl<W, T> Unpin for Run<W, T> {}

impl<W: IntoJob<T>, T: Send + 'static> Run<W, T> {
    pub(crate) fn new(core: Arc<Core>, work: W, deadline: Deadline) -> Run<W, T> {
        Run {
            acquire: Acquire::new(Arc::clone(&core.limit)),
            core,
            phase: Phase::Waiting(work),
            checked: false,
            deadline,
            timer: None,
            refuse_early: false,
        }
    }

    /// Ends the operation at expiry, whatever its phase: nothing new starts, a waiter
    /// leaves the queue (handing back a slot granted meanwhile), a running job is orphaned.
    fn expire(&mut self) -> RunError {
        let spent = match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Waiting(work) => {
                self.acquire.leave();
                drop(work);
                Spent::IN_LINE
            }
            Phase::Running(job) => {
                drop(job);
                Spent::RUNNING
            }
            Phase::Done => Spent::IN_LINE,
        };
        RunError::Expired(spent)
    }

    /// Why a caller that has just joined the line must not wait in it, if it must not:
    /// its own request holds one of the slots (it would wait for itself), or it asked to
    /// [`refuse_early`](Run::refuse_early) and cannot be served in time.
    fn refuse_in_line(&self) -> Option<RunError> {
        if super::held::holds(&self.core.limit) {
            return Some(RunError::OwnSlot);
        }
        if !self.refuse_early {
            return None;
        }
        let limit = &self.core.limit;
        let estimate = super::estimate::Line {
            ahead: limit.waiting().saturating_sub(1),
            capacity: limit.capacity(),
            hold: limit.mean_hold()?,
        };
        let left = self
            .deadline
            .instant()?
            .saturating_duration_since(Instant::now());
        estimate
            .cannot_finish_within(left)
            .then(|| RunError::WouldExpire {
                retry_after: estimate.wait(),
            })
    }

    /// Arms the deadline's timer; returns `true` if it has already fired.
    fn timer_fired(&mut self, cx: &mut Context<'_>) -> bool {
        match self.deadline.instant() {
            Some(at) => poll_timer(&mut self.timer, at, cx),
            None => false,
        }
    }

    /// Advances the state machine as far as it goes without waiting. User code (the
    /// waker's clone) only runs with the phase in place, so a panic there leaves a queued
    /// caller queued, for `Drop` (the [`Acquire`]'s) to withdraw.
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, RunError>> {
        loop {
            match &mut self.phase {
                Phase::Waiting(_) => match self.acquire.poll_acquire(cx) {
                    Poll::Ready(Some((permit, waited))) => self.admit(permit, waited),
                    Poll::Ready(None) => {
                        self.phase = Phase::Done;
                        return Poll::Ready(Err(RunError::Closed));
                    }
                    Poll::Pending => {
                        // Just joined the line: checked once whether it may wait in it.
                        if !std::mem::replace(&mut self.checked, true) {
                            if let Some(refused) = self.refuse_in_line() {
                                self.acquire.leave();
                                self.phase = Phase::Done;
                                return Poll::Ready(Err(refused));
                            }
                        }
                        return Poll::Pending;
                    }
                },
                Phase::Running(job) => {
                    let Poll::Ready((result, elapsed)) = job.poll_outcome(cx) else {
                        return Poll::Pending;
                    };
                    let Phase::Running(job) = std::mem::replace(&mut self.phase, Phase::Done)
                    else {
                        unreachable!("matched `Running`")
                    };
                    if self.deadline.is_expired() {
                        // Completed, but too late to count as a result. The caller gets
                        // `Expired`, so a failure among late results is nobody's: report it.
                        job.report_refused(result, elapsed);
                        return Poll::Ready(Err(RunError::Expired(Spent::RUNNING)));
                    }
                    return Poll::Ready(result.map_err(RunError::from));
                }
                Phase::Done => unreachable!("checked by poll"),
            }
        }
    }

    /// The caller holds `permit`: hand the work to a worker.
    fn admit(&mut self, permit: Permit, waited: std::time::Duration) {
        let Phase::Waiting(work) = std::mem::replace(&mut self.phase, Phase::Done) else {
            unreachable!("admitted twice")
        };
        let job = job::admit(&self.core, work, permit, waited);
        self.phase = Phase::Running(job);
    }
}

impl<W, T> Run<W, T> {
    /// Opt-in admission that knows its budget: a caller that would have to wait in line,
    /// and that at the pool's measured pace cannot be done before its deadline, is refused
    /// at once with [`RunError::WouldExpire`] (and a `Retry-After` hint) instead of
    /// waiting its budget out to end as [`RunError::Expired`]. A caller served at once, or
    /// one with [`Deadline::never`], is never refused by it.
    ///
    /// # The estimate
    ///
    /// Decided once, when the caller joins the line: with `k` waiters ahead of it, `c`
    /// slots and `h` the pool's mean hold (the moving average behind
    /// [`Saturated::retry_after`](super::Saturated::retry_after)), its slot is expected
    /// after `(k + 1) · h / c` (the `k + 1`-th release at `c / h` releases a second), and
    /// its job done one `h` later. If that is past the deadline, it is refused; the hint is
    /// the expected wait. Before the first job has finished there is no `h`, and nobody is
    /// refused.
    ///
    /// # Precision
    ///
    /// When jobs take about `h` each, the true wait lies between `⌊k / c⌋ · h` and
    /// `(⌊k / c⌋ + 1) · h`, so the estimate is off by at most one mean hold; with holds that
    /// vary (exponentially, say) its spread grows like `√(k + 1) · h / c`. `k` is read from
    /// the gate's waiting count as the caller joins, so concurrent arrivals may count each
    /// other. The average follows the last eight or so holds: a change in job cost shows
    /// with that lag.
    ///
    /// # When it refuses wrongly
    ///
    /// It refuses a caller that would have made it when the line moves faster than the
    /// mean: the running jobs are near their end, the jobs ahead (or its own) are shorter
    /// than `h` (a pool whose jobs are mostly quick with a few slow ones has an `h` above
    /// the typical job), or waiters ahead leave (their deadline passes, they are dropped)
    /// before their turn. It admits to the line a caller that will expire anyway when the
    /// line moves slower, as under `for_pool` when requests hold their slots past their
    /// jobs (`h` is the jobs' time, not the holds'). A refused caller can retry elsewhere;
    /// one admitted waits as with
    /// [`run_within`](super::Pool::run_within), within its deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::Deadline;
    /// use loopguard::pool::{Pool, RunError};
    ///
    /// # futures_lite::future::block_on(async {
    /// let pool = Pool::builder().workers(1).build()?;
    /// // The pool learns its pace: a walk takes about 200 ms.
    /// pool.run(|| std::thread::sleep(Duration::from_millis(200))).await.unwrap();
    /// let (release, gate) = std::sync::mpsc::channel::<()>();
    /// let busy = pool.try_run(move || gate.recv().ok()).unwrap();
    ///
    /// // 50 ms cannot cover the walk ahead and its own: refused now, not in 50 ms.
    /// let hopeless = pool.run_within(Deadline::after(Duration::from_millis(50)), || 1).refuse_early();
    /// let refused = hopeless.await.unwrap_err();
    /// assert!(matches!(refused, RunError::WouldExpire { .. }));
    /// assert!(refused.retry_after().unwrap() >= Duration::from_millis(150));
    /// release.send(()).unwrap();
    /// # busy.await.unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn refuse_early(mut self) -> Run<W, T> {
        self.refuse_early = true;
        self
    }
}

impl<W, T> fmt::Debug for Run<W, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match &self.phase {
            Phase::Waiting(_) if self.acquire.is_queued() => "queued",
            Phase::Waiting(_) => "start",
            Phase::Running(_) => "running",
            Phase::Done => "done",
        };
        f.debug_struct("Run")
            .field("pool", &&**self.core.limit.name())
            .field("phase", &phase)
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl<W: IntoJob<T>, T: Send + 'static> Future for Run<W, T> {
    type Output = Result<T, RunError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if matches!(this.phase, Phase::Done) {
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

// No `Drop`: a caller in line leaves it when the `Acquire` (the first field) is dropped, and
// a running job is orphaned by dropping its `Job`.
