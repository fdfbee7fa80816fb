//! The line estimate behind early refusal ([`Run::refuse_early`](super::Run::refuse_early)
//! and the tower layer's `refuse_early`): when would a caller that joins the line now be
//! done, at the gate's measured pace?
//!
//! A caller with `ahead` waiters before it gets a slot at the `ahead + 1`-th release; `c`
//! slots, each held `h` on average, release at a rate of `c / h`, so the wait is estimated
//! at `(ahead + 1) · h / c`, and the caller is done one hold `h` after that.

use std::time::Duration;

/// A line as a caller joining it sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    /// Waiters ahead of the caller.
    pub(crate) ahead: usize,
    /// Slots of the gate.
    pub(crate) capacity: usize,
    /// The gate's mean hold (its `Retry-After` basis).
    pub(crate) hold: Duration,
}

impl Line {
    /// The estimated wait for a slot: `(ahead + 1) · hold / capacity`, at least 1 ms (the
    /// `Retry-After` floor), saturating.
    pub(crate) fn wait(&self) -> Duration {
        let releases = self.ahead as u128 + 1;
        let nanos = self.hold.as_nanos().saturating_mul(releases) / self.capacity.max(1) as u128;
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        Duration::from_nanos(nanos).max(Duration::from_millis(1))
    }

    /// Whether the caller, waiting `wait()` and then holding its slot `hold`, would not be
    /// done within `left`.
    pub(crate) fn cannot_finish_within(&self, left: Duration) -> bool {
        self.wait().saturating_add(self.hold) > left
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_wait_is_the_releases_needed_at_the_gates_pace() {
        let line = |ahead, capacity, hold| Line {
            ahead,
            capacity,
            hold,
        };
        assert_eq!(line(0, 1, 200 * MS).wait(), 200 * MS);
        assert_eq!(line(2, 1, 200 * MS).wait(), 600 * MS);
        assert_eq!(line(3, 2, 200 * MS).wait(), 400 * MS);
        assert_eq!(line(0, 4, 200 * MS).wait(), 50 * MS);
        // The floor, and no overflow.
        assert_eq!(line(0, 8, Duration::from_nanos(10)).wait(), MS);
        assert_eq!(
            line(usize::MAX, 1, Duration::MAX).wait(),
            Duration::from_nanos(u64::MAX)
        );
        // Done one hold after the wait: 600 + 200 ms.
        assert!(line(2, 1, 200 * MS).cannot_finish_within(799 * MS));
        assert!(!line(2, 1, 200 * MS).cannot_finish_within(800 * MS));
        assert!(line(usize::MAX, 1, Duration::MAX).cannot_finish_within(Duration::MAX - MS));
    }
}
