//! Every pool tracks its demand (holders + waiters, time-weighted), and every way a caller
//! ends removes what it added: release, cancellation while waiting, expiry, panic, close.

mod common;

use std::time::Duration;

use common::{Latch, bounded, hold, poll_once};
use loopguard::deadline::Deadline;
use loopguard::pool::Pool;

const WINDOW: Duration = Duration::from_millis(80);
const LIMIT: Duration = Duration::from_secs(30);

fn pool(workers: usize) -> Pool {
    Pool::builder()
        .name("demand")
        .workers(workers)
        .demand_window(WINDOW)
        .no_stuck_reports()
        .build()
        .unwrap()
}

/// Lets a whole window pass (time is the thing under test): afterwards the average equals
/// the level that held throughout, so a leaked unit of demand reads 1.0 instead of 0.
async fn a_window_later(pool: &Pool) -> f64 {
    async_io::Timer::after(WINDOW * 2).await;
    pool.demand()
}

on_every_executor! {
    async fn holders_and_waiters_count_and_every_exit_removes_them() {
        let pool = pool(1);
        let release = Latch::new();
        let holder = hold(&pool, &release);

        // Two waiters: one will be cancelled, one expires.
        let mut cancelled = pool.run(|| ());
        let mut expiring = pool.run_within(Deadline::after(WINDOW / 2), || ());
        assert!(poll_once(&mut cancelled).await.is_none());
        assert!(poll_once(&mut expiring).await.is_none());

        // Holder + two waiters for a while: the average climbs towards 3.
        async_io::Timer::after(WINDOW / 4).await;
        let busy = pool.demand();
        assert!(busy > 1.0, "holder plus waiters should read above 1, got {busy}");

        drop(cancelled);
        assert!(bounded(LIMIT, expiring).await.is_err());
        // A panicking job releases its demand too.
        release.open();
        holder.await.unwrap();
        assert!(pool.run(|| -> () { panic!("boom") }).await.is_err());
        pool.wait_idle().await;

        let idle = a_window_later(&pool).await;
        assert_eq!(idle, 0.0, "demand leaked: {idle}");
    }
}

on_every_executor! {
    async fn closing_fails_waiters_without_leaking_demand() {
        let pool = pool(1);
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut waiter = pool.run(|| ());
        assert!(poll_once(&mut waiter).await.is_none());
        pool.close();
        assert!(waiter.await.is_err());
        release.open();
        holder.await.unwrap();
        pool.wait_idle().await;
        assert_eq!(a_window_later(&pool).await, 0.0);
    }
}

on_every_executor! {
    async fn one_holder_throughout_reads_one() {
        let pool = pool(2);
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let steady = a_window_later(&pool).await;
        assert!((steady - 1.0).abs() < 0.05, "one holder throughout should read 1, got {steady}");
        release.open();
        holder.await.unwrap();
    }
}

#[test]
fn an_invalid_demand_window_is_an_error() {
    let err = Pool::builder()
        .demand_window(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("demand window"), "{err}");
}
