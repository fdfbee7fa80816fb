//! Keep a single-threaded async event loop responsive while it offloads blocking work.
//!
//! A service on smol or an `async_executor::LocalExecutor` (or on async-std, discontinued
//! upstream in favour of smol) that serializes a whole metrics registry, walks a
//! cardinality report or runs a SQL collector must not do that on its loop. The usual answers, `blocking::unblock` and tokio's `spawn_blocking`,
//! queue without bound: under a scrape storm every caller waits behind redundant walks and
//! gets a late answer instead of a clear "busy". And when a caller leaves, the thread runs
//! on while its result, and any failure, vanishes.
//!
//! loopguard gives the loop a [`Pool`](pool::Pool) whose admission gate is sized to its
//! threads:
//!
//! - [`Pool::try_run`](pool::Pool::try_run) fails fast with a `retry_after` hint (an HTTP
//!   503 with `Retry-After`), without awaiting, allocating or queueing;
//! - [`Pool::run`](pool::Pool::run) waits for a slot in FIFO order, and a freed slot goes to
//!   the oldest waiter rather than to whoever calls `try_run` next;
//! - a slot is released by the worker thread when the job has *finished*, never by the
//!   awaiting future ([the slot rule](pool::Pool#the-slot-rule)): dropping a
//!   [`Job`](pool::Job) orphans the job, which keeps its slot until its thread is done, and
//!   whose failure reaches the pool's [`OrphanHandler`](orphan::OrphanHandler) exactly once;
//! - a job running past a threshold is reported, so a pool that never frees a slot is
//!   visible, and every pool publishes honest numbers through the `metrics` facade
//!   ([`telemetry`]).
//!
//! The same contract exists for async work ([`shield`]: a runner you spawn and a handle
//! whose drop orphans the work), and [`refresh`] builds a single-flight TTL cache on either.
//!
//! The other pieces:
//!
//! - [`deadline`]: one absolute instant fixed at call entry that every wait spends:
//!   [`Pool::run_within`](pool::Pool::run_within) (the slot wait and the job),
//!   [`retry::Retry`] (attempts and backoff sleeps),
//!   [`Deadline::run`](deadline::Deadline::run) for any future. After expiry nothing new
//!   starts and a late result is not returned as success. Expiry is *cooperative*: it is
//!   observed at await points and at [`Deadline::check`](deadline::Deadline::check) in
//!   blocking code, never by pre-empting a thread. [`header`] derives one from the budgets
//!   callers send (Prometheus' `X-Prometheus-Scrape-Timeout-Seconds`, Envoy's
//!   `x-envoy-expected-rq-timeout-ms`, gRPC's `grpc-timeout`).
//! - Load signals: every pool's [`Pool::demand`](pool::Pool::demand) (time-weighted
//!   holders plus waiters, see [`demand`]) and [`keyed`], per-key admission with atomic
//!   reject-when-busy.
//! - [`operation`]: one duration observation per operation, `cancelled` when its future is
//!   dropped, the clock started before the first queue.
//! - `tower` (feature `tower`, off by default): an admission layer for HTTP services on
//!   any executor (hyper through `smol-hyper`, axum through `smol-axum`): a 503 with
//!   `Retry-After` at once when no slot is free, or a FIFO wait within the request's
//!   deadline; the slot held until the response body has been written; per-key admission;
//!   the request's [`Deadline`](deadline::Deadline) from its timeout headers. And on the
//!   client side, [`retry::Retry::decide`] honours a server's `Retry-After`
//!   ([`header::retry_after`]) within the deadline.
//!
//! # Where things are
//!
//! Each item has one path: its module. Only [`Panicked`] and [`Fallible`] live at the root,
//! because the pool, the shield and the cache all use them. A job's or a future's output
//! may be of any type; a panic is always a failure, and an `Err` is one when the work is
//! wrapped in [`Fallible`].
//!
//! The crate is runtime-agnostic: it is built on smol-rs parts (`event-listener`,
//! `futures-lite`, `async-io`) and its tests run the same behaviour on smol, `LocalExecutor`,
//! `futures_lite::future::block_on`, tokio's current-thread runtime and async-std (for
//! applications migrating off it). It never depends on tokio.
//!
//! # Examples
//!
//! ```
//! use loopguard::pool::{Pool, TryRunError};
//!
//! # futures_lite::future::block_on(async {
//! let pool = Pool::builder().name("registry-serve").workers(2).build()?;
//!
//! // In an HTTP handler: answer 503 at once when both workers are busy.
//! let body = match pool.try_run(|| "up 1\n".to_string()) {
//!     Ok(job) => job.await.map_err(std::io::Error::from)?,
//!     Err(TryRunError::Saturated(busy)) => {
//!         format!("busy, retry after {}s", busy.retry_after_secs())
//!     }
//!     Err(closed) => return Err(closed.into()),
//! };
//! assert_eq!(body, "up 1\n");
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```
//!
//! # When not to use it
//!
//! - For CPU-parallel data processing, use a work-stealing pool (rayon): loopguard bounds
//!   admission, it does not split work.
//! - For work that should queue without bound and must never be refused, `blocking::unblock`
//!   is simpler.
//! - Nothing here pre-empts a thread: a job that never returns keeps its slot. loopguard
//!   makes that visible (stuck-job reports, the oldest job's age); it cannot stop it.
//! - On a multi-threaded tokio runtime, `tokio::sync::Semaphore` with owned permits moved
//!   into `spawn_blocking` gives the slot rule, though not the orphan reporting.
//!
//! # Code of yours that panics
//!
//! loopguard calls code it does not own in a few places. Where that code panics, and what
//! happens then:
//!
//! | your code | called on | if it panics |
//! |---|---|---|
//! | a job's closure (and the `Drop` of what it captured) | a worker thread | the job's outcome is [`Panicked`]: returned to whoever awaits it, or reported once if nobody does |
//! | a shielded future's `poll` (and its `Drop`) | the runner's executor | the same, through the [`Shielded`](shield::Shielded) handle |
//! | a refresh collection | a worker thread, or the runner | cached as a failure for the failure TTL and reported once |
//! | an output's `Drop`, when nobody takes it | a worker thread or the dropping thread | contained: the slot is released, the worker goes on |
//! | a failure's `Debug` (for the report) | where the failure is reported | contained: reported with a placeholder message |
//! | an [`OrphanHandler`](orphan::OrphanHandler) closure, the logger behind `OrphanHandler::log()` | where the failure is observed, the stuck monitor | contained: that report is lost to the handler, still counted |
//! | a metrics recorder | wherever loopguard emits | contained: that one update is lost; deliveries and wake-ups come first |
//! | a `Waker`'s `wake` | a worker thread, the releasing or closing thread | contained: the other waiters are still woken, the slot still handed on |
//! | a `Waker`'s `clone`, during *your* poll of a `Job`, `Run`, `Acquire`, `Shielded`, a waiting layer's response future | your task | the panic is yours (it comes out of your poll); the future keeps its place, and dropping it withdraws it cleanly |
//! | a key's `Display` ([`KeyedGate::publish_metrics`](keyed::KeyedGate::publish_metrics)) | the publishing thread | contained: that key's gauge is not updated |
//! | a key's `Hash` or `Eq` ([`KeyedGate`](keyed::KeyedGate)) | under the gate's lock | **not contained**: the panic is yours, and a permit dropped by it may leave its key's slot held. Keys must hash and compare without panicking, as a `HashMap`'s must |
//! | (feature `tower`) the inner service's `call`, its future, its response body; the key closure of a keyed layer | your server's task | the panic is yours; the request's slot is released as it unwinds (a key closure runs before anything is held) |
//!
//! "Contained" means caught where it happens: it kills no worker, leaks no slot, strands no
//! waiter and loses no report, and it leaves a trace (a line on stderr for the first few,
//! and [`telemetry::contained_panics`]).

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod failure;
mod handoff;
mod late;
mod sync;

pub mod deadline;
pub mod demand;
pub mod header;
pub mod keyed;
pub mod operation;
pub mod orphan;
pub mod pool;
pub mod refresh;
pub mod retry;
pub mod shield;
pub mod telemetry;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub use crate::failure::{Fallible, Panicked};

// The README's examples are compiled and run as doctests. They include the tower layer and
// the prometheus-client collector: with the features only (always so from the repository,
// through the self dev-dependency; the published package's own tests run without them).
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "tower", feature = "prometheus-client"))]
pub struct ReadmeDoctests;
