//! The HTTP side of the exporter: accepting connections ([`super::conns`]), routing, and the
//! `/metrics`, `/` and `/healthz` answers. Walks are offloaded through [`Shared`].

use std::convert::Infallible;
use std::fmt::Write as _;
use std::rc::Rc;

use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, RETRY_AFTER, VARY};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use loopguard::header::request_deadline;
use smol::{Async, LocalExecutor};
use smol_hyper::rt::{FuturesIo, SmolTimer};

use super::conns::{Conn, Tracker, first_byte, out_of_descriptors};
use super::sliced::{Sliced, Turns};
use super::*;

/// Serves `listener` on the current thread until `stop` is triggered, then drains:
/// connections get `shutdown_grace` to finish, the pool as long again for its walks.
pub async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    stop: Stop,
) -> io::Result<()> {
    let listener = Async::new(listener)?;
    let ex = LocalExecutor::new();
    let tracker = Rc::new(Tracker::default());
    ex.run(async {
        let listener = listener;
        ex.spawn(cardinality_loop(shared.clone(), stop.clone()))
            .detach();
        ex.spawn(upkeep_loop(shared.registry.clone(), stop.clone()))
            .detach();
        loop {
            let accepted = future::or(async { Some(listener.accept().await) }, async {
                stop.wait().await;
                None
            });
            match accepted.await {
                None => break,
                Some(Ok((stream, _))) => {
                    if tracker.open() >= shared.config.max_connections
                        && !tracker.shed_oldest_idle()
                    {
                        // Every connection has a request in progress: this one waits.
                        drop(stream);
                        continue;
                    }
                    let _ = stream.get_ref().set_nodelay(true);
                    let conn = tracker.add();
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    let task = connection(stream, conn, tracker.clone(), &shared, &stop);
                    ex.spawn(task).detach();
                }
                Some(Err(err)) if out_of_descriptors(&err) => {
                    if !tracker.shed_oldest_idle() {
                        Timer::after(Duration::from_millis(50)).await;
                    }
                }
                Some(Err(err)) if err.kind() == io::ErrorKind::ConnectionAborted => {}
                Some(Err(err)) => {
                    eprintln!("accept failed: {err}");
                    Timer::after(Duration::from_millis(50)).await;
                }
            }
            shared.shed.store(tracker.shed() as usize, Ordering::SeqCst);
        }
        // New connections are refused from here on.
        drop(listener);
        let drained = async {
            loop {
                let listener = shared.connection_closed.listen();
                if shared.connections.load(Ordering::SeqCst) == 0 {
                    return;
                }
                listener.await;
            }
        };
        let _ = Deadline::after(shared.config.shutdown_grace)
            .run(drained)
            .await;
    })
    .await;
    // Connections still open past the grace are dropped with the executor.
    drop(ex);
    shared.pool.close();
    if Deadline::after(shared.config.shutdown_grace)
        .run(shared.pool.shutdown())
        .await
        .is_err()
    {
        eprintln!("walks still running after the shutdown grace; leaving them behind");
    }
    Ok(())
}

/// Serves one connection; on stop, finishes the request in flight and closes; shed by the
/// tracker, closes at once.
fn connection(
    stream: Async<std::net::TcpStream>,
    conn: Rc<Conn>,
    tracker: Rc<Tracker>,
    shared: &Arc<Shared>,
    stop: &Stop,
) -> impl std::future::Future<Output = ()> + 'static {
    let (shared, stop) = (shared.clone(), stop.clone());
    async move {
        struct Open<'a>(&'a Shared, &'a Tracker, &'a Conn);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.1.remove(self.2);
                self.0.connections.fetch_sub(1, Ordering::SeqCst);
                self.0.connection_closed.notify(usize::MAX);
            }
        }
        let _open = Open(&shared, &tracker, &conn);
        let timeout = shared.config.header_read_timeout;
        let started = async { first_byte(&stream, timeout).await.then_some(()) };
        let shed = async {
            conn.closed().await;
            None
        };
        if future::or(shed, started).await.is_none() {
            return;
        }
        let service = service_fn(|request| {
            tracker.set_busy(&conn);
            let busy = Busy(&tracker, &conn);
            let shared = shared.clone();
            async move {
                let reply = handle(shared, request).await;
                drop(busy);
                reply
            }
        });
        let mut builder = http1::Builder::new();
        builder
            .timer(SmolTimer::new())
            .header_read_timeout(timeout)
            .max_buf_size(shared.config.max_header_bytes.max(8192));
        // smol's `TcpStream` shuts its write side down when hyper closes the connection (a
        // bare `Async<TcpStream>` only flushes): a client then reads an error response, such
        // as a 431, to its end before the close resets the unread rest.
        let stream = smol::net::TcpStream::from(stream);
        let http = builder.serve_connection(FuturesIo::new(stream), service);
        let mut http = std::pin::pin!(http);
        let served = async {
            // Clients that leave, time out or send garbage are routine; nothing to report.
            let _ = Turns(http.as_mut()).await;
            Ending::Served
        };
        let stopped = async {
            stop.wait().await;
            Ending::Stopped
        };
        let shed = async {
            conn.closed().await;
            Ending::Shed
        };
        if future::or(served, future::or(shed, stopped)).await == Ending::Stopped {
            // Finish the request in flight, then close.
            http.as_mut().graceful_shutdown();
            let _ = Turns(http).await;
        }
    }
}

#[derive(PartialEq)]
enum Ending {
    Served,
    Stopped,
    Shed,
}

/// Marks a connection idle again when its request's handler is done.
struct Busy<'a>(&'a Rc<Tracker>, &'a Rc<Conn>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.set_idle(self.1);
    }
}

type Reply = Response<Sliced>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Sliced::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    reply(status, "text/plain; charset=utf-8", body)
}

fn busy(retry_after_secs: u64, pool: &str, what: &str) -> Reply {
    let mut response = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what}: every {pool} worker is busy; retry after {retry_after_secs}s\n"),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

fn walk_failed(walked: Walked<impl Sized>, pool: &str, what: &str) -> Reply {
    match walked {
        Walked::Busy(secs) => busy(secs, pool, what),
        // Not 503: the walk started and goes on holding its slot, so a proxy that retries
        // 503s elsewhere would start a second walk that meets the same budget. Proxies pick
        // retries by status, so a status of its own (outside every shipped retry list).
        Walked::Expired => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("{what}: the budget ran out before the registry walk finished\n"),
        ),
        Walked::Failed(message) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{what}: the registry walk failed: {message}\n"),
        ),
        Walked::Closed | Walked::Done(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what}: shutting down\n"),
        ),
    }
}

/// The scrape's deadline: the earliest of the server's budget and every budget the caller
/// sent (Prometheus' scrape timeout, Envoy's expected request timeout, gRPC's timeout), less
/// the offset.
fn deadline(headers: &HeaderMap, config: &Config) -> Deadline {
    request_deadline(headers, config.scrape_budget, config.scrape_timeout_offset)
}

/// Routes one request.
async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Reply, Infallible> {
    // The budget starts now, before the body read and any queue.
    let deadline = deadline(request.headers(), &shared.config);
    let encoding = encoding(request.headers());
    let path = request.uri().path().to_string();
    if !matches!(path.as_str(), "/" | "/metrics" | "/healthz") {
        return Ok(text(StatusCode::NOT_FOUND, "not found\n"));
    }
    if request.method() != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return Ok(response);
    }
    // A GET has no use for a body; read (and bound) it anyway so the connection stays usable.
    let body = Limited::new(request.into_body(), shared.config.max_body_bytes);
    match Deadline::after(shared.config.header_read_timeout)
        .run(body.collect())
        .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
            return Ok(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large\n",
            ));
        }
        Ok(Err(_)) | Err(_) => return Ok(text(StatusCode::BAD_REQUEST, "bad request body\n")),
    }
    Ok(match path.as_str() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/metrics" => metrics(&shared, deadline, encoding).await,
        _ => status_page(&shared, deadline).await,
    })
}

const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

fn exposition(body: Bytes, encoding: Encoding) -> Reply {
    let mut response = reply(StatusCode::OK, EXPOSITION, body);
    let headers = response.headers_mut();
    headers.insert(VARY, HeaderValue::from_static("accept-encoding"));
    if encoding == Encoding::Gzip {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

async fn metrics(shared: &Shared, deadline: Deadline, encoding: Encoding) -> Reply {
    let pool = shared.config.pool_name.as_str();
    if let Some(cache) = &shared.cache {
        shared.pool.publish_metrics();
        return match cache.get(deadline).await {
            Ok(Rendered { gzip, .. }) if encoding == Encoding::Gzip => exposition(gzip, encoding),
            Ok(Rendered { plain, .. }) => exposition(plain, encoding),
            Err(err) if err.is_expired() => walk_failed(Walked::<()>::Expired, pool, "scrape"),
            Err(err) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("scrape: the registry walk failed: {err}\n"),
            ),
        };
    }
    let registry = shared.registry.clone();
    match shared
        .offload(false, deadline, move || registry.scrape(encoding))
        .await
    {
        Walked::Done(Ok(body)) => exposition(body, encoding),
        Walked::Done(Err(err)) => {
            walk_failed(Walked::<()>::Failed(err.to_string()), pool, "scrape")
        }
        other => walk_failed(other, pool, "scrape"),
    }
}

async fn status_page(shared: &Shared, deadline: Deadline) -> Reply {
    // The numbers come from the pool and the cache, read here on the loop before the
    // page's own walk asks for a slot; the walk only measures the registry.
    let stats = shared.pool.stats();
    let cache = shared.cache_stats();
    let registry = shared.registry.clone();
    let walk = move || {
        let rendering = registry.walk(WalkKind::Status);
        (registry::count_series(&rendering).0, rendering.len())
    };
    let (series, bytes) = match shared.offload(false, deadline, walk).await {
        Walked::Done(measured) => measured,
        other => return walk_failed(other, &shared.config.pool_name, "status page"),
    };
    let card = shared.cardinality();
    let config = &shared.config;
    let oldest = stats.oldest_job_age.unwrap_or_default();
    let mut rows = vec![
        ("mode", config.mode.name().to_string()),
        ("capacity (workers)", stats.capacity.to_string()),
        ("in use", stats.in_use.to_string()),
        ("waiting", stats.waiting.to_string()),
        (
            "demand (avg over window)",
            format!("{:.3} over {:?}", stats.demand, config.demand_window),
        ),
        ("rejections", stats.rejected.to_string()),
        ("orphaned failures", stats.orphaned_failures.to_string()),
        ("oldest job age", format!("{:.3} s", oldest.as_secs_f64())),
        ("stuck jobs reported", stats.stuck_jobs.to_string()),
        ("series in this walk", series.to_string()),
        ("bytes in this walk", bytes.to_string()),
        ("open connections", shared.connections().to_string()),
        ("connections shed", shared.shed_connections().to_string()),
        (
            "cardinality reports",
            format!(
                "{} ({} failed); last: {} series in {} families, {:?}",
                card.runs, card.failures, card.series, card.families, card.took
            ),
        ),
    ];
    if let Some(cache) = cache {
        rows.push((
            "cache (runs ok / failed, hits, joins)",
            format!(
                "{} / {}, {}, {}",
                cache.runs_ok, cache.runs_error, cache.hits, cache.joins
            ),
        ));
    }
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>registry exporter</title></head>\n<body><h1>registry exporter</h1>\n<table>\n",
    );
    for (name, value) in rows {
        let _ = writeln!(html, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    html.push_str("</table>\n<p><a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a></p>\n</body></html>\n");
    reply(StatusCode::OK, "text/html; charset=utf-8", html)
}
