//! One status mapping for a scrape that got no rendering.

use std::fmt;

use loopguard::Panicked;
use loopguard::deadline::Expired;
use loopguard::pool::{TryRunError, WithinError};
use loopguard::refresh::RefreshError;

/// Why a scrape got no rendering, and the HTTP answer for it.
///
/// | outcome | status | `Retry-After` | the walk |
/// |---|---|---|---|
/// | [`Saturated`](Unserved::Saturated): no slot was free | `503` | yes, at once | never started |
/// | [`BudgetSpent`](Unserved::BudgetSpent): the budget ran out | `504` | no | goes on, holding its slot |
/// | [`Failed`](Unserved::Failed): the render failed or panicked | `500` | no | ended; reported once |
/// | [`Closed`](Unserved::Closed): shutting down | `503` | no | never started |
///
/// A `503` + `Retry-After` says "nothing started, come back". A spent budget is different:
/// the walk started and goes on holding its slot, and an attempt elsewhere starts a second
/// walk, as long, that meets the same budget. Proxies choose retries by status (Envoy
/// `retryOn`, HAProxy `retry-on`, nginx `proxy_next_upstream`), not by headers, so only a
/// status of its own keeps them from retrying it: `504`, outside every retry list shipped
/// in loopguard's `ops/`. Prometheus fails the scrape either way, and its target page tells
/// the two apart.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::deadline::Deadline;
/// use loopguard::pool::Pool;
/// use loopguard_exporter::Unserved;
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().workers(1).build()?;
/// let spent = pool.try_run_within(Deadline::after(Duration::ZERO), || ()).await.unwrap_err();
/// let unserved = Unserved::from(spent);
/// assert_eq!((unserved.status(), unserved.retry_after_secs()), (504, None));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unserved {
    /// Every slot was held: nothing started. `503` with `Retry-After`.
    Saturated {
        /// The `Retry-After` value, whole seconds.
        retry_after_secs: u64,
    },
    /// The budget ran out before the rendering was ready. `504`, no `Retry-After`.
    BudgetSpent,
    /// The render returned an error or panicked (the message). `500`.
    Failed(String),
    /// The pool is closed: the exporter is shutting down. `503`, no `Retry-After`.
    Closed,
}

impl Unserved {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Unserved::Saturated { .. } | Unserved::Closed => 503,
            Unserved::BudgetSpent => 504,
            Unserved::Failed(_) => 500,
        }
    }

    /// The `Retry-After` header's value, for a refusal only.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Unserved::Saturated { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

impl fmt::Display for Unserved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unserved::Saturated { retry_after_secs } => {
                write!(f, "every worker is busy; retry after {retry_after_secs}s")
            }
            Unserved::BudgetSpent => f.write_str("budget spent; the walk goes on"),
            Unserved::Failed(message) => write!(f, "the registry walk failed: {message}"),
            Unserved::Closed => f.write_str("shutting down"),
        }
    }
}

impl<W, E: fmt::Display> From<WithinError<W, E>> for Unserved {
    /// The outcome of `Pool::try_run_within` that is not an output.
    // `{ .. }` on unit variants: a field loopguard adds to them later breaks nothing here.
    #[allow(clippy::unneeded_struct_pattern)]
    fn from(err: WithinError<W, E>) -> Unserved {
        match err {
            WithinError::Saturated(busy) => Unserved::Saturated {
                retry_after_secs: busy.retry_after_secs(),
            },
            WithinError::Expired { .. } => Unserved::BudgetSpent,
            WithinError::Panicked(panic) => Unserved::Failed(panic.to_string()),
            WithinError::Failed(err) => Unserved::Failed(err.to_string()),
            WithinError::Closed { .. } => Unserved::Closed,
            // A handler asking for a second slot while its request holds one: a bug in the
            // handler, as for `TryRunError` below.
            own @ WithinError::OwnSlot(_) => Unserved::Failed(own.to_string()),
            // A kind added later: nothing was served; say so without a retry hint.
            _ => Unserved::Closed,
        }
    }
}

impl<E: fmt::Display> From<RefreshError<E>> for Unserved {
    /// The outcome of a coalesced `Refresh::get` that is not a value.
    #[allow(clippy::unneeded_struct_pattern)] // as above
    fn from(err: RefreshError<E>) -> Unserved {
        match err {
            RefreshError::Expired { .. } => Unserved::BudgetSpent,
            RefreshError::Closed { .. } => Unserved::Closed,
            other => Unserved::Failed(other.to_string()),
        }
    }
}

impl<W> From<TryRunError<W>> for Unserved {
    /// A refused `Pool::try_run` or `Slot::try_run` (feature `tower`): the walk never
    /// started. A handler asking for a second slot while its request holds one
    /// (`OwnSlot`) is a bug in the handler: `500`.
    fn from(err: TryRunError<W>) -> Unserved {
        match err {
            TryRunError::Saturated(busy) => Unserved::Saturated {
                retry_after_secs: busy.retry_after_secs(),
            },
            TryRunError::Closed(_) => Unserved::Closed,
            other => Unserved::Failed(other.to_string()),
        }
    }
}

impl From<Expired> for Unserved {
    /// A `Deadline::run` around a started walk (a `Job`) that ran out: `504`, the walk goes
    /// on.
    fn from(_: Expired) -> Unserved {
        Unserved::BudgetSpent
    }
}

impl From<Panicked> for Unserved {
    /// A walk that panicked: `500`.
    fn from(panic: Panicked) -> Unserved {
        Unserved::Failed(panic.to_string())
    }
}
