//! A `for_pool` handler cannot deadlock on its own request's slot: `pool.run`,
//! `pool.run_within`, `pool.try_run` and `pool.try_run_within` from the handler, with no
//! other slot free, are refused at once with `OwnSlot` (which says to use `slot.try_run`)
//! instead of waiting for the slot the request itself holds. On every executor.
#![cfg(feature = "tower")]

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{Latch, bounded, hold};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use loopguard::deadline::Deadline;
use loopguard::pool::{Pool, RunError, TryRunError, WithinError};
use loopguard::tower::{AdmissionLayer, Slot};
use tower_layer::Layer;
use tower_service::Service;

const LIMIT: Duration = Duration::from_secs(10);

/// How the handler asks its own pool for work.
#[derive(Clone, Copy, Debug)]
enum Ask {
    Run,
    RunWithin,
    TryRun,
    TryRunWithin,
    /// `slot.try_run` twice: the second, with the slot busy, is an ordinary second
    /// admission (refused as `Saturated` by a full pool, never `OwnSlot`).
    SlotTwice,
}

/// A handler that asks its pool for one job the way `ask` says and answers with what it
/// got: `ok <value>` or the error's `Debug` and `Display`.
#[derive(Clone)]
struct Asker {
    pool: Pool,
    ask: Ask,
}

impl Service<Request<()>> for Asker {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        let slot = request
            .extensions()
            .get::<Slot>()
            .cloned()
            .expect("admitted");
        let (pool, ask) = (self.pool.clone(), self.ask);
        // Asked from `call` (try_run) and from the future (run), as handlers do.
        let now = match ask {
            Ask::TryRun => Some(match pool.try_run(|| 1_u8) {
                Ok(_) => "ok admitted".to_string(),
                Err(err) => format!("{err:?}: {err}"),
            }),
            _ => None,
        };
        Box::pin(async move {
            let body = match (ask, now) {
                (_, Some(body)) => body,
                (Ask::Run, _) => answer(pool.run(|| 2_u8).await),
                (Ask::RunWithin, _) => {
                    answer(pool.run_within(Deadline::after(LIMIT), || 3_u8).await)
                }
                (Ask::TryRunWithin, _) => {
                    match pool.try_run_within(Deadline::after(LIMIT), || 4_u8).await {
                        Ok(v) => format!("ok {v}"),
                        Err(err) => format!("{err:?}: {err}"),
                    }
                }
                (Ask::SlotTwice, _) => {
                    let release = Latch::new();
                    let r = release.clone();
                    let first = slot
                        .try_run(&pool, move || r.wait())
                        .expect("the request's own slot");
                    let second = match slot.try_run(&pool, || ()) {
                        Ok(_) => "ok admitted".to_string(),
                        Err(err) => format!("{err:?}: {err}"),
                    };
                    release.open();
                    first.await.unwrap();
                    second
                }
                (Ask::TryRun, None) => unreachable!("answered in `call`"),
            };
            Ok(Response::new(body))
        })
    }
}

fn answer(out: Result<u8, RunError>) -> String {
    match out {
        Ok(v) => format!("ok {v}"),
        Err(err) => format!("{err:?}: {err}"),
    }
}

async fn ask(pool: &Pool, ask: Ask) -> (String, Duration) {
    let layer = AdmissionLayer::for_pool(pool);
    let mut service = layer.layer(Asker {
        pool: pool.clone(),
        ask,
    });
    let began = Instant::now();
    let response = bounded(LIMIT, service.call(Request::new(())))
        .await
        .unwrap();
    let took = began.elapsed();
    assert_eq!(response.status(), StatusCode::OK, "admitted");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (String::from_utf8(body.to_vec()).unwrap(), took)
}

const OWN_SLOT: &str = "this request holds one of the pool's slots and none other is free: \
                        run the job on it with `slot.try_run(&pool, job)`";

on_every_executor! {
    async fn a_handler_holding_the_only_slot_is_told_to_use_it() {
        let pool = Pool::builder().name("own-slot").workers(1).build().unwrap();
        for (how, shown) in [
            (Ask::Run, "OwnSlot"),
            (Ask::RunWithin, "OwnSlot"),
            (Ask::TryRun, "OwnSlot(..)"),
            (Ask::TryRunWithin, "OwnSlot(..)"),
        ] {
            let (body, took) = ask(&pool, how).await;
            assert_eq!(body, format!("{shown}: {OWN_SLOT}"), "{how:?}");
            // At once: not at the deadline (10 s), nor at the bound.
            assert!(took < Duration::from_secs(2), "{how:?} took {took:?}");
            pool.wait_idle().await;
            assert_eq!((pool.in_use(), pool.waiting()), (0, 0), "{how:?}");
        }
        // A second job on the busy slot is an ordinary second admission: `Saturated`.
        let (body, _) = ask(&pool, Ask::SlotTwice).await;
        assert!(body.starts_with("Saturated("), "{body}");
        pool.wait_idle().await;
        // Outside a handler the pool is as before: `run` waits its turn.
        let release = Latch::new();
        let busy = hold(&pool, &release);
        assert!(matches!(pool.try_run(|| ()), Err(TryRunError::Saturated(_))));
        let mut waiting = Box::pin(pool.run(|| 5_u8));
        assert!(common::poll_once(&mut waiting).await.is_none(), "queued");
        release.open();
        busy.await.unwrap();
        assert_eq!(bounded(LIMIT, waiting).await, Ok(5));
    }
}

on_every_executor! {
    async fn a_free_slot_is_still_taken_and_a_full_pool_refuses_whoever_holds_one() {
        let pool = Pool::builder().name("own-slot-two").workers(2).build().unwrap();
        // A free second slot: the handler's own `run` takes it, as before.
        let (body, _) = ask(&pool, Ask::Run).await;
        assert_eq!(body, "ok 2");
        let (body, _) = ask(&pool, Ask::TryRunWithin).await;
        assert_eq!(body, "ok 4");
        pool.wait_idle().await;
        // The other slot held elsewhere: nothing free, and this request holds one.
        let release = Latch::new();
        let busy = hold(&pool, &release);
        let (body, took) = ask(&pool, Ask::RunWithin).await;
        assert_eq!(body, format!("OwnSlot: {OWN_SLOT}"));
        assert!(took < Duration::from_secs(2), "took {took:?}");
        release.open();
        busy.await.unwrap();
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
    }
}

#[test]
fn own_slot_errors_say_what_to_do_and_hand_the_job_back() {
    let refused: TryRunError<fn() -> u8> = TryRunError::OwnSlot(|| 9);
    assert!(!refused.is_saturated() && !refused.is_closed());
    assert_eq!(refused.retry_after(), None, "retrying will not help");
    let io: std::io::Error = TryRunError::OwnSlot(|| ()).into();
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(refused.into_inner()(), 9);
    let within: WithinError<()> = TryRunError::OwnSlot(()).into();
    assert!(matches!(within, WithinError::OwnSlot(())));
    assert_eq!(RunError::OwnSlot.to_string(), OWN_SLOT);
}
