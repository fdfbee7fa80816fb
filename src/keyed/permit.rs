//! What a caller of a [`KeyedGate`] holds or waits on: [`KeyPermit`], [`Acquire`], and the
//! [`Busy`] rejection.

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::{KeyWaiter, KeyedGate};
use crate::contain::drop_contained;

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
    pub(super) gate: KeyedGate<K>,
    pub(super) key: K,
}

impl<K: Hash + Eq> KeyPermit<K> {
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
    fn drop(&mut self) {
        self.gate.inner.release(&self.key);
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
    pub(super) gate: KeyedGate<K>,
    pub(super) key: Option<K>,
    pub(super) state: AcquireState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AcquireState {
    Start,
    Waiting(u64),
    Done,
}

// No field is structurally pinned.
impl<K: Hash + Eq> Unpin for Acquire<K> {}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Acquire<K> {
    /// Tries to take or wait for the slot under the lock; true once admitted.
    ///
    /// The task's waker is cloned before the lock (the clone is user code: a panic in it
    /// changes nothing), and a stored waker it replaces, or one left over, is dropped after
    /// the lock is released and the accounting is done, its `Drop` contained: a waker whose
    /// `Drop` panics or calls back into the gate neither deadlocks it nor leaks a slot.
    fn poll_admission(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(key) = self.key.as_ref() else {
            panic!("`Acquire` polled after it completed");
        };
        let inner = &*self.gate.inner;
        let mut fresh = Some(cx.waker().clone());
        let mut stale: Option<Waker> = None;
        let admitted = 'locked: {
            let mut state = inner.lock();
            let now = Instant::now();
            if let AcquireState::Waiting(id) = self.state {
                let entry = state.entries.get_mut(key);
                let found =
                    entry.and_then(|e| e.waiters.iter().position(|w| w.id == id).map(|i| (e, i)));
                if let Some((entry, index)) = found {
                    if index < entry.granted {
                        stale = entry.waiters.remove(index).map(|w| w.waker);
                        entry.granted -= 1;
                        break 'locked true;
                    }
                    let waiter = &mut entry.waiters[index];
                    if !waiter.waker.will_wake(cx.waker()) {
                        if let Some(waker) = fresh.take() {
                            stale = Some(mem::replace(&mut waiter.waker, waker));
                        }
                    }
                    break 'locked false;
                }
                // Not queued (cannot happen while waiting): start over rather than hang.
                self.state = AcquireState::Start;
            }
            let id = state.next_id;
            state.next_id = id.wrapping_add(1);
            let entry = inner.ensure_entry(&mut state, key, now);
            entry.demand.add_at(now, 1);
            if entry.admits_now() {
                entry.in_use += 1;
                break 'locked true;
            }
            let waker = fresh.take().unwrap_or_else(|| cx.waker().clone());
            entry.waiters.push_back(KeyWaiter { id, waker });
            self.state = AcquireState::Waiting(id);
            false
        };
        drop_contained("a Waker", (stale, fresh));
        admitted
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> Future for Acquire<K> {
    type Output = KeyPermit<K>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if !this.poll_admission(cx) {
            return Poll::Pending;
        }
        this.state = AcquireState::Done;
        match this.key.take() {
            Some(key) => Poll::Ready(KeyPermit {
                gate: this.gate.clone(),
                key,
            }),
            None => Poll::Pending,
        }
    }
}

impl<K: Hash + Eq> Drop for Acquire<K> {
    fn drop(&mut self) {
        if let (AcquireState::Waiting(id), Some(key)) = (self.state, &self.key) {
            self.gate.inner.cancel(key, id);
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
