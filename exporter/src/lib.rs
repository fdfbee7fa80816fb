//! A Prometheus endpoint for a single-threaded async loop, with no tokio runtime.
//!
//! ```
//! let handle = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
//! let exporter = loopguard_exporter::Exporter::builder().source(handle).build()?;
//! let listener = std::net::TcpListener::bind("127.0.0.1:9898")?;
//! # exporter.shutdown(); // serve would serve until shutdown
//! smol::block_on(exporter.serve(listener))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! That is a whole exporter: `GET /metrics` renders the registry on a bounded
//! [`loopguard`] pool (two worker threads below the loop's priority), gzipped
//! (or zstd) there when the scraper asks, within the scraper's own budget; `GET /healthz` answers
//! without touching the pool; `GET /` is a status page.
//!
//! # What it does for you
//!
//! - **Admission**: a render runs on the pool through `Pool::try_run_within`. No free
//!   slot: `503` with `Retry-After` at once, nothing queued. The budget is the earliest of
//!   [`scrape_budget`](ExporterBuilder::scrape_budget) and the caller's own
//!   (`X-Prometheus-Scrape-Timeout-Seconds`, Envoy's, gRPC's) less the offset, a ceiling;
//!   spent: `504`, and the walk keeps its slot until it ends. A render that fails or
//!   panics: `500`, reported once. One mapping, [`Unserved`], says which is which.
//! - **Honest numbers**: the pool's read-side gauges are published on the loop before the
//!   slot is asked for, so a scrape never counts itself and an idle exporter reads
//!   `in_use 0`.
//! - **Cheap renders**: a buffer kept per worker and reserved at the last size;
//!   compression on the worker; `Accept-Encoding` read once, q-values included
//!   ([`Encoding::negotiate`]): see [Negotiation](#negotiation).
//! - **A loop that stays responsive**: bodies go out 256 KiB per poll of their
//!   connection's task, so refusals and `/healthz` answer between the slices of a large
//!   scrape.
//! - **Flood defence**: every connection accepted at once into a listen backlog raised to
//!   the system's maximum; past [`max_connections`](ExporterBuilder::max_connections) or
//!   out of descriptors (`EMFILE`, `ENFILE`), the connection idle the longest is closed,
//!   never one with a request in progress; header timeouts.
//! - **Graceful drain**: [`Exporter::shutdown`] stops accepting, finishes the requests in
//!   flight and the walks within a grace.
//! - **Optional coalescing** through loopguard's `Refresh`
//!   ([`coalesce`](ExporterBuilder::coalesce), off by default).
//!
//! # Sources
//!
//! A [`Source`] renders its exposition into a buffer on a worker thread:
//!
//! | source | feature | content type | loopguard's own series |
//! |---|---|---|---|
//! | `metrics_exporter_prometheus::PrometheusHandle` | `metrics-exporter-prometheus` (default) | Prometheus text 0.0.4, whatever is asked | emitted through the `metrics` facade into the installed recorder: there as soon as it is installed |
//! | `Arc<prometheus_client::registry::Registry>` | `prometheus-client` | OpenMetrics text 1.0.0, whatever is asked (its encoder's one format) | register a `loopguard::telemetry::Collector` (loopguard's feature `prometheus-client`) in the registry |
//! | [`render_fn`]`(content_type, f)` | | what `f` writes | `f`'s to add |
//! | your own [`Source`] | | what it writes for the [`Format`] asked | yours to add |
//!
//! The exporter calls the recorder's `run_upkeep()` itself, every five seconds.
//!
//! # Negotiation
//!
//! As client_golang's promhttp does it:
//!
//! - **`Accept-Encoding`** ([`Encoding::negotiate`]): gzip (level [`GZIP_LEVEL`]), zstd
//!   (level [`ZSTD_LEVEL`], with the feature `zstd`) or identity, by q-value; gzip first when
//!   weights tie; `zstd;q=0` refuses zstd, `gzip;q=0` gzip, whatever `*` says; nothing
//!   acceptable is answered identity. Compression runs on the worker that rendered.
//! - **`Accept`** ([`Format::negotiate`]): OpenMetrics when the scraper prefers it (Prometheus
//!   does), the Prometheus text otherwise; a source writes the format asked where it can,
//!   and the `Content-Type` is exactly what it wrote ([`Source::content_type`]).
//! - **`Vary: accept-encoding, accept`** on every `/metrics` answer.
//!
//! # The handler's own series
//!
//! The exporter adds promhttp's two series about `/metrics` itself, with promhttp's names,
//! to the exposition of every source (at the end of Prometheus text, before the closing
//! `# EOF` of OpenMetrics; a source of another content type is served as it wrote it):
//!
//! | series | type | what |
//! |---|---|---|
//! | `promhttp_metric_handler_requests_total{code}` | counter | `/metrics` requests answered, by HTTP status code (`"200"`, `"503"`, `"504"`, `"500"`, `"405"` …; 200, 500, 503 and 504 start at 0); a scrape counts once answered, so its own rendering reads the ones before it |
//! | `promhttp_metric_handler_requests_in_flight` | gauge | `/metrics` requests being served, the one rendering included |
//!
//! Every scraper is counted (other Prometheus servers, an HA pair, a dashboard), not only
//! the one reading; a scrape whose client left before its answer is no longer in flight
//! and counted under no code. With [`coalesce`](ExporterBuilder::coalesce), the scrapes
//! that share a walk read its values. loopguard's `ops/` dashboard plots them and its
//! alert `LoopguardMetricsHandlerErrors` reads them.
//!
//! # Features
//!
//! | feature | default | what |
//! |---|---|---|
//! | `metrics-exporter-prometheus` | on | `impl Source for PrometheusHandle` |
//! | `prometheus-client` | off | `impl Source for Arc<prometheus_client::registry::Registry>` |
//! | `zstd` | off | zstd offered beside gzip; the `zstd` crate builds libzstd's C sources (a C compiler; 7 s on two cores here) |
//! | `web-config` | off | exporter-toolkit's web config file (`ExporterBuilder::web_config_file`): basic auth (bcrypt), headers, rate limit; a YAML parser, bcrypt and sha2 that an exporter without the file does not build |
//! | `tls` | off | the web config file's `tls_server_config` (turns `web-config` on): TLS 1.2 and 1.3 through rustls and futures-rustls with ring, client certificates, certificates reloaded on change ([`Exporter::serves_tls`]) |
//!
//! # Executors
//!
//! [`Exporter::serve`] runs its connections on a `LocalExecutor` of its own, with
//! async-io's reactor and timers: it serves under smol, async-std, a `LocalExecutor`,
//! `futures_lite::future::block_on`, or beside a tokio app in a current-thread runtime
//! (`rt.block_on(exporter.serve(listener))`). hyper brings the tokio crate with its
//! `sync` feature only; no tokio runtime runs.
//!
//! # Caveats
//!
//! - Expiry is cooperative: a render that overruns its budget is answered `504` at the
//!   deadline, but runs on and keeps its slot until it returns.
//! - The workers' idle class and nice value are Linux-only; elsewhere the workers run at
//!   the loop's priority.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

mod builder;
mod coalesce;
mod conns;
mod encoding;
mod exporter;
mod handler_series;
mod offload;
mod routes;
mod sliced;
mod source;
mod status;
#[cfg(feature = "tls")]
mod tls_accept;
#[cfg(feature = "tls")]
mod tls_thread;
#[cfg(feature = "web-config")]
mod web_config;

pub use builder::{ExporterBuilder, POOL_NAME};
pub use encoding::{Encoding, GZIP_LEVEL, ZSTD_LEVEL};
pub use exporter::{Exporter, Serve};
pub use offload::{Offload, walk};
pub use source::{Format, OPENMETRICS_TEXT, PROMETHEUS_TEXT, RenderFn, Source, render_fn};
pub use status::Unserved;
#[cfg(feature = "web-config")]
pub use web_config::BCRYPT_MAX_COST;
