//! The budget's semantics at injected instants: tower's `TpsBudget` cases, the settings it
//! refuses, a reference model it must agree with on every decision, and real threads that
//! must not lose a deposit or a withdrawal while windows close under them.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::RetryBudget;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn budget(ttl: Duration, min_per_sec: u32, ratio: f64) -> RetryBudget {
    RetryBudget::new(ttl, min_per_sec, ratio).expect("valid settings")
}

/// tower's `tps_empty`: no reserve, no deposit, no retry.
#[test]
fn empty() {
    let b = budget(Duration::from_secs(1), 0, 1.0);
    assert!(!b.withdraw_at(b.start()));
    assert_eq!(b.available_at(b.start()), 0);
}

/// tower's `tps_leaky`: a deposit is gone once its TTL has passed.
#[test]
fn a_deposit_expires() {
    let b = budget(Duration::from_secs(1), 0, 1.0);
    let t0 = b.start();
    b.deposit_at(t0);
    assert_eq!(b.available_at(t0 + ms(999)), 1);
    assert_eq!(
        b.available_at(t0 + ms(1_050)),
        1,
        "kept for up to 1.1 × ttl"
    );
    assert!(!b.withdraw_at(t0 + ms(3_000)));
}

/// tower's `tps_slots`: windows expire one by one.
#[test]
fn windows_expire_one_by_one() {
    let b = budget(Duration::from_secs(1), 0, 0.5);
    let t0 = b.start();
    b.deposit_at(t0);
    b.deposit_at(t0);
    // 900 ms later the deposits are still valid.
    assert!(b.withdraw_at(t0 + ms(901)));
    // A blank slate two seconds later.
    let t1 = t0 + ms(2_902);
    assert_eq!(b.available_at(t1), 0);
    b.deposit_at(t1);
    b.deposit_at(t1 + ms(301));
    b.deposit_at(t1 + ms(1_102));
    // The first of the three has expired; the second and the third make one retry.
    assert!(b.withdraw_at(t1 + ms(1_102)));
    assert!(!b.withdraw_at(t1 + ms(1_102)));
}

/// tower's `tps_reserve`: `min_per_sec × ttl` retries with no deposit at all, and the
/// withdrawals expire too, so the reserve comes back.
#[test]
fn the_reserve_comes_back() {
    let b = budget(Duration::from_secs(1), 5, 1.0);
    let t0 = b.start();
    for _ in 0..5 {
        assert!(b.withdraw_at(t0));
    }
    assert!(!b.withdraw_at(t0));
    assert_eq!(b.available_at(t0 + ms(1_150)), 5);
    // Fractional reserves are kept to the thousandth: 1.5 retries, one whole.
    let b = budget(ms(1_500), 1, 0.0);
    assert_eq!(b.available_at(b.start()), 1);
    assert!(b.withdraw_at(b.start()) && !b.withdraw_at(b.start()));
}

#[test]
fn a_ratio_counts_as_given() {
    // 0.3 is 3 retries for 10 first attempts (tower's 1 / 0.3 = 3 deposits per retry makes
    // it 1/3), 0.7 is 7 (tower: 1), 2.5 is 25.
    for (ratio, want) in [
        (0.3, 3),
        (0.7, 7),
        (2.5, 25),
        (0.1, 1),
        (1000.0, 10_000),
        (0.0, 0),
    ] {
        let b = budget(Duration::from_secs(10), 0, ratio);
        for _ in 0..10 {
            b.deposit_at(b.start());
        }
        assert_eq!(b.available_at(b.start()), want, "ratio {ratio}");
    }
}

#[test]
fn invalid_settings_are_refused_not_clamped() {
    let refused = [
        (Duration::ZERO, 1.0),
        (Duration::from_micros(999), 1.0),
        (Duration::from_secs(3601), 1.0),
        (Duration::MAX, 1.0),
        (Duration::from_secs(10), -0.1),
        (Duration::from_secs(10), 1000.001),
        (Duration::from_secs(10), f64::NAN),
        (Duration::from_secs(10), f64::INFINITY),
        (Duration::from_secs(10), f64::NEG_INFINITY),
    ];
    for (ttl, ratio) in refused {
        let err = RetryBudget::new(ttl, 1, ratio).expect_err("refused");
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "{ttl:?} {ratio}"
        );
        let message = err.to_string();
        assert!(message.starts_with("a retry budget's "), "{message}");
        assert!(
            message.contains("ttl") || message.contains("retry_ratio"),
            "{message}"
        );
    }
    for (ttl, ratio) in [(ms(1), 0.0), (Duration::from_secs(3600), 1000.0)] {
        let b = RetryBudget::new(ttl, u32::MAX, ratio).expect("the edges are valid");
        assert!(b.available_at(b.start()) >= u64::from(u32::MAX) / 1000);
    }
}

#[test]
fn names_are_checked_and_fixed_at_first_use() {
    let b = budget(Duration::from_secs(10), 1, 0.1);
    let err = b.clone().named("").unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(err.to_string(), "a retry budget name must not be empty");
    let used = budget(Duration::from_secs(10), 1, 0.1);
    used.deposit();
    let err = used.named("late").unwrap_err();
    assert!(err.to_string().contains("\"default\""), "{err}");
    // Given to a policy, a budget's name is fixed too.
    let shared = budget(Duration::from_secs(10), 1, 0.1);
    let _policy = crate::retry::Retry::new().budget(shared.clone());
    assert!(shared.named("late").is_err());
    let named = b.named("catalog").unwrap();
    assert!(format!("{named:?}").contains("\"catalog\""));
    assert!(named.clone().named("twice").is_err());
}

/// One operation of a history: a deposit or a withdrawal at an offset from the start.
#[derive(Clone, Debug)]
enum Op {
    Deposit(u64),
    Withdraw(u64),
}

fn op() -> impl Strategy<Value = Op> {
    // Offsets in tenths of a window, forwards mostly, sometimes a stale clock behind.
    prop_oneof![
        (0u64..400).prop_map(Op::Deposit),
        (0u64..400).prop_map(Op::Withdraw),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Every decision agrees with a model that keeps each event and sums those of the last
    /// eleven windows (the open one and ten closed ones): nothing is lost, nothing counts
    /// twice, and a withdrawal's effect expires like a deposit's.
    #[test]
    fn agrees_with_a_model(ops in proptest::collection::vec(op(), 1..200),
                           min_per_sec in 0u32..5, ratio_thousandths in 0u32..3000,
                           steps in proptest::collection::vec(0u64..30, 1..200)) {
        let ttl = Duration::from_secs(1);
        let ratio = f64::from(ratio_thousandths) / 1000.0;
        let b = budget(ttl, min_per_sec, ratio);
        let window = ttl / 10;
        let (deposit, reserve) = (i64::from(ratio_thousandths), i64::from(min_per_sec) * 1000);
        let mut events: Vec<(u64, i64)> = Vec::new();
        let mut open = 0u64;
        let mut clock = 0u64; // tenths of a window
        for (i, op) in ops.iter().enumerate() {
            // The clock moves forward by `steps`; an op's own offset may put it behind.
            clock += steps[i % steps.len()];
            let (tenths, is_deposit) = match op {
                Op::Deposit(back) => (clock.saturating_sub(*back % 15), true),
                Op::Withdraw(back) => (clock.saturating_sub(*back % 15), false),
            };
            let at = b.start() + window * u32::try_from(tenths / 10).unwrap()
                + window / 10 * u32::try_from(tenths % 10).unwrap();
            // The ledger never goes back to an earlier window.
            open = open.max(tenths / 10);
            let balance: i64 = reserve
                + events.iter().filter(|(e, _)| open - e <= 10).map(|(_, u)| u).sum::<i64>();
            if is_deposit {
                b.deposit_at(at);
                if deposit > 0 {
                    events.push((open, deposit));
                }
            } else {
                let granted = b.withdraw_at(at);
                prop_assert_eq!(granted, balance >= 1000, "op {} at {}: balance {}", i, tenths, balance);
                if granted {
                    events.push((open, -1000));
                }
            }
            let balance: i64 = reserve
                + events.iter().filter(|(e, _)| open - e <= 10).map(|(_, u)| u).sum::<i64>();
            prop_assert_eq!(b.available_at(at), u64::try_from(balance.max(0) / 1000).unwrap());
        }
    }
}

/// Threads deposit and withdraw while others close windows under them (each thread moves
/// through windows 0 to 9 at its own pace, so closings race with every deposit and
/// withdrawal): at the end, with nothing expired yet, every deposit is either spent by a
/// granted withdrawal or still there.
#[test]
fn threads_lose_nothing_while_windows_close() {
    const THREADS: usize = 4;
    const ROUNDS: u64 = 5_000;
    for _trial in 0..5 {
        // An hour's TTL: windows of 6 minutes, reached here through injected instants.
        let b = budget(Duration::from_secs(3600), 0, 1.0);
        let window = Duration::from_secs(360);
        let barrier = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (b, barrier) = (b.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut granted = 0u64;
                    for i in 0..ROUNDS {
                        let epoch = u32::try_from((i * 10 / ROUNDS + t as u64) % 10).unwrap();
                        let at = b.start() + window * epoch;
                        b.deposit_at(at);
                        // Two tries for one deposit: at most one can be paid for.
                        granted += u64::from(b.withdraw_at(at));
                        granted += u64::from(b.withdraw_at(at));
                    }
                    granted
                })
            })
            .collect();
        let granted: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let deposits = THREADS as u64 * ROUNDS;
        let left = b.available_at(b.start() + window * 9);
        assert_eq!(granted + left, deposits, "granted {granted}, left {left}");
    }
}

#[test]
fn clones_share_one_budget_across_threads() {
    let b = budget(Duration::from_secs(60), 0, 1.0);
    let at = Instant::now();
    let depositors: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || (0..1000).for_each(|_| b.deposit_at(at)))
        })
        .collect();
    depositors.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(b.available_at(at), 4000);
}
