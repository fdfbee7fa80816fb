//! What loopguard emits, and [`describe_metrics`].
//!
//! loopguard only *emits* through the [`metrics`] facade; the application installs the
//! recorder (for example `metrics-exporter-prometheus`). Handles are obtained when a pool,
//! shield, gate, layer or cache is built, so install the recorder first. Counters and
//! gauges (each `outcome` label included) are created at build time with a zero value, so
//! dashboards and alerts never see them missing; a histogram appears with its first
//! observation, and a key's `loopguard_keyed_demand_avg` when the key is first published
//! (keys are pruned when idle: keep them to a bounded set). The ignored-header counters
//! are created at the first header parse of the process, a retry budget's at its first
//! use or naming.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `loopguard_pool_capacity` | gauge | `pool` |
//! | `loopguard_pool_in_use` | gauge, read | `pool` |
//! | `loopguard_pool_waiting` | gauge, read | `pool` |
//! | `loopguard_pool_jobs_total` | counter | `pool`, `outcome` = `ok` / `error` / `panicked` |
//! | `loopguard_pool_rejected_total` | counter, in batches | `pool` |
//! | `loopguard_pool_wait_seconds` | histogram | `pool` |
//! | `loopguard_pool_job_seconds` | histogram | `pool` |
//! | `loopguard_pool_oldest_job_seconds` | gauge, read | `pool` |
//! | `loopguard_pool_demand_avg` | gauge, read | `pool` |
//! | `loopguard_orphaned_failures_total` | counter | `pool` for a pool's, `shield` for a shield's |
//! | `loopguard_pool_stuck_jobs_total` | counter | `pool` |
//! | `loopguard_keyed_demand_avg` | gauge, read | `gate`, `key` |
//! | `loopguard_keyed_rejected_total` | counter, in batches | `gate` |
//! | `loopguard_keyed_expired_total` | counter, in batches | `gate` |
//! | `loopguard_refresh_runs_total` | counter | `cache`, `outcome` = `ok` / `error` |
//! | `loopguard_refresh_hits_total` | counter | `cache` |
//! | `loopguard_refresh_joins_total` | counter | `cache` |
//! | `loopguard_refresh_expired_waits_total` | counter | `cache` |
//! | `loopguard_operation_duration_seconds` | histogram | `operation`, `outcome` = `success` / `deadline` / `deadline_in_line` / `cancelled` / `error` |
//! | `loopguard_operations_in_flight` | gauge | `operation` |
//! | `loopguard_ignored_budget_headers_total` | counter | `header` = `x-prometheus-scrape-timeout-seconds` / `x-envoy-expected-rq-timeout-ms` / `grpc-timeout` |
//! | `loopguard_retry_budget_refused_total` | counter | `budget` |
//! | `loopguard_loop_lag_seconds` | histogram | `loop` |
//! | `loopguard_loop_slow_polls_total` | counter | `loop`, `task` |
//!
//! Two `outcome` vocabularies, on purpose. What *ran* (a pool's job, a cache's collection)
//! ends `ok`, `error` (a `Fallible` job's or a collection's `Err`) or, for a job, `panicked`:
//! the work is loopguard's to run, so the outcome is what the work did. What a caller
//! *measured* (an [`Operation`](crate::operation::Operation)) ends `success`, `error`,
//! `cancelled` (dropped unfinished) or a spent budget, `deadline` (while it ran) or
//! `deadline_in_line` (before anything ran): a request's outcome includes what the
//! caller's budget and the caller's own drop did to it, which a job never sees.
//!
//! The `loop` series are a [`LoopLag`](crate::lag::LoopLag)'s: one lateness observation per
//! tick of its probe, and a task's slow polls from the task's first instrumented future.
//!
//! The `pool` series of admission (capacity, in use, waiting, rejected, wait seconds,
//! demand) are also emitted by a tower `AdmissionLayer` of its own, under its name.
//!
//! A refusal only counts (one atomic add, so refusing stays cheap under a storm); the
//! recorder hears of refusals in one update when the next job finishes (a keyed gate's:
//! when one of its permits is dropped) and at `publish_metrics`, so a scrape that
//! publishes first sees them all;
//! [`PoolStats::rejected`](crate::pool::PoolStats::rejected) and
//! [`KeyedGate::rejected`](crate::keyed::KeyedGate::rejected) are always exact. The gauges
//! that are *read* rather than pushed are updated by
//! [`Pool::publish_metrics`](crate::pool::Pool::publish_metrics) and
//! [`KeyedGate::publish_metrics`](crate::keyed::KeyedGate::publish_metrics): call them
//! right before rendering a scrape, and before the scrape takes a slot of its own, so a
//! scrape never counts itself.
//!
//! `loopguard_pool_demand_avg` counts what the pool admitted (and callers waiting in
//! `run`), so under overload it stops near the capacity exactly when `try_run` starts
//! refusing. To scale on the load the pool refuses, use the offered load recorded by
//! `ops/prometheus/loopguard-recording.yaml` in the repository (demand plus the rate of
//! refusals times the mean job time, by Little's law).
//!
//! With the `prometheus-client` feature, `Collector` publishes the same series (names,
//! labels, types) to a `prometheus_client` registry instead, reading the pools' own
//! numbers; the read gauges are again those `publish_metrics` read on the loop.
//!
//! A recorder is code loopguard does not own: every call into it is contained, so a
//! panicking recorder loses that one update and nothing else (see [`contained_panics`]).
//!
//! # Examples
//!
//! ```
//! // Once, at startup, after installing a recorder:
//! loopguard::telemetry::describe_metrics();
//! ```

pub use crate::emit::{DURATION_BUCKETS, contained_panics, describe_metrics};

#[cfg(feature = "prometheus-client")]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus-client")))]
pub use crate::collector::Collector;
