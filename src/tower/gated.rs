//! [`Limited`]: admission through a [`Limit`], a named limit of the layer's own or a pool's
//! (`for_pool`), with the gate's own [`Permit`] and [`Acquire`]: the same permit and the
//! same wait a pool's own admissions go through.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::Request;

use super::mode::sealed::{Admit, Gauged};
use super::mode::{AdmitOutcome, Mode};
use super::slot::Slot;
use crate::gate::limit::Limit;
use crate::gate::permit::{Acquire, Permit};
use crate::pool::Pool;

/// Admission through a named limit shared by every request: a limit of the layer's own,
/// made by [`AdmissionLayer::new`](super::AdmissionLayer::new), or a [`Pool`]'s own slots,
/// made by [`AdmissionLayer::for_pool`](super::AdmissionLayer::for_pool). Its series are a
/// pool's admission series (`loopguard_pool_capacity`, `_in_use`, `_waiting`,
/// `_rejected_total`, `_wait_seconds`, `_demand_avg`) under its name.
///
/// On a pool's slots a request holds one of the pool's slots, so the pool's `in_use` and
/// `try_run` see it, a refused request counts as a pool refusal, and
/// [`Slot::try_run`](super::Slot::try_run) runs the handler's job on it. The `Retry-After`
/// hint is then the pool's mean job time (its jobs', whether run on a request's slot or
/// not), not the time a request holds its slot; on a limit of the layer's own it is the
/// mean time a request holds its slot.
///
/// # Examples
///
/// ```
/// let layer = loopguard::tower::AdmissionLayer::new("api", 4)?;
/// assert_eq!(layer.capacity(), 4);
///
/// let pool = loopguard::pool::Pool::builder().name("walks").workers(2).build()?;
/// let layer = loopguard::tower::AdmissionLayer::for_pool(&pool);
/// assert_eq!(layer.capacity(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Limited {
    pub(crate) limit: Arc<Limit>,
    /// The pool whose limit this is (`for_pool`): the handler's jobs may run on a
    /// request's permit.
    pub(crate) pool: Option<Pool>,
}

impl Limited {
    /// A limit of the layer's own.
    pub(crate) fn own(limit: Limit) -> Limited {
        Limited {
            limit: Arc::new(limit),
            pool: None,
        }
    }

    /// `pool`'s own limit.
    pub(crate) fn on_pool(pool: &Pool) -> Limited {
        Limited {
            limit: Arc::clone(pool.limit()),
            pool: Some(pool.clone()),
        }
    }
}

impl fmt::Debug for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = &self.limit;
        f.debug_struct("Limited")
            .field("name", &&**limit.name())
            .field("capacity", &limit.capacity())
            .field("in_use", &limit.in_use())
            .field("waiting", &limit.waiting())
            .field("on_pool", &self.pool.is_some())
            .finish()
    }
}

impl Admit for Limited {
    type Permit = Permit;
    type Ticket = ();
    type Wait = Acquire;

    fn try_admit<B>(&self, request: Request<B>) -> AdmitOutcome<Self, B> {
        // Not counted here: the service counts a refusal when it answers one (a request
        // that goes on to wait in line is not refused yet).
        match self.limit.try_acquire(false) {
            Ok(permit) => {
                self.limit.record_wait(Duration::ZERO);
                AdmitOutcome::Now(permit, request)
            }
            Err(_) => AdmitOutcome::Later((), request),
        }
    }

    fn wait(&self, (): ()) -> Acquire {
        Acquire::new(Arc::clone(&self.limit))
    }

    fn reject(&self) {
        self.limit.count_rejected();
    }

    /// A limit has one refusal count: a request whose deadline passed first is a refusal.
    fn expire(&self) {
        self.limit.count_rejected();
    }

    fn rejected(&self) -> u64 {
        self.limit.rejected()
    }

    fn retry_after(&self) -> Duration {
        self.limit.retry_after()
    }

    fn slot(&self, permit: Permit) -> Slot {
        Slot::gated(permit, self.pool.clone())
    }

    fn discard(permit: Permit) {
        permit.discard();
    }

    fn line(&self) -> Option<(usize, usize, Duration)> {
        let limit = &self.limit;
        Some((limit.waiting(), limit.capacity(), limit.mean_hold()?))
    }
}

impl Gauged for Limited {
    fn capacity(&self) -> usize {
        self.limit.capacity()
    }

    fn in_use(&self) -> usize {
        self.limit.in_use()
    }

    fn waiting(&self) -> usize {
        self.limit.waiting()
    }

    fn wait_idle(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.limit.wait_idle())
    }
}

impl Mode for Limited {}
