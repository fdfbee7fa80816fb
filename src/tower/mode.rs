//! How a request is admitted: [`Slots`] (one gate of N slots for every request) or [`Keyed`]
//! (a [`KeyedGate`] slot for the request's key), and the grant that holds the slot.
//!
//! Both modes answer the same three questions (take a slot now? wait for one? how long
//! until one frees up?) through a sealed trait, so the service and its future are written
//! once.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Request;
use http::request::Parts;

use crate::keyed::{Acquire, KeyPermit, KeyedGate};
use crate::pool::gate::{Gate, MAX_CAPACITY};
use crate::pool::wait::{Ended, SlotWait, Started};
use crate::signal::Signal;

/// The sealed side of [`Mode`]: what the service asks of a mode. Not nameable outside the
/// crate, so only the modes here implement it.
#[allow(unreachable_pub)]
pub mod sealed {
    use super::*;

    pub trait Admit: Clone + Send + Sync + 'static {
        /// Holds one slot; dropping it gives the slot back.
        type Permit: Send + Sync + 'static;
        /// What a refused request keeps to wait in line (the key, for [`Keyed`]).
        type Ticket: Send + 'static;
        /// The wait for a slot, FIFO; `None` if the gate will never admit.
        type Wait: Future<Output = Option<Self::Permit>> + Send + Unpin + 'static;

        /// A slot now, or the ticket to wait with; the request comes back either way.
        /// Never waits, never allocates a refusal. `will_wait`: the request waits in line
        /// if no slot is free, so a busy gate is not a refusal (and not counted as one).
        fn try_admit<B>(&self, request: Request<B>, will_wait: bool) -> AdmitOutcome<Self, B>;
        /// Starts waiting in line with `ticket` (nothing happens until it is polled).
        fn wait(&self, ticket: Self::Ticket) -> Self::Wait;
        /// The mode's counters.
        fn stats(&self) -> &Arc<AdmissionStats>;
    }
}

use sealed::Admit;

/// What [`Admit::try_admit`] gives back: the permit or the ticket, and the request.
#[allow(unreachable_pub, missing_debug_implementations)]
pub enum AdmitOutcome<M: Admit, B> {
    /// Admitted: the request holds this permit.
    Now(M::Permit, Request<B>),
    /// No slot now: wait with this ticket, or refuse.
    Later(M::Ticket, Request<B>),
}

/// How an [`AdmissionLayer`](super::AdmissionLayer) admits requests: [`Slots`] or
/// [`Keyed`]. Sealed: implemented by those two only.
///
/// # Examples
///
/// ```
/// use loopguard::tower::{AdmissionLayer, Mode, Slots};
///
/// fn rejected_by<M: Mode>(layer: &AdmissionLayer<M>) -> u64 {
///     layer.rejected()
/// }
/// let layer: AdmissionLayer<Slots> = AdmissionLayer::new(2);
/// assert_eq!(rejected_by(&layer), 0);
/// ```
pub trait Mode: Admit {}

impl Mode for Slots {}
impl<K, F> Mode for Keyed<K, F>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    F: Fn(&Parts) -> K + Clone + Send + Sync + 'static,
{
}

/// Counters every mode keeps: refusals, and how long admitted requests hold their slot
/// (the `Retry-After` hint).
#[derive(Debug, Default)]
#[allow(unreachable_pub)]
pub struct AdmissionStats {
    rejected: AtomicU64,
    /// Moving average of hold times in nanoseconds (weight 1/8); 0 until one ended.
    avg_hold_nanos: AtomicU64,
}

impl AdmissionStats {
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    pub(crate) fn reject(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Expected time until a held slot frees up: the average hold, at least 1 ms; 1 s before
    /// any request finished.
    pub(crate) fn retry_after(&self) -> Duration {
        match self.avg_hold_nanos.load(Ordering::Relaxed) {
            0 => Duration::from_secs(1),
            nanos => Duration::from_nanos(nanos).max(Duration::from_millis(1)),
        }
    }

    fn held(&self, held: Duration) {
        // Lost updates under contention only make the hint a little older.
        let sample = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX).max(1);
        let avg = self.avg_hold_nanos.load(Ordering::Relaxed);
        let next = if avg == 0 {
            sample
        } else {
            avg - avg / 8 + sample / 8
        };
        self.avg_hold_nanos.store(next.max(1), Ordering::Relaxed);
    }
}

/// An admitted request's slot, shared by its response body and every [`Slot`] clone:
/// released when the last of them goes.
struct Grant<P> {
    stats: Arc<AdmissionStats>,
    admitted: Instant,
    // Dropped after `Drop::drop` ran: the hold is recorded before the slot is given back.
    _permit: P,
}

impl<P> Drop for Grant<P> {
    fn drop(&mut self) {
        self.stats.held(self.admitted.elapsed());
    }
}

/// The admission slot of a request, in its extensions for the handler: the slot is held
/// while the response body is being written *and* while any clone of this lives.
///
/// Move a clone into work that outlives the handler's future (a [`Pool`](crate::pool::Pool)
/// job), so that a client that disconnects cannot free the slot while its work still runs.
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
    _grant: Arc<dyn Any + Send + Sync>,
}

impl Slot {
    pub(crate) fn grant<P: Send + Sync + 'static>(stats: &Arc<AdmissionStats>, permit: P) -> Slot {
        Slot {
            _grant: Arc::new(Grant {
                stats: Arc::clone(stats),
                admitted: Instant::now(),
                _permit: permit,
            }),
        }
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

/// Admission through one gate of N slots shared by every request: made by
/// [`AdmissionLayer::new`](super::AdmissionLayer::new).
///
/// # Examples
///
/// ```
/// let layer = loopguard::tower::AdmissionLayer::new(4);
/// assert_eq!(layer.capacity(), 4);
/// ```
#[derive(Clone)]
pub struct Slots {
    shared: Arc<SlotsShared>,
}

struct SlotsShared {
    gate: Gate,
    stats: Arc<AdmissionStats>,
    /// Notified when the last slot is released.
    idle: Signal,
}

impl Slots {
    pub(crate) fn new(capacity: usize) -> Slots {
        Slots {
            shared: Arc::new(SlotsShared {
                gate: Gate::new(capacity.clamp(1, MAX_CAPACITY)),
                stats: Arc::default(),
                idle: Signal::new(),
            }),
        }
    }

    pub(crate) fn gate(&self) -> &Gate {
        &self.shared.gate
    }

    pub(crate) async fn wait_idle(&self) {
        let shared = &self.shared;
        shared.idle.wait(|| shared.gate.in_use() == 0).await
    }
}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gate = &self.shared.gate;
        f.debug_struct("Slots")
            .field("capacity", &gate.capacity())
            .field("in_use", &gate.in_use())
            .field("waiting", &gate.waiting())
            .finish()
    }
}

/// One held slot of a [`Slots`] gate.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct SlotPermit {
    shared: Arc<SlotsShared>,
}

impl Drop for SlotPermit {
    fn drop(&mut self) {
        // `release` wakes the next waiter through the contained wake.
        if self.shared.gate.release() == 0 {
            self.shared.idle.notify_all();
        }
    }
}

/// A request waiting in line for a [`Slots`] gate.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct SlotsWait {
    shared: Arc<SlotsShared>,
    wait: SlotWait,
    queued: bool,
}

impl Future for SlotsWait {
    type Output = Option<SlotPermit>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let gate = &this.shared.gate;
        if !this.queued {
            match this.wait.start(gate) {
                Started::Acquired => return Poll::Ready(Some(this.permit())),
                Started::Closed => return Poll::Ready(None),
                Started::Queued => this.queued = true,
            }
        }
        // The waker is cloned in here (user code); a panic leaves us queued, for `Drop`.
        let ended = std::task::ready!(this.wait.poll(gate, cx.waker()));
        this.queued = false;
        Poll::Ready(match ended {
            Ended::Granted => Some(this.permit()),
            // The layer's gate is never closed; handle it anyway, without a leak.
            Ended::ClosedHolding => {
                drop(this.permit());
                None
            }
            Ended::Closed => None,
        })
    }
}

impl SlotsWait {
    fn permit(&self) -> SlotPermit {
        SlotPermit {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for SlotsWait {
    fn drop(&mut self) {
        // A slot granted while we were leaving is ours: pass it on.
        if self.queued && self.wait.cancel(&self.shared.gate) {
            drop(self.permit());
        }
    }
}

impl Admit for Slots {
    type Permit = SlotPermit;
    type Ticket = ();
    type Wait = SlotsWait;

    fn try_admit<B>(&self, request: Request<B>, _will_wait: bool) -> AdmitOutcome<Self, B> {
        // The gate counts nothing; the layer counts its own refusals.
        match self.shared.gate.try_acquire() {
            Ok(()) => AdmitOutcome::Now(
                SlotPermit {
                    shared: Arc::clone(&self.shared),
                },
                request,
            ),
            Err(_) => AdmitOutcome::Later((), request),
        }
    }

    fn wait(&self, (): ()) -> SlotsWait {
        SlotsWait {
            shared: Arc::clone(&self.shared),
            wait: SlotWait::new(),
            queued: false,
        }
    }

    fn stats(&self) -> &Arc<AdmissionStats> {
        &self.shared.stats
    }
}

/// Admission per key through a [`KeyedGate`], the key taken from each request by a
/// closure: made by [`AdmissionLayer::keyed`](super::AdmissionLayer::keyed).
///
/// # Examples
///
/// ```
/// use loopguard::keyed::KeyedGate;
/// use loopguard::tower::AdmissionLayer;
///
/// // One walk per target at a time; other targets unaffected.
/// let layer = AdmissionLayer::keyed(KeyedGate::new("targets"), |parts: &http::request::Parts| {
///     parts.uri.path().to_string()
/// });
/// # let _ = layer;
/// ```
pub struct Keyed<K, F> {
    gate: KeyedGate<K>,
    key: F,
    stats: Arc<AdmissionStats>,
}

impl<K, F: Clone> Clone for Keyed<K, F> {
    fn clone(&self) -> Self {
        Keyed {
            gate: self.gate.clone(),
            key: self.key.clone(),
            stats: Arc::clone(&self.stats),
        }
    }
}

impl<K, F> Keyed<K, F> {
    pub(crate) fn new(gate: KeyedGate<K>, key: F) -> Keyed<K, F> {
        Keyed {
            gate,
            key,
            stats: Arc::default(),
        }
    }

    pub(crate) fn gate(&self) -> &KeyedGate<K> {
        &self.gate
    }
}

impl<K, F> fmt::Debug for Keyed<K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

/// A request waiting in line for its key.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct KeyedWait<K: Hash + Eq>(Acquire<K>);

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Future for KeyedWait<K> {
    type Output = Option<KeyPermit<K>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(Some)
    }
}

impl<K, F> Admit for Keyed<K, F>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    F: Fn(&Parts) -> K + Clone + Send + Sync + 'static,
{
    type Permit = KeyPermit<K>;
    type Ticket = K;
    type Wait = KeyedWait<K>;

    fn try_admit<B>(&self, request: Request<B>, will_wait: bool) -> AdmitOutcome<Self, B> {
        let (parts, body) = request.into_parts();
        let key = (self.key)(&parts);
        let request = Request::from_parts(parts, body);
        // The gate's own refusal count (`loopguard_keyed_rejected_total`) counts the
        // requests refused, not those that go on to wait.
        let taken = if will_wait {
            self.gate.try_acquire_uncounted(key)
        } else {
            self.gate.try_acquire(key)
        };
        match taken {
            Ok(permit) => AdmitOutcome::Now(permit, request),
            Err(busy) => AdmitOutcome::Later(busy.into_key(), request),
        }
    }

    fn wait(&self, key: K) -> KeyedWait<K> {
        KeyedWait(self.gate.acquire(key))
    }

    fn stats(&self) -> &Arc<AdmissionStats> {
        &self.stats
    }
}
