//! The budget's accounting, in windows of `ttl / 10`: what was deposited and withdrawn in
//! each of the last [`WINDOWS`] closed windows and in the open one, plus a fixed reserve.
//!
//! A deposit only adds to the open window (`head`, one atomic add: lock-free, and never
//! lost, because the window is closed by swapping `head` out, never by a load and a
//! store). A withdrawal checks the balance and takes from the open window under a mutex:
//! deposits during the check can only raise the balance, and withdrawals and closings are
//! serialized by that mutex, so the check and the take are one step and no two retries can
//! spend the same token. No code of anyone else's runs under it.
//!
//! Times are window numbers (epochs) here; the budget turns the clock into them.

// Under the crate's loom cfg (unit tests only) the atomics and the mutex are loom's, so
// the model in `budget/loom_model.rs` explores every interleaving; normal builds never see loom.
use crate::sync::{
    Mutex,
    atomic::{AtomicI64, AtomicU64, Ordering},
    lock,
};

/// Closed windows kept: with the open one, a deposit counts for between 10 and 11 windows,
/// `ttl` to `1.1 × ttl` (tower's `TpsBudget` keeps the same).
pub(crate) const WINDOWS: usize = 10;

/// A slot for a closed window no epoch can match.
const EMPTY: (u64, i64) = (u64::MAX, 0);

/// Deposits, withdrawals and the reserve, in units (a retry is `withdraw` units).
#[derive(Debug)]
pub(crate) struct Ledger {
    /// Units one first attempt deposits.
    deposit: i64,
    /// Units one retry withdraws.
    withdraw: i64,
    /// Units always there, on top of the live windows.
    reserve: i64,
    /// Net units of the open window.
    head: AtomicI64,
    /// The epoch of the open window; only moves forward, under `closed`.
    head_epoch: AtomicU64,
    /// The closed windows.
    closed: Mutex<Closed>,
}

/// The closed windows, `(epoch, net units)` at `epoch % WINDOWS`, and the sum of those
/// still live (kept at each closing, so a withdrawal adds three numbers, not eleven).
#[derive(Debug)]
struct Closed {
    windows: [(u64, i64); WINDOWS],
    live: i128,
}

impl Ledger {
    /// A ledger whose open window is epoch 0.
    pub(crate) fn new(deposit: i64, withdraw: i64, reserve: i64) -> Ledger {
        Ledger {
            deposit,
            withdraw,
            reserve,
            head: AtomicI64::new(0),
            head_epoch: AtomicU64::new(0),
            closed: Mutex::new(Closed {
                windows: [EMPTY; WINDOWS],
                live: 0,
            }),
        }
    }

    /// One first attempt at `epoch`.
    pub(crate) fn deposit(&self, epoch: u64) {
        if self.deposit == 0 {
            return;
        }
        if self.head_epoch.load(Ordering::Acquire) < epoch {
            self.close(&mut lock(&self.closed), epoch);
        }
        self.head.fetch_add(self.deposit, Ordering::AcqRel);
    }

    /// One retry at `epoch`, if the balance holds one: whether it was granted.
    pub(crate) fn withdraw(&self, epoch: u64) -> bool {
        let mut closed = lock(&self.closed);
        self.close(&mut closed, epoch);
        if self.balance(&closed) >= i128::from(self.withdraw) {
            self.head.fetch_sub(self.withdraw, Ordering::AcqRel);
            true
        } else {
            false
        }
    }

    /// Whole retries the balance holds at `epoch`.
    pub(crate) fn available(&self, epoch: u64) -> u64 {
        let mut closed = lock(&self.closed);
        self.close(&mut closed, epoch);
        let retries = self.balance(&closed).max(0) / i128::from(self.withdraw);
        u64::try_from(retries).unwrap_or(u64::MAX)
    }

    /// Closes the open window if `epoch` is past it: its units move to its slot (the one of
    /// the window `WINDOWS` before it, which has expired), and the open window is `epoch`.
    fn close(&self, closed: &mut Closed, epoch: u64) {
        let open = self.head_epoch.load(Ordering::Relaxed);
        if epoch <= open {
            return;
        }
        // A swap, so a deposit that lands while this runs is in the old window or the new
        // one, never in neither.
        let units = self.head.swap(0, Ordering::AcqRel);
        closed.windows[slot(open)] = (open, units);
        // Live: the `WINDOWS` epochs before the open one.
        closed.live = closed
            .windows
            .iter()
            .filter(|(e, _)| *e < epoch && epoch - *e <= WINDOWS as u64)
            .map(|(_, units)| i128::from(*units))
            .sum();
        self.head_epoch.store(epoch, Ordering::Release);
    }

    /// The reserve, the open window and the closed windows still live.
    fn balance(&self, closed: &Closed) -> i128 {
        i128::from(self.reserve) + i128::from(self.head.load(Ordering::Acquire)) + closed.live
    }
}

fn slot(epoch: u64) -> usize {
    // `WINDOWS` is small: the remainder fits.
    (epoch % WINDOWS as u64) as usize
}
