//! `RefreshBuilder`: a cache's name, TTLs and where its collections run.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::flight::Counters;
use super::{BoxFuture, CollectionRunner, Refresh, Source, assemble};
use crate::emit::{
    self, Counted, LABEL_CACHE, LABEL_OUTCOME, REFRESH_EXPIRED_WAITS_TOTAL, REFRESH_HITS_TOTAL,
    REFRESH_JOINS_TOTAL, REFRESH_OUTCOMES, REFRESH_RUNS_TOTAL,
};
use crate::pool::Pool;
use crate::shield::Shield;

/// The default TTL of a [`Refresh`] cache.
const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// Configures a [`Refresh`] cache; from [`Refresh::builder`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # let pool = loopguard::pool::Pool::builder().build()?;
/// let cache = loopguard::refresh::Refresh::builder("bloat")
///     .ttl(Duration::from_secs(300))
///     .failure_ttl(Duration::from_secs(60))
///     .on_pool(&pool, || Ok::<u64, std::io::ErrorKind>(42))?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RefreshBuilder {
    name: String,
    ttl: Duration,
    failure_ttl: Option<Duration>,
}

impl RefreshBuilder {
    pub(super) fn new(name: &str) -> RefreshBuilder {
        RefreshBuilder {
            name: name.to_string(),
            ttl: DEFAULT_TTL,
            failure_ttl: None,
        }
    }

    /// How long a successful value stays fresh, counted from the *start* of its collection.
    /// A value is fresh while its age is strictly less than `ttl`; zero makes every call
    /// collect (still one collection at a time, shared by concurrent callers).
    ///
    /// # Examples
    ///
    /// See [`RefreshBuilder`].
    pub fn ttl(mut self, ttl: Duration) -> RefreshBuilder {
        self.ttl = ttl;
        self
    }

    /// How long a failed collection is served from the cache before the next call runs the
    /// collection again, counted from the start of the failed collection, strict like
    /// [`ttl`](RefreshBuilder::ttl). Defaults to the TTL.
    ///
    /// # Examples
    ///
    /// See [`RefreshBuilder`].
    pub fn failure_ttl(mut self, failure_ttl: Duration) -> RefreshBuilder {
        self.failure_ttl = Some(failure_ttl);
        self
    }

    /// A cache whose collections run `collect` on a worker thread of `pool`. The starting
    /// caller waits for a slot within its deadline; see the [module docs](super).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a name that is empty or has a NUL byte; nothing
    /// is registered then.
    ///
    /// # Examples
    ///
    /// See [`Refresh`], and:
    ///
    /// ```
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// let err = loopguard::refresh::Refresh::builder("").on_pool(&pool, || Ok::<u8, String>(1));
    /// assert_eq!(err.unwrap_err().to_string(), "a refresh cache name must not be empty");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn on_pool<T, E, F>(self, pool: &Pool, collect: F) -> io::Result<Refresh<T, E>>
    where
        T: Clone + Send + Sync + 'static,
        E: Clone + Send + Sync + 'static,
        F: Fn() -> Result<T, E> + Send + Sync + 'static,
    {
        assemble(self, Source::Pool(pool.clone(), Arc::new(collect)))
    }

    /// A cache whose collections are async: `collect()` makes the future of one collection,
    /// and `spawn` receives its [`CollectionRunner`] to spawn and detach on the
    /// application's executor (`|r| smol::spawn(r).detach()`, `|r| { tokio::spawn(r); }`).
    /// The runner belongs to `shield`, which reports a panicking collection. If the runner
    /// is dropped without finishing, callers waiting for it get
    /// [`RefreshError::Closed`](super::RefreshError::Closed).
    ///
    /// # Errors
    ///
    /// As for [`on_pool`](RefreshBuilder::on_pool).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// use loopguard::deadline::Deadline;
    /// use loopguard::refresh::Refresh;
    /// use loopguard::shield::Shield;
    /// use std::sync::Arc;
    ///
    /// let ex = Arc::new(async_executor::Executor::new());
    /// let spawner = ex.clone();
    /// let cache = Refresh::builder("catalog").spawned(
    ///     &Shield::new("catalog-refresh")?,
    ///     move |runner| spawner.spawn(runner).detach(),
    ///     || async { Ok::<_, String>(vec!["a", "b"]) },
    /// )?;
    /// let items = ex.run(cache.get(Deadline::never())).await.unwrap();
    /// assert_eq!(items.len(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn spawned<T, E, S, F, Fut>(
        self,
        shield: &Shield,
        spawn: S,
        collect: F,
    ) -> io::Result<Refresh<T, E>>
    where
        T: Clone + Send + Sync + 'static,
        E: Clone + Send + Sync + 'static,
        S: Fn(CollectionRunner) + Send + Sync + 'static,
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let collect = move || -> BoxFuture<Result<T, E>> { Box::pin(collect()) };
        assemble(
            self,
            Source::Spawned(shield.clone(), Box::new(spawn), Box::new(collect)),
        )
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn parts(self) -> (Arc<str>, Duration, Duration) {
        let failure_ttl = self.failure_ttl.unwrap_or(self.ttl);
        (Arc::from(self.name), self.ttl, failure_ttl)
    }
}

/// Registers the cache's counters, each with a zero.
pub(super) fn register(name: &str) -> Counters {
    let counter = |metric: &'static str| {
        Counted::new(emit::register(
            || ::metrics::counter!(metric, LABEL_CACHE => name.to_string()),
            ::metrics::Counter::noop,
        ))
    };
    let run = |outcome: &'static str| {
        Counted::new(emit::register(
            || {
                ::metrics::counter!(
                    REFRESH_RUNS_TOTAL,
                    LABEL_CACHE => name.to_string(),
                    LABEL_OUTCOME => outcome
                )
            },
            ::metrics::Counter::noop,
        ))
    };
    Counters {
        runs: REFRESH_OUTCOMES.map(run),
        hits: counter(REFRESH_HITS_TOTAL),
        joins: counter(REFRESH_JOINS_TOTAL),
        expired: counter(REFRESH_EXPIRED_WAITS_TOTAL),
    }
}
