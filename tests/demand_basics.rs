//! `Demand`: the worked cases and edge cases, all with explicit instants.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::assert_close;
use loopguard::demand::{Demand, DemandGuard};

const WINDOW: Duration = Duration::from_secs(5);

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn tracker() -> (Demand, Instant) {
    let t0 = Instant::now();
    (Demand::new_at(WINDOW, t0).unwrap(), t0)
}

#[test]
fn one_holder_throughout_is_one() {
    let (d, t0) = tracker();
    d.add_at(t0, 1);
    assert_close(d.average_at(t0 + WINDOW), 1.0);
    assert_close(d.average_at(t0 + secs(12.345)), 1.0);
}

#[test]
fn one_holder_and_two_waiters_is_three() {
    let (d, t0) = tracker();
    let _holder = d.enter_at(t0);
    let _waiter_a = d.enter_at(t0);
    let _waiter_b = d.enter_at(t0);
    assert_eq!(d.level(), 3);
    assert_close(d.average_at(t0 + WINDOW), 3.0);
}

#[test]
fn three_for_one_second_then_idle_is_point_six() {
    let (d, t0) = tracker();
    d.add_at(t0, 3);
    d.add_at(t0 + secs(1.0), -3);
    assert_close(d.average_at(t0 + WINDOW), 0.6);
}

#[test]
fn burst_shorter_than_window_counts_in_proportion() {
    let (d, t0) = tracker();
    d.add_at(t0 + secs(1.0), 2);
    d.add_at(t0 + secs(1.5), -2);
    // Startup: 1 level-second over 3 elapsed seconds.
    assert_close(d.average_at(t0 + secs(3.0)), 1.0 / 3.0);
    assert_close(d.average_at(t0 + WINDOW), 0.2);
    assert_close(d.average_at(t0 + secs(6.0)), 0.2);
}

#[test]
fn cancelled_waiter_stops_counting() {
    let (d, t0) = tracker();
    let _holder = d.enter_at(t0);
    let waiter = d.enter_at(t0);
    waiter.leave_at(t0 + secs(1.0)); // the waiter gives up after a second
    assert_eq!(d.level(), 1);
    assert_close(d.average_at(t0 + WINDOW), 1.2);
}

#[test]
fn guard_dropped_with_its_future_or_by_panic_leaves() {
    let demand = Demand::default();
    let guard = demand.enter();
    let mut waiting = Box::pin(async move {
        let _guard: DemandGuard = guard;
        futures_lite::future::pending::<()>().await;
    });
    let polled = futures_lite::future::block_on(futures_lite::future::poll_once(&mut waiting));
    assert!(polled.is_none());
    assert_eq!(demand.level(), 1);
    drop(waiting); // cancellation
    assert_eq!(demand.level(), 0);

    let result = catch_unwind(AssertUnwindSafe(|| {
        let _guard = demand.enter();
        panic!("worker failed");
    }));
    assert!(result.is_err());
    assert_eq!(demand.level(), 0);
}

#[test]
fn activity_older_than_the_window_disappears() {
    let (d, t0) = tracker();
    d.add_at(t0, 3);
    d.add_at(t0 + secs(1.0), -3);
    assert_close(d.average_at(t0 + secs(5.5)), 0.3); // half of it is still inside
    assert_eq!(d.average_at(t0 + secs(6.0)), 0.0);
    assert_eq!(d.average_at(t0 + secs(3600.0)), 0.0);
    // The ring is reused correctly after a long gap.
    d.add_at(t0 + secs(3600.0), 1);
    assert_close(d.average_at(t0 + secs(3602.5)), 0.5);
    assert_close(d.average_at(t0 + secs(3610.0)), 1.0);
}

#[test]
fn startup_denominator_is_elapsed_time() {
    let (d, t0) = tracker();
    assert_eq!(d.average_at(t0), 0.0); // zero elapsed time
    d.add_at(t0, 1);
    assert_eq!(d.average_at(t0), 0.0);
    assert_close(d.average_at(t0 + secs(1.0)), 1.0);
    d.add_at(t0 + secs(1.0), -1);
    assert_close(d.average_at(t0 + secs(2.0)), 0.5);
    assert_close(d.average_at(t0 + secs(4.0)), 0.25);
}

#[test]
fn out_of_order_instants_are_clamped() {
    let (d, t0) = tracker();
    d.add_at(t0 + secs(2.0), 1);
    d.add_at(t0 + secs(1.0), -1); // earlier than the last event: taken as t0 + 2 s
    assert_eq!(d.level(), 0);
    assert_eq!(d.average_at(t0 + WINDOW), 0.0);
    // A read before the last event reads at the last event.
    d.add_at(t0 + secs(3.0), 1);
    d.add_at(t0 + secs(4.0), -1);
    assert_close(d.average_at(t0), d.average_at(t0 + secs(4.0)));
    // An instant before the start is clamped too.
    let late = Demand::new_at(WINDOW, t0 + secs(10.0)).unwrap();
    late.add_at(t0, 1);
    assert_close(late.average_at(t0 + secs(15.0)), 1.0);
}

#[test]
fn negative_level_saturates_at_zero() {
    let (d, t0) = tracker();
    d.add_at(t0, -5);
    d.add_at(t0, isize::MIN);
    assert_eq!(d.level(), 0);
    assert_eq!(d.average_at(t0 + WINDOW), 0.0);
    d.add_at(t0, 1);
    assert_eq!(d.level(), 1);
    assert_close(d.average_at(t0 + WINDOW), 1.0);
}

#[test]
fn invalid_windows_are_rejected() {
    let zero = Demand::new(Duration::ZERO).unwrap_err();
    assert_eq!(zero.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(zero.to_string(), "demand window must be greater than zero");
    let huge: std::io::Error = Demand::new(Duration::MAX).unwrap_err();
    assert!(huge.to_string().starts_with("demand window of "));
    let just_over = Duration::from_nanos(u64::MAX) + Duration::from_nanos(1);
    assert!(Demand::new(just_over).is_err());
    let _: &dyn std::error::Error = &huge;
    assert!(Demand::new(Duration::from_nanos(1)).is_ok());
    assert!(Demand::new(Duration::from_nanos(u64::MAX)).is_ok());
    assert_eq!(Demand::default().window(), Duration::from_secs(5));
}

#[test]
fn constant_level_reads_exactly_for_odd_windows() {
    for window in [
        secs(1.0),
        Duration::from_nanos(1_000_000_007),
        Duration::from_nanos(7),
        secs(61.0),
    ] {
        let t0 = Instant::now();
        let d = Demand::new_at(window, t0).unwrap();
        d.add_at(t0, 2);
        for k in 1..40u32 {
            let at = t0 + window + window * k / 13 + Duration::from_nanos(u64::from(k));
            assert_close(d.average_at(at), 2.0);
        }
    }
}

#[test]
fn many_events_keep_memory_and_precision() {
    let (d, t0) = tracker();
    // Alternate 1 and 0 every millisecond for 20 s: 20,000 events.
    for ms in 0..20_000u64 {
        d.add_at(
            t0 + Duration::from_millis(ms),
            if ms % 2 == 0 { 1 } else { -1 },
        );
    }
    assert_close(d.average_at(t0 + Duration::from_millis(20_000)), 0.5);
    assert!(std::mem::size_of::<Demand>() < 4096);
}

#[test]
fn shared_across_threads() {
    let demand = Demand::default();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (demand, barrier) = (demand.clone(), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..1000 {
                    let _guard = demand.enter();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(demand.level(), 0);
    assert!(format!("{demand:?}").contains("level: 0"));
}

#[test]
fn auto_traits() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Demand>();
    send_sync::<DemandGuard>();
    fn is_static<T: 'static>() {}
    is_static::<DemandGuard>();
}

// The history against an exact reference, within the documented bound, for a pool's and
// a key's ring sizes: `src/demand.rs`'s unit test
// `a_pool_history_and_a_key_history_keep_their_documented_bounds`.
