//! `rate_limit`: a token bucket as Go's `rate.NewLimiter(rate.Every(interval), burst)`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `burst` tokens at first, one more every `interval` up to `burst`; a request takes one.
#[derive(Debug)]
pub(crate) struct Limiter {
    interval: Duration,
    burst: u32,
    /// Tokens left, and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl Limiter {
    pub(crate) fn new(interval: Duration, burst: u32) -> Limiter {
        let state = Mutex::new((f64::from(burst), Instant::now()));
        Limiter {
            interval,
            burst,
            state,
        }
    }

    pub(crate) fn settings(&self) -> (Duration, u32) {
        (self.interval, self.burst)
    }

    /// Takes a token if one is left.
    pub(crate) fn allow(&self) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let earned = now.duration_since(state.1).as_secs_f64() / self.interval.as_secs_f64();
        let tokens = (state.0 + earned).min(f64::from(self.burst));
        let allowed = tokens >= 1.0;
        *state = (if allowed { tokens - 1.0 } else { tokens }, now);
        allowed
    }
}
