//! How a request is admitted: [`Limited`](super::Limited) (a named limit, the layer's own
//! or a pool's) or [`Keyed`] (a [`KeyedGate`] slot for the request's key).
//!
//! The modes answer the same questions (take a slot now? wait for one? how long until one
//! frees up?) through a sealed trait, so the service and its future are written once.

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

use crate::gate::limit::Average;
use crate::keyed::{Acquire, KeyPermit, KeyedGate};

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
        /// Counts a refused request.
        fn reject(&self);
        /// Requests refused so far.
        fn rejected(&self) -> u64;
        /// The hint a refusal carries: the mean of the limit's `Retry-After` basis (a
        /// request's hold, a pool's job time), or how long a key is held, on average.
        fn retry_after(&self) -> Duration;
        /// The [`Slot`](crate::tower::Slot) of an admitted request, holding `permit`.
        fn slot(&self, permit: Self::Permit) -> crate::tower::Slot;
        /// Gives back the `permit` of a request refused after its grant (its deadline
        /// passed before it was served): nothing it held counts as a hold.
        fn discard(permit: Self::Permit) {
            drop(permit);
        }
        /// The line a request joining now would see, for an early refusal: waiters ahead,
        /// slots, mean hold; `None` when the mode has no estimate (no hold measured yet, or
        /// per key).
        fn line(&self) -> Option<(usize, usize, Duration)>;
    }

    /// The modes with one gate for every request: its numbers, and its idle signal.
    pub trait Gauged {
        fn capacity(&self) -> usize;
        fn in_use(&self) -> usize;
        fn waiting(&self) -> usize;
        fn wait_idle(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
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

/// How an [`AdmissionLayer`](super::AdmissionLayer) admits requests:
/// [`Limited`](super::Limited) or [`Keyed`]. Sealed: implemented by those two only.
///
/// # Examples
///
/// ```
/// use loopguard::tower::{AdmissionLayer, Limited, Mode};
///
/// fn rejected_by<M: Mode>(layer: &AdmissionLayer<M>) -> u64 {
///     layer.rejected()
/// }
/// let layer: AdmissionLayer<Limited> = AdmissionLayer::new("api", 2)?;
/// assert_eq!(rejected_by(&layer), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Mode: Admit {}

impl<K, F> Mode for Keyed<K, F>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    F: Fn(&Parts) -> K + Clone + Send + Sync + 'static,
{
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
/// let layer = AdmissionLayer::keyed(KeyedGate::new("targets")?, |parts: &http::request::Parts| {
///     parts.uri.path().to_string()
/// });
/// # let _ = layer;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Keyed<K, F> {
    gate: KeyedGate<K>,
    key: F,
    stats: Arc<KeyedStats>,
}

/// The layer's own counters in keyed mode (the keyed gate keeps its per-key ones).
#[derive(Debug, Default)]
struct KeyedStats {
    rejected: AtomicU64,
    hold: Average,
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

/// A held key, whose hold time feeds the layer's `Retry-After` basis.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct KeyedPermit<K: Hash + Eq> {
    /// Gives the key back when dropped, after `Drop::drop` recorded the hold.
    _permit: KeyPermit<K>,
    stats: Arc<KeyedStats>,
    admitted: Instant,
}

impl<K: Hash + Eq> Drop for KeyedPermit<K> {
    fn drop(&mut self) {
        // Recorded before the permit (a field) gives the key back.
        self.stats.hold.add(self.admitted.elapsed());
    }
}

fn keyed_permit<K: Hash + Eq>(permit: KeyPermit<K>, stats: &Arc<KeyedStats>) -> KeyedPermit<K> {
    KeyedPermit {
        _permit: permit,
        stats: Arc::clone(stats),
        admitted: Instant::now(),
    }
}

/// A request waiting in line for its key.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct KeyedWait<K: Hash + Eq> {
    acquire: Acquire<K>,
    stats: Arc<KeyedStats>,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Future for KeyedWait<K> {
    type Output = Option<KeyedPermit<K>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        Pin::new(&mut this.acquire)
            .poll(cx)
            .map(|permit| Some(keyed_permit(permit, &this.stats)))
    }
}

impl<K, F> Admit for Keyed<K, F>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    F: Fn(&Parts) -> K + Clone + Send + Sync + 'static,
{
    type Permit = KeyedPermit<K>;
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
            Ok(permit) => AdmitOutcome::Now(keyed_permit(permit, &self.stats), request),
            Err(busy) => AdmitOutcome::Later(busy.into_key(), request),
        }
    }

    fn wait(&self, key: K) -> KeyedWait<K> {
        KeyedWait {
            acquire: self.gate.acquire(key),
            stats: Arc::clone(&self.stats),
        }
    }

    fn reject(&self) {
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
    }

    fn rejected(&self) -> u64 {
        self.stats.rejected.load(Ordering::Relaxed)
    }

    fn retry_after(&self) -> Duration {
        let hold = self.stats.hold.get();
        hold.map_or(Duration::from_secs(1), |avg| {
            avg.max(Duration::from_millis(1))
        })
    }

    fn slot(&self, permit: KeyedPermit<K>) -> super::slot::Slot {
        super::slot::Slot::grant(permit)
    }

    fn line(&self) -> Option<(usize, usize, Duration)> {
        None
    }
}
