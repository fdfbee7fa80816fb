//! The thread TLS handshakes run on (feature `tls`): their crypto (the key exchange, the
//! server's signature, a client certificate's verification) never runs on the loop.
//!
//! A handshake is a future spawned on this thread's executor; the loop awaits its task, and
//! races it with the header timeout, a shed and the shutdown there: dropping the task
//! cancels the handshake. The stream the handshake gives back is the loop's again, and
//! hyper serves it there (a record's AES-GCM or ChaCha20 is cheap beside a handshake).

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_executor::{Executor, FallibleTask};
use event_listener::Event;

/// The name of the handshake thread.
pub(crate) const THREAD_NAME: &str = "tls-handshake";

/// Set once, when the exporter that owns the thread goes away.
#[derive(Default)]
struct Stop {
    stopped: AtomicBool,
    event: Event,
}

impl Stop {
    async fn wait(&self) {
        loop {
            if self.stopped.load(Ordering::SeqCst) {
                return;
            }
            let listener = self.event.listen();
            if self.stopped.load(Ordering::SeqCst) {
                return;
            }
            listener.await;
        }
    }
}

/// Handshakes spawned and not yet polled at most: the thread's backlog of fresh
/// ClientHellos, each about 0.2 ms (ECDSA P-256) to 1.3 ms (RSA-2048) of CPU. Past it a
/// new connection is closed at once, as a saturated pool refuses: a flood of handshakes
/// never builds a queue that a scraper's handshake would wait behind for seconds. A
/// handshake waiting for its client's bytes has been polled, so stalled ones do not count
/// (the connection cap sheds those).
pub(crate) const MAX_QUEUED: usize = 128;

/// One thread with an executor of its own for handshakes; it ends when this is dropped
/// (handshakes still in progress are cancelled, their loop side sees `None`).
pub(crate) struct Handshaker {
    executor: Arc<Executor<'static>>,
    stop: Arc<Stop>,
    queued: Arc<AtomicUsize>,
}

/// One spawned handshake counted in `Handshaker::queued` until its first poll, or until it
/// is dropped unpolled (cancelled while queued).
struct Queued(Option<Arc<AtomicUsize>>);

impl Queued {
    fn leave(&mut self) {
        if let Some(queued) = self.0.take() {
            queued.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.leave();
    }
}

/// Says so in the log if the handshake thread ends by a panic: TLS connections would then
/// all time out.
struct Unwinding;

impl Drop for Unwinding {
    fn drop(&mut self) {
        if std::thread::panicking() {
            log::error!("{THREAD_NAME}: the thread panicked; TLS connections are refused");
        }
    }
}

impl std::fmt::Debug for Handshaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshaker").finish_non_exhaustive()
    }
}

impl Handshaker {
    /// Starts the thread at `nice` (the render workers' value, as bcrypt's: below the loop,
    /// in the normal class so that a busy machine still handshakes).
    pub(crate) fn start(nice: u8) -> io::Result<Handshaker> {
        let executor = Arc::new(Executor::new());
        let stop = Arc::new(Stop::default());
        let (ex, stopping) = (executor.clone(), stop.clone());
        std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let _unwinding = Unwinding;
                set_nice(nice);
                futures_lite::future::block_on(ex.run(stopping.wait()));
            })?;
        Ok(Handshaker {
            executor,
            stop,
            queued: Arc::default(),
        })
    }

    /// Runs `handshake` on the thread: its task resolves to `None` if the thread ended
    /// first. `None` at once when [`MAX_QUEUED`] handshakes wait for their first poll.
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        handshake: impl Future<Output = T> + Send + 'static,
    ) -> Option<FallibleTask<T>> {
        if self.queued.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let mut queued = Queued(Some(self.queued.clone()));
        let counted = async move {
            queued.leave();
            handshake.await
        };
        Some(self.executor.spawn(counted).fallible())
    }
}

impl Drop for Handshaker {
    fn drop(&mut self) {
        self.stop.stopped.store(true, Ordering::SeqCst);
        self.stop.event.notify(usize::MAX);
    }
}

/// `setpriority(PRIO_PROCESS, 0, nice)`: on Linux, the calling thread only.
fn set_nice(nice: u8) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        if let Err(err) = rustix::process::setpriority_process(None, i32::from(nice)) {
            log::warn!("{THREAD_NAME}: cannot set nice {nice}: {err}");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backlog is counted until each handshake's first poll, or its drop unpolled; past
    /// [`MAX_QUEUED`] a spawn is refused at once.
    #[test]
    fn the_backlog_is_bounded_and_counted_until_the_first_poll() {
        let handshaker = Handshaker::start(0).unwrap();
        // Hold the thread: its first task blocks until told.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (entered, on_thread) = std::sync::mpsc::channel::<()>();
        let blocker = handshaker
            .spawn(async move {
                entered.send(()).unwrap();
                held.recv().unwrap();
            })
            .unwrap();
        on_thread.recv().unwrap();
        let queued: Vec<_> = (0..MAX_QUEUED)
            .map(|i| handshaker.spawn(async move { i }).expect("under the bound"))
            .collect();
        assert!(
            handshaker.spawn(async {}).is_none(),
            "past the bound: refused"
        );
        assert_eq!(handshaker.queued.load(Ordering::SeqCst), MAX_QUEUED);
        // Half cancelled while queued, half run: every one leaves the count.
        let mut kept = Vec::new();
        for (i, task) in queued.into_iter().enumerate() {
            if i % 2 == 0 {
                drop(task)
            } else {
                kept.push(task)
            }
        }
        release.send(()).unwrap();
        futures_lite::future::block_on(async {
            blocker.await.unwrap();
            for task in kept {
                assert!(task.await.is_some());
            }
            // Spawned after the cancelled ones: the thread has dropped them when it runs.
            handshaker.spawn(async {}).unwrap().await.unwrap();
        });
        assert_eq!(handshaker.queued.load(Ordering::SeqCst), 0);
        // Polled once and waiting (a client that has not sent its next flight): not queued.
        let (polled, first_poll) = std::sync::mpsc::channel::<()>();
        let waiting = handshaker
            .spawn(async move {
                polled.send(()).unwrap();
                futures_lite::future::pending::<()>().await
            })
            .unwrap();
        first_poll.recv().unwrap();
        assert_eq!(
            handshaker.queued.load(Ordering::SeqCst),
            0,
            "counted past its first poll"
        );
        drop(waiting);
    }
}
