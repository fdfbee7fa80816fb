//! Per-key admission: a small gate per key (a repository, a tenant, a target),
//! so that a busy key turns callers away, or queues them, without touching
//! any other key.
//!
//! Each key's gate is the crate's one admission primitive (the gate under the pool and the
//! tower layer: its FIFO line, its hand-off to the oldest waiter, its waiters' wakers), and
//! the keyed gate keeps one accounting for all its keys, as a pool's limit does for its
//! slots: the refusals (counted at once, emitted in batches) and the `Retry-After` basis
//! (the mean time a key is held), plus each key's demand.
//!
//! - [`KeyedGate::try_acquire`] is the reject-when-busy path. The decision is
//!   taken under one lock, so two simultaneous callers can never both see an
//!   idle key. A key with queued waiters counts as busy (waiters are not
//!   starved), and a rejection queues nothing, reserves nothing and adds no
//!   demand.
//! - [`KeyedGate::acquire`] waits for the key, first come first served among
//!   the waiters of that key.
//! - A [`KeyPermit`] frees its slot when dropped, so every way an admitted
//!   caller ends (return, error, panic unwinding, its future being dropped)
//!   frees the key. A freed slot goes straight to the oldest waiter.
//!
//! Each key tracks its time-weighted [demand](crate::demand) (holders plus
//! waiters, over the gate's window), with the precision of a [`Demand`](crate::demand::Demand)
//! whose window is split into 16 buckets rather than 64: exact in the same cases, and
//! otherwise off by at most the oldest bucket's peak level × 1/16 of the window. A key's
//! history is about 600 bytes, kept inline in its entry.
//!
//! # What an idle key costs
//!
//! In the gate, nothing after a while: a key's entry is removed once it has no
//! holders and no waiters and its demand history is entirely older than the
//! window (its average has decayed to zero). Removal is lazy: when an
//! operation adds a new key, idle entries are swept, at most once per window;
//! [`KeyedGate::prune`], [`KeyedGate::demands`] and
//! [`KeyedGate::publish_metrics`] sweep too. The map therefore holds at most
//! the keys used in about the last two windows, however many one-off keys pass
//! through.
//!
//! In the metrics recorder, one series per key ever published: a removed key's
//! `loopguard_keyed_demand_avg` gauge is set to 0, but the recorder keeps the series
//! (loopguard cannot delete it through the `metrics` facade). Keys are a label,
//! so keep them to a bounded set (repositories, tenants), not request ids; or
//! let the recorder expire idle series (`metrics-exporter-prometheus`:
//! `PrometheusBuilder::idle_timeout`).
//!
//! # Metrics
//!
//! The gate emits through the `metrics` facade (and, with the `prometheus-client`
//! feature, `loopguard::telemetry::Collector::keyed` encodes the same series):
//! `loopguard_keyed_rejected_total` (counter, `gate` label), the rejections;
//! `loopguard_keyed_expired_total` (counter, `gate` label), the requests of a keyed tower
//! layer whose deadline passed before their key admitted them (on arrival or in line);
//! and `loopguard_keyed_demand_avg` (gauge, `gate` and `key` labels), which is updated on
//! read: call [`KeyedGate::publish_metrics`] before each scrape. As a pool's refusals, the
//! counters are counted at once (one atomic add) and told to the recorder in batches: when
//! a permit of the gate is dropped, and by [`KeyedGate::publish_metrics`], so a scrape that
//! publishes first sees them all; [`KeyedGate::rejected`] and [`KeyedGate::expired`] are
//! always exact. The counter handles are obtained once, when the gate is built, so install
//! the recorder before building gates.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::mem;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

// Under the crate's loom cfg (unit tests only) the key table's lock is loom's (and so are
// the keys' gates' own), so `keyed/loom_model.rs` explores every interleaving of release,
// grant, cancel and sweep; normal builds never see loom.
use crate::sync::{Mutex, MutexGuard, lock};

use crate::contain::contain;
use crate::demand::{DEFAULT_WINDOW, DemandCore, KEY_SLOTS};
use crate::emit::publisher::OnePublisher;
use crate::emit::{
    self, Counted, KEYED_DEMAND_AVG, KEYED_EXPIRED_TOTAL, KEYED_REJECTED_TOTAL, LABEL_GATE,
    LABEL_KEY,
};
use crate::gate::Gate;
use crate::gate::tally::Tally;

mod builder;
mod permit;

/// A key's demand history: 16 buckets over the gate's window (a pool's has 64). Every
/// live key carries one inline in its table entry (608 bytes in all on x86-64 Linux, plus
/// the key's gate, a 96-byte allocation; against 2 KiB of
/// history alone with 64 buckets): a million live keys take about 1.4 GB with the table's
/// slack (3.6 GB before). The price is precision: see the [module docs](self).
pub(crate) type KeyDemand = DemandCore<KEY_SLOTS>;

/// Each key as `publish_metrics` displayed it, and the value it set.
#[cfg(feature = "prometheus-client")]
pub(crate) type Shown = Arc<[(String, f64)]>;

pub use builder::KeyedGateBuilder;
pub use permit::{Acquire, Busy, KeyPermit};

/// Per-key admission with reject-when-busy and FIFO waiting; see the
/// [module docs](self).
///
/// A cheap, cloneable handle (`Send + Sync`); clones share the same gate.
///
/// # Examples
///
/// ```
/// use loopguard::keyed::KeyedGate;
///
/// # futures_lite::future::block_on(async {
/// let gate = KeyedGate::new("repos")?;
/// let permit = gate.acquire("backend").await;
/// assert!(gate.try_acquire("backend").is_err()); // busy
/// assert!(gate.try_acquire("frontend").is_ok()); // other keys unaffected
/// drop(permit);
/// assert!(gate.try_acquire("backend").is_ok());
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct KeyedGate<K> {
    inner: Arc<Keys<K>>,
}

struct Keys<K> {
    name: Arc<str>,
    capacity: usize,
    overrides: HashMap<K, usize>,
    /// An empty demand history with the gate's window; cloned per key.
    proto: KeyDemand,
    created: Instant,
    /// The one accounting of every key: `try_acquire` refusals (counted at once, mirrored
    /// into `loopguard_keyed_rejected_total` in batches) and the `Retry-After` basis (how
    /// long a key's permit was held, sampled by its `Drop`).
    tally: Tally,
    /// Requests whose deadline passed before their key admitted them, mirrored into
    /// `loopguard_keyed_expired_total` in batches.
    expired: Counted,
    state: Mutex<KeyTable<K>>,
    /// What the last `publish_metrics` set, keys displayed: what a registry that reads
    /// (the prometheus-client collector) encodes, with no key code and no table lock.
    #[cfg(feature = "prometheus-client")]
    shown: Mutex<Shown>,
    /// One `publish_metrics` round at a time: an older snapshot never overwrites a newer
    /// one, in the recorder or in `shown`.
    publisher: OnePublisher,
}

struct KeyTable<K> {
    entries: HashMap<K, Entry>,
    next_sweep: Option<Instant>,
    /// Removed keys whose published gauge was not zero.
    unpublish: Vec<K>,
}

/// A live key: its gate (the crate's FIFO admission gate, shared with the key's permits and
/// waiters so that a release and a wait touch it outside the table lock) and its demand.
struct Entry {
    gate: Arc<Gate>,
    /// Changed under the table lock only, always before the gate is: a key whose demand
    /// is not idle yet, or whose gate is held or waited for, is never swept.
    demand: KeyDemand,
    published: f64,
}

impl Entry {
    /// Takes a free slot if nobody waits (the gate's lock-free `try_acquire`), counting it
    /// as demand at `now`. Allocates nothing either way.
    fn admit(&mut self, now: Instant) -> Option<Arc<Gate>> {
        self.gate.try_acquire().ok()?;
        self.demand.add_at(now, 1);
        Some(Arc::clone(&self.gate))
    }

    fn removable_at(&self, now: Instant) -> bool {
        self.gate.in_use() == 0 && self.gate.waiting() == 0 && self.demand.is_idle_at(now)
    }
}

impl<K: Hash + Eq> Keys<K> {
    fn lock(&self) -> MutexGuard<'_, KeyTable<K>> {
        lock(&self.state)
    }

    /// A holder or a waiter of `key` leaves the demand at `now`. Called before the key's
    /// gate gives the slot back or forgets the waiter, so the key cannot be swept between.
    fn leave(&self, key: &K, now: Instant) {
        // The key's `Hash` and `Eq` are user code: a panic there is contained and leaves at
        // most a phantom unit of demand (the key stays tracked a while), never a slot held
        // or a line stranded, since the gate's step comes after this.
        contain("a key's Hash or Eq", || {
            let mut state = self.lock();
            if let Some(entry) = state.entries.get_mut(key) {
                entry.demand.add_at(now, -1);
            }
        });
    }

    /// The one release, from [`KeyPermit`]'s `Drop`: off the demand, the hold into the
    /// `Retry-After` basis, then the slot back to the key's gate (to its oldest waiter
    /// first, whose waker runs there, outside every lock), then the refusals counted so far
    /// to the recorder.
    fn release(&self, key: &K, gate: &Gate, granted: Option<Instant>) {
        let now = Instant::now();
        self.leave(key, now);
        if let Some(granted) = granted {
            self.tally
                .sample_hold(now.saturating_duration_since(granted));
        }
        gate.release();
        self.flush_counts();
    }

    /// Tells the recorder of the refusals and expiries counted since the last flush (user
    /// code: outside every lock).
    fn flush_counts(&self) {
        self.tally.flush_rejected();
        self.expired.flush();
    }
}

impl<K: Hash + Eq + Clone> Keys<K> {
    fn new_entry(&self, key: &K, now: Instant) -> Entry {
        // A new or re-created key was idle since the gate started (or for a full window).
        let start = now
            .checked_sub(self.proto.window())
            .map_or(self.created, |s| s.max(self.created));
        let capacity = self.overrides.get(key).copied().unwrap_or(self.capacity);
        Entry {
            gate: Arc::new(Gate::new(capacity)),
            demand: self.proto.fresh(start),
            published: 0.0,
        }
    }

    /// Makes sure `key` has an entry, sweeping idle ones first if it is new and a sweep is due.
    fn ensure_entry<'s>(&self, state: &'s mut KeyTable<K>, key: &K, now: Instant) -> &'s mut Entry {
        if !state.entries.contains_key(key) && state.next_sweep.is_some_and(|at| now >= at) {
            self.sweep(state, now);
        }
        state
            .entries
            .entry(key.clone())
            .or_insert_with(|| self.new_entry(key, now))
    }

    fn sweep(&self, state: &mut KeyTable<K>, now: Instant) {
        let KeyTable {
            entries,
            unpublish,
            next_sweep,
            ..
        } = state;
        entries.retain(|key, entry| {
            let remove = entry.removable_at(now);
            if remove && entry.published > 0.0 {
                unpublish.push(key.clone());
            }
            !remove
        });
        *next_sweep = now.checked_add(self.proto.window());
    }
}

/// What [`crate::name::check`] calls a keyed gate.
pub(super) const NAME_KIND: &str = "a keyed gate";

impl<K> Clone for KeyedGate<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: Hash + Eq + Clone + Send + Sync + 'static> KeyedGate<K> {
    /// A gate named `name` (the `gate` metric label) with one slot per key and
    /// a five-second demand window.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`](std::io::ErrorKind::InvalidInput) for a name that is
    /// empty or has a NUL byte, as [`build`](KeyedGateBuilder::build).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::keyed::KeyedGate;
    ///
    /// let gate: KeyedGate<String> = KeyedGate::new("tenants")?;
    /// assert_eq!(gate.name(), "tenants");
    /// let err = KeyedGate::<String>::new("").unwrap_err();
    /// assert_eq!(err.to_string(), "a keyed gate name must not be empty");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(name: &str) -> std::io::Result<Self> {
        crate::name::check(NAME_KIND, name)?;
        Ok(Self::from_parts(
            name,
            1,
            HashMap::new(),
            KeyDemand::with_default_window(Instant::now()),
        ))
    }

    /// A builder to set the per-key capacity, overrides and demand window.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::keyed::KeyedGate;
    ///
    /// let gate = KeyedGate::builder("repos")
    ///     .capacity(2)
    ///     .capacity_for("monorepo", 4)
    ///     .window(Duration::from_secs(30))
    ///     .build()?;
    /// let _a = gate.try_acquire("small")?;
    /// let _b = gate.try_acquire("small")?;
    /// assert!(gate.try_acquire("small").is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(name: &str) -> KeyedGateBuilder<K> {
        KeyedGateBuilder {
            name: name.to_owned(),
            capacity: 1,
            overrides: HashMap::new(),
            window: DEFAULT_WINDOW,
        }
    }

    fn from_parts(
        name: &str,
        capacity: usize,
        overrides: HashMap<K, usize>,
        proto: KeyDemand,
    ) -> Self {
        let name: Arc<str> = Arc::from(name);
        let counter = |metric: &'static str| {
            Counted::new(emit::register(
                || metrics::counter!(metric, LABEL_GATE => Arc::clone(&name)),
                metrics::Counter::noop,
            ))
        };
        let (rejected, expired) = (counter(KEYED_REJECTED_TOTAL), counter(KEYED_EXPIRED_TOTAL));
        let created = Instant::now();
        Self {
            inner: Arc::new(Keys {
                name,
                capacity,
                overrides,
                proto,
                created,
                tally: Tally::new(rejected),
                expired,
                state: Mutex::new(KeyTable {
                    entries: HashMap::new(),
                    next_sweep: created.checked_add(proto.window()),
                    unpublish: Vec::new(),
                }),
                #[cfg(feature = "prometheus-client")]
                shown: Mutex::new(Arc::new([])),
                publisher: OnePublisher::new(),
            }),
        }
    }

    /// The gate's name.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::<u32>::new("shards")?;
    /// assert_eq!(gate.name(), "shards");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Takes a slot of `key` if one is free right now, or fails at once.
    ///
    /// Atomic: of any number of simultaneous callers on an idle single-slot
    /// key, exactly one is admitted. A key with queued waiters is busy. A
    /// rejection counts in [`rejected`](Self::rejected), adds no demand,
    /// queues and reserves nothing, does not allocate, and hands the key back.
    ///
    /// # Errors
    ///
    /// [`Busy`] if every slot of the key is taken or callers are waiting for it.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::keyed::KeyedGate;
    ///
    /// let gate = KeyedGate::new("repos")?;
    /// let permit = gate.try_acquire("backend").unwrap();
    /// let busy = gate.try_acquire("backend").unwrap_err();
    /// assert_eq!(busy.into_key(), "backend");
    /// assert_eq!(gate.rejected(), 1);
    /// drop(permit);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_acquire(&self, key: K) -> Result<KeyPermit<K>, Busy<K>> {
        let taken = self.try_acquire_uncounted(key);
        if taken.is_err() {
            self.count_rejected();
        }
        taken
    }

    /// Counts a refusal (one atomic add; the recorder hears of it in a batch).
    pub(crate) fn count_rejected(&self) {
        self.inner.tally.count_rejected();
    }

    /// Counts a request whose deadline passed before its key admitted it (one atomic add;
    /// the recorder hears of it in a batch).
    #[cfg(feature = "tower")]
    pub(crate) fn count_expired(&self) {
        self.inner.expired.count();
    }

    /// The hint a refused caller gets: the mean time a permit of this gate was held (any
    /// key), at least 1 ms; 1 s before the first permit came back.
    #[cfg(feature = "tower")]
    pub(crate) fn retry_after(&self) -> std::time::Duration {
        self.inner.tally.retry_after()
    }

    /// [`try_acquire`](Self::try_acquire) without counting a refusal: for a caller that
    /// goes on to wait in line (the tower layer's waiting mode), which is not refused.
    pub(crate) fn try_acquire_uncounted(&self, key: K) -> Result<KeyPermit<K>, Busy<K>> {
        let inner = &*self.inner;
        let mut state = inner.lock();
        let now = Instant::now();
        // Decided under the table lock, by the key's gate: one compare-and-exchange on its
        // word, which fails while every slot is taken or anyone waits.
        let admitted = match state.entries.get_mut(&key) {
            Some(entry) => entry.admit(now),
            None => inner.ensure_entry(&mut state, &key, now).admit(now),
        };
        drop(state);
        match admitted {
            Some(slot) => Ok(KeyPermit::new(self.clone(), key, slot, now)),
            None => Err(Busy { key }),
        }
    }

    /// Waits for a slot of `key`, first come first served among its waiters.
    /// The caller counts as demand while waiting and while holding.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves no trace: it leaves the
    /// queue, and a slot handed to it just before the drop passes on to the
    /// next waiter (or back to the key).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::keyed::KeyedGate;
    ///
    /// # futures_lite::future::block_on(async {
    /// let gate = KeyedGate::new("repos")?;
    /// let permit = gate.acquire("backend").await;
    /// assert_eq!(gate.in_use(&"backend"), 1);
    /// drop(permit);
    /// assert_eq!(gate.in_use(&"backend"), 0);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn acquire(&self, key: K) -> Acquire<K> {
        Acquire::new(self.clone(), key)
    }

    /// The key's time-weighted demand over the window ending now (0 for an
    /// unknown key).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// assert_eq!(gate.demand(&"backend"), 0.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn demand(&self, key: &K) -> f64 {
        self.demand_at(key, Instant::now())
    }

    /// The key's time-weighted demand over the window ending at `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::keyed::KeyedGate;
    ///
    /// let gate = KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire("backend").unwrap();
    /// let later = Instant::now() + Duration::from_secs(10);
    /// assert_eq!(gate.demand_at(&"backend", later), 1.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn demand_at(&self, key: &K, now: Instant) -> f64 {
        let state = self.inner.lock();
        state
            .entries
            .get(key)
            .map_or(0.0, |entry| entry.demand.average_at(now))
    }

    /// Every tracked key with its demand now, after sweeping idle keys.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire("backend").unwrap();
    /// let demands = gate.demands();
    /// assert_eq!(demands.len(), 1);
    /// assert_eq!(demands[0].0, "backend");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn demands(&self) -> Vec<(K, f64)> {
        let now = Instant::now();
        let mut state = self.inner.lock();
        self.inner.sweep(&mut state, now);
        state
            .entries
            .iter()
            .map(|(key, entry)| (key.clone(), entry.demand.average_at(now)))
            .collect()
    }

    /// Slots of `key` currently held (including ones handed to a waiter that
    /// has not resumed yet).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire(7).unwrap();
    /// assert_eq!(gate.in_use(&7), 1);
    /// assert_eq!(gate.in_use(&8), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn in_use(&self, key: &K) -> usize {
        self.inner
            .lock()
            .entries
            .get(key)
            .map_or(0, |entry| entry.gate.in_use())
    }

    /// Holders and waiters of `key` counted as demand now (the models check none is left
    /// over).
    #[cfg(all(test, loopguard_loom))]
    pub(crate) fn demand_level(&self, key: &K) -> usize {
        let state = self.inner.lock();
        state
            .entries
            .get(key)
            .map_or(0, |entry| entry.demand.level())
    }

    /// Callers of [`acquire`](Self::acquire) queued for `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// use futures_lite::future;
    ///
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire(1).unwrap();
    /// let mut waiter = gate.acquire(1);
    /// assert!(future::poll_once(&mut waiter).await.is_none());
    /// assert_eq!(gate.waiting(&1), 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn waiting(&self, key: &K) -> usize {
        let state = self.inner.lock();
        state
            .entries
            .get(key)
            .map_or(0, |entry| entry.gate.waiting())
    }

    /// How many [`try_acquire`](Self::try_acquire) calls were rejected.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire(1).unwrap();
    /// let _ = gate.try_acquire(1);
    /// assert_eq!(gate.rejected(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn rejected(&self) -> u64 {
        self.inner.tally.rejected()
    }

    /// How many requests of a keyed tower layer (`AdmissionLayer::keyed`, feature `tower`)
    /// waiting for a key were refused because their deadline passed first: spent on
    /// arrival, or while in line (`loopguard_keyed_expired_total`). 0 without the `tower`
    /// feature.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::<u8>::new("repos")?;
    /// assert_eq!(gate.expired(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn expired(&self) -> u64 {
        self.inner.expired.get()
    }

    /// How many keys have an entry (held, waited for, or with recent demand).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// drop(gate.try_acquire("once").unwrap());
    /// assert_eq!(gate.tracked_keys(), 1); // its demand is still recent
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn tracked_keys(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Removes idle keys now; see the [module docs](self).
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// drop(gate.try_acquire("once").unwrap());
    /// gate.prune(); // too recent: kept
    /// assert_eq!(gate.tracked_keys(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn prune(&self) {
        self.prune_at(Instant::now());
    }

    /// Removes the keys that are idle as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// drop(gate.try_acquire("once").unwrap());
    /// gate.prune_at(Instant::now() + Duration::from_secs(5));
    /// assert_eq!(gate.tracked_keys(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn prune_at(&self, now: Instant) {
        let mut state = self.inner.lock();
        self.inner.sweep(&mut state, now);
    }

    /// Each key and the value the last [`publish_metrics`](Self::publish_metrics) set, as
    /// it displayed the key: what a registry that reads encodes.
    #[cfg(feature = "prometheus-client")]
    pub(crate) fn shown(&self) -> Shown {
        let shown = self.inner.shown.lock();
        Arc::clone(&shown.unwrap_or_else(PoisonError::into_inner))
    }

    /// The address of the state this gate's clones share: its identity.
    #[cfg(feature = "prometheus-client")]
    pub(crate) fn identity(&self) -> *const () {
        Arc::as_ptr(&self.inner).cast()
    }

    /// Sets the `loopguard_keyed_demand_avg` gauge of every tracked key to its demand
    /// now (and to 0 for keys removed since the last call). The gauge is
    /// updated on read: call this before each scrape. With the `prometheus-client`
    /// feature, what it set (keys displayed) is also kept for
    /// `loopguard::telemetry::Collector`, which encodes exactly that.
    ///
    /// One publisher at a time, so an older snapshot never overwrites a newer one: a call
    /// made while another thread's call of the same gate is publishing returns at once,
    /// and that call publishes once more, with a snapshot taken after this one began,
    /// before it returns. A call from the recorder during a publish of the same gate
    /// returns at once.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::new("repos")?;
    /// let _permit = gate.try_acquire("backend").unwrap();
    /// gate.publish_metrics(); // a no-op without an installed recorder
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn publish_metrics(&self)
    where
        K: fmt::Display,
    {
        self.inner.publisher.publish(|| self.publish_round());
    }

    /// One round of [`publish_metrics`](Self::publish_metrics): snapshot under the table
    /// lock, then the recorder and `shown` outside it. Never two at once.
    fn publish_round(&self)
    where
        K: fmt::Display,
    {
        let (values, removed) = {
            let now = Instant::now();
            let mut state = self.inner.lock();
            self.inner.sweep(&mut state, now);
            let values: Vec<(K, f64)> = (state.entries.iter_mut())
                .map(|(key, entry)| {
                    entry.published = entry.demand.average_at(now);
                    (key.clone(), entry.published)
                })
                .collect();
            let mut removed = mem::take(&mut state.unpublish);
            // A key swept and back since the last call is live: its value above stands.
            removed.retain(|key| !state.entries.contains_key(key));
            (values, removed)
        };
        self.inner.flush_counts();
        let zeros = removed.into_iter().map(|key| (key, 0.0));
        #[cfg(feature = "prometheus-client")]
        let mut shown = Vec::new();
        for (key, value) in values.into_iter().chain(zeros) {
            // `Display`, the key's `Drop` and the recorder are user code: a panic loses
            // this key's update.
            let Some(label) = contain("a key's Display or Drop", move || key.to_string()) else {
                continue;
            };
            #[cfg(feature = "prometheus-client")]
            shown.push((label.clone(), value));
            contain("the metrics recorder", || {
                let gate = Arc::clone(&self.inner.name);
                metrics::gauge!(KEYED_DEMAND_AVG, LABEL_GATE => gate, LABEL_KEY => label)
                    .set(value);
            });
        }
        #[cfg(feature = "prometheus-client")]
        {
            let shown: Shown = shown.into();
            let mut slot = self
                .inner
                .shown
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let previous = mem::replace(&mut *slot, shown);
            drop(slot);
            drop(previous);
        }
    }
}

impl<K> fmt::Debug for KeyedGate<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .len();
        f.debug_struct("KeyedGate")
            .field("name", &self.inner.name)
            .field("capacity", &self.inner.capacity)
            .field("window", &self.inner.proto.window())
            .field("tracked_keys", &keys)
            .field("rejected", &self.inner.tally.rejected())
            .field("expired", &self.inner.expired.get())
            .finish()
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_live_key_costs_no_more_than_before_it_had_a_gate_of_its_own() {
        // The entry inline in the table (656 bytes before each key had its own gate), and
        // the gate's allocation beside it.
        assert!(
            mem::size_of::<Entry>() <= 656,
            "{}",
            mem::size_of::<Entry>()
        );
        assert!(mem::size_of::<Gate>() <= 96, "{}", mem::size_of::<Gate>());
    }
}

/// Exhaustive interleavings of release, grant, cancel and sweep, under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;
