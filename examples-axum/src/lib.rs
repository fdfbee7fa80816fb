//! axum on smol, with loopguard in front: `GET /metrics` renders a real Prometheus registry
//! on a `Pool`, behind `AdmissionLayer::for_pool`: the pool is the one limit from the request
//! to the worker thread. A scrape is admitted on one of the pool's slots (or answered 503 +
//! `Retry-After` at once when every slot is taken), runs its walk on that very slot, and
//! spends the scrape's own deadline (from its timeout headers) on it. The statuses are
//! `loopguard_exporter::Unserved`'s, the one mapping the exporter crate answers with: no
//! slot `503` + `Retry-After`, a spent budget `504` (the walk goes on), a panic `500`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use loopguard::deadline::Deadline;
use loopguard::pool::Pool;
use loopguard::tower::{AdmissionLayer, Slot};
use loopguard_exporter::Unserved;
use metrics_exporter_prometheus::PrometheusHandle;

/// What the route needs: the pool that walks, and the registry it walks.
#[derive(Clone)]
pub struct Registry {
    pub pool: Pool,
    pub handle: Arc<PrometheusHandle>,
}

/// The router: `/metrics` behind the pool's own admission (one scrape per worker, fail
/// fast), the budget `min(default, scrape timeout - offset)`.
pub fn app(registry: Registry, default: Duration, offset: Duration) -> Router {
    let admission = AdmissionLayer::for_pool(&registry.pool).deadline_from_headers(default, offset);
    // Outermost: the pool's gauges are published before the request asks for its slot, so
    // a scrape never counts itself.
    let pool = registry.pool.clone();
    let publish = axum::middleware::map_request(move |request: Request| {
        pool.publish_metrics();
        std::future::ready(request)
    });
    Router::new()
        .route("/metrics", get(metrics))
        .layer(admission)
        .layer(publish)
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(registry)
}

async fn metrics(
    State(registry): State<Registry>,
    Extension(deadline): Extension<Deadline>,
    Extension(slot): Extension<Slot>,
) -> Response {
    let handle = registry.handle.clone();
    // The walk runs on the request's own pool slot: no second admission. The slot comes
    // back when both the response body and the walk are done, even if the scraper hangs up.
    let walk = slot.try_run(&registry.pool, move || {
        handle.run_upkeep();
        handle.render()
    });
    let walk = match walk {
        Ok(walk) => walk,
        Err(busy) => return unserved(Unserved::from(busy)),
    };
    match deadline.run(walk).await {
        Ok(Ok(text)) => {
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
        }
        // The budget ran out: the walk goes on, orphaned, on its slot.
        Err(spent) => unserved(Unserved::from(spent)),
        Ok(Err(panicked)) => unserved(Unserved::from(panicked)),
    }
}

/// The answer for a scrape that got no rendering: the status, `Retry-After` for a refusal,
/// and the reason as the body.
fn unserved(unserved: Unserved) -> Response {
    let status =
        StatusCode::from_u16(unserved.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, format!("{unserved}\n")).into_response();
    if let Some(secs) = unserved.retry_after_secs() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    }
    response
}
