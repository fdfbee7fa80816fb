//! The tower layer's waiting mode at the edges of a budget: a request whose deadline has
//! already passed gets the same answer whether or not a slot is free, and with
//! `refuse_early` a request that cannot be served before its deadline is refused at once
//! instead of at its deadline. On every executor.
#![cfg(feature = "tower")]

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::bounded;
use common::services::NeverReady;
use http::{Request, Response, StatusCode};
use loopguard::deadline::Deadline;
use loopguard::tower::AdmissionLayer;
use tower_layer::Layer;
use tower_service::Service;

const LIMIT: Duration = Duration::from_secs(20);

/// Answers at once, counting the requests it sees.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicUsize>);

impl Service<Request<()>> for Counting {
    type Response = Response<&'static str>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<&'static str>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(Response::new("ok")))
    }
}

/// A request whose budget (an outer layer's `Deadline`) ends `after` from now.
fn within(after: Duration) -> Request<()> {
    let mut request = Request::new(());
    request.extensions_mut().insert(Deadline::after(after));
    request
}

fn answer<B>(response: &Response<B>) -> (StatusCode, Option<String>) {
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (response.status(), retry_after)
}

on_every_executor! {
    async fn an_already_expired_request_gets_one_answer_whether_or_not_a_slot_is_free() {
        let seen = Counting::default();
        let layer = AdmissionLayer::new("expired-on-arrival", 1).unwrap().wait_within_deadline();
        let mut service = layer.layer(seen.clone());
        let spent = || within(Duration::ZERO);

        // A free slot: refused all the same, and nothing admitted or run for it.
        let free = service.call(spent()).await.unwrap();
        assert_eq!(answer(&free), (StatusCode::SERVICE_UNAVAILABLE, Some("1".into())));
        assert_eq!((seen.0.load(Ordering::SeqCst), layer.in_use(), layer.rejected()), (0, 0, 1));

        // No free slot: the same answer.
        let held = service.call(Request::new(())).await.unwrap();
        assert_eq!(held.status(), StatusCode::OK);
        let busy = service.call(spent()).await.unwrap();
        assert_eq!(answer(&busy), answer(&free));
        assert_eq!((seen.0.load(Ordering::SeqCst), layer.in_use(), layer.rejected()), (1, 1, 2));
        drop(held);

        // The same for a budget header that means "already expired" (`grpc-timeout: 0S`).
        let layer = AdmissionLayer::new("expired-header", 1)
            .unwrap()
            .wait_within_deadline()
            .deadline_from_headers(Duration::from_secs(10), Duration::ZERO);
        let mut service = layer.layer(seen.clone());
        let zero = || Request::get("/").header("grpc-timeout", "0S").body(()).unwrap();
        let free = service.call(zero()).await.unwrap();
        let held = service.call(Request::new(())).await.unwrap();
        let busy = service.call(zero()).await.unwrap();
        assert_eq!(answer(&free), (StatusCode::SERVICE_UNAVAILABLE, Some("1".into())));
        assert_eq!(answer(&busy), answer(&free));
        assert_eq!((layer.in_use(), layer.rejected()), (1, 2));
        drop(held);
        // A budget left: admitted as before.
        assert_eq!(service.call(within(LIMIT)).await.unwrap().status(), StatusCode::OK);
    }
}

on_every_executor! {
    async fn refuse_early_answers_at_once_what_waiting_answers_at_the_deadline() {
        let seen = Counting::default();
        let waiting = AdmissionLayer::new("early", 1).unwrap().wait_within_deadline();
        // The same gate (a clone of the layer shares it), with the opt-in.
        let early = waiting.clone().refuse_early();
        let mut plain = waiting.layer(seen.clone());
        let mut eager = early.layer(seen.clone());

        // Before any slot came back there is no pace: nobody is refused early.
        let held = plain.call(Request::new(())).await.unwrap();
        let began = Instant::now();
        let out = bounded(LIMIT, eager.call(within(Duration::from_millis(50)))).await.unwrap();
        assert_eq!(out.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(began.elapsed() >= Duration::from_millis(50), "waited for its deadline");
        // Teach the gate its pace: that request held its slot for at least 200 ms.
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        assert_eq!(waiting.in_use(), 0);

        let held = plain.call(Request::new(())).await.unwrap();
        // Expected done after the hold ahead and its own, at least 400 ms; it has 300 ms.
        let budget = Duration::from_millis(300);
        let began = Instant::now();
        let refused = bounded(LIMIT, eager.call(within(budget))).await.unwrap();
        let refused_after = began.elapsed();
        assert_eq!(answer(&refused), (StatusCode::SERVICE_UNAVAILABLE, Some("1".into())));
        assert!(refused_after < budget / 2, "refused after {refused_after:?} of {budget:?}");
        assert_eq!(waiting.waiting(), 0, "it never joined the line");

        // Without the opt-in the same request waits its whole budget for a 503.
        let began = Instant::now();
        let expired = bounded(LIMIT, plain.call(within(budget))).await.unwrap();
        assert_eq!(expired.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(began.elapsed() >= budget);

        // A budget the estimate fits in waits in line and is served when the slot frees.
        let mut patient = Box::pin(eager.call(within(LIMIT)));
        assert!(common::poll_once(&mut patient).await.is_none(), "waits in line");
        assert_eq!(waiting.waiting(), 1);
        drop(held);
        let served = bounded(LIMIT, patient).await.unwrap();
        assert_eq!(served.status(), StatusCode::OK);
        drop(served);
        assert_eq!(waiting.in_use(), 0);
        // Refusals counted once each: the early one, and the two at their deadline.
        assert_eq!(waiting.rejected(), 3);
    }
}

/// A request granted a slot late and then refused (its service not ready before its
/// deadline) gives the slot back without sampling its short hold: the `Retry-After` basis
/// stays what the served request made it, not dragged down towards zero.
#[test]
fn a_request_refused_after_its_grant_leaves_the_retry_after_basis_alone() {
    futures_lite::future::block_on(bounded(LIMIT, async {
        let layer = AdmissionLayer::new("refused-after-grant", 1)
            .unwrap()
            .wait_within_deadline();
        let mut service = layer.layer(NeverReady);
        // Admitted at once (no readiness asked of it): it holds the slot.
        let held = service.call(Request::new(())).await.unwrap();
        // A budget well past the hold below, so that a slow timer cannot make the grant
        // come after the deadline (then no permit is granted and nothing is discarded).
        let mut waiting = Box::pin(service.call(within(Duration::from_millis(1000))));
        assert!(
            futures_lite::future::poll_once(&mut waiting)
                .await
                .is_none()
        );
        assert_eq!(layer.waiting(), 1);
        // The hold under test.
        async_io::Timer::after(Duration::from_millis(300)).await;
        // Its hold is the basis; the slot goes to the waiting request, which holds it until
        // its deadline (about 700 ms more): a sample of that hold would move the basis.
        drop(held);
        let basis = layer.retry_after();
        assert!(basis >= Duration::from_millis(300), "{basis:?}");
        assert_eq!((layer.in_use(), layer.waiting()), (1, 0), "granted");
        // Whoever the slot's return wakes (here a wait for idleness) reads the refusal
        // counted already: its waker reads the count the moment it is called.
        let seen = Arc::new(std::sync::Mutex::new(None));
        let mut idle = Box::pin(layer.wait_idle());
        let waker = std::task::Waker::from(Arc::new(ReadsRejected(layer.clone(), seen.clone())));
        assert!(
            idle.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        let refused = waiting.await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            *seen.lock().unwrap(),
            Some(1),
            "woken before the refusal was counted"
        );
        assert_eq!(layer.in_use(), 0, "the slot came back");
        assert_eq!(layer.retry_after(), basis, "the refused hold was sampled");
    }));
}

/// A waker that records the layer's refusal count when it is called.
struct ReadsRejected(AdmissionLayer, Arc<std::sync::Mutex<Option<u64>>>);

impl std::task::Wake for ReadsRejected {
    fn wake(self: Arc<Self>) {
        *self.1.lock().unwrap() = Some(self.0.rejected());
    }
}
