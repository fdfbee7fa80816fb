//! What a caller of a [`KeyedGate`] holds or waits on: [`KeyPermit`], [`Acquire`], and the
//! [`Busy`] rejection. A key's line is its gate's ([`SlotWait`], the line a pool's `Run`
//! waits in): FIFO, a released slot handed to the oldest waiter, wakers stored and dropped
//! by the gate's rules.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use super::KeyedGate;
use crate::gate::Gate;
use crate::gate::wait::{Ended, SlotWait, Started};

/// The key was busy: returned by [`KeyedGate::try_acquire`], with the key.
///
/// # Examples
///
/// ```
/// let gate = loopguard::keyed::KeyedGate::new("repos")?;
/// let _permit = gate.try_acquire("backend").unwrap();
/// let busy = gate.try_acquire("backend").unwrap_err();
/// assert_eq!(busy.to_string(), "key is busy");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Busy<K> {
    pub(super) key: K,
}

impl<K> Busy<K> {
    /// The key that was busy.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire("backend").unwrap();
    /// assert_eq!(*gate.try_acquire("backend").unwrap_err().key(), "backend");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Hands the key back, e.g. to wait for it with [`KeyedGate::acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire(String::from("backend")).unwrap();
    /// let key: String = gate.try_acquire("backend".into()).unwrap_err().into_key();
    /// assert_eq!(key, "backend");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_key(self) -> K {
        self.key
    }
}

impl<K> fmt::Debug for Busy<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Busy").finish_non_exhaustive()
    }
}

impl<K> fmt::Display for Busy<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("key is busy")
    }
}

impl<K> std::error::Error for Busy<K> {}

/// A held slot of one key; dropping it frees the slot, handing it to the
/// oldest waiter if there is one.
///
/// # Examples
///
/// ```
/// let gate = loopguard::keyed::KeyedGate::new("repos")?;
/// let permit = gate.try_acquire("backend").unwrap();
/// assert_eq!(*permit.key(), "backend");
/// drop(permit);
/// assert_eq!(gate.in_use(&"backend"), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[must_use = "the key is freed as soon as the permit is dropped"]
pub struct KeyPermit<K: Hash + Eq> {
    gate: KeyedGate<K>,
    key: K,
    /// The key's gate, whose slot this is.
    slot: Arc<Gate>,
    /// When the slot was granted: the hold sampled into the `Retry-After` basis (`None`
    /// once [discarded](KeyPermit::discard)).
    granted: Option<Instant>,
}

impl<K: Hash + Eq> KeyPermit<K> {
    /// The permit of a slot of `key` just taken from `slot` (and counted as demand).
    pub(super) fn new(gate: KeyedGate<K>, key: K, slot: Arc<Gate>, granted: Instant) -> Self {
        KeyPermit {
            gate,
            key,
            slot,
            granted: Some(granted),
        }
    }

    /// Gives the slot back without sampling its hold: a request refused after its grant
    /// (its deadline passed first) is no sample of the `Retry-After` basis.
    #[cfg(any(feature = "tower", test))]
    pub(crate) fn discard(mut self) {
        self.granted = None;
    }

    /// The key this permit holds.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// assert_eq!(*gate.try_acquire(5).unwrap().key(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K: Hash + Eq> Drop for KeyPermit<K> {
    /// The one release: off the key's demand, the hold into the `Retry-After` basis, the
    /// slot back to the key's gate (to its oldest waiter first).
    fn drop(&mut self) {
        self.gate.inner.release(&self.key, &self.slot, self.granted);
    }
}

impl<K: Hash + Eq> fmt::Debug for KeyPermit<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPermit")
            .field("gate", &self.gate.inner.name)
            .finish_non_exhaustive()
    }
}

/// The future returned by [`KeyedGate::acquire`].
///
/// # Cancel safety
///
/// Dropping it while it waits removes it from the queue; a slot handed to it
/// just before the drop passes to the next waiter.
///
/// # Panics
///
/// Polling it again after it returned the permit panics.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let gate = loopguard::keyed::KeyedGate::new("repos")?;
/// let acquire = gate.acquire("backend");
/// let permit = acquire.await;
/// # drop(permit);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<K: Hash + Eq> {
    gate: KeyedGate<K>,
    /// `None` once the permit was returned.
    key: Option<K>,
    /// The key's gate while in line.
    slot: Option<Arc<Gate>>,
    wait: SlotWait,
    state: AcquireState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AcquireState {
    /// Not polled yet: nothing asked for, nothing counted.
    Start,
    /// In the key's line, counted as demand.
    Waiting,
    /// Returned its permit.
    Done,
}

// No field is structurally pinned.
impl<K: Hash + Eq> Unpin for Acquire<K> {}

impl<K: Hash + Eq> Acquire<K> {
    pub(super) fn new(gate: KeyedGate<K>, key: K) -> Self {
        Acquire {
            gate,
            key: Some(key),
            slot: None,
            wait: SlotWait::new(),
            state: AcquireState::Start,
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Acquire<K> {
    /// The first poll: under the table lock, the key's entry, the demand, and the key's
    /// gate's start (a free slot if nobody waits, or a place at the end of its line). Runs
    /// no user code but the key's `Hash`, `Eq` and `Clone`.
    fn start(&mut self) -> Option<KeyPermit<K>> {
        let Some(key) = self.key.as_ref() else {
            panic!("`Acquire` polled after it completed");
        };
        let inner = &*self.gate.inner;
        let (slot, started, now) = {
            let mut state = inner.lock();
            let now = Instant::now();
            let entry = inner.ensure_entry(&mut state, key, now);
            let started = self.wait.start(&entry.gate);
            if started != Started::Closed {
                entry.demand.add_at(now, 1);
            }
            (Arc::clone(&entry.gate), started, now)
        };
        match started {
            Started::Acquired => Some(self.granted(slot, now)),
            Started::Queued => {
                self.slot = Some(slot);
                self.state = AcquireState::Waiting;
                None
            }
            Started::Closed => unreachable!("a key's gate is never closed"),
        }
    }

    /// The permit of a slot granted to this caller (already counted as demand).
    fn granted(&mut self, slot: Arc<Gate>, now: Instant) -> KeyPermit<K> {
        self.state = AcquireState::Done;
        let key = self.key.take().expect("granted once");
        KeyPermit::new(self.gate.clone(), key, slot, now)
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Future for Acquire<K> {
    type Output = KeyPermit<K>;

    /// Takes or joins the key's line on the first poll; then registers the task's waker
    /// (cloned outside every lock: a panic in the clone changes nothing, and `Drop` still
    /// leaves the line) and takes the slot once it was handed over.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if this.state == AcquireState::Start {
            if let Some(permit) = this.start() {
                return Poll::Ready(permit);
            }
        }
        if this.state == AcquireState::Done {
            panic!("`Acquire` polled after it completed");
        }
        std::task::ready!(this.wait.register(cx.waker()));
        let slot = this.slot.take().expect("queued on its key's gate");
        match this.wait.settle(&slot) {
            Ended::Granted => Poll::Ready(this.granted(slot, Instant::now())),
            Ended::Closed | Ended::ClosedHolding => unreachable!("a key's gate is never closed"),
        }
    }
}

impl<K: Hash + Eq> Drop for Acquire<K> {
    /// Leaves the line: off the demand first (the key cannot be swept while its line holds
    /// this caller), then out of the key's gate; a slot handed over meanwhile goes on to the
    /// next in line, or back to the key. The waker the line stored goes with `wait`, after
    /// this, contained.
    fn drop(&mut self) {
        if self.state != AcquireState::Waiting {
            return;
        }
        let (Some(key), Some(slot)) = (&self.key, &self.slot) else {
            return;
        };
        self.gate.inner.leave(key, Instant::now());
        if self.wait.cancel(slot) {
            slot.release();
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for Acquire<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("gate", &self.gate.inner.name)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}
