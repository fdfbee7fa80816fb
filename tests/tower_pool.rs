//! One gate from the HTTP edge to the worker thread: `AdmissionLayer::for_pool` admits
//! requests on the pool's own slots, the handler runs its job on the request's slot, and a
//! standalone layer emits a pool's admission series under its name. In process, on every
//! executor: the layer's service is called directly, as a server would.
#![cfg(feature = "tower")]

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use common::{Latch, MapRecorder, hold};
use http::{Request, Response, StatusCode};
use loopguard::pool::{Job, Pool};
use loopguard::tower::{AdmissionLayer, Slot};
use tower_layer::Layer;
use tower_service::Service;

// The series names, as a dashboard or alert spells them.
const POOL_CAPACITY: &str = "loopguard_pool_capacity";
const POOL_IN_USE: &str = "loopguard_pool_in_use";
const POOL_REJECTED_TOTAL: &str = "loopguard_pool_rejected_total";
const POOL_WAITING: &str = "loopguard_pool_waiting";

/// A handler that runs a job on the request's slot and hands the `Job` out, so the test
/// decides when it finishes (the job waits for a latch).
#[derive(Clone)]
struct OnSlot {
    pool: Pool,
    release: Latch,
    jobs: Arc<Mutex<Vec<Job<()>>>>,
    /// Whether each job was admitted: `Slot::try_run` succeeded.
    ran: Arc<Mutex<Vec<bool>>>,
    /// Jobs the handler starts per request.
    per_request: usize,
}

impl Service<Request<()>> for OnSlot {
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
        for _ in 0..self.per_request {
            let release = self.release.clone();
            let job = slot.try_run(&self.pool, move || release.wait());
            self.ran.lock().unwrap().push(job.is_ok());
            if let Ok(job) = job {
                self.jobs.lock().unwrap().push(job);
            }
        }
        Box::pin(async { Ok(Response::new("walked".to_string())) })
    }
}

fn handler(pool: &Pool) -> OnSlot {
    OnSlot {
        pool: pool.clone(),
        release: Latch::new(),
        jobs: Arc::default(),
        ran: Arc::default(),
        per_request: 1,
    }
}

on_every_executor! {
    async fn a_pools_layer_admits_on_the_pools_own_slots_and_counts_its_refusals() {
        let pool = Pool::builder().name("edge-pool").workers(1).build().unwrap();
        let inner = handler(&pool);
        let layer = AdmissionLayer::for_pool(&pool);
        let mut service = layer.layer(inner.clone());

        // Admitted on the pool's only slot; the job runs on that slot, no second admission.
        let response = service.call(Request::new(())).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(*inner.ran.lock().unwrap(), [true]);
        assert_eq!((pool.in_use(), layer.in_use()), (1, 1), "one slot for request and job");

        // The pool sees the request: a job of its own is refused, and so is a second request,
        // counted as the pool's refusal.
        assert!(pool.try_run(|| ()).unwrap_err().is_saturated());
        let refused = service.call(Request::new(())).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.headers().contains_key(http::header::RETRY_AFTER));
        assert_eq!(pool.stats().rejected, 2);
        assert_eq!(layer.rejected(), 2);

        // The slot comes back when both the body and the job are done, whichever is last.
        drop(response);
        assert_eq!(pool.in_use(), 1, "the job still runs on the request's slot");
        inner.release.open();
        let job = inner.jobs.lock().unwrap().pop().unwrap();
        job.await.unwrap();
        pool.wait_idle().await;
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
    }
}

on_every_executor! {
    async fn a_slot_runs_one_job_at_a_time_and_a_second_goes_through_the_pool() {
        // Two jobs from one request: the first on the request's slot, the second, with the
        // slot busy, through `pool.try_run`: refused by a one-worker pool, admitted on the
        // free slot of a two-worker one.
        for (workers, second_admitted) in [(1, false), (2, true)] {
            let pool = Pool::builder().name("edge-once").workers(workers).build().unwrap();
            let layer = AdmissionLayer::for_pool(&pool);
            let mut inner = handler(&pool);
            inner.per_request = 2;
            let mut service = layer.layer(inner.clone());
            let response = service.call(Request::new(())).await.unwrap();
            assert_eq!(*inner.ran.lock().unwrap(), [true, second_admitted]);
            assert_eq!(pool.in_use(), workers);
            inner.release.open();
            let jobs: Vec<Job<()>> = inner.jobs.lock().unwrap().drain(..).collect();
            for job in jobs {
                job.await.unwrap();
            }
            drop(response);
            pool.wait_idle().await;
            assert_eq!(pool.in_use(), 0);
        }
    }
}

on_every_executor! {
    async fn a_slot_of_another_pool_or_layer_runs_its_job_through_the_pool() {
        let pool = Pool::builder().name("walks").workers(1).build().unwrap();
        let layer = AdmissionLayer::new("edge-own", 1).unwrap();
        let inner = handler(&pool);
        let mut service = layer.layer(inner.clone());
        let response = service.call(Request::new(())).await.unwrap();
        // Not a pool slot: the job was admitted by the pool itself, on its own slot.
        assert_eq!(*inner.ran.lock().unwrap(), [true]);
        assert_eq!((layer.in_use(), pool.in_use()), (1, 1));
        inner.release.open();
        let job = inner.jobs.lock().unwrap().pop().unwrap();
        job.await.unwrap();
        pool.wait_idle().await;
        assert_eq!(layer.in_use(), 1, "the body still holds the layer's slot");
        drop(response);
        layer.wait_idle().await;

        // With the pool busy, the handler's job is refused: two limits that know nothing
        // of each other, which is what `for_pool` avoids.
        let release = Latch::new();
        let busy = hold(&pool, &release);
        let response = service.call(Request::new(())).await.unwrap();
        assert_eq!(*inner.ran.lock().unwrap(), [true, false]);
        drop(response);
        release.open();
        busy.await.unwrap();
    }
}

#[test]
fn a_standalone_layer_emits_a_pools_admission_series_under_its_name() {
    let recorder = MapRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let layer = AdmissionLayer::new("edge", 1).unwrap();
        let inner = handler(&Pool::builder().name("edge-walks").build().unwrap());
        inner.release.open();
        let mut service = layer.layer(inner);
        futures_lite::future::block_on(async {
            let held = service.call(Request::new(())).await.unwrap();
            for _ in 0..3 {
                let refused = service.call(Request::new(())).await.unwrap();
                assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
            }
            layer.publish_metrics();
            let series = |name: &str| recorder.get(&format!("{name}{{pool=edge}}"));
            assert_eq!(series(POOL_CAPACITY), Some(1.0f64.to_bits()));
            assert_eq!(series(POOL_IN_USE), Some(1.0f64.to_bits()));
            assert_eq!(series(POOL_WAITING), Some(0.0f64.to_bits()));
            assert_eq!(series(POOL_REJECTED_TOTAL), Some(3));
            drop(held);
            layer.publish_metrics();
            assert_eq!(series(POOL_IN_USE), Some(0.0f64.to_bits()));
        });
    });
}

/// A handler that awaits one job (sleeping `job`) on the request's slot and at once starts
/// the next, `rounds` times per request: each job runs on the request's own slot (never
/// refused, never a second pool slot), because the worker marks the lent slot free before
/// it wakes the handler.
#[derive(Clone)]
struct BackToBack {
    pool: Pool,
    rounds: usize,
    job: Duration,
}

impl Service<Request<()>> for BackToBack {
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
        let (pool, rounds, sleep) = (self.pool.clone(), self.rounds, self.job);
        Box::pin(async move {
            for round in 0..rounds {
                // Read inside the job: the request's slot is the only one held.
                let observer = pool.clone();
                let work = move || {
                    std::thread::sleep(sleep);
                    observer.in_use()
                };
                let job = match slot.try_run(&pool, work) {
                    Ok(job) => job,
                    Err(err) => panic!("round {round}: the second job was refused: {err}"),
                };
                let in_use = job.await.expect("the job ran");
                assert_eq!(in_use, 1, "round {round}: the job took a second pool slot");
            }
            Ok(Response::new(format!("{rounds} jobs")))
        })
    }
}

on_every_executor! {
    async fn jobs_back_to_back_on_a_requests_slot_are_never_refused_nor_take_a_second_slot() {
        // A full 1-worker pool (the request holds its only slot), and a 2-worker pool where
        // a job that missed the request's slot would take the free one.
        for workers in [1, 2] {
            let pool = Pool::builder().name("edge-back-to-back").workers(workers).build().unwrap();
            let layer = AdmissionLayer::for_pool(&pool);
            let mut service = layer.layer(BackToBack { pool: pool.clone(), rounds: 5_000, job: Duration::ZERO });
            for _ in 0..2 {
                let response = service.call(Request::new(())).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                assert_eq!(pool.stats().rejected, 0);
                drop(response);
            }
            pool.wait_idle().await;
            assert_eq!(pool.in_use(), 0);
        }
    }
}

on_every_executor! {
    async fn under_for_pool_the_retry_after_basis_is_the_jobs_time_not_the_requests_hold() {
        // Each request runs a 30 ms job on its slot and then holds the slot for 600 ms more
        // (a slow response body, or a slow service around the job). The pool's
        // `Retry-After` basis, `mean_job_time`, is the job's time: had the request's hold
        // fed it too (once per job and once per request, as before the permit), the first
        // request alone would move it from 30 ms to 30·7/8 + 630/8 ≈ 105 ms, and a basis of
        // the holds alone reads about 630 ms. The bound, 200 ms, leaves a loaded machine
        // 170 ms of oversleep on a 30 ms job.
        let job = Duration::from_millis(30);
        let extra = Duration::from_millis(600);
        let pool = Pool::builder().name("edge-basis").workers(1).build().unwrap();
        let layer = AdmissionLayer::for_pool(&pool);
        let mut service = layer.layer(BackToBack {
            pool: pool.clone(),
            rounds: 1,
            job,
        });
        for _ in 0..2 {
            let response = service.call(Request::new(())).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(pool.in_use(), 1, "the body holds the request's slot");
            // The body is written slowly: the request's hold is the job and then some.
            std::thread::sleep(extra);
            drop(response);
            pool.wait_idle().await;
        }
        let mean = pool.stats().mean_job_time.expect("two jobs ran");
        assert!(mean >= job, "the basis is below the job's own time: {mean:?}");
        assert!(
            mean < Duration::from_millis(200),
            "the request's hold fed the basis: {mean:?} for {job:?} jobs held {extra:?} longer"
        );
        // The layer's hint is the pool's: the same basis.
        assert_eq!(layer.retry_after(), mean);
    }
}

on_every_executor! {
    async fn a_layers_own_limit_bases_retry_after_on_the_requests_hold() {
        // Without a pool the layer knows only the request: its basis is the hold.
        let pool = Pool::builder().name("edge-basis-walks").workers(1).build().unwrap();
        let layer = AdmissionLayer::new("edge-basis-own", 1).unwrap();
        let mut service = layer.layer(BackToBack {
            pool: pool.clone(),
            rounds: 1,
            job: Duration::from_millis(1),
        });
        let hold = Duration::from_millis(200);
        let response = service.call(Request::new(())).await.unwrap();
        std::thread::sleep(hold);
        drop(response);
        layer.wait_idle().await;
        assert!(
            layer.retry_after() >= hold,
            "the request's hold is the basis: {:?}",
            layer.retry_after()
        );
    }
}
