//! The crate's error types in one vocabulary: a spent budget says its phase the same way in
//! `RunError`, `WithinError` and `RefreshError` (`Display`, `Spent::phase`, `io::Error`), and
//! every error prints a cause in its `Display` or returns it from `source()`, never both.

mod common;

use std::error::Error;
use std::io;
use std::time::Duration;

use loopguard::deadline::{Deadline, Expired, Phase, Spent};
use loopguard::pool::{Pool, RunError, TryRunError, WithinError};
use loopguard::refresh::RefreshError;
use loopguard::retry::{AttemptError, RetryError};
use loopguard::shield::{Shield, ShieldError};

/// A caused error with a cause of its own, to see what a wrapper forwards.
#[derive(Debug)]
struct Outer(Inner);

#[derive(Debug)]
struct Inner;

impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("database refused the query")
    }
}

impl std::fmt::Display for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("password rejected")
    }
}

impl Error for Outer {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

impl Error for Inner {}

/// Walks the chain as a reporter (anyhow's `{:#}`, `eyre`) does: no link's `Display` may
/// already contain the next link's, or the cause is printed twice. Returns the chain.
fn chain(err: &(dyn Error + 'static)) -> Vec<String> {
    let mut texts = vec![err.to_string()];
    let mut current = err;
    while let Some(next) = current.source() {
        let (outer, inner) = (current.to_string(), next.to_string());
        assert!(
            !outer.contains(&inner),
            "{outer:?} prints its source {inner:?} and returns it from source() too"
        );
        texts.push(inner);
        current = next;
    }
    texts
}

async fn panicked() -> loopguard::Panicked {
    let pool = Pool::builder().workers(1).build().unwrap();
    match pool
        .run(|| -> u8 { panic!("expected boom, for the chain") })
        .await
    {
        Err(RunError::Panicked(p)) => p,
        other => panic!("expected a panic, got {other:?}"),
    }
}

#[test]
fn no_error_prints_its_source_and_returns_it_too() {
    futures_lite::future::block_on(async {
        let p = panicked().await;
        let in_line = Spent::new(Phase::InLine);
        let running = Spent::new(Phase::Running);
        let errors: Vec<Box<dyn Error + 'static>> = vec![
            Box::new(RunError::Panicked(p.clone())),
            Box::new(RunError::Expired(in_line)),
            Box::new(RunError::Closed),
            Box::new(WithinError::<()>::Panicked(p.clone())),
            Box::new(WithinError::<()>::Expired(running)),
            Box::new(RefreshError::Failed(Outer(Inner))),
            Box::new(RefreshError::<Outer>::Panicked(p.clone())),
            Box::new(RefreshError::<Outer>::Expired(in_line)),
            Box::new(ShieldError::Panicked(p.clone())),
            Box::new(RetryError::Exhausted {
                attempts: 2,
                last: AttemptError::Failed(Outer(Inner)),
            }),
            Box::new(AttemptError::Failed(Outer(Inner))),
            Box::new(io::Error::from(RunError::Expired(running))),
            Box::new(io::Error::from(WithinError::<()>::Panicked(p.clone()))),
            Box::new(Expired),
            Box::new(in_line),
        ];
        for err in &errors {
            chain(err.as_ref());
        }
        // What each shows, once: the collection's error in `Display`, its cause next.
        let failed = RefreshError::Failed(Outer(Inner));
        assert_eq!(
            chain(&failed),
            [
                "collection failed: database refused the query",
                "password rejected"
            ]
        );
        // A retry names its count, the attempt its kind, the error comes next.
        let retried = RetryError::Exhausted {
            attempts: 2,
            last: AttemptError::Failed(Outer(Inner)),
        };
        assert_eq!(
            chain(&retried),
            [
                "all 2 attempts failed",
                "attempt failed",
                "database refused the query",
                "password rejected"
            ]
        );
        // A panic is shown by its wrapper, with no second link saying it again.
        assert_eq!(
            chain(&RunError::Panicked(p.clone())),
            ["job panicked: expected boom, for the chain"]
        );
        assert_eq!(
            chain(&ShieldError::Panicked(p)),
            ["shielded work panicked: expected boom, for the chain"]
        );
    });
}

#[test]
fn a_spent_budget_says_its_phase_the_same_way_everywhere() {
    let in_line = Spent::new(Phase::InLine);
    let running = Spent::new(Phase::Running);
    assert_eq!(in_line.phase(), Phase::InLine);
    assert_eq!(running.phase(), Phase::Running);
    assert_eq!(
        in_line.to_string(),
        "deadline expired in line, before the job started"
    );
    assert_eq!(running.to_string(), "deadline expired while the job ran");
    for spent in [in_line, running] {
        let text = spent.to_string();
        assert_eq!(RunError::Expired(spent).to_string(), text);
        assert_eq!(WithinError::<()>::Expired(spent).to_string(), text);
        assert_eq!(RefreshError::<String>::Expired(spent).to_string(), text);
        assert_eq!(
            RefreshError::<String>::from(spent),
            RefreshError::Expired(spent)
        );
        let io: io::Error = WithinError::<()>::Expired(spent).into();
        assert_eq!(io.kind(), io::ErrorKind::TimedOut);
        assert_eq!(io.to_string(), text);
        let inner = io.get_ref().and_then(|e| e.downcast_ref::<Spent>());
        assert_eq!(inner.map(Spent::phase), Some(spent.phase()));
        // A spent budget is an `Expired` with a place: `?` into the bare error works.
        let bare: Expired = spent.into();
        assert_eq!(bare, Expired);
    }
    assert_eq!(
        format!("{:?}", WithinError::<()>::Expired(running)),
        "Expired(Spent { phase: Running })"
    );
}

/// The phase each real path reports, on every executor: expired on entry and in the queue
/// are `InLine`; expiry while the job runs, or a result that lands late, is `Running`.
mod phases {
    use super::*;
    use common::{Latch, bounded};

    const LIMIT: Duration = Duration::from_secs(10);

    on_every_executor! {
        async fn each_path_reports_its_own_phase() {
            let pool = Pool::builder().workers(1).build().unwrap();
            let past = Deadline::after(Duration::ZERO);
            assert_eq!(pool.run_within(past, || ()).await, Err(RunError::Expired(Spent::new(Phase::InLine))));
            let entry = pool.try_run_within(past, || ()).await;
            assert!(matches!(entry, Err(WithinError::Expired(s)) if s.phase() == Phase::InLine), "{entry:?}");

            let release = Latch::new();
            let r = release.clone();
            let budget = Deadline::after(Duration::from_millis(40));
            let holder = pool.try_run_within(budget, move || r.wait());
            let queued = pool.run_within(budget, || ());
            let (held, queued) = futures_lite::future::zip(bounded(LIMIT, holder), bounded(LIMIT, queued)).await;
            assert!(matches!(held, Err(WithinError::Expired(s)) if s.phase() == Phase::Running), "{held:?}");
            assert_eq!(queued, Err(RunError::Expired(Spent::new(Phase::InLine))));
            // A saturated `try_run_within` is a refusal, not a spent budget.
            match pool.try_run_within(Deadline::never(), || ()).await {
                Err(WithinError::Saturated(_)) => {}
                other => panic!("expected a refusal, got {other:?}"),
            }
            assert!(matches!(pool.try_run(|| ()), Err(TryRunError::Saturated(_))));
            release.open();
            pool.wait_idle().await;

            let shield = Shield::new("phases").unwrap();
            let (runner, handle) = shield.wrap(async { 1 });
            drop(runner);
            assert!(matches!(handle.await, Err(ShieldError::RunnerDropped)));
        }
    }
}
