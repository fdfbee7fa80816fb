//! How a request is admitted: [`Limited`](super::Limited) (a named limit, the layer's own
//! or a pool's) or [`Keyed`] (a [`KeyedGate`] slot for the request's key).
//!
//! The modes answer the same questions (take a slot now? wait for one? how long until one
//! frees up?) through a sealed trait, so the service and its future are written once.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Request;
use http::request::Parts;

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
        /// Never waits, never allocates a refusal, counts nothing (a request that goes on
        /// to wait in line is not refused; the service counts what it refuses).
        fn try_admit<B>(&self, request: Request<B>) -> AdmitOutcome<Self, B>;
        /// Starts waiting in line with `ticket` (nothing happens until it is polled).
        fn wait(&self, ticket: Self::Ticket) -> Self::Wait;
        /// Counts a request refused at once (no free slot, or no hope in time), in the
        /// gate's own count.
        fn reject(&self);
        /// Counts a request refused because its deadline passed before it was admitted (on
        /// arrival, in line, or while its service got ready), in the gate's own count: a
        /// limit's refusals, a keyed gate's expiries.
        fn expire(&self);
        /// Requests refused so far, the gate's count: at once, or when their deadline
        /// passed first.
        fn rejected(&self) -> u64;
        /// The hint a refusal carries, the gate's own: the mean of the limit's
        /// `Retry-After` basis (a request's hold, a pool's job time), or how long a key of
        /// the keyed gate is held, on average.
        fn retry_after(&self) -> Duration;
        /// The [`Slot`](crate::tower::Slot) of an admitted request, holding `permit`.
        fn slot(&self, permit: Self::Permit) -> crate::tower::Slot;
        /// Gives back the `permit` of a request refused after its grant (its deadline
        /// passed before it was served): nothing it held counts as a hold.
        fn discard(permit: Self::Permit);
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
}

impl<K, F: Clone> Clone for Keyed<K, F> {
    fn clone(&self) -> Self {
        Keyed {
            gate: self.gate.clone(),
            key: self.key.clone(),
        }
    }
}

impl<K, F> Keyed<K, F> {
    pub(crate) fn new(gate: KeyedGate<K>, key: F) -> Keyed<K, F> {
        Keyed { gate, key }
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

/// A request waiting in line for its key: the keyed gate's own wait.
#[allow(unreachable_pub, missing_debug_implementations)]
pub struct KeyedWait<K: Hash + Eq> {
    acquire: Acquire<K>,
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Future for KeyedWait<K> {
    type Output = Option<KeyPermit<K>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.acquire).poll(cx).map(Some)
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

    fn try_admit<B>(&self, request: Request<B>) -> AdmitOutcome<Self, B> {
        let (parts, body) = request.into_parts();
        let key = (self.key)(&parts);
        let request = Request::from_parts(parts, body);
        // Not counted here: the service counts a refusal when it answers one, in the
        // gate's own counts (`loopguard_keyed_rejected_total`, `_expired_total`).
        match self.gate.try_acquire_uncounted(key) {
            Ok(permit) => AdmitOutcome::Now(permit, request),
            Err(busy) => AdmitOutcome::Later(busy.into_key(), request),
        }
    }

    fn wait(&self, key: K) -> KeyedWait<K> {
        KeyedWait {
            acquire: self.gate.acquire(key),
        }
    }

    fn reject(&self) {
        self.gate.count_rejected();
    }

    fn expire(&self) {
        self.gate.count_expired();
    }

    fn discard(permit: KeyPermit<K>) {
        permit.discard();
    }

    fn rejected(&self) -> u64 {
        self.gate.rejected() + self.gate.expired()
    }

    fn retry_after(&self) -> Duration {
        self.gate.retry_after()
    }

    fn slot(&self, permit: KeyPermit<K>) -> super::slot::Slot {
        super::slot::Slot::grant(permit)
    }

    fn line(&self) -> Option<(usize, usize, Duration)> {
        None
    }
}
