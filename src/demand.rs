//! Time-weighted demand: how many callers held or waited for a resource, on
//! average, over a sliding window.
//!
//! An instantaneous "busy" flag cannot tell a 10 ms blip from a queue that has
//! been building for seconds, and a gauge sampled at scrape time misses every
//! burst that happened between two scrapes. [`Demand`] integrates the level
//! (holders + waiters) over time instead:
//!
//! ```text
//! average = sum(level × time spent at that level within the window) / window
//! ```
//!
//! While the history is shorter than the window, the denominator is the time
//! elapsed since the history started; at zero elapsed time the average is 0.
//! An average above 1 for a single-slot resource means callers waited during
//! the window, not necessarily that anybody is waiting right now.
//!
//! # Precision
//!
//! Memory is fixed whatever the event rate (about 2 KiB): the window is split
//! into 64 buckets, each holding the exact integral of level × nanoseconds
//! spent in it (segments are split exactly at bucket boundaries) and the
//! level since its last change. Only the oldest bucket can be partly inside
//! the window. The average is exact when the window starts on a bucket
//! boundary, or after the last change inside that oldest bucket: so all the
//! worked cases are exact, and activity older than the window reads exactly
//! 0. Otherwise the part of the oldest bucket before its last change is
//! pro-rated, an error of at most that bucket's peak level × 1/64 of the
//! window. Windows of whole seconds divide into whole-nanosecond buckets.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Ring slots of a [`Demand`]'s history (and a pool's): the current, partial bucket plus
/// 64 older ones, so the window is divided into 64 buckets.
pub(crate) const SLOTS: usize = 65;

/// Ring slots of a [`KeyedGate`](crate::keyed::KeyedGate) key's history: 16 buckets. Every
/// live key carries one inline, so it is kept small; see `keyed`'s docs for the precision.
pub(crate) const KEY_SLOTS: usize = 17;

/// The window of [`Demand::default`] (and of every pool unless its builder sets one):
/// five seconds.
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(5);

/// A zero averaging window, or one longer than `u64::MAX` nanoseconds (about 584 years).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InvalidWindow {
    window: Duration,
}

impl fmt::Display for InvalidWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.window.is_zero() {
            f.write_str("demand window must be greater than zero")
        } else {
            write!(f, "demand window of {:?} is too large", self.window)
        }
    }
}

impl From<InvalidWindow> for io::Error {
    fn from(err: InvalidWindow) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, err.to_string())
    }
}

/// One bucket of the ring: the exact integral of level × ns spent in it, and
/// its tail: the level since the last change inside it, and when that was.
#[derive(Clone, Copy, Default)]
struct Bucket {
    integral: u128,
    tail_start: u64,
    tail_level: usize,
}

/// The lock-free core shared by [`Demand`] and the keyed gate (which keeps one
/// per key under its own lock). Times are nanoseconds since `start`. `N` ring slots: the
/// window is divided into `N - 1` buckets (at least 1, so `N >= 2`).
#[derive(Clone, Copy)]
pub(crate) struct DemandCore<const N: usize = SLOTS> {
    start: Instant,
    window_ns: u64,
    bucket_ns: u64,
    last_ns: u64,
    level: usize,
    buckets: [Bucket; N],
}

impl<const N: usize> DemandCore<N> {
    /// Buckets the window is divided into: every slot but the current one.
    const BUCKETS: u64 = {
        assert!(N >= 2, "a demand history needs at least two ring slots");
        N as u64 - 1
    };

    fn slot(bucket: u64) -> usize {
        (bucket % N as u64) as usize
    }

    pub(crate) fn new(window: Duration, start: Instant) -> Result<Self, InvalidWindow> {
        match u64::try_from(window.as_nanos()) {
            Ok(window_ns) if window_ns > 0 => Ok(Self::with_nanos(window_ns, start)),
            _ => Err(InvalidWindow { window }),
        }
    }

    /// A core with the [`DEFAULT_WINDOW`], starting at `start`.
    pub(crate) fn with_default_window(start: Instant) -> Self {
        const NANOS: u64 = DEFAULT_WINDOW.as_secs() * 1_000_000_000;
        Self::with_nanos(NANOS, start)
    }

    /// An empty core with the same window, starting at `start`.
    pub(crate) fn fresh(&self, start: Instant) -> Self {
        Self::with_nanos(self.window_ns, start)
    }

    /// `window_ns` must be non-zero.
    fn with_nanos(window_ns: u64, start: Instant) -> Self {
        Self {
            start,
            window_ns,
            bucket_ns: window_ns.div_ceil(Self::BUCKETS).max(1),
            last_ns: 0,
            level: 0,
            buckets: [Bucket::default(); N],
        }
    }

    pub(crate) fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    pub(crate) fn level(&self) -> usize {
        self.level
    }

    /// `now` as an offset, clamped so that time never runs backwards.
    fn offset(&self, now: Instant) -> u64 {
        let ns = now.saturating_duration_since(self.start).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX).max(self.last_ns)
    }

    /// Accounts the current level from the last event up to `now_ns`.
    fn advance(&mut self, now_ns: u64) {
        let (from, bl) = (self.last_ns, self.bucket_ns);
        if now_ns <= from {
            return;
        }
        let level = self.level as u128;
        let (cur, target) = (from / bl, now_ns / bl);
        let cur_end = if cur == target {
            now_ns
        } else {
            (cur + 1).saturating_mul(bl)
        };
        let bucket = &mut self.buckets[Self::slot(cur)];
        bucket.integral = bucket
            .integral
            .saturating_add(level.saturating_mul(u128::from(cur_end - from)));
        if cur != target {
            // Buckets entered now start with the current level as their tail.
            let first = (cur + 1).max(target.saturating_sub(Self::BUCKETS));
            for index in first..=target {
                let bucket_start = index.saturating_mul(bl);
                let spent = if index == target {
                    now_ns - bucket_start
                } else {
                    bl
                };
                self.buckets[Self::slot(index)] = Bucket {
                    integral: level.saturating_mul(u128::from(spent)),
                    tail_start: bucket_start,
                    tail_level: self.level,
                };
            }
        }
        self.last_ns = now_ns;
    }

    pub(crate) fn add_at(&mut self, now: Instant, delta: isize) {
        let now_ns = self.offset(now);
        self.advance(now_ns);
        self.level = if delta < 0 {
            self.level.saturating_sub(delta.unsigned_abs())
        } else {
            self.level.saturating_add(delta.unsigned_abs())
        };
        let bucket = &mut self.buckets[Self::slot(now_ns / self.bucket_ns)];
        bucket.tail_start = now_ns;
        bucket.tail_level = self.level;
    }

    pub(crate) fn average_at(&self, now: Instant) -> f64 {
        let mut copy = *self;
        copy.advance(self.offset(now));
        copy.average_at_last()
    }

    fn average_at_last(&self) -> f64 {
        let (now_ns, bl) = (self.last_ns, self.bucket_ns);
        if now_ns == 0 {
            return 0.0;
        }
        if now_ns <= self.window_ns {
            // No bucket has been reused yet; unused ones are zero.
            let total = self
                .buckets
                .iter()
                .fold(0u128, |a, b| a.saturating_add(b.integral));
            return total as f64 / now_ns as f64;
        }
        let window_start = now_ns - self.window_ns;
        let (oldest, cur) = (window_start / bl, now_ns / bl);
        let full = (oldest + 1..=cur).fold(0u128, |a, b| {
            a.saturating_add(self.buckets[Self::slot(b)].integral)
        });
        (full as f64 + self.oldest_part(oldest, window_start)) / self.window_ns as f64
    }

    /// The integral of the oldest bucket from `window_start` to its end: exact
    /// after its last change, pro-rated before it.
    fn oldest_part(&self, index: u64, window_start: u64) -> f64 {
        let bucket = self.buckets[Self::slot(index)];
        let bucket_start = index.saturating_mul(self.bucket_ns);
        let end = bucket_start.saturating_add(self.bucket_ns);
        let tail_start = bucket.tail_start.clamp(bucket_start, end);
        let tail_level = bucket.tail_level as u128;
        if window_start >= tail_start {
            return tail_level.saturating_mul(u128::from(end - window_start)) as f64;
        }
        let tail = tail_level.saturating_mul(u128::from(end - tail_start));
        let head = bucket.integral.saturating_sub(tail) as f64;
        let head_inside = (tail_start - window_start) as f64 / (tail_start - bucket_start) as f64;
        tail as f64 + head * head_inside
    }

    /// True when nothing is held and all activity is older than the window.
    pub(crate) fn is_idle_at(&self, now: Instant) -> bool {
        self.level == 0 && self.offset(now) - self.last_ns >= self.window_ns
    }
}

/// A thread-safe, time-weighted average of a level (holders + waiters) over a
/// sliding window.
///
/// Every method takes `&self`; share it by reference or inside an [`Arc`].
/// The methods that create, change or read the history at a time ([`new`](Self::new),
/// [`add`](Self::add), [`average`](Self::average), [`enter`](Self::enter) and
/// [`DemandGuard`]'s leave) have an `_at` twin taking an explicit [`Instant`] (for
/// deterministic tests, simulations and callers replaying recorded timestamps); the plain
/// ones use [`Instant::now`]. An
/// instant earlier than the last event (as can happen across threads) is
/// treated as the time of the last event. The level saturates at zero, so a
/// misplaced extra leave cannot make it negative. A poisoned lock is
/// recovered, never propagated. Updates and reads do not allocate. See the
/// [module docs](self) for the formula and its precision.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use loopguard::demand::Demand;
///
/// let t0 = Instant::now();
/// let demand = Demand::new_at(Duration::from_secs(5), t0)?;
/// demand.add_at(t0, 3); // three callers for one second...
/// demand.add_at(t0 + Duration::from_secs(1), -3); // ...then four idle seconds
/// let avg = demand.average_at(t0 + Duration::from_secs(5));
/// assert!((avg - 0.6).abs() < 1e-9);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Clones share one history: hand one to each task that adds to it.
#[derive(Clone)]
pub struct Demand {
    core: Arc<Mutex<DemandCore>>,
}

impl Demand {
    /// Creates a tracker with the given window, its history starting now.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `window` is zero or longer than `u64::MAX`
    /// nanoseconds (about 584 years).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::new(Duration::from_secs(10))?;
    /// assert_eq!(demand.average(), 0.0);
    /// let err = Demand::new(Duration::ZERO).unwrap_err();
    /// assert_eq!(err.to_string(), "demand window must be greater than zero");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(window: Duration) -> io::Result<Self> {
        Self::new_at(window, Instant::now())
    }

    /// Creates a tracker whose history starts at `start`, for a caller with its own clock
    /// (a deterministic test, a simulation, a replay of recorded timestamps), like every
    /// `_at` method here; [`new`](Self::new) starts it now.
    ///
    /// # Errors
    ///
    /// As for [`new`](Self::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::demand::Demand;
    ///
    /// let t0 = Instant::now();
    /// let demand = Demand::new_at(Duration::from_secs(5), t0)?;
    /// assert_eq!(demand.average_at(t0), 0.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new_at(window: Duration, start: Instant) -> io::Result<Self> {
        Ok(Self {
            core: Arc::new(Mutex::new(DemandCore::new(window, start)?)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, DemandCore> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The averaging window.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::new(Duration::from_secs(30))?;
    /// assert_eq!(demand.window(), Duration::from_secs(30));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.lock().window()
    }

    /// Changes the level by `delta` now (positive: callers arrive).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::default();
    /// demand.add(2);
    /// demand.add(-1);
    /// assert_eq!(demand.level(), 1);
    /// ```
    pub fn add(&self, delta: isize) {
        self.add_at(Instant::now(), delta);
    }

    /// Changes the level by `delta` at `now`; the level saturates at zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Instant;
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::default();
    /// demand.add_at(Instant::now(), -1); // misuse: stays at zero
    /// assert_eq!(demand.level(), 0);
    /// ```
    pub fn add_at(&self, now: Instant, delta: isize) {
        self.lock().add_at(now, delta);
    }

    /// The current level (holders + waiters).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::default();
    /// let _guard = demand.enter();
    /// assert_eq!(demand.level(), 1);
    /// ```
    pub fn level(&self) -> usize {
        self.lock().level()
    }

    /// The time-weighted average over the window ending now.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::demand::Demand;
    ///
    /// assert_eq!(Demand::default().average(), 0.0);
    /// ```
    pub fn average(&self) -> f64 {
        self.average_at(Instant::now())
    }

    /// The time-weighted average over the window ending at `now`. Reading does
    /// not change the history.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::demand::Demand;
    ///
    /// let t0 = Instant::now();
    /// let demand = Demand::new_at(Duration::from_secs(5), t0)?;
    /// demand.add_at(t0, 1);
    /// assert_eq!(demand.average_at(t0 + Duration::from_secs(60)), 1.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn average_at(&self, now: Instant) -> f64 {
        let core = *self.lock();
        core.average_at(now)
    }

    /// Adds one to the level now; the returned guard removes it when dropped. The guard
    /// owns a clone of this `Demand`, so it can move into a task or a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::default();
    /// let guard = demand.enter();
    /// assert_eq!(demand.level(), 1);
    /// std::thread::spawn(move || drop(guard)).join().unwrap();
    /// assert_eq!(demand.level(), 0);
    /// ```
    pub fn enter(&self) -> DemandGuard {
        self.enter_at(Instant::now())
    }

    /// Adds one to the level at `now`; see [`enter`](Self::enter).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Instant;
    /// use loopguard::demand::Demand;
    ///
    /// let demand = Demand::default();
    /// let guard = demand.enter_at(Instant::now());
    /// assert_eq!(demand.level(), 1);
    /// drop(guard);
    /// assert_eq!(demand.level(), 0);
    /// ```
    pub fn enter_at(&self, now: Instant) -> DemandGuard {
        self.add_at(now, 1);
        DemandGuard {
            demand: self.clone(),
            active: true,
        }
    }
}

impl Default for Demand {
    /// A tracker with a window of five seconds, starting now.
    fn default() -> Self {
        Self {
            core: Arc::new(Mutex::new(DemandCore::with_default_window(Instant::now()))),
        }
    }
}

impl fmt::Debug for Demand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = *self.lock();
        f.debug_struct("Demand")
            .field("window", &core.window())
            .field("level", &core.level())
            .finish()
    }
}

/// Holds one unit of [`Demand`]; dropping it (on release, error, cancellation or panic)
/// removes that unit. Created by [`Demand::enter`]; `Send + 'static`.
///
/// # Examples
///
/// ```
/// use loopguard::demand::Demand;
///
/// let demand = Demand::default();
/// let guard = demand.enter();
/// drop(guard);
/// assert_eq!(demand.level(), 0);
/// ```
#[must_use = "the demand is removed as soon as the guard is dropped"]
pub struct DemandGuard {
    demand: Demand,
    active: bool,
}

impl DemandGuard {
    /// Removes the unit at `now` instead of at drop time (for a caller with its own clock).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::demand::Demand;
    ///
    /// let t0 = Instant::now();
    /// let demand = Demand::new_at(Duration::from_secs(4), t0)?;
    /// demand.enter_at(t0).leave_at(t0 + Duration::from_secs(1));
    /// assert_eq!(demand.average_at(t0 + Duration::from_secs(4)), 0.25);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn leave_at(mut self, now: Instant) {
        self.active = false;
        self.demand.add_at(now, -1);
    }
}

impl Drop for DemandGuard {
    fn drop(&mut self) {
        if self.active {
            self.demand.add(-1);
        }
    }
}

impl fmt::Debug for DemandGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemandGuard")
            .field("demand", &self.demand)
            .finish()
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    /// The integral of a piecewise-constant level over `[from, to]`.
    fn exact_integral(events: &[(Duration, usize)], from: Duration, to: Duration) -> f64 {
        let mut total = 0.0;
        for (i, &(at, level)) in events.iter().enumerate() {
            let until = events.get(i + 1).map_or(to, |next| next.0);
            let (a, b) = (at.max(from), until.min(to));
            if b > a {
                total += level as f64 * (b - a).as_secs_f64();
            }
        }
        total
    }

    /// A core of `N` slots against an exact reference: within the oldest bucket's peak
    /// level × 1/(N - 1) of the window anywhere, exact when the window starts on a bucket
    /// boundary.
    fn within_the_bound<const N: usize>() {
        let window = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut core = DemandCore::<N>::new(window, t0).unwrap();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut at, mut level, mut peak) = (Duration::ZERO, 0usize, 0usize);
        let mut events = vec![(Duration::ZERO, 0)];
        for _ in 0..2000 {
            at += Duration::from_micros(next() % 20_000);
            let delta = (next() % 5) as isize - 2;
            core.add_at(t0 + at, delta);
            level = level.saturating_add_signed(delta);
            peak = peak.max(level);
            events.push((at, level));
        }
        let buckets = N as u32 - 1;
        let bucket = window / buckets;
        for step in 0..200u32 {
            let now = at + Duration::from_micros(u64::from(step) * 37_003);
            let from = now.saturating_sub(window);
            let exact = exact_integral(&events, from, now) / (now - from).as_secs_f64();
            let got = core.average_at(t0 + now);
            let bound = peak as f64 / f64::from(buckets) + 1e-9;
            assert!(
                (got - exact).abs() <= bound,
                "N={N} at {now:?}: {got} vs {exact}"
            );
            let aligned = bucket * now.as_nanos().div_ceil(bucket.as_nanos()) as u32;
            let exact = exact_integral(&events, aligned - window, aligned) / window.as_secs_f64();
            let got = core.average_at(t0 + aligned);
            assert!((got - exact).abs() < 1e-6, "N={N} aligned {aligned:?}");
        }
    }

    #[test]
    fn a_pool_history_and_a_key_history_keep_their_documented_bounds() {
        within_the_bound::<SLOTS>();
        within_the_bound::<KEY_SLOTS>();
    }
}
