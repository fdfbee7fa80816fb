//! Admission control for HTTP services without tokio: a tower [`Layer`](tower_layer::Layer)
//! that admits each request through a loopguard gate (feature `tower`).
//!
//! tower's own `limit` queues (it needs the tokio crate's `sync` primitives, not its
//! runtime); `load-shed` refuses only what the inner service says it cannot take. [`AdmissionLayer`] refuses by itself, at once,
//! with the answer a client or a mesh can act on, on any executor (smol, async-std, a
//! `LocalExecutor`, tokio):
//!
//! - **Fail fast**: no free slot, and the request gets `503 Service Unavailable` with
//!   `Retry-After` (the average time a slot is held, in whole seconds). Nothing queues;
//!   the decision is a few atomic operations on the gate's word (a lock and a map lookup
//!   per key, in keyed mode) and allocates nothing; the response costs the two allocations
//!   of its header map.
//! - **Or wait**, in FIFO order, within the request's deadline
//!   ([`AdmissionLayer::wait_within_deadline`]); once admitted, the request also waits
//!   for the inner service's readiness within that deadline.
//! - **The slot covers the whole response.** It is held by the response body
//!   ([`AdmissionBody`]) until the body has ended or is dropped, not only until the handler
//!   returns; and by every clone of the request's [`Slot`] that the handler moved into work
//!   of its own, so that a client that disconnects cannot free the slot while a walk it
//!   started still runs on a pool thread.
//! - **One limit with a pool** ([`AdmissionLayer::for_pool`]): requests take the pool's
//!   own slots, so the pool sees them (`in_use`, `try_run`, its refusal counter), and the
//!   handler runs its blocking job on the request's slot ([`Slot::try_run`]). A layer of
//!   its own ([`AdmissionLayer::new`]) has a name and emits a pool's admission series
//!   under it.
//! - **Per key** ([`AdmissionLayer::keyed`]): a [`KeyedGate`](crate::keyed::KeyedGate)
//!   slot for a key taken from each request; a busy key is refused, others are unaffected.
//!   The gate counts what the layer refuses (`loopguard_keyed_rejected_total` at once,
//!   `loopguard_keyed_expired_total` when a waiting request's deadline passed first) and
//!   keeps the `Retry-After` basis: the layer keeps no counts of its own.
//! - **Deadlines from the request's headers** ([`AdmissionLayer::deadline_from_headers`]):
//!   the earliest of `X-Prometheus-Scrape-Timeout-Seconds`, `x-envoy-expected-rq-timeout-ms`
//!   and `grpc-timeout` (see [`header`](crate::header)) less an offset (at most half of
//!   it, so never later than the caller's own timeout), at most a server default, fixed
//!   when the request arrives and put in its extensions as a
//!   [`Deadline`](crate::deadline::Deadline) for the handler to spend.
//!
//! # Examples
//!
//! The pool as the one limit from the request to the worker thread: a request is admitted
//! on one of the pool's slots (or refused at once), and its handler walks the registry on
//! that very slot, within the request's deadline:
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//! use http::{Request, Response, StatusCode};
//! use loopguard::deadline::Deadline;
//! use loopguard::pool::Pool;
//! use loopguard::tower::{AdmissionLayer, Slot};
//! use tower_layer::Layer;
//! use tower_service::Service;
//!
//! #[derive(Clone)]
//! struct Metrics(Pool);
//!
//! impl Service<Request<()>> for Metrics {
//!     type Response = Response<String>;
//!     type Error = Infallible;
//!     type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<String>, Infallible>> + Send>>;
//!
//!     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
//!         std::task::Poll::Ready(Ok(()))
//!     }
//!
//!     fn call(&mut self, request: Request<()>) -> Self::Future {
//!         let deadline = *request.extensions().get::<Deadline>().expect("set by the layer");
//!         let slot = request.extensions().get::<Slot>().cloned().expect("set by the layer");
//!         let pool = self.0.clone();
//!         Box::pin(async move {
//!             // On the request's own slot: no second admission. The walk keeps the slot
//!             // until it ends, even if the client leaves. The statuses are
//!             // `loopguard_exporter::Unserved`'s: nothing started is 503, a spent budget
//!             // (the walk goes on) 504, which no retry policy in loopguard's `ops/` retries.
//!             let status = match slot.try_run(&pool, || "up 1\n".to_string()) {
//!                 Ok(walk) => match deadline.run(walk).await {
//!                     Ok(Ok(body)) => return Ok(Response::new(body)),
//!                     Ok(Err(_panicked)) => StatusCode::INTERNAL_SERVER_ERROR,
//!                     Err(_spent) => StatusCode::GATEWAY_TIMEOUT,
//!                 },
//!                 Err(_busy) => StatusCode::SERVICE_UNAVAILABLE,
//!             };
//!             let mut answer = Response::new(String::new());
//!             *answer.status_mut() = status;
//!             Ok(answer)
//!         })
//!     }
//! }
//!
//! # futures_lite::future::block_on(async {
//! let pool = Pool::builder().name("registry-serve").workers(2).build()?;
//! let layer = AdmissionLayer::for_pool(&pool)
//!     .deadline_from_headers(Duration::from_secs(10), Duration::from_millis(500));
//! let mut service = layer.layer(Metrics(pool.clone()));
//!
//! let request = Request::get("/metrics")
//!     .header("X-Prometheus-Scrape-Timeout-Seconds", "5")
//!     .body(())
//!     .unwrap();
//! let response = service.call(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! // The body still holds the request's pool slot until it is written.
//! assert_eq!(pool.in_use(), 1);
//! drop(response);
//! pool.wait_idle().await;
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```
//!
//! With hyper on smol, wrap the service for hyper (`hyper_util::service::TowerToHyperService`
//! or a `service_fn`); with axum on smol (`smol-axum`), `Router::layer(layer)`: see the
//! `examples-axum` workspace member.
//!
//! # Caveats
//!
//! - The slot is released when the body *ends* (its last frame was polled) or is dropped:
//!   the last bytes may still sit in the server's write buffer.
//! - Dropping the response future while the handler runs frees the slot, unless the
//!   handler's work holds a [`Slot`] clone: pass it on to any work that outlives the
//!   handler's future.

mod body;
mod config;
mod gated;
mod layer;
mod mode;
mod refuse;
mod service;
mod slot;

pub use body::AdmissionBody;
pub use gated::Limited;
pub use layer::AdmissionLayer;
pub use mode::{Keyed, Mode};
pub use service::{Admission, ResponseFuture};
pub use slot::Slot;
