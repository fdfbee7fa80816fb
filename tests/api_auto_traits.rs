//! Compile-time assertions of `Send`, `Sync` and `Unpin` on the public types.

use loopguard::Panicked;
use loopguard::orphan::{OrphanHandler, OrphanReceiver, Report};
use loopguard::pool::Run;
use loopguard::pool::{Job, Pool, PoolBuilder, PoolStats, RunError, Saturated, TryRunError};
use loopguard::retry::RetryRun;

fn send_sync<T: Send + Sync>() {}
fn send<T: Send>() {}
fn unpin<T: Unpin>() {}

type Closure = fn() -> u32;
#[cfg(feature = "tower")]
type Keyed = loopguard::tower::Keyed<String, fn(&http::request::Parts) -> String>;

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<Pool>();
    send_sync::<PoolBuilder>();
    send_sync::<PoolStats>();
    send_sync::<Job<u32>>();
    send_sync::<Job<Result<String, std::io::Error>>>();
    send_sync::<Run<Closure, u32>>();
    send_sync::<OrphanHandler>();
    send_sync::<OrphanReceiver>();
    send_sync::<Report>();
    send_sync::<Panicked>();
    send_sync::<RunError>();
    send_sync::<Saturated<Closure>>();
    send_sync::<TryRunError<Closure>>();
    send_sync::<loopguard::Fallible<Closure>>();
    send_sync::<loopguard::shield::Shield>();
    send_sync::<loopguard::shield::Shielded<u32>>();
    send_sync::<loopguard::refresh::Refresh<u32, String>>();
    send_sync::<loopguard::keyed::KeyedGate<String>>();
    send_sync::<loopguard::keyed::KeyPermit<String>>();
    send_sync::<loopguard::keyed::Acquire<String>>();
    send_sync::<loopguard::demand::Demand>();
    send_sync::<loopguard::deadline::Deadline>();
    send_sync::<loopguard::operation::Operation>();
    send_sync::<loopguard::retry::Decision>();
    send_sync::<loopguard::retry::Decide<fn(&u16) -> loopguard::retry::Decision>>();
    send_sync::<loopguard::retry::RetryBudget>();
    send_sync::<loopguard::retry::BoxedRule<std::io::Error>>();
    send_sync::<loopguard::retry::Retry<loopguard::retry::BoxedRule<std::io::Error>>>();
    send_sync::<
        RetryRun<
            fn(u32) -> std::future::Ready<Result<u32, String>>,
            std::future::Ready<Result<u32, String>>,
            loopguard::retry::BoxedRule<String>,
            String,
        >,
    >();
    send_sync::<loopguard::lag::LoopLag>();
    send_sync::<loopguard::lag::LoopLagBuilder>();
    send_sync::<loopguard::lag::LagStats>();
    send_sync::<loopguard::lag::Probe>();
    send_sync::<loopguard::lag::TimedPolls<std::future::Ready<u32>>>();
    #[cfg(feature = "tower")]
    send_sync::<loopguard::tower::AdmissionLayer>();
    #[cfg(feature = "tower")]
    send_sync::<loopguard::tower::AdmissionLayer<Keyed>>();
    #[cfg(feature = "tower")]
    send_sync::<loopguard::tower::Admission<Closure>>();
    #[cfg(feature = "tower")]
    send_sync::<loopguard::tower::Slot>();
    #[cfg(feature = "tower")]
    send_sync::<loopguard::tower::AdmissionBody<String>>();
    // A non-Sync output is fine: only `Send` is needed to move it back.
    send::<Job<std::cell::Cell<u8>>>();
}

#[test]
fn futures_are_unpin() {
    unpin::<Job<u32>>();
    unpin::<Run<Closure, u32>>();
    unpin::<loopguard::shield::Shielded<u32>>();
    unpin::<loopguard::keyed::Acquire<String>>();
    unpin::<loopguard::orphan::OrphanReceiver>();
    unpin::<loopguard::lag::Probe>();
    // Unpin exactly when the inner future is: `TimedPolls` pins it in place.
    unpin::<loopguard::lag::TimedPolls<std::future::Ready<u32>>>();
}

#[test]
fn errors_are_std_errors() {
    fn error<E: std::error::Error + Send + Sync + 'static>() {}
    error::<Panicked>();
    error::<RunError>();
    error::<Saturated<Closure>>();
    error::<TryRunError<Closure>>();
    error::<loopguard::retry::RetryError<std::io::Error>>();
}
