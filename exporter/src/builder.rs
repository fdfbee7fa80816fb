//! The exporter's settings and their checks.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use loopguard::lag::LoopLag;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{MAX_WORKERS, Pool};

use crate::encoding::GZIP_LEVEL;
use crate::exporter::Exporter;
use crate::offload::Offload;
use crate::source::Source;

/// The default name of the exporter's pool: its threads' names and its metrics' `pool`
/// label.
pub const POOL_NAME: &str = "registry-serve";

pub(crate) type Note = Arc<dyn Fn() -> String + Send + Sync>;

/// Everything an [`Exporter`] was told, checked by [`ExporterBuilder::build`].
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) pool_name: String,
    pub(crate) workers: usize,
    pub(crate) worker_nice: u8,
    pub(crate) worker_sched_idle: bool,
    pub(crate) demand_window: Duration,
    pub(crate) scrape_budget: Duration,
    pub(crate) scrape_timeout_offset: Duration,
    pub(crate) coalesce: Option<Duration>,
    pub(crate) offload: Offload,
    pub(crate) header_read_timeout: Duration,
    pub(crate) max_header_bytes: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) max_connections: usize,
    pub(crate) shutdown_grace: Duration,
    pub(crate) gzip_level: u32,
    pub(crate) status_page: bool,
    pub(crate) status_note: Option<Note>,
    #[cfg(feature = "web-config")]
    pub(crate) web_config_file: Option<std::path::PathBuf>,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("pool_name", &self.pool_name)
            .field("workers", &self.workers)
            .field("worker_nice", &self.worker_nice)
            .field("worker_sched_idle", &self.worker_sched_idle)
            .field("scrape_budget", &self.scrape_budget)
            .field("scrape_timeout_offset", &self.scrape_timeout_offset)
            .field("coalesce", &self.coalesce)
            .field("offload", &self.offload)
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

/// Builds an [`Exporter`]: [`Exporter::builder`].
///
/// Every setting has a default that the example and the storm measured; only the
/// [`source`](ExporterBuilder::source) is required. A setting out of range is an
/// [`InvalidInput`](io::ErrorKind::InvalidInput) error from [`build`](ExporterBuilder::build),
/// never clamped.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};
///
/// let exporter = Exporter::builder()
///     .source(render_fn(PROMETHEUS_TEXT, |b| Ok(b.extend_from_slice(b"up 1\n"))))
///     .workers(1)
///     .scrape_budget(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(exporter.pool().stats().capacity, 1);
/// assert!(Exporter::builder().build().is_err(), "no source");
/// # Ok::<(), std::io::Error>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct ExporterBuilder {
    source: Option<Arc<dyn Source>>,
    settings: Settings,
    on_orphan: Option<OrphanHandler>,
    /// `None` until [`loop_lag`](ExporterBuilder::loop_lag) is called: the default probe.
    loop_lag: Option<Option<LoopLag>>,
}

impl fmt::Debug for ExporterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExporterBuilder")
            .field("source", &self.source.is_some())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ExporterBuilder {
    pub(crate) fn new() -> ExporterBuilder {
        ExporterBuilder {
            source: None,
            on_orphan: None,
            loop_lag: None,
            settings: Settings {
                pool_name: POOL_NAME.to_string(),
                workers: 2,
                worker_nice: 10,
                worker_sched_idle: true,
                demand_window: Duration::from_secs(5),
                scrape_budget: Duration::from_secs(30),
                scrape_timeout_offset: Duration::from_millis(500),
                coalesce: None,
                offload: Offload::Pool,
                header_read_timeout: Duration::from_secs(10),
                max_header_bytes: 16 * 1024,
                max_body_bytes: 64 * 1024,
                max_connections: 10_000,
                shutdown_grace: Duration::from_secs(5),
                gzip_level: GZIP_LEVEL,
                status_page: true,
                status_note: None,
                #[cfg(feature = "web-config")]
                web_config_file: None,
            },
        }
    }

    /// The registry to serve (required).
    pub fn source(mut self, source: impl Source) -> ExporterBuilder {
        self.source = Some(Arc::new(source));
        self
    }

    /// The pool's name (default [`POOL_NAME`]): its threads are `NAME-0`, … and its series
    /// carry `pool="NAME"`.
    pub fn pool_name(mut self, name: &str) -> ExporterBuilder {
        self.settings.pool_name = name.to_string();
        self
    }

    /// Worker threads, and so renders at once (default 2; 1 to `loopguard::pool::MAX_WORKERS`).
    pub fn workers(mut self, workers: usize) -> ExporterBuilder {
        self.settings.workers = workers;
        self
    }

    /// The workers' nice value, 0 to 19 (default 10): walks run below the loop, so that
    /// refusals and `/healthz` answer while every core renders. See loopguard's
    /// `PoolBuilder::worker_nice` for the caveats (Linux only; a no-op elsewhere).
    pub fn worker_nice(mut self, nice: u8) -> ExporterBuilder {
        self.settings.worker_nice = nice;
        self
    }

    /// Whether the workers run in Linux's idle scheduling class (default `true`): the loop
    /// then takes a CPU from a walk the moment it wakes instead of waiting for the next
    /// scheduler tick. A walk in that class runs only on CPU time nothing else wants: on a
    /// machine kept busy by other work, scrapes may then run out of budget (`504`). See
    /// loopguard's `PoolBuilder::worker_sched_idle`.
    ///
    /// One wait is left: a loop that another normal thread preempted (after using more than
    /// its share) can still wait behind a walk until the next tick, up to 4 ms at 250 Hz.
    /// The loop's thread is the application's, so the exporter leaves it alone; on Linux
    /// 6.12 and later a short scheduler slice for it (`sched_setattr` with `sched_runtime`
    /// 100 µs, allowed without privileges) made such waits rarer in the storm's bursts
    /// (BENCHMARKS.md, "The loop through a burst").
    pub fn worker_sched_idle(mut self, idle: bool) -> ExporterBuilder {
        self.settings.worker_sched_idle = idle;
        self
    }

    /// The window of the pool's demand average (default 5 s; above zero).
    pub fn demand_window(mut self, window: Duration) -> ExporterBuilder {
        self.settings.demand_window = window;
        self
    }

    /// The longest a scrape may take, whatever its caller says it will wait (default 30 s;
    /// above zero).
    pub fn scrape_budget(mut self, budget: Duration) -> ExporterBuilder {
        self.settings.scrape_budget = budget;
        self
    }

    /// Kept from the caller's own budget (`X-Prometheus-Scrape-Timeout-Seconds`, Envoy's
    /// `x-envoy-expected-rq-timeout-ms`, `grpc-timeout`) to send and parse the answer
    /// (default 500 ms, Prometheus' own margin). An offset that would use a caller's budget
    /// up shrinks it: the caller's budget stays a ceiling.
    pub fn scrape_timeout_offset(mut self, offset: Duration) -> ExporterBuilder {
        self.settings.scrape_timeout_offset = offset;
        self
    }

    /// Scrapes share one walk per `ttl` through a loopguard `Refresh` (off by default:
    /// exporter practice is to collect fresh for every scrape). When on, one walk per
    /// scrape cycle is the documented choice: a `ttl` a little under the scrape interval,
    /// so that the several Prometheus servers (or the HA pair) scraping one target share a
    /// walk and each cycle still reads fresh values. Above zero.
    pub fn coalesce(mut self, ttl: Duration) -> ExporterBuilder {
        self.settings.coalesce = Some(ttl);
        self
    }

    /// Where the render runs (default [`Offload::Pool`]); the other choices are baselines
    /// for measurement.
    pub fn offload(mut self, offload: Offload) -> ExporterBuilder {
        self.settings.offload = offload;
        self
    }

    /// A client must start a request head within this time and finish it within as long
    /// again; it also bounds idle keep-alive connections and the body read (default 10 s;
    /// above zero).
    pub fn header_read_timeout(mut self, timeout: Duration) -> ExporterBuilder {
        self.settings.header_read_timeout = timeout;
        self
    }

    /// The largest request head buffered, at least 8 KiB (default 16 KiB): larger heads
    /// get `431`.
    pub fn max_header_bytes(mut self, bytes: usize) -> ExporterBuilder {
        self.settings.max_header_bytes = bytes;
        self
    }

    /// The largest request body read (default 64 KiB): larger bodies get `413`.
    pub fn max_body_bytes(mut self, bytes: usize) -> ExporterBuilder {
        self.settings.max_body_bytes = bytes;
        self
    }

    /// Connections open at most per listener (default 10 000; at least 1): past it, the
    /// one idle the longest is closed to make room, never one with a request in progress.
    pub fn max_connections(mut self, max: usize) -> ExporterBuilder {
        self.settings.max_connections = max;
        self
    }

    /// On shutdown, how long the requests in flight may take to finish, and then the walks
    /// as long again (default 5 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> ExporterBuilder {
        self.settings.shutdown_grace = grace;
        self
    }

    /// The gzip level, 0 to 9 (default [`GZIP_LEVEL`](crate::GZIP_LEVEL)).
    pub fn gzip_level(mut self, level: u32) -> ExporterBuilder {
        self.settings.gzip_level = level;
        self
    }

    /// Whether `/` serves a plain-text status page from `Pool::stats()` (default `true`):
    /// its first line is `N connections`, then the loop's lag (unless
    /// [`loop_lag`](ExporterBuilder::loop_lag) turned it off), the pool's stats and the
    /// coalescing cache's.
    pub fn status_page(mut self, on: bool) -> ExporterBuilder {
        self.settings.status_page = on;
        self
    }

    /// A note the status page adds to its first line (`N connections; NOTE`), read on the
    /// loop for each page: keep it cheap.
    pub fn status_note(
        mut self,
        note: impl Fn() -> String + Send + Sync + 'static,
    ) -> ExporterBuilder {
        self.settings.status_note = Some(Arc::new(note));
        self
    }

    /// exporter-toolkit's web config file (`--web.config.file`; feature `web-config`):
    /// `basic_auth_users`, `http_server_config.headers` and `rate_limit`, for every path
    /// (`/metrics`, `/healthz` and `/` alike, as exporter-toolkit protects every path), and
    /// `tls_server_config` with the feature `tls`.
    ///
    /// - **`basic_auth_users`** (user: bcrypt hash, `$2y$`, `$2b$` or `$2a$`, cost at most
    ///   [`BCRYPT_MAX_COST`](crate::BCRYPT_MAX_COST)): without the right credentials, `401`
    ///   with `WWW-Authenticate: Basic` (an `Authorization` that is not Basic, not base64 or
    ///   not UTF-8 too). The user is compared in constant time; bcrypt runs on a pool of its
    ///   own, one worker ([`Exporter::web_auth_pool`]), never on the loop nor on the render's
    ///   slots; when it is busy, `503` with `Retry-After`, nothing queued. A verified
    ///   credential is cached as a keyed sha256 digest (a per-process random key, the user,
    ///   the hash and the password; the password itself is not kept), so a right password
    ///   costs one bcrypt until 64 other credentials push it out. An unknown user's
    ///   password is verified against a hash of the dearest user's cost, so the time taken
    ///   does not give a user's name away (exporter-toolkit uses cost 10 whatever the users'
    ///   cost; give every user the same cost).
    /// - **`http_server_config.headers`**: exporter-toolkit's five (`Content-Security-Policy`,
    ///   `X-Frame-Options` `deny` or `sameorigin`, `X-Content-Type-Options` `nosniff`,
    ///   `X-XSS-Protection`, `Strict-Transport-Security`), added to every answer.
    /// - **`rate_limit`** (`interval`, `burst`): a token bucket over every request, checked
    ///   before the credentials; past it, `429`. `interval` is read as exporter-toolkit
    ///   reads it: Go's duration form (`1.5s`, `1m30s`, `500ms`) or a whole number of
    ///   nanoseconds; `0` turns the limit off. A negative one is an error (Go would take it
    ///   as no limit).
    ///
    /// - **`tls_server_config`** (feature `tls`; without it, an error naming the key): every
    ///   connection is TLS 1.2 or 1.3 through rustls with ring, and
    ///   [`Exporter::serves_tls`] is `true`. Its keys, as exporter-toolkit's:
    ///   - `cert_file` and `key_file` (PEM; relative to the file's directory), or `cert`
    ///     and `key` inline: the key must be the certificate's;
    ///   - `client_auth_type`: `NoClientCert` (the default), `RequestClientCert` and
    ///     `RequireAnyClientCert` (`RequireClientCert`) take any certificate (the client
    ///     still proves it holds the key) without and with requiring one,
    ///     `VerifyClientCertIfGiven` and `RequireAndVerifyClientCert` verify it against
    ///     `client_ca_file` (or inline `client_ca`);
    ///   - `client_allowed_sans`: the client certificate must carry one of these DNS
    ///     names, email addresses, IP addresses or URIs, else the handshake fails (with
    ///     `RequireAnyClientCert` or `RequireAndVerifyClientCert` only, as exporter-toolkit);
    ///   - `min_version`, `max_version`: `TLS12` (min's default), `TLS13` (max's default);
    ///   - `cipher_suites`: Go's names of the TLS 1.2 suites rustls has
    ///     (`TLS_ECDHE_{ECDSA,RSA}_WITH_AES_128_GCM_SHA256`, `…_AES_256_GCM_SHA384`,
    ///     `…_CHACHA20_POLY1305_SHA256`); TLS 1.3 names are taken with no effect, as in Go
    ///     (TLS 1.3's suites are always on);
    ///   - `curve_preferences`: `X25519`, `CurveP256`, `CurveP384`, in that order of
    ///     preference if so listed;
    ///   - `prefer_server_cipher_suites` (default `true`).
    ///
    ///   The first byte and the handshake must come within one
    ///   [`header_read_timeout`](ExporterBuilder::header_read_timeout) of the accept (as
    ///   Go's handshake deadline), and a handshake counts against
    ///   [`max_connections`](ExporterBuilder::max_connections) as an idle connection (it is
    ///   shed to make room like one; rustls buffers up to 64 KiB of a handshake message, so
    ///   a stalled one may hold about 68 KiB against a plain connection's
    ///   [`max_header_bytes`](ExporterBuilder::max_header_bytes)). Plain HTTP sent to the port gets
    ///   Go's answer, `HTTP/1.0 400 Bad Request` and `Client sent an HTTP request to an
    ///   HTTPS server.`; other bytes that are not a TLS record are closed. The certificate,
    ///   key and CA files are `stat`ed at every handshake and read again when they change:
    ///   a renewed pair (each file replaced by a rename) is used for the next handshake; a
    ///   pair that does not load (a handshake between the two renames sees a key that is
    ///   not the certificate's) keeps the last good one and says why with `log::warn!`,
    ///   once per change. The handshake's crypto (key exchange, signature, a client
    ///   certificate's verification) runs on a thread of the exporter's own,
    ///   `tls-handshake`, at the [`worker_nice`](ExporterBuilder::worker_nice) value, not on
    ///   the loop, which pays 0.2 to 0.5 ms a connection for the rest (BENCHMARKS.md, "TLS
    ///   handshakes"). When 128 new handshakes already wait for that thread, a new
    ///   connection is closed at once instead of queueing behind them, as a saturated pool
    ///   refuses; one that waits for its client's next bytes does not count.
    ///
    /// Not supported, an error naming the key: what rustls cannot honour (`TLS10` and
    /// `TLS11`, CBC, RSA key exchange, 3DES and RC4 suites, `CurveP521`); a verifying
    /// `client_auth_type` without `client_ca_file` (Go would verify against the system's
    /// roots: the exporter does not guess); `client_ca_file` with `NoClientCert`; a CA or a
    /// tuning key without `cert_file` and `key_file`; `http_server_config.http2: true` (the
    /// exporter speaks HTTP/1.1); any key exporter-toolkit does not have.
    ///
    /// The file is `stat`ed on every request and read again when its modification time,
    /// length or inode changed: a new user applies at once. A bad new file keeps the last
    /// good one and says why with `log::warn!`, once per change; so does a file with no
    /// `basic_auth_users` where the last good one has some (a file written in place is
    /// empty or cut short for a moment: replace it by a rename; turning basic auth off
    /// takes a restart), a file that would turn TLS on or off (a restart too: the address
    /// was announced as `http://` or `https://`), and a file over 1 MiB. bcrypt runs on a
    /// pool of one worker of its own (`web-auth`), at the render workers' nice value.
    ///
    /// # Errors
    ///
    /// [`build`](ExporterBuilder::build) fails with
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) naming the key when the file does not
    /// parse (or names a certificate, key or CA file that does not load), and with the
    /// read's error when it cannot be read.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};
    ///
    /// let path = std::env::temp_dir().join(format!("web-{}.yml", std::process::id()));
    /// std::fs::write(&path, "basic_auth_users:\n  \
    ///     prometheus: $2y$10$3lRI10WVWUgWA.W4EAZ8R.C7u4fN7fTI1MwuzdgsmsiKUDfSEfX7K\n")?;
    /// let source = || render_fn(PROMETHEUS_TEXT, |b| Ok(b.extend_from_slice(b"up 1\n")));
    /// let exporter = Exporter::builder().source(source()).web_config_file(&path).build()?;
    /// assert_eq!(exporter.web_auth_pool().map(|p| p.stats().capacity), Some(1));
    ///
    /// std::fs::write(&path, "tls_server_config:\n  cert_file: server.crt\n")?;
    /// let err = Exporter::builder().source(source()).web_config_file(&path).build().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// assert!(err.to_string().contains("tls_server_config"), "{err}");
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg(feature = "web-config")]
    pub fn web_config_file(mut self, path: impl Into<std::path::PathBuf>) -> ExporterBuilder {
        self.settings.web_config_file = Some(path.into());
        self
    }

    /// Where failures of walks whose scrape left are reported (default: loopguard's
    /// default handler, which logs and counts).
    pub fn on_orphan(mut self, handler: OrphanHandler) -> ExporterBuilder {
        self.on_orphan = Some(handler);
        self
    }

    /// The loop's own lag: by default a [`LoopLag`] named after the pool (label `loop`, so
    /// `registry-serve`), with Node's 10 ms resolution and a 50 ms slow-poll threshold.
    ///
    /// The exporter runs one probe, on the loop of its first [`serve`](Exporter::serve)
    /// future (when that one ends, another serve's loop takes it over: one sample per
    /// resolution whatever the number of listeners), and every serve times each poll of its
    /// accept loop (task `accept`) and of each connection (task `connection`: the
    /// request's parsing, its handler and its body): a poll over the threshold is counted
    /// and logged. The status page shows the stats; the series
    /// `loopguard_loop_lag_seconds` and `loopguard_loop_slow_polls_total` reach a
    /// metrics-exporter-prometheus handle through the facade, and a prometheus-client
    /// registry through a `loopguard::telemetry::Collector` given
    /// [`Exporter::loop_lag`]. `Some(lag)` shares a `LoopLag` of your own, whose probe the
    /// exporter then runs (an application whose loop also serves the exporter measures one
    /// loop once: do not also spawn `lag.probe()`); `None` turns the probe and the timing
    /// off.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::lag::LoopLag;
    /// use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};
    ///
    /// let source = || render_fn(PROMETHEUS_TEXT, |b| Ok(b.extend_from_slice(b"up 1\n")));
    /// let probed = Exporter::builder().source(source()).build()?;
    /// assert_eq!(probed.loop_lag().map(|l| l.name()), Some("registry-serve"));
    /// let mine = LoopLag::new("app")?;
    /// let shared = Exporter::builder().source(source()).loop_lag(Some(mine.clone())).build()?;
    /// assert_eq!(shared.loop_lag().map(|l| l.name()), Some("app"));
    /// let off = Exporter::builder().source(source()).loop_lag(None).build()?;
    /// assert!(off.loop_lag().is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn loop_lag(mut self, lag: Option<LoopLag>) -> ExporterBuilder {
        self.loop_lag = Some(lag);
        self
    }

    /// Checks the settings and starts the pool.
    ///
    /// # Errors
    ///
    /// [`InvalidInput`](io::ErrorKind::InvalidInput) naming the setting when one is out of
    /// range or no source was given, or naming the key of a web config file that does not
    /// parse; the pool's own error if its threads cannot start.
    pub fn build(self) -> io::Result<Exporter> {
        let s = &self.settings;
        let invalid = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        let Some(source) = self.source else {
            return invalid("no source: call `ExporterBuilder::source`".into());
        };
        if !(1..=MAX_WORKERS).contains(&s.workers) {
            return invalid(format!(
                "workers must be between 1 and {MAX_WORKERS}, not {}",
                s.workers
            ));
        }
        if s.worker_nice > 19 {
            return invalid(format!(
                "worker_nice must be between 0 and 19, not {}",
                s.worker_nice
            ));
        }
        for (name, value) in [
            ("demand_window", s.demand_window),
            ("scrape_budget", s.scrape_budget),
            ("header_read_timeout", s.header_read_timeout),
            ("coalesce", s.coalesce.unwrap_or(Duration::MAX)),
        ] {
            if value.is_zero() {
                return invalid(format!("{name} must be above zero"));
            }
        }
        if s.max_header_bytes < 8192 {
            return invalid(format!(
                "max_header_bytes must be at least 8192, not {}",
                s.max_header_bytes
            ));
        }
        if s.max_connections == 0 {
            return invalid("max_connections must be at least 1".into());
        }
        if s.gzip_level > 9 {
            return invalid(format!(
                "gzip_level must be between 0 and 9, not {}",
                s.gzip_level
            ));
        }
        if s.coalesce.is_some() && s.offload != Offload::Pool {
            return invalid("coalesce needs Offload::Pool".into());
        }
        #[cfg(feature = "web-config")]
        let web = (s.web_config_file.clone())
            .map(|path| crate::web_config::Web::load(path, s.worker_nice));
        #[cfg(feature = "web-config")]
        let web = web.transpose()?;
        #[cfg(not(feature = "web-config"))]
        let web = ();
        let mut pool = Pool::builder()
            .name(&s.pool_name)
            .workers(s.workers)
            .worker_nice(s.worker_nice)
            .worker_sched_idle(s.worker_sched_idle)
            .demand_window(s.demand_window);
        if let Some(handler) = self.on_orphan {
            pool = pool.on_orphan(handler);
        }
        // The pool first: it names a bad `pool_name` as the pool's, and the lag's series is
        // registered only once the pool's threads run.
        let pool = pool.build()?;
        let lag = match self.loop_lag {
            Some(lag) => lag,
            None => Some(LoopLag::new(&s.pool_name)?),
        };
        Exporter::new(self.settings, source, pool, lag, web)
    }
}
