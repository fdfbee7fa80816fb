//! [`Slot`]: the admission slot a request holds, shared by its response body and by any
//! work the handler hands it to.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::pool::{IntoJob, Job, Pool, TryRunError};

/// The admission slot of a request, in its extensions for the handler: the slot is held
/// while the response body is being written *and* while any clone of this lives.
///
/// Move a clone into work that outlives the handler's future, so that a client that
/// disconnects cannot free the slot while its work still runs. With a layer made by
/// [`AdmissionLayer::for_pool`](super::AdmissionLayer::for_pool), the slot *is* one of the
/// pool's: [`try_run`](Slot::try_run) runs the handler's blocking job on it, with no second
/// admission that could refuse it.
///
/// # Examples
///
/// ```
/// use loopguard::tower::Slot;
///
/// fn keep(request: &http::Request<()>) -> Option<Slot> {
///     request.extensions().get::<Slot>().cloned()
/// }
/// assert!(keep(&http::Request::new(())).is_none());
/// ```
#[derive(Clone)]
pub struct Slot {
    grant: Arc<dyn Any + Send + Sync>,
    /// The pool whose slot this is, and whether a job runs on it now.
    pool: Option<(Pool, Arc<AtomicBool>)>,
}

impl Slot {
    pub(crate) fn grant<P: Send + Sync + 'static>(permit: P, pool: Option<Pool>) -> Slot {
        Slot {
            grant: Arc::new(permit),
            pool: pool.map(|pool| (pool, Arc::new(AtomicBool::new(false)))),
        }
    }

    /// Runs `job` on `pool`: on this very slot when it is one of `pool`'s (a layer made by
    /// [`AdmissionLayer::for_pool`](super::AdmissionLayer::for_pool)) and no other job runs
    /// on it, otherwise through [`pool.try_run`](Pool::try_run), a second admission that
    /// may refuse.
    ///
    /// A job run on the slot keeps it: the slot comes back when the response body has
    /// ended *and* the job is done, whichever is last, so a client that disconnects cannot
    /// free it while the walk runs on.
    ///
    /// # Errors
    ///
    /// Those of [`Pool::try_run`], only when the job does not run on this slot.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::pool::Pool;
    /// use loopguard::tower::Slot;
    ///
    /// # futures_lite::future::block_on(async {
    /// async fn walk(pool: &Pool, slot: Option<&Slot>) -> String {
    ///     let render = || "up 1\n".to_string();
    ///     let job = match slot {
    ///         Some(slot) => slot.try_run(pool, render),
    ///         None => pool.try_run(render),
    ///     };
    ///     match job {
    ///         Ok(job) => job.await.unwrap_or_default(),
    ///         Err(busy) => format!("503: {busy}"),
    ///     }
    /// }
    /// let pool = Pool::builder().build()?;
    /// assert_eq!(walk(&pool, None).await, "up 1\n");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn try_run<W: IntoJob<T>, T: Send + 'static>(
        &self,
        pool: &Pool,
        job: W,
    ) -> Result<Job<T>, TryRunError<W>> {
        match &self.pool {
            Some((own, running))
                if own.same_pool(pool)
                    && running
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok() =>
            {
                let lent = LentSlot {
                    _grant: self.grant.clone(),
                    running: running.clone(),
                };
                Ok(pool.run_on_held_slot(job, Box::new(lent)))
            }
            // Its own slot busy with a job: a second admission, refused as any other when
            // the pool is full (not told to use the slot it is using).
            Some((own, _)) if own.same_pool(pool) => {
                let _asked_knowingly = Pool::unheld_scope();
                pool.try_run(job)
            }
            _ => pool.try_run(job),
        }
    }

    /// Marks the thread, while the handler runs, as serving a request that holds a slot of
    /// its pool: a `pool.run` there that would wait, or a `pool.try_run` that would be
    /// refused, is refused with `OwnSlot` instead of waiting for itself.
    pub(crate) fn scope(&self) -> Option<impl Drop + use<>> {
        self.pool.as_ref().map(|(pool, _)| pool.held_scope())
    }
}

/// This slot, lent to a job: the job holds it until it is done, then frees it for the next.
struct LentSlot {
    _grant: Arc<dyn Any + Send + Sync>,
    running: Arc<AtomicBool>,
}

impl Drop for LentSlot {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Release);
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("pool", &self.pool.as_ref().map(|(pool, _)| pool.name()))
            .finish_non_exhaustive()
    }
}
