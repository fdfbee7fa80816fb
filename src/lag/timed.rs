//! `TimedPolls`: a future whose every poll is timed against the slow-poll threshold.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use super::task::SlowTask;

pin_project_lite::pin_project! {
    /// The future of [`LoopLag::instrument`](super::LoopLag::instrument): `future`, with each
    /// of its polls timed.
    ///
    /// A poll that takes longer than the slow-poll threshold is counted under the task's
    /// name (`loopguard_loop_slow_polls_total{loop, task}`,
    /// [`LoopLag::slow_polls`](super::LoopLag::slow_polls)) once, and logged through the
    /// `log` facade at `warn` (target `loopguard`), one line per task per report interval:
    /// "main: \`status-page\` held the loop for 87 ms". The output is the inner future's.
    ///
    /// # Panics
    ///
    /// A panic of the inner future's poll is yours: it comes out of this poll, and that poll
    /// is not timed.
    ///
    /// # Cancel safety
    ///
    /// As cancel-safe as the inner future: dropping it drops the inner future and nothing
    /// else.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// let page = lag.instrument("status-page", async { "<html>ok</html>" }).await;
    /// assert_eq!(page, "<html>ok</html>");
    /// assert_eq!(lag.slow_polls("status-page"), 0);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use = "futures do nothing unless polled"]
    pub struct TimedPolls<F> {
        #[pin]
        future: F,
        task: Arc<SlowTask>,
    }
}

impl<F> TimedPolls<F> {
    pub(super) fn new(future: F, task: Arc<SlowTask>) -> TimedPolls<F> {
        TimedPolls { future, task }
    }
}

impl<F: Future> Future for TimedPolls<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let start = Instant::now();
        let output = this.future.poll(cx);
        let end = Instant::now();
        this.task.polled(end.saturating_duration_since(start), end);
        output
    }
}

impl<F> fmt::Debug for TimedPolls<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimedPolls")
            .field("loop", &self.task.config.name)
            .field("task", &self.task.name)
            .finish_non_exhaustive()
    }
}
