//! Keep a single-threaded async event loop responsive while it offloads blocking work.
//!
//! A service on smol or an `async_executor::LocalExecutor` (or on async-std, discontinued
//! upstream in favour of smol) that serializes a whole metrics registry, walks a
//! cardinality report or runs a SQL collector must not do that on its loop. The usual
//! answers, `blocking::unblock` and tokio's `spawn_blocking`, queue without bound: under a
//! scrape storm every caller waits behind redundant walks and gets a late answer instead of
//! a clear "busy". And when a caller leaves, the thread runs on while its result, and any
//! failure, vanishes.
//!
//! # The core
//!
//! - A [`Pool`](pool::Pool) of worker threads behind an admission gate with one slot per
//!   thread. [`try_run`](pool::Pool::try_run) fails fast with a `retry_after` hint (an HTTP
//!   503 with `Retry-After`) without awaiting, allocating or queueing;
//!   [`run`](pool::Pool::run) waits for a slot in FIFO order; a slot is released by the
//!   worker when the job has *finished*, never by the awaiting future
//!   ([the slot rule](pool::Pool#the-slot-rule)).
//! - Dropping a [`Job`](pool::Job) orphans the job: it runs on, keeps its slot, and its
//!   failure reaches the pool's [`OrphanHandler`](orphan::OrphanHandler) exactly once. The
//!   [`shield`] gives async work the same contract.
//! - A [`Deadline`](deadline::Deadline) is one instant fixed at call entry that every wait
//!   spends: [`run_within`](pool::Pool::run_within) and
//!   [`try_run_within`](pool::Pool::try_run_within) (the slot and the job),
//!   [`Deadline::run`](deadline::Deadline::run) for any future. Expiry is *cooperative*: it
//!   is observed at await points and at [`Deadline::check`](deadline::Deadline::check) in
//!   blocking code, never by pre-empting a thread.
//!
//! ```
//! use std::time::Duration;
//! use loopguard::deadline::Deadline;
//! use loopguard::pool::{Pool, WithinError};
//!
//! # futures_lite::future::block_on(async {
//! let pool = Pool::builder().name("registry-serve").workers(2).build()?;
//!
//! // A scrape: answer 503 at once when both workers are busy, and spend at most 5 s.
//! let deadline = Deadline::after(Duration::from_secs(5));
//! let body = match pool.try_run_within(deadline, || "up 1\n".to_string()).await {
//!     Ok(body) => body,
//!     Err(WithinError::Saturated(busy)) => format!("busy, retry after {}s", busy.retry_after_secs()),
//!     Err(WithinError::Expired(_)) => "budget spent; the walk goes on, on its slot".to_string(),
//!     Err(err) => return Err(err.into()),
//! };
//! assert_eq!(body, "up 1\n");
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Which piece do I need
//!
//! | you want | use |
//! |---|---|
//! | blocking work off the loop, refused at once when busy | [`Pool::try_run`](pool::Pool::try_run) |
//! | the same, waiting in line | [`Pool::run`](pool::Pool::run) |
//! | waiting in line, refused at once when the line cannot clear in time | [`Run::refuse_early`](pool::Run::refuse_early) |
//! | fail fast and a budget in one call | [`Pool::try_run_within`](pool::Pool::try_run_within) |
//! | async work that must finish even if its caller leaves | [`shield::Shield`] |
//! | failures nobody awaited, on your loop | [`orphan::OrphanHandler::channel`] |
//! | one budget over slots, attempts, sleeps and reads | [`deadline::Deadline`], [`retry::Retry`] |
//! | a budget from the caller's timeout headers | [`header`] |
//! | one expensive collection shared by concurrent callers | [`refresh::Refresh`] |
//! | a scaling signal that sees bursts between scrapes | [`Pool::demand`](pool::Pool::demand), [`demand::Demand`] |
//! | one caller per key (tenant, target), others unaffected | [`keyed::KeyedGate`] |
//! | one duration observation per operation, cancelled ones too | [`operation::Operation`] |
//! | how late the loop runs, and which task held it | [`lag::LoopLag`] |
//! | admission for a hyper or axum service without tokio | `tower::AdmissionLayer` (feature `tower`) |
//! | help text and units for the series | [`telemetry::describe_metrics`] |
//!
//! Each item has one path: its module. Only [`Panicked`] and [`Fallible`] live at the root,
//! because the pool, the shield and the cache all use them. A job's or a future's output
//! may be of any type; a panic is always a failure, and an `Err` is one when the work is
//! wrapped in [`Fallible`].
//!
//! The crate is runtime-agnostic: it is built on smol-rs parts (`async-io` for timers,
//! `futures-lite`) and its tests run the same behaviour on smol, `LocalExecutor`,
//! `futures_lite::future::block_on`, tokio's current-thread runtime and async-std. Its
//! dependency tree has no tokio, with any feature (an axum or hyper 1 *application* pulls in
//! the tokio crate's `sync` part through hyper, not its runtime).
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
//! # Containment: code of yours
//!
//! One rule: loopguard's own state (slots, waiters, demand, the hand-off of an outcome,
//! reports) is consistent before any call into code it does not own, and no such call runs
//! while loopguard holds a lock. Code loopguard calls itself is *contained* where it is
//! called: a panic there is caught, kills no worker, leaks no slot, strands no waiter and
//! loses no report, and leaves a trace (a line on stderr for the first few, and
//! [`telemetry::contained_panics`]). Other crates' primitives are not wrapped: a timer's
//! waker is async-io's to call.
//!
//! | your code | called on | if it panics |
//! |---|---|---|
//! | a job's closure (and the `Drop` of what it captured) | a worker thread | the job's outcome is [`Panicked`]: returned to whoever awaits it, or reported once if nobody does |
//! | a shielded future's `poll` (and its `Drop`) | the runner's executor | the same, through the [`Shielded`](shield::Shielded) handle |
//! | a refresh collection | a worker thread, or the runner | cached as a failure for the failure TTL and reported once |
//! | a cached value's or error's `Clone` and `Drop` ([`Refresh`](refresh::Refresh)) | the calling task, after the cache's lock; a `Drop` where the last copy goes | contained: a panicking `Clone` gives that caller `RefreshError::Panicked`; a `Clone` may call back into the cache |
//! | an output's `Drop`, when nobody takes it or it is refused as late | a worker thread or the dropping thread | contained |
//! | a failure's `Debug` (for the report) | where the failure is reported | contained: reported with a placeholder message |
//! | an [`OrphanHandler`](orphan::OrphanHandler) closure, the logger behind `OrphanHandler::log()` | where the failure is observed, the stuck monitor | contained: that report is lost to the handler, still counted |
//! | a metrics recorder | wherever loopguard emits | contained: that one update is lost; the job's outcome is stored first, and its caller is woken after |
//! | the logger, for a slow poll's line ([`lag::LoopLag::instrument`]) | the polling thread, after the count | contained: that line is lost, the poll still counted |
//! | an instrumented future's `poll` ([`lag::TimedPolls`]) | your task | the panic is yours; that poll is not timed |
//! | a `Waker` loopguard stored: its `wake`, and the `Drop` of one it lets go | a worker thread, the releasing, closing or polling thread | contained, after the accounting and outside every lock: it may call back into the same pool, gate, cache or channel |
//! | a `Waker`'s `clone`, during *your* poll of a loopguard future | your task | the panic is yours (it comes out of your poll); the future keeps its place, and dropping it withdraws it cleanly |
//! | a key's `Display` ([`KeyedGate::publish_metrics`](keyed::KeyedGate::publish_metrics)) | the publishing thread | contained: that key's gauge is not updated |
//! | a key's `Hash`, `Eq` or `Clone` ([`KeyedGate`](keyed::KeyedGate)) | under the gate's lock | **not contained**: the panic is yours, and a permit dropped by it may leave its key's slot held. Keys must hash, compare and clone without panicking, as a `HashMap`'s must |
//! | (feature `tower`) the inner service's `call`, its future, its response body; the key closure of a keyed layer | your server's task | the panic is yours; the request's slot is released as it unwinds (a key closure runs before anything is held) |

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

#[cfg(feature = "prometheus-client")]
mod collector;
mod contain;
mod emit;
mod failure;
mod gate;
mod handoff;
#[cfg(all(test, loopguard_loom))]
mod loom_util;
mod name;
mod signal;
mod sync;
mod waker_slot;

pub mod deadline;
pub mod demand;
pub mod header;
pub mod keyed;
pub mod lag;
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

// The migration guide's examples too, tokio's side included (tokio is a dev-dependency).
#[doc = include_str!("../no-tokio-guide.md")]
#[cfg(doctest)]
pub struct NoTokioGuideDoctests;
