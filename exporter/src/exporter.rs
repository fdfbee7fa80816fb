//! The exporter handle and its serving loop: accepting, connections, shutdown.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_executor::LocalExecutor;
use async_io::{Async, Timer};
use event_listener::Event;
use futures_lite::future;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use loopguard::deadline::Deadline;
use loopguard::lag::LoopLag;
use loopguard::pool::Pool;
use smol_hyper::rt::{FuturesIo, SmolTimer};

use crate::builder::{ExporterBuilder, Settings};
use crate::coalesce::Coalesced;
use crate::conns::{self, Conn, Tracker};
use crate::handler_series::{HandlerSeries, Instrumented};
use crate::routes;
use crate::sliced::{Turn, Turns};
use crate::source::Source;

/// A Prometheus endpoint on a loopguard pool: build it with [`Exporter::builder`], serve
/// it with [`serve`](Exporter::serve).
///
/// A cheap handle: clones share one pool, one source and one shutdown.
///
/// # Examples
///
/// ```
/// use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};
///
/// let exporter = Exporter::builder()
///     .source(render_fn(PROMETHEUS_TEXT, |b| Ok(b.extend_from_slice(b"up 1\n"))))
///     .build()?;
/// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
/// exporter.shutdown(); // here, so that `serve` drains at once and returns
/// futures_lite::future::block_on(exporter.serve(listener))?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Exporter {
    pub(crate) inner: Arc<Inner>,
}

/// The web config file and its bcrypt verifier, when one was given (feature `web-config`).
#[cfg(feature = "web-config")]
pub(crate) type Web = Option<crate::web_config::Web>;
/// Nothing without the feature `web-config`.
#[cfg(not(feature = "web-config"))]
pub(crate) type Web = ();

pub(crate) struct Inner {
    pub(crate) settings: Settings,
    pub(crate) source: Arc<dyn Source>,
    pub(crate) pool: Pool,
    pub(crate) cache: Option<Coalesced>,
    /// promhttp's series of `/metrics` itself, added to the source's exposition.
    pub(crate) series: Arc<HandlerSeries>,
    pub(crate) lag: Option<LoopLag>,
    /// One probe per exporter: held by the serve that runs it, handed on when it ends.
    probing: Probe,
    /// The web config file and its bcrypt verifier, when one was given.
    #[cfg_attr(not(feature = "web-config"), allow(dead_code))]
    pub(crate) web: Web,
    stop: Stop,
    pub(crate) connections: AtomicUsize,
    shed: AtomicU64,
    /// [`Serve`]s made and not yet drained (or dropped): the last to drain closes the pool.
    serving: AtomicUsize,
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter")
            .field("settings", &self.inner.settings)
            .field("pool", &self.inner.pool)
            .field("shut_down", &self.inner.stop.is_triggered())
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// A builder with the measured defaults: see [`ExporterBuilder`].
    pub fn builder() -> ExporterBuilder {
        ExporterBuilder::new()
    }

    pub(crate) fn new(
        settings: Settings,
        source: Arc<dyn Source>,
        pool: Pool,
        lag: Option<LoopLag>,
        web: Web,
    ) -> io::Result<Exporter> {
        let series = Arc::<HandlerSeries>::default();
        let source: Arc<dyn Source> = Arc::new(Instrumented {
            source,
            series: series.clone(),
        });
        let cache = settings
            .coalesce
            .map(|ttl| Coalesced::new(&source, &pool, ttl, settings.gzip_level))
            .transpose()?;
        Ok(Exporter {
            inner: Arc::new(Inner {
                settings,
                source,
                pool,
                cache,
                series,
                lag,
                probing: Probe::default(),
                web,
                stop: Stop::default(),
                connections: AtomicUsize::new(0),
                shed: AtomicU64::new(0),
                serving: AtomicUsize::new(0),
            }),
        })
    }

    /// Serves HTTP/1.1 on `listener` until [`shutdown`](Exporter::shutdown), then drains.
    ///
    /// Raises the listen backlog to the system's maximum (std listens with 128, which
    /// locks scrapers out behind a connection flood) when called, before the future is
    /// first polled: announce the address after this call. `GET /metrics` renders the source on
    /// the pool; `GET /healthz` answers `ok` without touching the pool; `GET /` is the
    /// status page (unless turned off). Several listeners are served by calling this once
    /// per listener: they share the one pool.
    ///
    /// The future serves on the thread that polls it (it runs its connections on a
    /// `LocalExecutor` of its own), with async-io's timers and reactor: it runs under
    /// `smol::block_on`, a `LocalExecutor`, async-std, `futures_lite::future::block_on` or a
    /// tokio current-thread runtime alike. It is not `Send`.
    ///
    /// On shutdown it stops accepting, lets the requests in flight finish within the
    /// shutdown grace, and resolves. The last serve of the exporter to drain (of those made
    /// and not dropped) closes the pool first and gives its walks as long again: a listener
    /// that drains early never refuses the render of a request still in flight on another.
    /// A `Serve` dropped before it resolves leaves the pool open.
    ///
    /// # Errors
    ///
    /// If the listener cannot be made non-blocking or its backlog raised.
    pub fn serve(&self, listener: TcpListener) -> Serve {
        // At once, not at the first poll: a caller that says where it listens after this
        // call has the raised backlog behind its word.
        let prepared = prepare(&listener).map(|()| listener);
        let inner = self.inner.clone();
        let counted = Serving::enter(&inner);
        Serve {
            future: Box::pin(async move { serve(inner, prepared?, counted).await }),
        }
    }

    /// Starts a graceful shutdown of every [`serve`](Exporter::serve) of this exporter
    /// (and of those called later). Wire it to SIGTERM (the example does, with
    /// `async-signal`).
    pub fn shutdown(&self) {
        self.inner.stop.trigger();
    }

    /// Whether [`shutdown`](Exporter::shutdown) was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner.stop.is_triggered()
    }

    /// The pool renders run on: its stats, or other blocking work that should share its
    /// slots (the example's cardinality walk waits for one with `Pool::run`).
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The loop's lag probe and poll timing, unless turned off:
    /// [`ExporterBuilder::loop_lag`].
    pub fn loop_lag(&self) -> Option<&LoopLag> {
        self.inner.lag.as_ref()
    }

    /// The pool bcrypt verifications run on (one worker), when a
    /// [`web_config_file`](ExporterBuilder::web_config_file) was given: its stats count
    /// the verifications (`jobs_ok`) and the requests refused because it was busy
    /// (`rejected`). Feature `web-config`.
    #[cfg(feature = "web-config")]
    pub fn web_auth_pool(&self) -> Option<&Pool> {
        self.inner.web.as_ref().map(|web| web.pool())
    }

    /// Whether every connection is TLS: the web config file
    /// (`ExporterBuilder::web_config_file`, feature `web-config`) has `tls_server_config`
    /// (feature `tls`; always `false` without it). Fixed when the exporter is built: a new
    /// file that would turn TLS on or off is not taken. Say `https://` when announcing the
    /// address if it is `true`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};
    ///
    /// let source = render_fn(PROMETHEUS_TEXT, |b| {
    ///     b.extend_from_slice(b"up 1\n");
    ///     Ok(())
    /// });
    /// let exporter = Exporter::builder().source(source).build()?;
    /// let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// let scheme = if exporter.serves_tls() { "https" } else { "http" };
    /// println!("listening on {scheme}://{}", listener.local_addr()?);
    /// assert_eq!(scheme, "http"); // no web config file: plain HTTP
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn serves_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.inner.web.as_ref().is_some_and(|web| web.serves_tls());
        #[cfg(not(feature = "tls"))]
        false
    }

    /// Connections open now, over every listener.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Connections closed so far to make room for newer ones, over every listener.
    pub fn shed_connections(&self) -> u64 {
        self.inner.shed.load(Ordering::SeqCst)
    }
}

/// The future of [`Exporter::serve`]: serves until shutdown, then drains.
#[must_use = "futures do nothing unless polled"]
pub struct Serve {
    future: Pin<Box<dyn Future<Output = io::Result<()>>>>,
}

impl fmt::Debug for Serve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve").finish_non_exhaustive()
    }
}

impl Future for Serve {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.future.as_mut().poll(cx)
    }
}

/// Raises the backlog and makes the listener non-blocking.
fn prepare(listener: &TcpListener) -> io::Result<()> {
    #[cfg(unix)]
    conns::raise_backlog(listener)?;
    listener.set_nonblocking(true)
}

/// One [`Serve`] counted in `Inner::serving` until it drains or is dropped.
struct Serving(Option<Arc<Inner>>);

impl Serving {
    fn enter(inner: &Arc<Inner>) -> Serving {
        inner.serving.fetch_add(1, Ordering::SeqCst);
        Serving(Some(inner.clone()))
    }

    /// Uncounts this serve; whether it was the last one counted.
    fn leave(&mut self) -> bool {
        self.0
            .take()
            .is_some_and(|inner| inner.serving.fetch_sub(1, Ordering::SeqCst) == 1)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.leave();
    }
}

async fn serve(inner: Arc<Inner>, listener: TcpListener, mut counted: Serving) -> io::Result<()> {
    let listener = Async::new(listener)?;
    let ex = LocalExecutor::new();
    let tracker = Rc::new(Tracker::default());
    let grace = inner.settings.shutdown_grace;
    let lag = inner.lag.clone();
    let accepting = async {
        let listener = listener;
        let mut published = 0;
        ex.spawn(upkeep(inner.clone())).detach();
        if let Some(lag) = &lag {
            ex.spawn(probe(inner.clone(), lag.clone())).detach();
        }
        loop {
            let accepted = future::or(async { Some(listener.accept().await) }, async {
                inner.stop.wait().await;
                None
            });
            match accepted.await {
                None => break,
                Some(Ok((stream, _))) => {
                    if tracker.open() >= inner.settings.max_connections
                        && !tracker.shed_oldest_idle()
                    {
                        // Every connection has a request in progress: this one is closed.
                        drop(stream);
                        continue;
                    }
                    let conn = tracker.add();
                    inner.connections.fetch_add(1, Ordering::SeqCst);
                    let served = connection(stream, conn, tracker.clone(), inner.clone());
                    ex.spawn(timed(lag.as_ref(), "connection", served)).detach();
                }
                Some(Err(err)) if conns::out_of_descriptors(&err) => {
                    if !tracker.shed_oldest_idle() {
                        Timer::after(Duration::from_millis(50)).await;
                    }
                }
                Some(Err(err)) if err.kind() == io::ErrorKind::ConnectionAborted => {}
                Some(Err(err)) => {
                    log::warn!("accept failed: {err}");
                    Timer::after(Duration::from_millis(50)).await;
                }
            }
            publish_shed(&inner, &tracker, &mut published);
        }
        // New connections are refused from here on.
        drop(listener);
        let _ = Deadline::after(grace).run(tracker.all_closed()).await;
        publish_shed(&inner, &tracker, &mut published);
    };
    ex.run(timed(lag.as_ref(), "accept", accepting)).await;
    // Connections still open past the grace are dropped with the executor.
    drop(ex);
    if !counted.leave() {
        return Ok(()); // another serve still drains: it may need the pool, it closes it
    }
    inner.pool.close();
    if Deadline::after(grace)
        .run(inner.pool.shutdown())
        .await
        .is_err()
    {
        log::warn!("walks still running after the shutdown grace; leaving them behind");
    }
    Ok(())
}

/// Runs the exporter's one probe on this serve's loop once no other serve runs it: the
/// first serve probes; when it ends (its executor drops this task), another takes over.
async fn probe(inner: Arc<Inner>, lag: LoopLag) {
    let held = inner.probing.take().await;
    lag.probe().await;
    drop(held);
}

/// Who runs the exporter's probe: a flag and the serves waiting for it.
#[derive(Debug, Default)]
struct Probe {
    held: AtomicBool,
    released: Event,
}

/// The probe held by one serve; dropping it lets the next one take it.
struct HeldProbe<'a>(&'a Probe);

impl Drop for HeldProbe<'_> {
    fn drop(&mut self) {
        self.0.held.store(false, Ordering::SeqCst);
        // Every waiting serve: one takes the probe, the others wait again.
        self.0.released.notify(usize::MAX);
    }
}

impl Probe {
    async fn take(&self) -> HeldProbe<'_> {
        loop {
            if !self.held.swap(true, Ordering::SeqCst) {
                return HeldProbe(self);
            }
            let listener = self.released.listen();
            if !self.held.swap(true, Ordering::SeqCst) {
                return HeldProbe(self);
            }
            listener.await;
        }
    }
}

/// `future`, its polls timed under `task` when the exporter has a loop lag.
fn timed<'a, F: Future + 'a>(
    lag: Option<&LoopLag>,
    task: &str,
    future: F,
) -> Pin<Box<dyn Future<Output = F::Output> + 'a>> {
    match lag {
        Some(lag) => Box::pin(lag.instrument(task, future)),
        None => Box::pin(future),
    }
}

/// Adds this listener's connections shed since `published` to the exporter's count.
fn publish_shed(inner: &Inner, tracker: &Tracker, published: &mut u64) {
    let shed = tracker.shed();
    inner.shed.fetch_add(shed - *published, Ordering::SeqCst);
    *published = shed;
}

/// The source's upkeep every five seconds, until shutdown.
async fn upkeep(inner: Arc<Inner>) {
    while inner.stop.sleep(Duration::from_secs(5)).await {
        inner.source.upkeep();
    }
}

/// Serves one connection; on shutdown, finishes the request in flight and closes; shed by
/// the tracker, closes at once.
async fn connection(
    stream: Async<std::net::TcpStream>,
    conn: Rc<Conn>,
    tracker: Rc<Tracker>,
    inner: Arc<Inner>,
) {
    struct Open<'a>(&'a Inner, &'a Tracker, &'a Conn);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.1.remove(self.2);
            self.0.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _open = Open(&inner, &tracker, &conn);
    #[cfg(feature = "tls")]
    let accepted = std::time::Instant::now();
    let _ = stream.get_ref().set_nodelay(true);
    let timeout = inner.settings.header_read_timeout;
    let started = async { conns::first_byte(&stream, timeout).await.then_some(()) };
    let shed = async {
        conn.closed().await;
        None
    };
    if future::or(shed, started).await.is_none() {
        return;
    }
    // async-net's `TcpStream` shuts its write side down when hyper closes the connection (a
    // bare `Async<TcpStream>` only flushes): a client then reads an error response, such
    // as a 431, to its end before the close resets the unread rest.
    let stream = async_net::TcpStream::from(stream);
    #[cfg(feature = "tls")]
    if let Some((config, handshaker)) = inner.web.as_ref().and_then(|web| web.tls()) {
        // The first byte and the handshake within one header timeout of the accept (as
        // Go's handshake deadline), then hyper's for the head; the connection stays idle
        // meanwhile, so a flood of them can be shed. Its crypto runs on the handshake
        // thread; dropping its task (timed out, shed, stopped) cancels it there.
        let socket = stream.clone();
        let handshake = async {
            let timed_out = async {
                Timer::at(accepted + timeout).await;
                None
            };
            let Some(task) = handshaker.spawn(crate::tls_accept::accept(stream, config)) else {
                log::debug!("TLS handshakes past the backlog's bound: a connection closed");
                return None;
            };
            future::or(async { task.await.flatten() }, timed_out).await
        };
        let shed = async {
            conn.closed().await;
            None
        };
        let stopped = async {
            inner.stop.wait().await;
            None
        };
        match future::or(handshake, future::or(shed, stopped)).await {
            Some(tls) => http(tls, &conn, &tracker, &inner).await,
            // Closed for the client now, not when the handshake thread drops the task.
            None => {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
        }
        return;
    }
    http(stream, &conn, &tracker, &inner).await;
}

/// Serves HTTP/1.1 on `io`, a plain or TLS connection, until it ends, shutdown or the
/// tracker sheds it.
async fn http<IO>(io: IO, conn: &Rc<Conn>, tracker: &Rc<Tracker>, inner: &Arc<Inner>)
where
    IO: futures_lite::AsyncRead + futures_lite::AsyncWrite + Unpin,
{
    let timeout = inner.settings.header_read_timeout;
    let turn = Turn::default();
    let service = service_fn(|request| {
        tracker.set_busy(conn);
        let busy = Busy(tracker, conn);
        let (inner, turn) = (inner.clone(), turn.clone());
        async move {
            let reply = routes::handle(&inner, request, &turn).await;
            drop(busy);
            reply
        }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(SmolTimer::new())
        .header_read_timeout(timeout)
        .max_buf_size(inner.settings.max_header_bytes);
    let http = builder.serve_connection(FuturesIo::new(io), service);
    let mut http = std::pin::pin!(http);
    let served = async {
        // Clients that leave, time out or send garbage are routine; nothing to report.
        let _ = Turns {
            future: http.as_mut(),
            turn: turn.clone(),
        }
        .await;
        Ending::Served
    };
    let stopped = async {
        inner.stop.wait().await;
        Ending::Stopped
    };
    let shed = async {
        conn.closed().await;
        Ending::Shed
    };
    if future::or(served, future::or(shed, stopped)).await == Ending::Stopped {
        // Finish the request in flight, then close.
        http.as_mut().graceful_shutdown();
        let _ = Turns {
            future: http,
            turn: turn.clone(),
        }
        .await;
    }
}

#[derive(PartialEq)]
enum Ending {
    Served,
    Stopped,
    Shed,
}

/// Marks a connection idle again when its request's handler is done.
struct Busy<'a>(&'a Tracker, &'a Rc<Conn>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.set_idle(self.1);
    }
}

/// A one-shot stop signal, shared by every serve of one exporter.
#[derive(Debug, Default)]
struct Stop {
    triggered: AtomicBool,
    event: Event,
}

impl Stop {
    fn trigger(&self) {
        self.triggered.store(true, Ordering::SeqCst);
        self.event.notify(usize::MAX);
    }

    fn is_triggered(&self) -> bool {
        self.triggered.load(Ordering::SeqCst)
    }

    async fn wait(&self) {
        loop {
            if self.is_triggered() {
                return;
            }
            let listener = self.event.listen();
            if self.is_triggered() {
                return;
            }
            listener.await;
        }
    }

    /// `true` after `period`, `false` as soon as the signal is triggered.
    async fn sleep(&self, period: Duration) -> bool {
        future::or(
            async {
                self.wait().await;
                false
            },
            async {
                Timer::after(period).await;
                true
            },
        )
        .await
    }
}
