//! What a [`Refresh`](super::Refresh) call returns besides a fresh value.

use std::fmt;
use std::time::Duration;

use crate::deadline::Spent;
use crate::failure::Panicked;

/// Why a [`Refresh`](super::Refresh) call returned no fresh value.
///
/// [`is_failure`](RefreshError::is_failure) tells real collection failures (count them,
/// alert on them) from a caller's budget running out ([`Expired`](RefreshError::Expired),
/// which says nothing about the collection: it goes on and its result is cached).
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// use loopguard::deadline::{Deadline, Phase};
/// use loopguard::pool::Pool;
/// use loopguard::refresh::{Refresh, RefreshError};
///
/// let pool = Pool::builder().workers(1).build()?;
/// let cache = Refresh::builder("up").on_pool(&pool, || Ok::<_, String>(1))?;
/// let late = cache.get(Deadline::after(std::time::Duration::ZERO)).await.unwrap_err();
/// assert!(late.is_expired() && !late.is_failure());
/// assert!(matches!(late, RefreshError::Expired(spent) if spent.phase() == Phase::InLine));
/// assert_eq!(late.to_string(), "deadline expired in line, before the job started");
/// let failed = RefreshError::Failed("no rows".to_string());
/// assert!(failed.is_failure());
/// assert_eq!(failed.to_string(), "collection failed: no rows");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefreshError<E> {
    /// The caller's deadline ended before a value was ready. Any collection in flight goes
    /// on and its outcome is cached. [`Spent::phase`] says where:
    /// [`InLine`](crate::deadline::Phase::InLine) when no collection ran for this caller yet
    /// (the budget had ended on entry, or the collection waited for a pool slot),
    /// [`Running`](crate::deadline::Phase::Running) when a collection this caller started or
    /// joined was running (or finished too late).
    Expired(Spent),
    /// The collection returned this error (now, or earlier within the failure TTL).
    Failed(E),
    /// The collection panicked (now, or earlier within the failure TTL), or the `Clone` that
    /// made this caller's copy of the value (or error) panicked: the message then starts
    /// with `the cached value's Clone panicked` (or `error's`), and the cache is unharmed.
    Panicked(Panicked),
    /// No collection could run: the pool was closed, or the executor dropped the
    /// collection's runner before it finished.
    Closed,
}

impl<E> RefreshError<E> {
    /// Whether the collection itself failed (returned an error or panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!loopguard::refresh::RefreshError::<()>::Closed.is_failure());
    /// ```
    pub fn is_failure(&self) -> bool {
        matches!(self, RefreshError::Failed(_) | RefreshError::Panicked(_))
    }

    /// Whether the caller's deadline ended.
    ///
    /// # Examples
    ///
    /// See [`RefreshError`].
    pub fn is_expired(&self) -> bool {
        matches!(self, RefreshError::Expired(_))
    }
}

impl<E> From<Spent> for RefreshError<E> {
    fn from(spent: Spent) -> RefreshError<E> {
        RefreshError::Expired(spent)
    }
}

impl<E: fmt::Display> fmt::Display for RefreshError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefreshError::Expired(e) => fmt::Display::fmt(e, f),
            RefreshError::Failed(e) => write!(f, "collection failed: {e}"),
            RefreshError::Panicked(p) => write!(f, "collection panicked: {}", p.message()),
            RefreshError::Closed => f.write_str("no collection could run: pool or executor gone"),
        }
    }
}

/// `Display` shows the collection's error, so `source()` is that error's own source (the
/// next cause it does not print), and `None` for the other variants: a chain printed by a
/// reporter names each cause once.
impl<E: std::error::Error + 'static> std::error::Error for RefreshError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RefreshError::Failed(e) => e.source(),
            _ => None,
        }
    }
}

/// A value from [`Refresh::get_or_stale`](super::Refresh::get_or_stale): fresh, or the last
/// successful value served explicitly as stale, with its age and the reason no fresh value
/// was available.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// use loopguard::deadline::Deadline;
/// use loopguard::pool::Pool;
/// use loopguard::refresh::Refresh;
/// use std::time::Duration;
///
/// let pool = Pool::builder().workers(1).build()?;
/// let cache = Refresh::builder("up").ttl(Duration::from_secs(5)).on_pool(&pool, || Ok::<_, String>(1))?;
/// let served = cache.get_or_stale(Deadline::after(Duration::from_secs(1))).await.unwrap();
/// assert!(!served.is_stale());
/// assert!(served.age() < Duration::from_secs(5));
/// assert_eq!(served.into_value(), 1);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Served<T, E> {
    pub(crate) value: T,
    pub(crate) age: Duration,
    pub(crate) stale_because: Option<RefreshError<E>>,
}

impl<T, E> Served<T, E> {
    /// The value.
    ///
    /// # Examples
    ///
    /// See [`Served`].
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The value, by move.
    ///
    /// # Examples
    ///
    /// See [`Served`].
    pub fn into_value(self) -> T {
        self.value
    }

    /// Time since the collection that produced the value started.
    ///
    /// # Examples
    ///
    /// See [`Served`].
    pub fn age(&self) -> Duration {
        self.age
    }

    /// Whether this is the last successful value served because no fresh one was available.
    ///
    /// # Examples
    ///
    /// See [`Served`].
    pub fn is_stale(&self) -> bool {
        self.stale_because.is_some()
    }

    /// Why no fresh value was served, `None` when the value is fresh.
    ///
    /// # Examples
    ///
    /// See [`Served`].
    pub fn stale_because(&self) -> Option<&RefreshError<E>> {
        self.stale_because.as_ref()
    }
}

/// A snapshot of a cache's counters, from [`Refresh::stats`](super::Refresh::stats).
///
/// # Examples
///
/// ```
/// # let pool = loopguard::pool::Pool::builder().build()?;
/// let cache = loopguard::refresh::Refresh::builder("c").on_pool(&pool, || Ok::<u8, String>(1))?;
/// assert_eq!(cache.stats().runs_ok, 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefreshStats {
    /// Collections that returned a value.
    pub runs_ok: u64,
    /// Collections that returned an error or panicked.
    pub runs_error: u64,
    /// Calls answered from the cache without waiting.
    pub hits: u64,
    /// Calls that joined a collection already in flight.
    pub joins: u64,
    /// Calls that ended with [`RefreshError::Expired`].
    pub expired_waits: u64,
    /// Whether a collection is in flight now.
    pub in_flight: bool,
}
