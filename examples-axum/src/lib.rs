//! axum on smol, with loopguard in front: `GET /metrics` renders a real Prometheus registry
//! on a `Pool`, behind an `AdmissionLayer` that answers 503 + `Retry-After` when every slot
//! is taken, and spends the scrape's own deadline (from its timeout headers) on the walk.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use loopguard::deadline::Deadline;
use loopguard::pool::{Pool, RunError};
use loopguard::tower::{AdmissionLayer, Slot};
use metrics_exporter_prometheus::PrometheusHandle;

/// What the route needs: the pool that walks, and the registry it walks.
#[derive(Clone)]
pub struct Registry {
    pub pool: Pool,
    pub handle: Arc<PrometheusHandle>,
}

/// The router: `/metrics` behind the layer (`workers` scrapes at a time, fail fast), the
/// budget `min(default, scrape timeout - offset)`.
pub fn app(registry: Registry, default: Duration, offset: Duration) -> Router {
    let slots = registry.pool.capacity();
    let admission = AdmissionLayer::new(slots).deadline_from_headers(default, offset);
    Router::new()
        .route("/metrics", get(metrics))
        .layer(admission)
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(registry)
}

async fn metrics(
    State(registry): State<Registry>,
    Extension(deadline): Extension<Deadline>,
    Extension(slot): Extension<Slot>,
) -> Response {
    // Fresh gauges, read before the walk asks for its slot: the scrape never counts itself.
    registry.pool.publish_metrics();
    let handle = registry.handle.clone();
    // The walk keeps the request's slot until it ends, even if the scraper hangs up.
    let walk = registry.pool.run_within(deadline, move || {
        let _slot = slot;
        handle.run_upkeep();
        handle.render()
    });
    match walk.await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        Err(RunError::Expired(_)) => {
            let busy = [(header::RETRY_AFTER, "1")];
            (
                StatusCode::SERVICE_UNAVAILABLE,
                busy,
                "scrape budget spent\n",
            )
                .into_response()
        }
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")).into_response(),
    }
}
