//! The tower layer's keyed mode counts in its keyed gate, with no counts of its own: a
//! request refused at once is the gate's refusal (`loopguard_keyed_rejected_total`), a
//! waiting request whose deadline passed first (in line, or on arrival) the gate's expiry
//! (`loopguard_keyed_expired_total`); its `Retry-After` is the gate's basis, whoever held
//! the key.
#![cfg(feature = "tower")]

mod common;

use std::time::{Duration, Instant};

use common::services::{Hello, NeverReady};
use common::{MapRecorder, bounded};
use futures_lite::future::block_on;
use http::{Request, StatusCode};
use loopguard::deadline::Deadline;
use loopguard::keyed::KeyedGate;
use loopguard::tower::AdmissionLayer;
use tower_layer::Layer;
use tower_service::Service;

const WATCHDOG: Duration = Duration::from_secs(20);

fn path(parts: &http::request::Parts) -> String {
    parts.uri.path().to_string()
}

/// A request for `path` whose budget (an outer layer's `Deadline`) ends `after` from now.
fn within(path: &str, after: Duration) -> Request<()> {
    let mut request = Request::get(path).body(()).unwrap();
    request.extensions_mut().insert(Deadline::after(after));
    request
}

#[test]
fn refusals_and_expiries_are_the_gates_own_counts_in_the_keyed_series() {
    let recorder = MapRecorder::default();
    let gate: KeyedGate<String> =
        metrics::with_local_recorder(&recorder, || KeyedGate::new("paths").unwrap());
    let rejected = || recorder.get("loopguard_keyed_rejected_total{gate=paths}");
    let expired = || recorder.get("loopguard_keyed_expired_total{gate=paths}");
    assert_eq!(
        (rejected(), expired()),
        (Some(0), Some(0)),
        "created at zero"
    );
    block_on(bounded(WATCHDOG, async {
        let waiting = AdmissionLayer::keyed(gate.clone(), path).wait_within_deadline();
        let mut service = waiting.layer(Hello);
        let first = service.call(within("/x", WATCHDOG)).await.unwrap();

        // In line for a busy key until its deadline passes: an expiry, not a refusal.
        let budget = Duration::from_millis(50);
        let start = Instant::now();
        let late = service.call(within("/x", budget)).await.unwrap();
        assert_eq!(late.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(start.elapsed() >= budget, "refused before its deadline");
        assert_eq!((gate.rejected(), gate.expired()), (0, 1));

        // Spent on arrival, the key free or not: an expiry too.
        let spent = service.call(within("/y", Duration::ZERO)).await.unwrap();
        assert_eq!(spent.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!((gate.rejected(), gate.expired()), (0, 2));
        assert_eq!(gate.in_use(&"/y".to_string()), 0, "nothing admitted for it");

        // Fail fast on the same gate: a refusal.
        let failing = AdmissionLayer::keyed(gate.clone(), path);
        let refused = failing.layer(Hello).call(within("/x", WATCHDOG)).await;
        assert_eq!(refused.unwrap().status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!((gate.rejected(), gate.expired()), (1, 2));
        // A layer reads its gate's counts: every refusal of the gate, whichever layer.
        assert_eq!((waiting.rejected(), failing.rejected()), (3, 3));
        drop(first);
    }));
    // Counted at once, told to the recorder in a batch: at the latest by the publish a
    // scrape makes first.
    gate.publish_metrics();
    assert_eq!((rejected(), expired()), (Some(1), Some(2)));
}

#[test]
fn the_retry_after_of_a_keyed_layer_is_its_gates_basis() {
    let gate: KeyedGate<String> = KeyedGate::new("paths").unwrap();
    let layer = AdmissionLayer::keyed(gate.clone(), path);
    assert_eq!(
        layer.retry_after(),
        Duration::from_secs(1),
        "before any sample"
    );
    // A key held 30 ms by a caller of the gate itself, not through the layer.
    let before = Instant::now();
    let permit = gate.try_acquire("/x".to_string()).unwrap();
    std::thread::sleep(Duration::from_millis(30)); // the hold under test
    drop(permit);
    let hint = layer.retry_after();
    assert!(
        hint >= Duration::from_millis(30) && hint <= before.elapsed(),
        "{hint:?}"
    );
    // And the 503 carries it, rounded up to whole seconds.
    block_on(bounded(WATCHDOG, async {
        let mut service = layer.layer(Hello);
        let held = service.call(within("/x", WATCHDOG)).await.unwrap();
        let refused = service.call(within("/x", WATCHDOG)).await.unwrap();
        assert_eq!(refused.headers()["retry-after"], "1");
        drop(held);
    }));
}

/// A keyed request granted its key late and then refused (its service not ready before
/// its deadline) gives the slot back without sampling its hold into the gate's basis.
#[test]
fn a_keyed_request_refused_after_its_grant_leaves_the_retry_after_basis_alone() {
    let gate: KeyedGate<String> = KeyedGate::new("paths").unwrap();
    let layer = AdmissionLayer::keyed(gate.clone(), path).wait_within_deadline();
    block_on(bounded(WATCHDOG, async {
        let mut service = layer.layer(NeverReady);
        // Held by a caller of the gate itself for 300 ms: the basis.
        let held = gate.try_acquire("/x".to_string()).unwrap();
        // In line for the key, with a budget well past that hold: it gets the key, then
        // holds it (its service never ready) until its deadline, about 700 ms more.
        let mut waiting = Box::pin(service.call(within("/x", Duration::from_millis(1000))));
        assert!(
            futures_lite::future::poll_once(&mut waiting)
                .await
                .is_none()
        );
        async_io::Timer::after(Duration::from_millis(300)).await; // the hold under test
        drop(held);
        let basis = layer.retry_after();
        assert!(basis >= Duration::from_millis(300), "{basis:?}");
        assert_eq!(gate.in_use(&"/x".to_string()), 1, "granted");
        let refused = waiting.await.unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(gate.in_use(&"/x".to_string()), 0, "the key came back");
        assert_eq!(gate.expired(), 1);
        assert_eq!(layer.retry_after(), basis, "the refused hold was sampled");
    }));
}
