//! `Spent` and `Phase`: a spent budget that says where it ran out.

use std::fmt;
use std::io;

use super::Expired;

/// Where a caller's budget ran out: still waiting in line, or while its work ran.
///
/// The answer a caller gives often depends on it: a budget spent [`InLine`](Phase::InLine)
/// means nothing of the caller's ran (a fail-fast refusal elsewhere might have served it);
/// one spent [`Running`](Phase::Running) means the work started and goes on without its
/// caller, holding its slot until it ends.
///
/// # Examples
///
/// ```
/// use loopguard::deadline::Phase;
///
/// assert_eq!(Phase::InLine.as_str(), "in line");
/// assert_eq!(Phase::Running.to_string(), "running");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Before the work started: waiting for a slot, or nothing started at all (the
    /// budget had ended on entry).
    InLine,
    /// The work had started: it ran past the budget, or finished too late to count.
    Running,
}

impl Phase {
    /// `"in line"` or `"running"`.
    ///
    /// # Examples
    ///
    /// See [`Phase`].
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::InLine => "in line",
            Phase::Running => "running",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A spent budget and the [`Phase`] it ran out in: what the `Expired` variants of
/// [`RunError`](crate::pool::RunError), [`WithinError`](crate::pool::WithinError) and
/// [`RefreshError`](crate::refresh::RefreshError) carry.
///
/// It is an [`Expired`] with a place: it converts into one, and into an [`io::Error`] of
/// kind [`TimedOut`](io::ErrorKind::TimedOut).
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// use std::time::Duration;
/// use loopguard::deadline::{Deadline, Phase};
/// use loopguard::pool::{Pool, RunError};
///
/// let pool = Pool::builder().workers(1).build()?;
/// let slow = pool.run_within(Deadline::after(Duration::from_millis(20)), || {
///     std::thread::sleep(Duration::from_millis(200));
/// });
/// let Err(RunError::Expired(spent)) = slow.await else { unreachable!("the job outlives its budget") };
/// assert_eq!(spent.phase(), Phase::Running);
/// assert_eq!(spent.to_string(), "deadline expired while the job ran");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spent {
    phase: Phase,
}

impl Spent {
    pub(crate) const IN_LINE: Spent = Spent {
        phase: Phase::InLine,
    };
    pub(crate) const RUNNING: Spent = Spent {
        phase: Phase::Running,
    };

    /// A budget spent in `phase`: for adapters that build the errors above from their own
    /// waits (a [`Job`](crate::pool::Job) awaited under [`Deadline::run`](super::Deadline::run)
    /// ran: [`Phase::Running`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::{Phase, Spent};
    ///
    /// assert_eq!(Spent::new(Phase::InLine).phase(), Phase::InLine);
    /// ```
    pub const fn new(phase: Phase) -> Spent {
        Spent { phase }
    }

    /// Where the budget ran out.
    ///
    /// # Examples
    ///
    /// See [`Spent`].
    pub fn phase(&self) -> Phase {
        self.phase
    }
}

impl fmt::Display for Spent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.phase {
            Phase::InLine => "deadline expired in line, before the job started",
            Phase::Running => "deadline expired while the job ran",
        })
    }
}

impl std::error::Error for Spent {}

impl From<Spent> for Expired {
    fn from(_: Spent) -> Expired {
        Expired
    }
}

impl From<Spent> for io::Error {
    fn from(spent: Spent) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, spent)
    }
}
