//! Routing and the answers: `/metrics`, `/healthz`, `/`.

use std::convert::Infallible;

use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{
    ALLOW, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, RETRY_AFTER, VARY, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Method, Request, Response, StatusCode};
use loopguard::deadline::Deadline;
use loopguard::header::request_deadline;

use crate::encoding::{self, Encoding};
use crate::exporter::Inner;
use crate::offload;
use crate::sliced::{Sliced, Turn};
use crate::source::Format;
use crate::status::Unserved;

type Reply = Response<Sliced>;

const TEXT: &str = "text/plain; charset=utf-8";

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
    turn: &Turn,
) -> Reply {
    let mut response = Response::new(Sliced::new(body.into(), turn));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status.is_client_error() || status.is_server_error() {
        // As Go's `http.Error` answers (promhttp's 503 and 500, exporter-toolkit's 401).
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    }
    response
}

/// The answer for a scrape that got no rendering: [`Unserved`]'s mapping.
fn unserved(unserved: &Unserved, turn: &Turn) -> Reply {
    let status =
        StatusCode::from_u16(unserved.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = reply(status, TEXT, format!("{unserved}\n"), turn);
    if let Some(secs) = unserved.retry_after_secs() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// Answers one request: through the web config first (its headers on every answer, its
/// rate limit, its users), then [`served`].
pub(crate) async fn handle(
    inner: &Inner,
    request: Request<Incoming>,
    turn: &Turn,
) -> Result<Reply, Infallible> {
    #[cfg(feature = "web-config")]
    if let Some(web) = &inner.web {
        let (headers, admitted) = web.admit(request.headers()).await;
        let mut reply = match admitted {
            Ok(()) => served(inner, request, turn).await?,
            Err(refused) => refused_reply(&refused, turn),
        };
        reply.headers_mut().extend(headers);
        return Ok(reply);
    }
    served(inner, request, turn).await
}

/// The answer for a request the web config did not let in.
#[cfg(feature = "web-config")]
fn refused_reply(refused: &crate::web_config::Refused, turn: &Turn) -> Reply {
    use crate::web_config::Refused;
    use hyper::header::WWW_AUTHENTICATE;
    match refused {
        Refused::Unauthorized => {
            let mut response = reply(StatusCode::UNAUTHORIZED, TEXT, "Unauthorized\n", turn);
            let headers = response.headers_mut();
            headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic"));
            response
        }
        Refused::Busy(secs) => {
            let body = "busy verifying credentials: retry after Retry-After\n";
            let mut response = reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, body, turn);
            let headers = response.headers_mut();
            headers.insert(RETRY_AFTER, HeaderValue::from(*secs));
            response
        }
        Refused::TooMany => reply(
            StatusCode::TOO_MANY_REQUESTS,
            TEXT,
            "Too Many Requests\n",
            turn,
        ),
    }
}

/// Routes one request; a `/metrics` one is counted in the handler's series (in flight
/// while it is served, then under its status code), whatever its answer.
async fn served(
    inner: &Inner,
    request: Request<Incoming>,
    turn: &Turn,
) -> Result<Reply, Infallible> {
    if request.uri().path() != "/metrics" {
        return route(inner, request, turn).await;
    }
    let in_flight = inner.series.begin();
    let mut reply = route(inner, request, turn).await?;
    // Every answer of /metrics depends on Accept-Encoding and Accept: a cache between must
    // not hand one scraper's answer to another.
    reply
        .headers_mut()
        .insert(VARY, HeaderValue::from_static("accept-encoding, accept"));
    in_flight.answered(reply.status().as_u16());
    Ok(reply)
}

async fn route(
    inner: &Inner,
    request: Request<Incoming>,
    turn: &Turn,
) -> Result<Reply, Infallible> {
    // The budget starts now, before the body read and any queue: the earliest of the
    // server's budget and each one the caller sent (Prometheus', Envoy's, gRPC's), less the
    // offset.
    let s = &inner.settings;
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()));
    let deadline = request_deadline(headers, s.scrape_budget, s.scrape_timeout_offset);
    let encoding = encoding::of_request(request.headers());
    let format = Format::of_request(request.headers());
    let path = request.uri().path();
    let known = matches!(path, "/metrics" | "/healthz") || (path == "/" && s.status_page);
    if !known {
        return Ok(reply(StatusCode::NOT_FOUND, TEXT, "not found\n", turn));
    }
    let path = path.to_string();
    if request.method() != Method::GET {
        let mut response = reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n", turn);
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return Ok(response);
    }
    // A GET has no use for a body; read (and bound) it anyway so the connection stays usable,
    // within the read timeout and the request's budget, which is a ceiling here too.
    let body = Limited::new(request.into_body(), s.max_body_bytes);
    match Deadline::after(s.header_read_timeout)
        .min(deadline)
        .run(body.collect())
        .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
            return Ok(reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                TEXT,
                "request body too large\n",
                turn,
            ));
        }
        // The budget ran out before any walk: 504, as for a walk's spent budget.
        Err(_) if deadline.is_expired() => {
            return Ok(reply(
                StatusCode::GATEWAY_TIMEOUT,
                TEXT,
                "budget spent reading the request body\n",
                turn,
            ));
        }
        Ok(Err(_)) | Err(_) => {
            return Ok(reply(
                StatusCode::BAD_REQUEST,
                TEXT,
                "bad request body\n",
                turn,
            ));
        }
    }
    Ok(match path.as_str() {
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n", turn),
        "/metrics" => metrics(inner, deadline, format, encoding, turn).await,
        _ => status_page(inner, turn),
    })
}

async fn metrics(
    inner: &Inner,
    deadline: Deadline,
    format: Format,
    encoding: Encoding,
    turn: &Turn,
) -> Reply {
    // Read-side gauges, on the loop, before asking for a slot: a walk never counts itself.
    inner.pool.publish_metrics();
    let rendered = match &inner.cache {
        Some(cache) => cache.get(deadline, format, encoding).await,
        None => {
            let (source, s) = (inner.source.clone(), &inner.settings);
            offload::render(
                s.offload,
                &inner.pool,
                deadline,
                source,
                format,
                encoding,
                s.gzip_level,
            )
            .await
        }
    };
    match rendered {
        Ok(body) => {
            let content_type = inner.source.content_type(format);
            let mut response = reply(StatusCode::OK, content_type, body, turn);
            if let Some(coding) = encoding.header() {
                let headers = response.headers_mut();
                headers.insert(CONTENT_ENCODING, HeaderValue::from_static(coding));
            }
            response
        }
        Err(err) => {
            if let Unserved::Failed(message) = &err {
                // Answered, so not an orphan: this is its one report.
                log::error!("scrape failed: {message}");
            }
            unserved(&err, turn)
        }
    }
}

/// The plain-text status page: `N connections` (and the note), the loop's lag, then the
/// pool's stats and the coalescing cache's, read on the loop; no walk, no slot.
fn status_page(inner: &Inner, turn: &Turn) -> Reply {
    inner.pool.publish_metrics();
    let stats = inner.pool.stats();
    let cache = inner.cache.as_ref().map(|c| c.stats());
    let open = inner.connections.load(std::sync::atomic::Ordering::SeqCst);
    let note = inner
        .settings
        .status_note
        .as_ref()
        // The user's note runs on the loop: its panic is contained here, the page still served.
        .map(
            |note| match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| note())) {
                Ok(note) => format!("; {note}"),
                Err(_) => "; the status note panicked".to_string(),
            },
        );
    let lag = match &inner.lag {
        Some(lag) => {
            let l = lag.stats();
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            format!(
                "loop lag over {:?}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, {} samples; {} slow polls\n",
                lag.window(),
                ms(l.p50),
                ms(l.p99),
                ms(l.max),
                l.samples,
                l.slow_polls
            )
        }
        None => String::new(),
    };
    let page = format!(
        "{open} connections{}\n{lag}{stats:#?}\n{cache:#?}\n",
        note.unwrap_or_default()
    );
    reply(StatusCode::OK, TEXT, page, turn)
}
