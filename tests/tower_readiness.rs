//! The admission layer in waiting mode against an inner service whose readiness is a
//! reservation (tower's `ConcurrencyLimit`: `poll_ready` takes its permit). A request
//! waiting in line must hold no such reservation: requests that could be served (another
//! key, a free slot) get past `poll_ready` meanwhile. Once admitted, a waiter waits for its
//! own service's readiness within its deadline. And a request that waits is not counted as
//! refused by the keyed gate.
//!
//! Driven by hand (`poll_ready`, `call`, one poll at a time) with explicit ordering; the
//! only clock is the deadline under test.

mod common;

use std::convert::Infallible;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::bounded;
use common::services::Hello;
use futures_lite::future::{block_on, poll_once};
use http::{Request, Response, StatusCode};
use loopguard::keyed::KeyedGate;
use loopguard::tower::AdmissionLayer;
use tower::limit::ConcurrencyLimit;
use tower_layer::Layer;
use tower_service::Service;

const WATCHDOG: Duration = Duration::from_secs(30);

fn get(path: &str) -> Request<()> {
    Request::get(path).body(()).unwrap()
}

fn ready<S: Service<Request<()>>>(service: &mut S) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(())))
}

#[test]
fn a_request_waiting_for_its_key_keeps_no_other_key_from_getting_past_poll_ready() {
    block_on(bounded(WATCHDOG, async {
        let gate = KeyedGate::new("paths").unwrap();
        let path = |parts: &http::request::Parts| parts.uri.path().to_string();
        let layer = AdmissionLayer::keyed(gate, path).wait_within_deadline();
        let mut service = layer.layer(ConcurrencyLimit::new(Hello, 1));

        // `/x` is busy: its first response's body holds the key's slot.
        assert!(ready(&mut service));
        let first = service.call(get("/x")).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);

        // A second `/x` as a server sends it (tower's `oneshot`, hyper's tower adapter: a
        // clone made ready, called, dropped) passes `poll_ready` and waits in line.
        let mut waiting_svc = service.clone();
        assert!(ready(&mut waiting_svc));
        let mut waiting = Box::pin(waiting_svc.call(get("/x")));
        drop(waiting_svc);
        assert!(poll_once(&mut waiting).await.is_none(), "it waits for `/x`");

        // `/y` is idle: it must get past `poll_ready` and be served now.
        let mut other = service.clone();
        assert!(
            ready(&mut other),
            "a waiter of `/x` holds the inner service's only permit"
        );
        let served = other.call(get("/y")).await.unwrap();
        assert_eq!(served.status(), StatusCode::OK);
        drop(served);

        // `/x` frees up: the waiter is admitted and served.
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(second.status(), StatusCode::OK);
        drop(second);
        assert_eq!(layer.gate().in_use(&"/x".to_string()), 0);
    }));
}

#[test]
fn an_admitted_waiter_waits_for_its_service_within_its_deadline() {
    block_on(bounded(WATCHDOG, async {
        let budget = Duration::from_millis(200);
        let layer = AdmissionLayer::new("test", 1)
            .unwrap()
            .wait_within_deadline()
            .deadline_from_headers(budget, Duration::ZERO);
        let mut service = layer.layer(ConcurrencyLimit::new(Hello, 1));

        // The one slot is held by a response body; the inner permit is free again.
        assert!(ready(&mut service));
        let first = service.call(get("/")).await.unwrap();

        // A request waits in line, sent as a server sends it (a clone made ready, called,
        // dropped). The clone kept the readiness it was called with (the inner permit) and
        // gave it back when dropped: `service` takes it now.
        let mut waiter = service.clone();
        assert!(ready(&mut waiter));
        let start = Instant::now();
        let mut waiting = Box::pin(waiter.call(get("/")));
        drop(waiter);
        assert!(poll_once(&mut waiting).await.is_none());
        assert!(
            ready(&mut service),
            "the waiting request holds the inner permit"
        );

        // Admitted when the body is dropped, it then waits for readiness: not past the
        // deadline, where it gets the 503 and its slot goes back.
        drop(first);
        let refused = waiting.await.unwrap();
        let took = start.elapsed();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.headers().contains_key("retry-after"));
        assert!(
            took >= budget,
            "refused after {took:?}, before the deadline"
        );
        assert!(took < budget * 10, "refused only after {took:?}");
        assert_eq!(layer.in_use(), 0, "the slot went back");
        assert_eq!(layer.rejected(), 1);

        // The service that kept its readiness still serves.
        let served = service.call(get("/")).await.unwrap();
        assert_eq!(served.status(), StatusCode::OK);
    }));
}

#[test]
fn a_keyed_request_that_waits_is_not_counted_as_refused() {
    block_on(bounded(WATCHDOG, async {
        let gate = KeyedGate::new("paths").unwrap();
        let path = |parts: &http::request::Parts| parts.uri.path().to_string();
        let waiting = AdmissionLayer::keyed(gate.clone(), path).wait_within_deadline();
        let mut service = waiting.layer(Hello);
        let first = service.call(get("/x")).await.unwrap();
        let mut second = Box::pin(service.call(get("/x")));
        assert!(poll_once(&mut second).await.is_none(), "it waits");
        drop(first);
        assert_eq!(second.await.unwrap().status(), StatusCode::OK);
        assert_eq!(waiting.rejected(), 0);
        assert_eq!(
            gate.rejected(),
            0,
            "a request that waited counted as refused"
        );

        // Fail fast, the same gate: a busy key is a refusal, counted by both.
        let failing = AdmissionLayer::keyed(gate.clone(), path);
        let mut service = failing.layer(Hello);
        let first = service.call(get("/x")).await.unwrap();
        let refused = service.call(get("/x")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(failing.rejected(), 1);
        assert_eq!(gate.rejected(), 1);
        drop(first);
    }));
}

/// Ready only once `open` is set.
#[derive(Clone)]
struct Gated {
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Service<Request<()>> for Gated {
    type Response = Response<&'static str>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<&'static str>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.open.load(std::sync::atomic::Ordering::SeqCst) {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new("late")))
    }
}

#[test]
fn a_waiter_whose_service_gets_ready_only_after_its_deadline_is_refused() {
    block_on(bounded(WATCHDOG, async {
        let budget = Duration::from_millis(100);
        let layer = AdmissionLayer::new("late-ready", 1)
            .unwrap()
            .wait_within_deadline()
            .deadline_from_headers(budget, Duration::ZERO);
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut service = layer.layer(Gated { open: open.clone() });
        let first = service.call(get("/")).await.unwrap();

        // A request waits in line; the inner service then stops being ready.
        let mut waiting = Box::pin(service.call(get("/")));
        // After `call`, which fixed the request's deadline: `start + budget` is past it.
        let start = Instant::now();
        assert!(poll_once(&mut waiting).await.is_none());
        open.store(false, std::sync::atomic::Ordering::SeqCst);
        // Admitted when the body is dropped; it then waits for its service's readiness.
        drop(first);
        assert!(poll_once(&mut waiting).await.is_none());
        // The deadline passes; only then does the service become ready.
        while start.elapsed() < budget {
            std::hint::spin_loop();
        }
        open.store(true, std::sync::atomic::Ordering::SeqCst);
        let answer = waiting.await.unwrap();
        assert_eq!(
            answer.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "served after its deadline"
        );
        assert_eq!(layer.in_use(), 0, "the slot went back");
    }));
}
