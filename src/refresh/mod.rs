//! A single-flight TTL cache for expensive collections: one registry walk per TTL, however
//! many scrapers ask.
//!
//! A [`Refresh`] holds the last successful value and when its collection *started*. A call
//! with a [`Deadline`]:
//!
//! 1. returns a fresh value at once: one whose collection started strictly less than the
//!    TTL ago (at `age == ttl` the value is stale);
//! 2. or serves a cached failure, if the newest collection failed less than the failure TTL
//!    ago: a departing or impatient client cannot make the cache repeat a failing query;
//! 3. or joins the collection already in flight, waiting within its own deadline;
//! 4. or starts one collection, shielded: on a [`Pool`] (a blocking closure) or as async
//!    work on the application's executor (a spawner and a [`Shield`]).
//!
//! The collection stores its own outcome, on the thread or task that ran it, and wakes the
//! waiters: its result is cached even if every caller has left. A caller whose deadline
//! ends gets [`RefreshError::Expired`]; the collection goes on. No stale value is ever
//! returned as fresh: [`Refresh::get_or_stale`] serves the last success explicitly, with
//! its age. [`Refresh::refresh`] forces a collection, bypassing the cached value.
//!
//! # Starting a collection
//!
//! On a pool, the caller that starts a collection waits for a slot in FIFO order within its
//! deadline ([`Pool::run`]); if the deadline ends first, nothing was started and a waiting
//! caller takes over. Joining never needs a slot, so one collection in flight serves any
//! number of callers. A closed pool gives [`RefreshError::Closed`].
//!
//! # Panics in a collection
//!
//! A panicking collection is cached as a failure ([`RefreshError::Panicked`]) for the
//! failure TTL and reported exactly once to the orphan handler of the pool (or shield) that
//! ran it, whether or not anyone was waiting, and counted as `panicked` in the pool's job
//! metrics. A collection that returns `Err` is not reported there: its error is served to
//! callers from the cache and counted in `loopguard_refresh_runs_total` as `error`.
//!
//! # Your code under the cache
//!
//! The collection, and the value's and error's `Clone` and `Drop`, never run under the
//! cache's lock, and a panic in any of them is contained (see [`Refresh`]): a `Clone` that
//! looks at the cache (`stats()`, say) cannot deadlock it, and a `Drop` that panics cannot
//! stop a caller from collecting again.
//!
//! # Metrics
//!
//! Counters with label `cache` (the name), registered with zeros when the cache is built:
//! `loopguard_refresh_runs_total` (also `outcome` = `ok` / `error`), `loopguard_refresh_hits_total`,
//! `loopguard_refresh_joins_total`, `loopguard_refresh_expired_waits_total`.
//!

mod builder;
mod error;
mod flight;

use std::fmt;
use std::future::Future;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::contain::drop_contained;
use crate::deadline::{Deadline, Spent};
use crate::emit::RunOutcome;
use crate::pool::{Pool, RunError};
use crate::shield::{Runner, Shield, ShieldError};
use crate::sync::lock;

pub use self::builder::RefreshBuilder;
pub use self::error::{RefreshError, RefreshStats, Served};
use self::flight::{CacheCore, Flight, Shared, clone_out, copy_out, run_async, run_blocking};

/// A boxed `Send` future, as produced by an async collection.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The runner of one async collection, handed to the spawner given to
/// [`RefreshBuilder::spawned`]. Spawn it and detach it.
pub type CollectionRunner = Runner<BoxFuture<()>>;

type Blocking<T, E> = Arc<dyn Fn() -> Result<T, E> + Send + Sync>;
type Spawner = Box<dyn Fn(CollectionRunner) + Send + Sync>;
type AsyncCollect<T, E> = Box<dyn Fn() -> BoxFuture<Result<T, E>> + Send + Sync>;

enum Source<T, E> {
    Pool(Pool, Blocking<T, E>),
    Spawned(Shield, Spawner, AsyncCollect<T, E>),
}

/// What one look at the state decided.
enum Step<T, E> {
    Hit(Shared<T, E>),
    Join(u64),
    Start(u64),
}

/// A single-flight TTL cache; see the [module docs](self). Built with
/// [`Refresh::builder`]. A cheap handle (`Clone + Send + Sync`); clones share the cache.
///
/// Values and errors are cloned out to each caller: wrap a large value in an `Arc`. They
/// are `Send + Sync`: the cache shares one copy between callers on any thread and clones it
/// out after its lock is released.
///
/// # Panics
///
/// None of the value's or error's own code runs under the cache's lock. A `Clone` that
/// panics while a caller's copy is made is contained: that caller gets
/// [`RefreshError::Panicked`] naming the `Clone`, the cache keeps its value, and the next
/// caller tries again. A `Drop` that panics (of a replaced value, of the cache's state when
/// the last handle goes) is contained where it runs. Either leaves a line on stderr and
/// counts in [`telemetry::contained_panics`](crate::telemetry::contained_panics).
///
/// # Examples
///
/// ```
/// use loopguard::deadline::Deadline;
/// use loopguard::pool::Pool;
/// use loopguard::refresh::Refresh;
/// use std::time::Duration;
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().name("registry").workers(1).build()?;
/// let registry = Refresh::builder("registry")
///     .ttl(Duration::from_secs(10))
///     .failure_ttl(Duration::from_secs(30))
///     .on_pool(&pool, || Ok::<_, String>("up 1\n".to_string()))?;
///
/// // In the /metrics handler, with the scrape's budget:
/// let deadline = Deadline::after(Duration::from_secs(5));
/// assert_eq!(registry.get(deadline).await.unwrap(), "up 1\n");
/// assert_eq!(registry.get(deadline).await.unwrap(), "up 1\n"); // a hit
/// assert_eq!((registry.stats().runs_ok, registry.stats().hits), (1, 1));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct Refresh<T, E> {
    inner: Arc<Cache<T, E>>,
}

struct Cache<T, E> {
    name: Arc<str>,
    ttl: Duration,
    failure_ttl: Duration,
    core: Arc<CacheCore<T, E>>,
    source: Source<T, E>,
}

impl<T, E> Clone for Refresh<T, E> {
    fn clone(&self) -> Self {
        Refresh {
            inner: self.inner.clone(),
        }
    }
}

impl<T, E> fmt::Debug for Refresh<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Read before formatting: the formatter writes into the caller's sink, user code.
        let in_flight = lock(&self.inner.core.state).in_flight.is_some();
        f.debug_struct("Refresh")
            .field("name", &self.name())
            .field("ttl", &self.inner.ttl)
            .field("failure_ttl", &self.inner.failure_ttl)
            .field("in_flight", &in_flight)
            .finish()
    }
}

impl Refresh<(), ()> {
    /// A builder for a cache named `name` (its `cache` label). Defaults: a TTL of 10 s and a
    /// failure TTL equal to the TTL.
    ///
    /// # Examples
    ///
    /// ```
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// let cache = loopguard::refresh::Refresh::builder("sizes").on_pool(&pool, || Ok::<u64, String>(0))?;
    /// assert_eq!(cache.name(), "sizes");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder(name: &str) -> RefreshBuilder {
        RefreshBuilder::new(name)
    }
}

impl<T, E> Refresh<T, E>
where
    T: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    /// A fresh value, or the outcome of a collection this call joins or starts, within
    /// `deadline`; see the [module docs](self) for the order of the steps.
    ///
    /// # Errors
    ///
    /// [`RefreshError::Expired`] when the deadline ended (also when it had ended on entry:
    /// nothing is served or started then); [`RefreshError::Failed`] or
    /// [`RefreshError::Panicked`] when the collection failed, now or within the failure
    /// TTL; [`RefreshError::Closed`] when no collection could run.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future never cancels a running collection: it finishes and
    /// its outcome is cached. A starter dropped while it still waits for a pool slot starts
    /// nothing, and a waiting caller takes over.
    ///
    /// # Examples
    ///
    /// See [`Refresh`].
    pub async fn get(&self, deadline: Deadline) -> Result<T, RefreshError<E>> {
        self.fetch(deadline, false).await.map(|(value, _)| value)
    }

    /// Like [`get`](Refresh::get), but ignores the cached value and a cached failure: joins
    /// the collection in flight, or starts one. For warm-ups and "refresh now" buttons.
    ///
    /// # Errors
    ///
    /// As for [`get`](Refresh::get).
    ///
    /// # Cancel safety
    ///
    /// As for [`get`](Refresh::get).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// use loopguard::deadline::Deadline;
    /// use loopguard::refresh::Refresh;
    /// let cache = Refresh::builder("warm").on_pool(&pool, || Ok::<u8, String>(1))?;
    /// cache.refresh(Deadline::never()).await.unwrap();
    /// cache.refresh(Deadline::never()).await.unwrap();
    /// assert_eq!(cache.stats().runs_ok, 2, "each forced refresh collects");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn refresh(&self, deadline: Deadline) -> Result<T, RefreshError<E>> {
        self.fetch(deadline, true).await.map(|(value, _)| value)
    }

    /// Stale-on-error, asked for explicitly: what [`get`](Refresh::get) returns, and when it
    /// fails (for any reason, the deadline included), the last successful value marked as
    /// stale, with its age and the error.
    ///
    /// # Errors
    ///
    /// The error of [`get`](Refresh::get) when no collection ever succeeded.
    ///
    /// # Cancel safety
    ///
    /// As for [`get`](Refresh::get).
    ///
    /// # Examples
    ///
    /// See [`Served`].
    pub async fn get_or_stale(&self, deadline: Deadline) -> Result<Served<T, E>, RefreshError<E>> {
        match self.fetch(deadline, false).await {
            Ok((value, started)) => Ok(Served {
                value,
                age: started.elapsed(),
                stale_because: None,
            }),
            Err(err) => {
                let last = lock(&self.inner.core.state)
                    .success
                    .as_ref()
                    .map(|done| (done.value.clone(), done.started));
                let Some((value, started)) = last else {
                    return Err(err);
                };
                // Copied after the lock; a `Clone` that panics leaves the caller its error.
                match copy_out(flight::CLONE_VALUE, flight::DROP_VALUE, value) {
                    Ok(value) => Ok(Served {
                        value,
                        age: started.elapsed(),
                        stale_because: Some(err),
                    }),
                    Err(_) => Err(err),
                }
            }
        }
    }

    /// The cached value if it is fresh now (younger than the TTL, counted from its
    /// collection's start), without waiting or starting a collection; `None` otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// use loopguard::deadline::Deadline;
    /// use loopguard::refresh::Refresh;
    /// use std::time::Duration;
    ///
    /// let cache = Refresh::builder("peek").ttl(Duration::from_secs(60)).on_pool(&pool, || Ok::<u8, String>(1))?;
    /// assert_eq!(cache.peek(), None);
    /// cache.get(Deadline::never()).await.unwrap();
    /// assert_eq!(cache.peek(), Some(1));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn peek(&self) -> Option<T> {
        self.peek_at(Instant::now())
    }

    /// The cached value if it is fresh at `now` (its collection started strictly less than
    /// the TTL before `now`) and is the newest outcome. Never collects, waits or counts.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// use loopguard::deadline::Deadline;
    /// use loopguard::refresh::Refresh;
    /// use std::time::{Duration, Instant};
    ///
    /// let ttl = Duration::from_secs(10);
    /// let cache = Refresh::builder("peek").ttl(ttl).on_pool(&pool, || Ok::<u8, String>(1))?;
    /// assert_eq!(cache.peek_at(Instant::now()), None);
    /// cache.get(Deadline::never()).await.unwrap();
    /// let started = cache.last_started().unwrap();
    /// assert_eq!(cache.peek_at(started + ttl - Duration::from_nanos(1)), Some(1));
    /// assert_eq!(cache.peek_at(started + ttl), None, "age == ttl is stale");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn peek_at(&self, now: Instant) -> Option<T> {
        let cached =
            lock(&self.inner.core.state).cached_at(now, self.inner.ttl, self.inner.failure_ttl);
        // Copied (or let go) after the lock: the value's `Clone` and `Drop` are user code.
        match cached? {
            Ok((value, _)) => copy_out(flight::CLONE_VALUE, flight::DROP_VALUE, value).ok(),
            Err(failure) => {
                drop_contained(flight::DROP_ERROR, failure);
                None
            }
        }
    }

    async fn fetch(
        &self,
        deadline: Deadline,
        force: bool,
    ) -> Result<(T, Instant), RefreshError<E>> {
        let inner = &*self.inner;
        let core = &inner.core;
        let mut joined = false;
        loop {
            if deadline.is_expired() {
                // Past a given-up flight it joined, no collection of its own ran yet.
                return Err(self.expired(Spent::IN_LINE));
            }
            let step = {
                let mut state = lock(&core.state);
                let now = Instant::now();
                let cached = if force {
                    None
                } else {
                    state.cached_at(now, inner.ttl, inner.failure_ttl)
                };
                match cached {
                    Some(outcome) => Step::Hit(outcome),
                    None => match state.in_flight {
                        Some(generation) => Step::Join(generation),
                        None => {
                            let generation = state.next_gen;
                            state.next_gen += 1;
                            state.in_flight = Some(generation);
                            Step::Start(generation)
                        }
                    },
                }
            };
            let generation = match step {
                Step::Hit(outcome) => {
                    core.counters.hits.bump();
                    return clone_out(outcome);
                }
                Step::Start(generation) => return self.start(generation, deadline).await,
                Step::Join(generation) => {
                    if !joined {
                        joined = true;
                        core.counters.joins.bump();
                    }
                    generation
                }
            };
            // The flight ends (stored, or given up) before the signal is notified, and the
            // wait looks at the flight after registering: nothing slips in unnoticed.
            let ended = || lock(&core.state).in_flight != Some(generation);
            if deadline.run(core.event.wait(ended)).await.is_err() {
                // The flight it joined was collecting.
                return Err(self.expired(Spent::RUNNING));
            }
            let outcome = lock(&core.state).outcome_since(generation);
            if let Some(outcome) = outcome {
                return clone_out(outcome);
            }
            // The flight was given up without an outcome: look again, maybe start one.
        }
    }

    /// Starts collection `gen` (already marked in flight) and waits for it within `deadline`.
    async fn start(
        &self,
        generation: u64,
        deadline: Deadline,
    ) -> Result<(T, Instant), RefreshError<E>> {
        let flight = Flight {
            core: self.inner.core.clone(),
            generation,
        };
        match &self.inner.source {
            Source::Pool(pool, collect) => {
                let collect = collect.clone();
                let job = move || run_blocking(flight, &*collect);
                // Dropping `Run` before admission drops `job` and so gives the flight up;
                // after admission it orphans the job, which still stores its outcome. `Run`
                // refuses a success that lands past the deadline and reports a panic it
                // refuses; a panic it returns is reported here, once.
                match pool.run_within(deadline, job).await {
                    Err(RunError::Expired(spent)) => return Err(self.expired(spent)),
                    Ok(()) => {}
                    Err(RunError::Panicked(panicked)) => {
                        // The starter is the job's only awaiter: it reports, so the panic
                        // reaches the handler exactly once, as if it had been orphaned.
                        pool.report_panic(panicked, self.ran_for(generation));
                    }
                    Err(_) => return Err(RefreshError::Closed),
                }
            }
            Source::Spawned(shield, spawn, collect) => {
                // `collect()` is user code, called here on the caller's task: a panic in it
                // is a panicking collection like one inside the future, so it travels the
                // same way (cached as a failure, reported once by the shield's runner)
                // instead of unwinding out of this call.
                let collection = match catch_unwind(AssertUnwindSafe(collect)) {
                    Ok(collection) => collection,
                    Err(payload) => Box::pin(async move { resume_unwind(payload) }),
                };
                let future: BoxFuture<()> = Box::pin(run_async(flight, collection));
                let (runner, handle) = shield.wrap(future);
                spawn(runner);
                match deadline.run(handle).await {
                    Err(_) => return Err(self.expired(Spent::RUNNING)),
                    Ok(Ok(())) => {}
                    Ok(Err(ShieldError::Panicked(panicked))) => {
                        shield.report_panic(panicked, self.ran_for(generation));
                    }
                    Ok(Err(_)) => return Err(RefreshError::Closed),
                }
            }
        }
        // The collection stored its outcome before its job or runner finished.
        let outcome = lock(&self.inner.core.state).outcome_since(generation);
        match outcome {
            Some(outcome) => clone_out(outcome),
            None => Err(RefreshError::Closed),
        }
    }

    /// How long collection `generation` ran, from its start to now (it has just finished).
    fn ran_for(&self, generation: u64) -> Duration {
        let state = lock(&self.inner.core.state);
        match &state.failure {
            Some(done) if done.generation == generation => done.started.elapsed(),
            _ => Duration::ZERO,
        }
    }

    fn expired(&self, spent: Spent) -> RefreshError<E> {
        self.inner.core.counters.expired.bump();
        RefreshError::Expired(spent)
    }
}

impl<T, E> Refresh<T, E> {
    /// The cache's name, its `cache` label.
    ///
    /// # Examples
    ///
    /// See [`Refresh::builder`].
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The address of the state this cache's clones share: its identity.
    #[cfg(feature = "prometheus-client")]
    pub(crate) fn identity(&self) -> *const () {
        Arc::as_ptr(&self.inner).cast()
    }

    /// When the newest finished collection (success or failure) started; `None` before the
    /// first one finished.
    ///
    /// # Examples
    ///
    /// See [`Refresh::peek_at`].
    pub fn last_started(&self) -> Option<Instant> {
        let state = lock(&self.inner.core.state);
        let s = state.success.as_ref().map(|d| (d.generation, d.started));
        let f = state.failure.as_ref().map(|d| (d.generation, d.started));
        s.max(f).map(|(_, started)| started)
    }

    /// A snapshot of the cache's counters.
    ///
    /// # Examples
    ///
    /// See [`RefreshStats`].
    pub fn stats(&self) -> RefreshStats {
        let c = &self.inner.core.counters;
        RefreshStats {
            runs_ok: c.runs[RunOutcome::Ok as usize].get(),
            runs_error: c.runs[RunOutcome::Error as usize].get(),
            hits: c.hits.get(),
            joins: c.joins.get(),
            expired_waits: c.expired.get(),
            in_flight: lock(&self.inner.core.state).in_flight.is_some(),
        }
    }
}

/// Builds the cache from a finished builder.
fn assemble<T, E>(builder: RefreshBuilder, source: Source<T, E>) -> io::Result<Refresh<T, E>> {
    crate::name::check("a refresh cache", builder.name())?;
    let (name, ttl, failure_ttl) = builder.parts();
    let core = Arc::new(CacheCore {
        state: flight::Mutex::new(flight::CacheState::new()),
        event: crate::signal::Signal::new(),
        counters: builder::register(&name),
    });
    Ok(Refresh {
        inner: Arc::new(Cache {
            name,
            ttl,
            failure_ttl,
            core,
            source,
        }),
    })
}
