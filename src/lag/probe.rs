//! `Probe`: the future that samples the loop's lag.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use async_io::Timer;

use super::state::Shared;

/// The future of [`LoopLag::probe`](super::LoopLag::probe): spawn it on the loop to measure.
///
/// It sleeps one resolution on an async-io timer, records how late it was polled after
/// the timer was due, and sleeps again, from the instant it recorded. It never completes;
/// dropping it (or cancelling the task that runs it) stops it and deregisters its timer.
/// No allocation per tick: the window of samples is allocated when the `LoopLag` is built,
/// and each tick re-arms the same timer.
///
/// # Cancel safety
///
/// Dropping it at any point loses nothing recorded: each sample is written in the poll
/// that takes it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use futures_lite::future;
///
/// # futures_lite::future::block_on(async {
/// let lag = loopguard::lag::LoopLag::new("main")?;
/// // The probe beside the loop's work, on the same thread.
/// let work = async {
///     async_io::Timer::after(Duration::from_millis(50)).await;
/// };
/// future::or(lag.probe(), work).await;
/// assert!(lag.stats().samples >= 1);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "a probe measures nothing unless it is spawned or polled"]
pub struct Probe {
    shared: Arc<Shared>,
    timer: Timer,
    /// Whether the timer has been set (on the first poll, not at creation: a probe created
    /// long before it is spawned must not read the wait as lag).
    armed: bool,
}

impl Probe {
    pub(super) fn new(shared: Arc<Shared>) -> Probe {
        Probe {
            shared,
            timer: Timer::never(),
            armed: false,
        }
    }

    /// Sets the timer one resolution after `now`. The resolution is at most an hour, so the
    /// instant fits in practice; if it did not, the timer would stay unset and the probe
    /// idle rather than fire at a wrong time.
    fn arm(&mut self, now: Instant) {
        match now.checked_add(self.shared.config.resolution) {
            Some(due) => self.timer.set_at(due),
            None => self.timer.clear(),
        }
        self.armed = true;
    }
}

impl Future for Probe {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if !this.armed {
            this.arm(Instant::now());
        }
        // A timer that fired is recorded, re-armed and polled again at once, which
        // registers it with the reactor for the next tick.
        while let Poll::Ready(due) = Pin::new(&mut this.timer).poll(cx) {
            let now = Instant::now();
            this.shared.record(now, now.saturating_duration_since(due));
            this.arm(now);
        }
        Poll::Pending
    }
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe")
            .field("loop", &self.shared.config.name)
            .field("resolution", &self.shared.config.resolution)
            .finish_non_exhaustive()
    }
}
