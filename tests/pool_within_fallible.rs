//! `Pool::try_run_within` with a `Fallible` job resolves flat: the job's `Ok` value, or its
//! own `Err` in `WithinError::Failed`, beside the pool's refusals, so a scrape is one
//! `match`. A plain job's output (a `Result` included) is returned as it is.

mod common;

use std::error::Error as _;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Latch, bounded, quiet_expected_panics, recording};
use futures_lite::future;
use loopguard::Fallible;
use loopguard::deadline::{Deadline, Phase, Spent};
use loopguard::operation::{Classify, Outcome};
use loopguard::orphan::ReportKind;
use loopguard::pool::{Pool, WithinError};

const LIMIT: Duration = Duration::from_secs(30);

on_every_executor! {
    async fn a_fallible_job_resolves_to_its_value_or_its_own_error() {
        let (handler, seen) = recording();
        let pool = Pool::builder().workers(1).on_orphan(handler).build().unwrap();

        // `Ok`: the value itself, not `Ok(Ok(..))`.
        let out: Result<u8, WithinError<_, String>> =
            bounded(LIMIT, pool.try_run_within(Deadline::never(), Fallible(|| Ok(7)))).await;
        assert!(matches!(out, Ok(7)), "{out:?}");

        // `Err`: the job's own error, in `Failed`, returned rather than reported.
        let out = bounded(
            LIMIT,
            pool.try_run_within(Deadline::never(), Fallible(|| Err::<u8, _>("no rows".to_string()))),
        )
        .await;
        match out {
            Err(WithinError::Failed(err)) => assert_eq!(err, "no rows"),
            other => panic!("expected the job's own error, got {other:?}"),
        }
        pool.wait_idle().await;
        assert!(seen.lock().unwrap().is_empty(), "returned, so not reported");
        let stats = pool.stats();
        assert_eq!((stats.jobs_ok, stats.jobs_error), (1, 1));
    }
}

on_every_executor! {
    async fn a_fallible_job_keeps_the_other_arms() {
        quiet_expected_panics();
        let (handler, seen) = recording();
        let pool = Pool::builder().workers(1).on_orphan(handler).build().unwrap();

        // A panic is `Panicked`, not `Failed`.
        let out = bounded(
            LIMIT,
            pool.try_run_within(Deadline::never(), Fallible(|| -> Result<u8, String> { panic!("expected boom") })),
        )
        .await;
        assert!(matches!(&out, Err(WithinError::Panicked(p)) if p.message() == "expected boom"), "{out:?}");

        // Saturated at the first poll: the `Fallible` job comes back inside.
        let release = Arc::new(Latch::new());
        let r = release.clone();
        let busy = pool.try_run(move || r.wait()).unwrap();
        match pool.try_run_within(Deadline::never(), Fallible(|| Ok::<u8, String>(3))).await {
            Err(WithinError::Saturated(refused)) => assert_eq!((refused.into_inner().0)(), Ok(3)),
            other => panic!("expected a refusal, got {other:?}"),
        }
        release.open();
        busy.await.unwrap();
        pool.wait_idle().await;

        // An `Err` that lands after the deadline: `Expired`, and the error goes to the
        // orphan handler, once.
        let release = Arc::new(Latch::new());
        let r = release.clone();
        let deadline = Deadline::after(Duration::from_millis(300));
        let walk = pool.try_run_within(
            deadline,
            Fallible(move || {
                r.wait();
                Err::<u8, _>("late".to_string())
            }),
        );
        let mut walk = Box::pin(walk);
        assert!(future::poll_once(walk.as_mut()).await.is_none(), "admitted and running");
        while !deadline.is_expired() {
            std::hint::spin_loop();
        }
        release.open();
        pool.wait_idle().await;
        let out = bounded(LIMIT, walk).await;
        assert!(matches!(out, Err(WithinError::Expired(s)) if s == Spent::new(Phase::Running)), "{out:?}");
        pool.wait_idle().await;
        let reports: Vec<_> = seen.lock().unwrap().iter().map(|r| (r.kind(), r.message().to_string())).collect();
        assert_eq!(reports, [(ReportKind::Failed, "\"late\"".to_string())]);
        assert_eq!(pool.in_use(), 0);

        // A budget already spent: nothing starts.
        let out = pool.try_run_within(Deadline::at(Instant::now()), Fallible(|| Err::<u8, _>("never".to_string()))).await;
        assert!(matches!(out, Err(WithinError::Expired(s)) if s == Spent::new(Phase::InLine)), "{out:?}");

        // Closed: the `Fallible` job comes back inside.
        pool.close();
        match pool.try_run_within(Deadline::never(), Fallible(|| Ok::<u8, String>(4))).await {
            Err(WithinError::Closed(job)) => assert_eq!((job.0)(), Ok(4)),
            other => panic!("expected Closed, got {other:?}"),
        }
        assert_eq!(seen.lock().unwrap().len(), 1, "nothing more reported");
    }
}

on_every_executor! {
    async fn a_plain_job_returning_a_result_is_an_ordinary_value() {
        let pool = Pool::builder().workers(1).build().unwrap();
        // No `Fallible`: the `Result` is the output, and the error type is `Infallible`.
        let out: Result<Result<u8, &str>, WithinError<_>> =
            bounded(LIMIT, pool.try_run_within(Deadline::never(), || Err::<u8, _>("plain"))).await;
        assert!(matches!(out, Ok(Err("plain"))), "{out:?}");
        assert_eq!(pool.stats().jobs_error, 0, "a plain job's `Err` is no failure");
    }
}

#[test]
fn the_job_s_own_error_is_displayed_once_classified_and_converted() {
    let inner = io::Error::new(io::ErrorKind::NotFound, "no registry");
    let failed = WithinError::<(), io::Error>::Failed(io::Error::other(inner));
    // `Display` prints the job's error, so `source()` is that error's own source.
    assert_eq!(failed.to_string(), "job failed: no registry");
    assert_eq!(failed.source().map(|s| s.to_string()), None::<String>);
    let chained =
        WithinError::<(), Chained>::Failed(Chained(io::Error::from(io::ErrorKind::NotFound)));
    assert_eq!(chained.to_string(), "job failed: the walk failed");
    assert_eq!(
        chained.source().unwrap().to_string(),
        io::Error::from(io::ErrorKind::NotFound).to_string()
    );
    assert_eq!(format!("{chained:?}"), "Failed(Chained(Kind(NotFound)))");

    // An operation counts it as an error, not a success.
    assert_eq!(
        Err::<(), _>(WithinError::<(), _>::Failed("x".to_string())).outcome(),
        Outcome::Error
    );

    // As an `io::Error`: `Other`, wrapping the job's error.
    let io: io::Error = WithinError::<(), _>::Failed("no rows".to_string()).into();
    assert_eq!(
        (io.kind(), io.to_string()),
        (io::ErrorKind::Other, "no rows".to_string())
    );
}

/// An error with a source of its own, which `Display` does not print.
#[derive(Debug)]
struct Chained(io::Error);

impl std::fmt::Display for Chained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the walk failed")
    }
}

impl std::error::Error for Chained {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}
