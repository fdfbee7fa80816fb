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
use std::sync::atomic::{AtomicBool, Ordering};

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

/// One thread with an executor of its own for handshakes; it ends when this is dropped
/// (handshakes still in progress are cancelled, their loop side sees `None`).
pub(crate) struct Handshaker {
    executor: Arc<Executor<'static>>,
    stop: Arc<Stop>,
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
                set_nice(nice);
                futures_lite::future::block_on(ex.run(stopping.wait()));
            })?;
        Ok(Handshaker { executor, stop })
    }

    /// Runs `handshake` on the thread; `None` if the thread ended first.
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        handshake: impl Future<Output = T> + Send + 'static,
    ) -> FallibleTask<T> {
        self.executor.spawn(handshake).fallible()
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
