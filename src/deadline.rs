//! One absolute deadline shared by every wait of an operation.
//!
//! A [`Deadline`] is an instant fixed once, at the start of an operation, before the
//! first wait. Everything the caller then waits for (a slot, an attempt, a backoff
//! sleep, a body read) spends the same budget, so a "one second" call cannot quietly
//! turn into 1.1 s because its clock started after a queue.
//!
//! Expiry is **cooperative**: it is observed at await points (by [`DeadlineRun`] and
//! [`Sleep`]) and at [`Deadline::check()`] in blocking code. A deadline never pre-empts
//! a thread, and work that is running when it passes goes on until it next looks.
//!
//! # Precision
//!
//! Waits use [`async_io::Timer`], which never fires before its instant. The wake-up
//! usually lands within a millisecond or two after it; on a busy machine, or on an
//! executor whose thread is blocked, it lands later. A result is judged by the clock
//! when it is observed, so lateness in waking never turns a late result into success.

use std::cmp::Ordering;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;

mod spent;

pub use spent::{Phase, Spent};

/// An instant after which an operation must not go on, or `never`.
///
/// `never` orders after every instant, so [`Deadline::min()`] of a real deadline and
/// `never` is the real one.
///
/// Expiry is cooperative: see the [module docs](self).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::deadline::Deadline;
///
/// let overall = Deadline::after(Duration::from_secs(1));
/// let step = overall.min(Deadline::after(Duration::from_millis(200)));
/// assert!(step <= overall);
/// assert!(overall < Deadline::never());
/// assert!(!step.is_expired());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Deadline {
    at: Option<Instant>,
}

impl Ord for Deadline {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.at, other.at) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        }
    }
}

impl PartialOrd for Deadline {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Deadline {
    /// A deadline `budget` from now.
    ///
    /// If `now + budget` does not fit in an [`Instant`], the deadline is `never`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::Deadline;
    ///
    /// assert!(!Deadline::after(Duration::from_secs(5)).is_never());
    /// assert!(Deadline::after(Duration::MAX).is_never());
    /// ```
    pub fn after(budget: Duration) -> Deadline {
        Deadline {
            at: Instant::now().checked_add(budget),
        }
    }

    /// A deadline at `instant`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Instant;
    /// use loopguard::deadline::Deadline;
    ///
    /// let now = Instant::now();
    /// assert_eq!(Deadline::at(now).instant(), Some(now));
    /// ```
    pub fn at(instant: Instant) -> Deadline {
        Deadline { at: Some(instant) }
    }

    /// A deadline that never expires.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    ///
    /// let d = Deadline::never();
    /// assert!(d.is_never());
    /// assert_eq!(d.remaining(), None);
    /// ```
    pub const fn never() -> Deadline {
        Deadline { at: None }
    }

    /// The earlier of two deadlines (`never` loses to any instant).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::deadline::Deadline;
    ///
    /// let now = Instant::now();
    /// let a = Deadline::at(now + Duration::from_secs(1));
    /// let b = Deadline::at(now + Duration::from_secs(2));
    /// assert_eq!(a.min(b), a);
    /// assert_eq!(Deadline::never().min(b), b);
    /// ```
    pub fn min(self, other: Deadline) -> Deadline {
        Ord::min(self, other)
    }

    /// The instant of this deadline, or `None` for `never`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    ///
    /// assert_eq!(Deadline::never().instant(), None);
    /// ```
    pub fn instant(self) -> Option<Instant> {
        self.at
    }

    /// Whether this deadline is `never`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Instant;
    /// use loopguard::deadline::Deadline;
    ///
    /// assert!(Deadline::never().is_never());
    /// assert!(!Deadline::at(Instant::now()).is_never());
    /// ```
    pub fn is_never(self) -> bool {
        self.at.is_none()
    }

    /// Time left from now: `None` for `never`, [`Duration::ZERO`] once expired.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::Deadline;
    ///
    /// let left = Deadline::after(Duration::from_secs(10)).remaining().unwrap();
    /// assert!(left <= Duration::from_secs(10));
    /// ```
    pub fn remaining(self) -> Option<Duration> {
        self.remaining_at(Instant::now())
    }

    /// Time left from `now`: `None` for `never`, [`Duration::ZERO`] once expired.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::deadline::Deadline;
    ///
    /// let now = Instant::now();
    /// let d = Deadline::at(now + Duration::from_secs(3));
    /// assert_eq!(d.remaining_at(now), Some(Duration::from_secs(3)));
    /// assert_eq!(d.remaining_at(now + Duration::from_secs(4)), Some(Duration::ZERO));
    /// ```
    pub fn remaining_at(self, now: Instant) -> Option<Duration> {
        self.at.map(|at| at.saturating_duration_since(now))
    }

    /// Whether the deadline has passed (now is at or after its instant).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::deadline::Deadline;
    ///
    /// assert!(Deadline::at(Instant::now()).is_expired());
    /// assert!(!Deadline::after(Duration::from_secs(60)).is_expired());
    /// ```
    pub fn is_expired(self) -> bool {
        // `never` needs no clock read.
        self.at.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether the deadline has passed at `now` (`now >= instant`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::deadline::Deadline;
    ///
    /// let now = Instant::now();
    /// let d = Deadline::at(now + Duration::from_secs(1));
    /// assert!(!d.is_expired_at(now));
    /// assert!(d.is_expired_at(now + Duration::from_secs(1)));
    /// ```
    pub fn is_expired_at(self, now: Instant) -> bool {
        match self.at {
            Some(at) => now >= at,
            None => false,
        }
    }

    /// `Err(Expired)` once the deadline has passed: for blocking code between steps.
    ///
    /// This is how a deadline reaches a thread: the thread asks. Nothing interrupts
    /// a step that is already running.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::{Deadline, Expired};
    ///
    /// fn walk(rows: &[u32], deadline: Deadline) -> Result<u64, Expired> {
    ///     let mut sum = 0;
    ///     for row in rows {
    ///         deadline.check()?;
    ///         sum += u64::from(*row);
    ///     }
    ///     Ok(sum)
    /// }
    ///
    /// assert_eq!(walk(&[1, 2, 3], Deadline::after(Duration::from_secs(5))), Ok(6));
    /// ```
    pub fn check(self) -> Result<(), Expired> {
        if self.is_expired() {
            Err(Expired)
        } else {
            Ok(())
        }
    }

    /// Runs `future` within this deadline: a timeout.
    ///
    /// See [`DeadlineRun`] for the one rule: a poll that starts after the deadline resolves to
    /// `Err(Expired)` without polling `future`; an output `future` produces is returned.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::{Deadline, Expired};
    ///
    /// # futures_lite::future::block_on(async {
    /// let quick = Deadline::after(Duration::from_secs(5)).run(async { 7 }).await;
    /// assert_eq!(quick, Ok(7));
    ///
    /// let stuck = Deadline::after(Duration::from_millis(10))
    ///     .run(futures_lite::future::pending::<()>())
    ///     .await;
    /// assert_eq!(stuck, Err(Expired));
    /// # });
    /// ```
    pub fn run<F: Future>(self, future: F) -> DeadlineRun<F> {
        DeadlineRun {
            deadline: self,
            timer: None,
            future,
        }
    }

    /// Sleeps for `duration` from now, but no later than this deadline.
    ///
    /// Resolves to `Ok(())` when the sleep ran its course, and to `Err(Expired)` when
    /// the deadline cut it. If both have passed when it is polled, the deadline wins.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::{Deadline, Expired};
    ///
    /// # futures_lite::future::block_on(async {
    /// let d = Deadline::after(Duration::from_millis(20));
    /// assert_eq!(d.sleep(Duration::from_millis(1)).await, Ok(()));
    /// assert_eq!(d.sleep(Duration::from_secs(60)).await, Err(Expired));
    /// # });
    /// ```
    pub fn sleep(self, duration: Duration) -> Sleep {
        Sleep {
            deadline: self,
            end: Deadline::after(duration),
            timer: None,
        }
    }
}

/// The error of an operation whose deadline passed.
///
/// # Examples
///
/// ```
/// use std::io;
/// use loopguard::deadline::Expired;
///
/// assert_eq!(Expired.to_string(), "deadline expired");
/// let e: io::Error = Expired.into();
/// assert_eq!(e.kind(), io::ErrorKind::TimedOut);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Expired;

impl fmt::Display for Expired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline expired")
    }
}

impl std::error::Error for Expired {}

impl From<Expired> for io::Error {
    fn from(e: Expired) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, e)
    }
}

/// The timer of a deadline, armed lazily at its instant.
pub(crate) type DeadlineTimer = Timer;

/// Polls `timer` (armed lazily at `at`), returning whether it has fired.
pub(crate) fn poll_timer(
    timer: &mut Option<DeadlineTimer>,
    at: Instant,
    cx: &mut Context<'_>,
) -> bool {
    let timer = timer.get_or_insert_with(|| Timer::at(at));
    Pin::new(timer).poll(cx).is_ready()
}

pin_project_lite::pin_project! {
    /// Future for [`Deadline::run()`]: the inner future's output, or [`Expired`].
    ///
    /// **The rule, in one sentence:** a poll that starts at or after the deadline resolves
    /// to `Err(Expired)` without polling the inner future; any other poll polls it, and an
    /// output it produces is returned, even if the clock passed the deadline during that
    /// poll.
    ///
    /// So nothing new starts after expiry, and nothing the inner future handed over is
    /// thrown away: an output (a success or a failure) is the caller's as soon as it
    /// exists. When the inner future is pending, a timer at the deadline wakes the task.
    /// This is tokio's `timeout` rule with one difference: tokio polls the inner future
    /// first even after expiry, `DeadlineRun` does not.
    ///
    /// Futures that own a hand-off judge lateness themselves, because only they can give
    /// a refused output to someone else: [`Pool::run_within`](crate::pool::Pool::run_within),
    /// [`Pool::try_run_within`](crate::pool::Pool::try_run_within),
    /// [`Retry`](crate::retry::Retry) and [`Refresh`](crate::refresh::Refresh) refuse a
    /// success that lands after their deadline and report a refused failure exactly once.
    /// Wrapping a [`Job`](crate::pool::Job) in `DeadlineRun` needs no such care: a job the
    /// deadline stops polling is dropped, which orphans it, and its failure is reported.
    ///
    /// Expiry is cooperative: a blocking inner `poll` is never interrupted.
    ///
    /// # Cancel safety
    ///
    /// Dropping it drops the inner future at its current await point.
    ///
    /// # Panics
    ///
    /// Polling it again after it returned `Ok` polls the inner future again, which
    /// may panic.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::{Deadline, DeadlineRun};
    ///
    /// # futures_lite::future::block_on(async {
    /// let within: DeadlineRun<_> = Deadline::never().run(async { "done" });
    /// assert_eq!(within.await, Ok("done"));
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct DeadlineRun<F> {
        deadline: Deadline,
        timer: Option<DeadlineTimer>,
        #[pin]
        future: F,
    }
}

impl<F> DeadlineRun<F> {
    /// The deadline this future runs within.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    ///
    /// let within = Deadline::never().run(async {});
    /// assert!(within.deadline().is_never());
    /// ```
    pub fn deadline(&self) -> Deadline {
        self.deadline
    }
}

impl<F> fmt::Debug for DeadlineRun<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineRun")
            .field("deadline", &self.deadline)
            .field("timer_armed", &self.timer.is_some())
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for DeadlineRun<F> {
    type Output = Result<F::Output, Expired>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let deadline = *this.deadline;
        if deadline.is_expired() {
            return Poll::Ready(Err(Expired));
        }
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match deadline.instant() {
            Some(at) if poll_timer(this.timer, at, cx) => Poll::Ready(Err(Expired)),
            _ => Poll::Pending,
        }
    }
}

/// Future for [`Deadline::sleep()`]: `Ok(())` after the sleep, `Err(Expired)` if the
/// deadline cut it.
///
/// # Cancel safety
///
/// Dropping it cancels the sleep; nothing else happens.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::deadline::{Deadline, Sleep};
///
/// # futures_lite::future::block_on(async {
/// let nap: Sleep = Deadline::never().sleep(Duration::from_millis(1));
/// assert_eq!(nap.await, Ok(()));
/// # });
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Sleep {
    deadline: Deadline,
    end: Deadline,
    timer: Option<DeadlineTimer>,
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl Future for Sleep {
    type Output = Result<(), Expired>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let now = Instant::now();
            if this.deadline.is_expired_at(now) {
                return Poll::Ready(Err(Expired));
            }
            if this.end.is_expired_at(now) {
                return Poll::Ready(Ok(()));
            }
            // Both are in the future here; with both `never` the sleep never ends.
            match this.deadline.min(this.end).instant() {
                Some(at) if poll_timer(&mut this.timer, at, cx) => continue,
                _ => return Poll::Pending,
            }
        }
    }
}
