//! The probe's samples over a sliding window of time: a ring allocated once, large enough for
//! every sample the window can hold (a probe takes at most one per resolution), so a tick
//! never allocates.

/// One tick of the probe, in nanoseconds: when it was taken (since the `LoopLag`'s epoch)
/// and how late the probe woke.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at: u64,
    late: u64,
}

/// The most recent samples, oldest overwritten first.
#[derive(Debug)]
pub(super) struct Window {
    samples: Box<[Sample]>,
    /// Where the next sample goes.
    next: usize,
    /// Samples held, at most `samples.len()`.
    len: usize,
}

impl Window {
    /// A window holding up to `capacity` samples (at least one).
    pub(super) fn new(capacity: usize) -> Window {
        Window {
            samples: vec![Sample::default(); capacity.max(1)].into_boxed_slice(),
            next: 0,
            len: 0,
        }
    }

    /// Adds a sample, overwriting the oldest when full.
    pub(super) fn push(&mut self, at: u64, late: u64) {
        self.samples[self.next] = Sample { at, late };
        self.next = (self.next + 1) % self.samples.len();
        self.len = (self.len + 1).min(self.samples.len());
    }

    /// Copies the lateness of every sample taken at or after `since` into `out`, and returns
    /// when the newest sample was taken (`None` when there is none).
    pub(super) fn since(&self, since: u64, out: &mut Vec<u64>) -> Option<u64> {
        let cap = self.samples.len();
        // Oldest first: the ring's `len` entries ending just before `next`.
        let start = (self.next + cap - self.len) % cap;
        out.extend(
            (0..self.len)
                .map(|i| self.samples[(start + i) % cap])
                .filter(|s| s.at >= since)
                .map(|s| s.late),
        );
        (self.len > 0).then(|| self.samples[(self.next + cap - 1) % cap].at)
    }
}

/// The nearest-rank `percent`th percentile of `sorted` (ascending); 0 when it is empty.
pub(super) fn percentile(sorted: &[u64], percent: u64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let n = sorted.len() as u64;
    // The smallest rank r with r / n >= percent / 100, from 1.
    let rank = (percent * n).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_samples_and_filters_by_age() {
        let mut window = Window::new(3);
        let mut out = Vec::new();
        assert_eq!(window.since(0, &mut out), None);
        assert!(out.is_empty());
        for (at, late) in [(10, 1), (20, 2), (30, 3), (40, 4)] {
            window.push(at, late);
        }
        assert_eq!(window.since(0, &mut out), Some(40));
        assert_eq!(out, [2, 3, 4], "the oldest is overwritten");
        out.clear();
        assert_eq!(window.since(30, &mut out), Some(40));
        assert_eq!(out, [3, 4], "samples before `since` are left out");
        out.clear();
        assert_eq!(window.since(41, &mut out), Some(40));
        assert!(out.is_empty());
    }

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(percentile(&[], 50), 0);
        assert_eq!(percentile(&[7], 50), 7);
        assert_eq!(percentile(&[7], 99), 7);
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 50), 50);
        assert_eq!(percentile(&hundred, 99), 99);
        assert_eq!(percentile(&hundred, 100), 100);
        let ten: Vec<u64> = (1..=10).collect();
        assert_eq!(percentile(&ten, 50), 5);
        assert_eq!(percentile(&ten, 99), 10);
    }
}
