//! The two modes that admit through a gate: [`Limited`] (a named limit of the layer's own)
//! and [`OnPool`] (a pool's own slots), written once over what they share: the same
//! [`Limit`] accounting a pool's own admissions go through.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Request;

use super::mode::sealed::{Admit, Gauged};
use super::mode::{AdmitOutcome, Mode};
use crate::gate::Refused;
use crate::gate::limit::Limit;
use crate::gate::wait::{SlotWait, Started};
use crate::pool::Pool;

/// Where a gated mode's slots live: a limit of the layer's own, or a pool's.
#[derive(Clone)]
pub(crate) enum Gates {
    Own(Arc<Limit>),
    Pool(Pool),
}

impl Gates {
    fn limit(&self) -> &Limit {
        match self {
            Gates::Own(limit) => limit,
            Gates::Pool(pool) => pool.limit(),
        }
    }

    /// The last slot came back: wake whoever waits for idle.
    fn idle_now(&self) {
        match self {
            Gates::Own(limit) => limit.notify_idle(),
            Gates::Pool(pool) => pool.idle_now(),
        }
    }

    /// Gives a slot back, waking the idle waiters when it was the last.
    fn release(&self) {
        if self.limit().release() == 0 {
            self.idle_now();
        }
    }
}

/// Admission through a named limit of the layer's own, shared by every request: made by
/// [`AdmissionLayer::new`](super::AdmissionLayer::new). Its series are a pool's admission
/// series (`loopguard_pool_capacity`, `_in_use`, `_waiting`, `_rejected_total`,
/// `_wait_seconds`, `_demand_avg`) under its name.
///
/// # Examples
///
/// ```
/// let layer = loopguard::tower::AdmissionLayer::new("api", 4)?;
/// assert_eq!(layer.capacity(), 4);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Limited {
    pub(crate) limit: Arc<Limit>,
}

/// Admission on a [`Pool`]'s own slots: made by
/// [`AdmissionLayer::for_pool`](super::AdmissionLayer::for_pool). A request holds one of the
/// pool's slots, so the pool's `in_use` and `try_run` see it, a refused request counts as a
/// pool refusal, and [`Slot::try_run`](super::Slot::try_run) runs the handler's job on it.
///
/// # Examples
///
/// ```
/// let pool = loopguard::pool::Pool::builder().name("walks").workers(2).build()?;
/// let layer = loopguard::tower::AdmissionLayer::for_pool(&pool);
/// assert_eq!(layer.capacity(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct OnPool {
    pub(crate) pool: Pool,
}

impl fmt::Debug for Limited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_limit(f, "Limited", &self.limit)
    }
}

impl fmt::Debug for OnPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_limit(f, "OnPool", Pool::limit(&self.pool))
    }
}

fn debug_limit(f: &mut fmt::Formatter<'_>, what: &str, limit: &Limit) -> fmt::Result {
    let gate = &limit.gate;
    f.debug_struct(what)
        .field("name", &&*limit.name)
        .field("capacity", &gate.capacity())
        .field("in_use", &gate.in_use())
        .field("waiting", &gate.waiting())
        .finish()
}

/// One held slot of a gated mode; the hold time feeds the `Retry-After` basis.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct GatePermit {
    gated: Gates,
    admitted: Instant,
}

impl Drop for GatePermit {
    fn drop(&mut self) {
        self.gated.limit().hold.add(self.admitted.elapsed());
        self.gated.release();
    }
}

/// A request waiting in line for a gated mode's slot.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct GateWait {
    gated: Gates,
    wait: SlotWait,
    created: Instant,
    /// Queued and not yet ended.
    queued: bool,
}

impl GateWait {
    fn permit(&self) -> GatePermit {
        GatePermit {
            gated: self.gated.clone(),
            admitted: Instant::now(),
        }
    }
}

impl Future for GateWait {
    type Output = Option<GatePermit>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let limit = this.gated.limit();
        if !this.queued {
            match this.wait.start(&limit.gate) {
                Started::Acquired => {
                    limit.admitted(false);
                    limit.record_wait(this.created.elapsed());
                    return Poll::Ready(Some(this.permit()));
                }
                Started::Closed => return Poll::Ready(None),
                Started::Queued => {
                    limit.queued();
                    this.queued = true;
                }
            }
        }
        // The waker is cloned in here (user code); a panic leaves us queued, for `Drop`.
        let ended = std::task::ready!(this.wait.poll(&limit.gate, cx.waker()));
        this.queued = false;
        if ended == crate::gate::wait::Ended::Granted {
            limit.admitted(true);
            limit.record_wait(this.created.elapsed());
            return Poll::Ready(Some(this.permit()));
        }
        if limit.wait_closed(ended) {
            this.gated.idle_now();
        }
        Poll::Ready(None)
    }
}

impl Drop for GateWait {
    fn drop(&mut self) {
        // A slot granted while we were leaving goes on to the next in line.
        if self.queued && self.gated.limit().abandon_wait(&mut self.wait) {
            self.gated.idle_now();
        }
    }
}

/// The admission shared by both gated modes.
fn try_admit<B>(gated: Gates, request: Request<B>) -> (Option<GatePermit>, Request<B>) {
    // Not counted here: the service counts a refusal when it answers one (a request that
    // goes on to wait in line is not refused yet).
    match gated.limit().try_acquire(false) {
        Ok(()) => {
            gated.limit().record_wait(Duration::ZERO);
            let permit = GatePermit {
                gated,
                admitted: Instant::now(),
            };
            (Some(permit), request)
        }
        Err(Refused::Saturated | Refused::Closed) => (None, request),
    }
}

fn wait(gated: Gates) -> GateWait {
    GateWait {
        gated,
        wait: SlotWait::new(),
        created: Instant::now(),
        queued: false,
    }
}

macro_rules! gated_mode {
    ($mode:ty) => {
        impl Admit for $mode {
            type Permit = GatePermit;
            type Ticket = ();
            type Wait = GateWait;

            fn try_admit<B>(&self, request: Request<B>, _will_wait: bool) -> AdmitOutcome<Self, B> {
                match try_admit(self.gates(), request) {
                    (Some(permit), request) => AdmitOutcome::Now(permit, request),
                    (None, request) => AdmitOutcome::Later((), request),
                }
            }

            fn wait(&self, (): ()) -> GateWait {
                wait(self.gates())
            }

            fn reject(&self) {
                self.gates_ref().rejected.count();
            }

            fn rejected(&self) -> u64 {
                self.gates_ref().rejected.get()
            }

            fn retry_after(&self) -> Duration {
                self.gates_ref().retry_after()
            }

            fn pool(&self) -> Option<Pool> {
                match self.gates() {
                    Gates::Pool(pool) => Some(pool),
                    Gates::Own(_) => None,
                }
            }

            fn line(&self) -> Option<(usize, usize, Duration)> {
                let limit = self.gates_ref();
                Some((
                    limit.gate.waiting(),
                    limit.gate.capacity(),
                    limit.hold.get()?,
                ))
            }
        }

        impl Gauged for $mode {
            fn capacity(&self) -> usize {
                self.gates_ref().gate.capacity()
            }

            fn in_use(&self) -> usize {
                self.gates_ref().gate.in_use()
            }

            fn waiting(&self) -> usize {
                self.gates_ref().gate.waiting()
            }

            fn wait_idle(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
                Box::pin(self.gates_ref().wait_idle())
            }
        }
    };
}

impl Limited {
    fn gates(&self) -> Gates {
        Gates::Own(self.limit.clone())
    }
    fn gates_ref(&self) -> &Limit {
        &self.limit
    }
}

impl OnPool {
    fn gates(&self) -> Gates {
        Gates::Pool(self.pool.clone())
    }
    fn gates_ref(&self) -> &Limit {
        self.pool.limit()
    }
}

gated_mode!(Limited);
gated_mode!(OnPool);

impl Mode for Limited {}
impl Mode for OnPool {}
