//! The pauses between attempts: none, a fixed list, or exponential with optional jitter.

use std::sync::Arc;
use std::time::Duration;

/// The pauses between attempts.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::retry::Backoff;
///
/// let ms = Duration::from_millis;
/// let b = Backoff::exponential(ms(100), ms(350));
/// assert_eq!([b.pause(0), b.pause(1), b.pause(2), b.pause(9)], [ms(100), ms(200), ms(350), ms(350)]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backoff {
    kind: Kind,
    jitter: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    None,
    Fixed(Arc<[Duration]>),
    Exponential {
        base: Duration,
        max: Duration,
    },
}

impl Backoff {
    /// No pause: the next attempt starts as soon as the previous one failed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Backoff;
    ///
    /// assert_eq!(Backoff::none().pause(3), Duration::ZERO);
    /// ```
    pub fn none() -> Backoff {
        Backoff::default()
    }

    /// Pauses taken from a list in order; the last one repeats when attempts outrun
    /// it. An empty list means no pause.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Backoff;
    ///
    /// let ms = Duration::from_millis;
    /// let b = Backoff::fixed([ms(10), ms(50)]);
    /// assert_eq!([b.pause(0), b.pause(1), b.pause(2)], [ms(10), ms(50), ms(50)]);
    /// ```
    pub fn fixed(pauses: impl IntoIterator<Item = Duration>) -> Backoff {
        Backoff {
            kind: Kind::Fixed(pauses.into_iter().collect()),
            jitter: false,
        }
    }

    /// Pauses of `base`, doubling after each attempt, never more than `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Backoff;
    ///
    /// let b = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(30));
    /// assert_eq!(b.pause(3), Duration::from_secs(8));
    /// assert_eq!(b.pause(100), Duration::from_secs(30));
    /// ```
    pub fn exponential(base: Duration, max: Duration) -> Backoff {
        Backoff {
            kind: Kind::Exponential { base, max },
            jitter: false,
        }
    }

    /// Adds "equal jitter": each pause `p` becomes a random value between `p / 2`
    /// and `p`, drawn with [`fastrand`].
    ///
    /// Half the pause stays, so a retry never follows a failure at once; the random
    /// half spreads out callers that failed together.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Backoff;
    ///
    /// let b = Backoff::fixed([Duration::from_millis(100)]).with_jitter();
    /// let p = b.pause(0);
    /// assert!(p >= Duration::from_millis(50) && p <= Duration::from_millis(100));
    /// ```
    pub fn with_jitter(mut self) -> Backoff {
        self.jitter = true;
        self
    }

    /// The `n`-th pause, counting from `0`: `pause(0)` comes between the first and
    /// second attempts. Random when jitter is on.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Backoff;
    ///
    /// let b = Backoff::fixed([Duration::from_millis(10)]);
    /// assert_eq!(b.pause(0), Duration::from_millis(10));
    /// ```
    pub fn pause(&self, n: u32) -> Duration {
        let pause = match &self.kind {
            Kind::None => Duration::ZERO,
            Kind::Fixed(list) => {
                let i = usize::try_from(n).unwrap_or(usize::MAX);
                list.get(i).or(list.last()).copied().unwrap_or_default()
            }
            Kind::Exponential { base, max } => 2u32
                .checked_pow(n)
                .and_then(|factor| base.checked_mul(factor))
                .map_or(*max, |p| p.min(*max)),
        };
        if self.jitter && !pause.is_zero() {
            let half = pause / 2;
            let spread = u64::try_from((pause - half).as_nanos()).unwrap_or(u64::MAX);
            half + Duration::from_nanos(fastrand::u64(0..=spread))
        } else {
            pause
        }
    }
}
