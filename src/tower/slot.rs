//! [`Slot`]: the admission slot a request holds, shared by its response body and by any
//! work the handler hands it to.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
// loom's under the crate's loom cfg: the flag is shared with `pool::Lent`, which the workers' model
// runs.
use crate::sync::atomic::{AtomicBool, Ordering};

use crate::gate::permit::Permit;
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
    held: Held,
}

/// What a request's slot holds.
#[derive(Clone)]
enum Held {
    /// A permit of a limit (`Limited`): lendable to a job of `pool`, when it is that
    /// pool's, with whether a job runs on it now.
    Gate {
        permit: Arc<Permit>,
        pool: Option<(Pool, Arc<AtomicBool>)>,
    },
    /// A key of a keyed gate, given back when the last clone goes.
    Key { _permit: Arc<dyn Any + Send + Sync> },
}

impl Slot {
    /// The slot of a request holding a key's permit.
    pub(crate) fn grant<P: Send + Sync + 'static>(permit: P) -> Slot {
        Slot {
            held: Held::Key {
                _permit: Arc::new(permit),
            },
        }
    }

    /// The slot of a request holding `permit`, one of `pool`'s when `pool` is given.
    pub(crate) fn gated(permit: Permit, pool: Option<Pool>) -> Slot {
        Slot {
            held: Held::Gate {
                permit: Arc::new(permit),
                pool: pool.map(|pool| (pool, Arc::new(AtomicBool::new(false)))),
            },
        }
    }

    /// The pool this slot is one of, with its permit and its `running` flag.
    fn lendable(&self) -> Option<(&Pool, &Arc<Permit>, &Arc<AtomicBool>)> {
        match &self.held {
            Held::Gate {
                permit,
                pool: Some((pool, running)),
            } => Some((pool, permit, running)),
            _ => None,
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
        match self.lendable() {
            Some((own, permit, running))
                if own.same_pool(pool)
                    && running
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok() =>
            {
                let lent = crate::pool::Lent::new(Arc::clone(permit), Arc::clone(running));
                Ok(pool.run_on_lent(job, lent))
            }
            // Its own slot busy with a job: a second admission, refused as any other when
            // the pool is full (not told to use the slot it is using).
            Some((own, _, _)) if own.same_pool(pool) => {
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
        self.lendable().map(|(pool, _, _)| pool.held_scope())
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("pool", &self.lendable().map(|(pool, _, _)| pool.name()))
            .finish_non_exhaustive()
    }
}
