//! The HTTP side of the exporter: accepting connections with limits, routing, and the
//! `/metrics`, `/` and `/healthz` answers. Walks are offloaded through [`Shared`].

use super::*;

/// Serves `listener` on the current thread until `stop` is triggered, then drains:
/// connections get `shutdown_grace` to finish, the pool as long again for its walks.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: Stop) -> io::Result<()> {
    let ex = LocalExecutor::new();
    ex.run(async {
        let listener = listener;
        ex.spawn(cardinality_loop(shared.clone(), stop.clone()))
            .detach();
        ex.spawn(upkeep_loop(shared.handle.clone(), stop.clone()))
            .detach();
        while let Some(accepted) = next_connection(&listener, &shared, &stop).await {
            match accepted {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    ex.spawn(connection(stream, shared.clone(), stop.clone()))
                        .detach();
                }
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    eprintln!("accept failed: {err}");
                    Timer::after(Duration::from_millis(50)).await;
                }
            }
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

/// The next accepted connection, waiting while `max_connections` are open; `None` on stop.
async fn next_connection(
    listener: &TcpListener,
    shared: &Shared,
    stop: &Stop,
) -> Option<io::Result<TcpStream>> {
    let accept = async {
        loop {
            let closed = shared.connection_closed.listen();
            if shared.connections.load(Ordering::SeqCst) < shared.config.max_connections {
                break;
            }
            closed.await;
        }
        Some(listener.accept().await.map(|(stream, _)| stream))
    };
    future::or(
        async {
            stop.wait().await;
            None
        },
        accept,
    )
    .await
}

/// Serves one connection; on stop, finishes the request in flight and closes.
async fn connection(stream: TcpStream, shared: Arc<Shared>, stop: Stop) {
    struct Open<'a>(&'a Shared);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.connections.fetch_sub(1, Ordering::SeqCst);
            self.0.connection_closed.notify(usize::MAX);
        }
    }
    let _open = Open(&shared);
    let service = {
        let shared = shared.clone();
        service_fn(move |request| handle(shared.clone(), request))
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(SmolTimer::new())
        .header_read_timeout(shared.config.header_read_timeout)
        .max_buf_size(shared.config.max_header_bytes.max(8192));
    let conn = builder.serve_connection(FuturesIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let finished = future::or(async { Some(conn.as_mut().await) }, async {
        stop.wait().await;
        None
    })
    .await;
    let result = match finished {
        Some(result) => result,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    // Clients that leave, time out or send garbage are routine; nothing to report.
    drop(result);
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    reply(status, "text/plain; charset=utf-8", body)
}

fn busy(retry_after_secs: u64, what: &str) -> Reply {
    let mut response = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what}: every {POOL_NAME} worker is busy; retry after {retry_after_secs}s\n"),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

fn walk_failed(walked: Walked<impl Sized>, what: &str) -> Reply {
    match walked {
        Walked::Busy(secs) => busy(secs, what),
        Walked::Expired => text(
            StatusCode::SERVICE_UNAVAILABLE,
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

/// Routes one request.
async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Reply, Infallible> {
    // The budget starts now, before the body read and any queue.
    let deadline = scrape_deadline(
        request
            .headers()
            .get(SCRAPE_TIMEOUT_HEADER)
            .map(HeaderValue::as_bytes),
        shared.config.scrape_budget,
        shared.config.scrape_timeout_offset,
    );
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
        "/metrics" => metrics(&shared, deadline).await,
        _ => status_page(&shared, deadline).await,
    })
}

const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn metrics(shared: &Shared, deadline: Deadline) -> Reply {
    if let Some(cache) = &shared.cache {
        return match cache.get(deadline).await {
            Ok(body) => reply(StatusCode::OK, EXPOSITION, body),
            Err(err) if err.is_expired() => walk_failed(Walked::<()>::Expired, "scrape"),
            Err(err) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("scrape: the registry walk failed: {err}\n"),
            ),
        };
    }
    match shared
        .offload(WalkKind::Scrape, false, deadline, |body| body)
        .await
    {
        Walked::Done(body) => reply(StatusCode::OK, EXPOSITION, body),
        other => walk_failed(other, "scrape"),
    }
}

/// The numbers the status page shows, read from one rendering of the registry.
#[derive(Debug, Default, Clone)]
struct PageStats {
    capacity: f64,
    in_use: f64,
    waiting: f64,
    demand: f64,
    rejected: f64,
    orphaned_failures: f64,
    oldest_job_seconds: f64,
    stuck_jobs: f64,
    series: usize,
    bytes: usize,
}

impl loopguard::JobOutput for PageStats {}

impl PageStats {
    /// Reads the pool's series (label `pool="registry-serve"`) out of a rendering.
    fn read(rendering: String) -> PageStats {
        use loopguard::metrics as m;
        let mut stats = PageStats {
            bytes: rendering.len(),
            ..PageStats::default()
        };
        let label = format!("pool=\"{POOL_NAME}\"");
        for line in rendering.lines().filter(|l| !l.starts_with('#')) {
            stats.series += 1;
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if !series.contains(&label) {
                continue;
            }
            let name = series.split('{').next().unwrap_or_default();
            let value: f64 = value.parse().unwrap_or(0.0);
            let slot = match name {
                n if n == m::POOL_CAPACITY => &mut stats.capacity,
                n if n == m::POOL_IN_USE => &mut stats.in_use,
                n if n == m::POOL_WAITING => &mut stats.waiting,
                n if n == m::POOL_DEMAND_AVG => &mut stats.demand,
                n if n == m::POOL_REJECTED_TOTAL => &mut stats.rejected,
                n if n == m::ORPHANED_FAILURES_TOTAL => &mut stats.orphaned_failures,
                n if n == m::POOL_OLDEST_JOB_SECONDS => &mut stats.oldest_job_seconds,
                n if n == m::POOL_STUCK_JOBS_TOTAL => &mut stats.stuck_jobs,
                _ => continue,
            };
            *slot = value;
        }
        stats
    }
}

async fn status_page(shared: &Shared, deadline: Deadline) -> Reply {
    let stats = match shared
        .offload(WalkKind::Status, false, deadline, PageStats::read)
        .await
    {
        Walked::Done(stats) => stats,
        other => return walk_failed(other, "status page"),
    };
    let card = shared.cardinality();
    let config = &shared.config;
    let rows = [
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
        (
            "oldest job age",
            format!("{:.3} s", stats.oldest_job_seconds),
        ),
        ("stuck jobs reported", stats.stuck_jobs.to_string()),
        ("series in this walk", stats.series.to_string()),
        ("bytes in this walk", stats.bytes.to_string()),
        (
            "cardinality reports",
            format!(
                "{} ({} failed); last: {} series in {} families, {:?}",
                card.runs, card.failures, card.series, card.families, card.took
            ),
        ),
    ];
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>registry exporter</title></head>\n<body><h1>registry exporter</h1>\n<table>\n",
    );
    for (name, value) in rows {
        let _ = writeln!(html, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    html.push_str("</table>\n<p><a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a></p>\n</body></html>\n");
    reply(StatusCode::OK, "text/html; charset=utf-8", html)
}
