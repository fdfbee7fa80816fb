//! [`RetryBudget`]: retries shared across calls within a ratio of first attempts, so an
//! outage is not multiplied by every caller's attempt limit.

use std::fmt;
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ::metrics::Counter;

use crate::emit::{self, Counted, LABEL_BUDGET, RETRY_BUDGET_REFUSED_TOTAL};

mod ledger;
#[cfg(all(test, loopguard_loom))]
mod loom_model;
#[cfg(all(test, not(loopguard_loom)))]
mod tests;

use ledger::{Ledger, WINDOWS};

/// Units of one retry: a ratio is counted in thousandths of a retry per first attempt, as
/// gRPC's `tokenRatio` is.
const UNITS: i64 = 1000;

/// The shortest TTL: a window (a tenth of it) of 100 µs.
const MIN_TTL: Duration = Duration::from_millis(1);

/// The longest TTL (Finagle allows 60 s): the open window's units cannot overflow in it.
const MAX_TTL: Duration = Duration::from_secs(3600);

/// The name of a budget that was not given one.
const DEFAULT_NAME: &str = "default";

/// Retries shared across calls and threads within a fraction of first attempts, with
/// tower's `TpsBudget` semantics (after Finagle's `RetryBudget`).
///
/// Each first attempt of a call deposits `retry_ratio` of a retry; each retry withdraws
/// one; with nothing to withdraw the retry is not made and the call ends with its last
/// failure ([`RetryError::BudgetExhausted`](super::RetryError::BudgetExhausted)). Deposits
/// and withdrawals expire after `ttl`, and a reserve of `min_per_sec × ttl` retries is
/// always there, so a client with little traffic can still retry. Over any `ttl`, a budget
/// grants at most `retry_ratio × first attempts + min_per_sec × ttl` retries (and about a
/// tenth of a `ttl` more, the window below).
///
/// Give the same budget (clones share it) to every [`Retry`](super::Retry) that calls one
/// dependency ([`Retry::budget`](super::Retry::budget)): during an outage every caller's
/// first attempt still goes out, but retries stop at about `retry_ratio` of them, where
/// each caller's attempt limit alone would multiply the load on the failing dependency by
/// that limit. The Google SRE book asks for retries under about 10 % per client; Finagle's
/// default is 20 % plus 10 a second, tower's `TpsBudget::default()` the same.
///
/// # When to leave it off
///
/// A budget only counts; it never waits. Leave it off where retries cannot amplify
/// anything: a single caller (a CLI, a batch job, a scraper that sends one request at a
/// time), a dependency that answers a saturated caller with a cheap refusal and a
/// `Retry-After` the rule honours, or idempotent work behind an admission gate that
/// refuses for you. And give each dependency its own: a budget shared by two dependencies
/// lets one's healthy traffic pay for the other's outage.
///
/// # Precision
///
/// Time is counted in windows of `ttl / 10`: a deposit or a withdrawal counts from the
/// window it was made in until ten more have passed, between `ttl` and `1.1 × ttl`
/// (tower's `TpsBudget` keeps the same windows). A ratio is kept in thousandths (a ratio
/// below 0.0005 deposits nothing: only the reserve can be retried), and a reserve in
/// thousandths of a retry (`min_per_sec × ttl`, rounded down). Unlike tower's budget
/// (`1 / retry_percent` whole deposits per retry, so 0.3 acts as 1/3 and 0.7 as 1), any
/// ratio counts as given to that precision.
///
/// # Cost
///
/// A deposit is a clock read, an atomic load and an atomic add: lock-free. A withdrawal
/// (only made for a failed attempt that would be retried) checks the balance and takes
/// from it under a mutex, so two retries never spend one token; no code of anyone else's
/// runs under it. BENCHMARKS.md measures both beside tower's `TpsBudget`.
///
/// # Metrics
///
/// Each refused retry counts in `loopguard_retry_budget_refused_total{budget}` (the name
/// given by [`named`](RetryBudget::named), `"default"` otherwise); the series is created
/// with a zero when the budget is first used, and [`refused`](RetryBudget::refused) keeps
/// the exact count.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::deadline::Deadline;
/// use loopguard::retry::{Retry, RetryBudget, RetryError};
///
/// # futures_lite::future::block_on(async {
/// // 10 % of first attempts, and 1 a second (10 over the 10 s TTL) in reserve.
/// let budget = RetryBudget::new(Duration::from_secs(10), 1, 0.1)?.named("catalog")?;
/// let policy = Retry::new().attempts(3)?.budget(budget.clone());
///
/// // The dependency is down: the reserve pays for 10 retries, then a call makes its first
/// // attempt only, and ends with that attempt's failure.
/// let mut ended = Vec::new();
/// for _ in 0..8 {
///     let call = policy.run(Deadline::never(), |_| async { Err::<(), _>("503") }).await;
///     ended.push(call.unwrap_err());
/// }
/// let attempts: Vec<u32> = ended.iter().map(|e| e.attempts()).collect();
/// assert_eq!(attempts, [3, 3, 3, 3, 3, 1, 1, 1]);
/// assert!(matches!(ended[5], RetryError::BudgetExhausted { attempts: 1, .. }));
/// assert_eq!(ended[5].error(), Some(&"503"));
/// assert_eq!(budget.refused(), 3);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

struct Inner {
    ledger: Ledger,
    /// Epoch 0 starts here.
    start: Instant,
    /// Nanoseconds per window (at most 360 s: it fits, and so do the divisions).
    window: u64,
    ttl: Duration,
    min_per_sec: u32,
    retry_ratio: f64,
    /// The name and the refusal count, fixed by `named` or at first use.
    series: OnceLock<Series>,
}

struct Series {
    name: String,
    refused: Counted,
}

impl RetryBudget {
    /// A budget whose deposits last `ttl`, with a reserve of `min_per_sec` retries a second
    /// (`min_per_sec × ttl` at a time) and `retry_ratio` retries per first attempt (`0.1`:
    /// one retry for ten first attempts; `2.0`: two for each).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a `ttl` under 1 ms or over an hour, or a
    /// `retry_ratio` that is not a finite number from 0 to 1000. Nothing is clamped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::RetryBudget;
    ///
    /// let budget = RetryBudget::new(Duration::from_secs(10), 10, 0.2)?; // Finagle's default
    /// assert_eq!(budget.available(), 100); // the reserve: 10 a second over 10 s
    /// let err = RetryBudget::new(Duration::ZERO, 10, 0.2).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// assert!(RetryBudget::new(Duration::from_secs(10), 10, f64::NAN).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(ttl: Duration, min_per_sec: u32, retry_ratio: f64) -> io::Result<RetryBudget> {
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return Err(invalid(format!(
                "a retry budget's ttl must be between 1 ms and 1 h, not {ttl:?}"
            )));
        }
        if !(retry_ratio.is_finite() && (0.0..=1000.0).contains(&retry_ratio)) {
            return Err(invalid(format!(
                "a retry budget's retry_ratio must be a finite number from 0 to 1000, not {retry_ratio}"
            )));
        }
        // At most 1 000 000 units per deposit, and a reserve of at most
        // 4.3e9 × 3600 × 1000 units: both fit an i64 with room to spare.
        let deposit = (retry_ratio * UNITS as f64).round() as i64;
        let reserve = u128::from(min_per_sec) * ttl.as_nanos() * UNITS as u128 / 1_000_000_000;
        let reserve = i64::try_from(reserve).unwrap_or(i64::MAX);
        Ok(RetryBudget {
            inner: Arc::new(Inner {
                ledger: Ledger::new(deposit, UNITS, reserve),
                start: Instant::now(),
                window: u64::try_from(ttl.as_nanos() / WINDOWS as u128)
                    .unwrap_or(u64::MAX)
                    .max(1),
                ttl,
                min_per_sec,
                retry_ratio,
                series: OnceLock::new(),
            }),
        })
    }

    /// Names the budget: its series carry `budget="NAME"`. Name it before its first use
    /// (before it is given to a [`Retry`](super::Retry)): a budget's name is fixed from
    /// then on.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for an empty name or one with a NUL byte, or a budget already named or
    /// used (its clones included).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::RetryBudget;
    ///
    /// let budget = RetryBudget::new(Duration::from_secs(10), 1, 0.1)?.named("catalog")?;
    /// assert!(format!("{budget:?}").contains("catalog"));
    /// assert!(budget.clone().named("again").is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn named(self, name: &str) -> io::Result<RetryBudget> {
        crate::name::check("a retry budget", name)?;
        if self.inner.series.set(Series::new(name)).is_err() {
            return Err(invalid(format!(
                "a retry budget is named before its first use; this one is {:?} already",
                self.name()
            )));
        }
        Ok(self)
    }

    /// Records a first attempt: `retry_ratio` of a retry, for `ttl`. [`Retry`](super::Retry)
    /// calls it when a call's first attempt starts.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::RetryBudget;
    ///
    /// let budget = RetryBudget::new(Duration::from_secs(10), 0, 0.5)?;
    /// budget.deposit();
    /// assert_eq!(budget.available(), 0);
    /// budget.deposit();
    /// assert_eq!(budget.available(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn deposit(&self) {
        self.inner.series();
        self.inner.ledger.deposit(self.inner.epoch(Instant::now()));
    }

    /// Takes one retry if the budget holds one: `true` if the retry may be made. A refusal
    /// counts in `loopguard_retry_budget_refused_total`. [`Retry`](super::Retry) calls it
    /// when a failed attempt would be retried, before the pause.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::RetryBudget;
    ///
    /// let budget = RetryBudget::new(Duration::from_secs(1), 2, 0.0)?;
    /// assert!(budget.withdraw() && budget.withdraw()); // the reserve: 2 a second over 1 s
    /// assert!(!budget.withdraw());
    /// assert_eq!(budget.refused(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn withdraw(&self) -> bool {
        let series = self.inner.series();
        let granted = self.inner.ledger.withdraw(self.inner.epoch(Instant::now()));
        if !granted {
            // After the ledger's lock is released: the recorder is not ours.
            series.refused.bump();
        }
        granted
    }

    /// The whole retries the budget would grant now.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::RetryBudget;
    ///
    /// let budget = RetryBudget::new(Duration::from_secs(10), 1, 0.1)?;
    /// assert_eq!(budget.available(), 10);
    /// for _ in 0..20 {
    ///     budget.deposit();
    /// }
    /// assert_eq!(budget.available(), 12);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn available(&self) -> u64 {
        self.inner
            .ledger
            .available(self.inner.epoch(Instant::now()))
    }

    /// Retries this budget refused so far, exactly (every clone's).
    ///
    /// # Examples
    ///
    /// See [`withdraw`](RetryBudget::withdraw).
    pub fn refused(&self) -> u64 {
        self.inner.series.get().map_or(0, |s| s.refused.get())
    }

    /// Fixes the budget's name (the default if it has none yet), as its first use does.
    pub(crate) fn seal(&self) {
        self.inner.series();
    }

    fn name(&self) -> &str {
        self.inner.series.get().map_or(DEFAULT_NAME, |s| &s.name)
    }

    /// [`deposit`](RetryBudget::deposit) at `now`.
    #[cfg(all(test, not(loopguard_loom)))]
    pub(crate) fn deposit_at(&self, now: Instant) {
        self.inner.ledger.deposit(self.inner.epoch(now));
    }

    /// [`withdraw`](RetryBudget::withdraw) at `now`, not counted.
    #[cfg(all(test, not(loopguard_loom)))]
    pub(crate) fn withdraw_at(&self, now: Instant) -> bool {
        self.inner.ledger.withdraw(self.inner.epoch(now))
    }

    /// [`available`](RetryBudget::available) at `now`.
    #[cfg(all(test, not(loopguard_loom)))]
    pub(crate) fn available_at(&self, now: Instant) -> u64 {
        self.inner.ledger.available(self.inner.epoch(now))
    }

    /// When epoch 0 started.
    #[cfg(all(test, not(loopguard_loom)))]
    pub(crate) fn start(&self) -> Instant {
        self.inner.start
    }
}

impl Inner {
    /// The window `now` falls in (a clock read before `start` is in window 0).
    fn epoch(&self, now: Instant) -> u64 {
        // In u64 (584 years of nanoseconds): a u128 division costs as much as the rest of
        // a deposit.
        let since = now.saturating_duration_since(self.start);
        let nanos = since
            .as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(since.subsec_nanos()));
        nanos / self.window
    }

    fn series(&self) -> &Series {
        self.series.get_or_init(|| Series::new(DEFAULT_NAME))
    }
}

impl Series {
    /// Registers the refusal counter of budget `name`, with a zero.
    fn new(name: &str) -> Series {
        let label = name.to_string();
        let counter = emit::register(
            || ::metrics::counter!(RETRY_BUDGET_REFUSED_TOTAL, LABEL_BUDGET => label),
            Counter::noop,
        );
        Series {
            name: name.to_string(),
            refused: Counted::new(counter),
        }
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryBudget")
            .field("name", &self.name())
            .field("ttl", &self.inner.ttl)
            .field("min_per_sec", &self.inner.min_per_sec)
            .field("retry_ratio", &self.inner.retry_ratio)
            .field("available", &self.available())
            .field("refused", &self.refused())
            .finish()
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
