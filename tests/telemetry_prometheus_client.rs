//! `loopguard::telemetry::Collector` in a real prometheus-client `Registry`: an encode that
//! runs inside a job of the pool it reports on encodes what `publish_metrics` read on the
//! loop, not itself; and the series are those the `metrics` facade gives a real
//! metrics-exporter-prometheus recorder (installed globally in this binary of its own,
//! since worker threads emit too), same names, labels, types and values, for a pool, a
//! refresh cache, a keyed gate and a tower layer of its own; each source is encoded once
//! however often it is given.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::exposition::{Samples, assert_same_samples, helps, samples, types};
use common::{Latch, hold};
use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::keyed::KeyedGate;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use loopguard::telemetry::{Collector, DURATION_BUCKETS};
use loopguard::tower::AdmissionLayer;
use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus_client::registry::Registry;
use tower_layer::Layer;
use tower_service::Service;

const LIMIT: Duration = Duration::from_secs(30);

/// A registry holding only the collector of `pool`.
fn registry(pool: &Pool) -> Arc<Registry> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collector::new().pool(pool)));
    Arc::new(registry)
}

/// Encodes `registry` the way an exporter does: as a job of `pool`.
fn encode_in(pool: &Pool, registry: &Arc<Registry>) -> String {
    let registry = registry.clone();
    block_on(pool.run(move || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }))
    .unwrap()
}

/// The value of the series `series` (exact name and labels as encoded).
fn value(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn an_encode_inside_a_job_does_not_count_itself() {
    let pool = Pool::builder().name("self").workers(2).build().unwrap();
    let registry = registry(&pool);

    // Idle: published on the loop, then encoded on a worker holding a slot of its own.
    pool.publish_metrics();
    let text = encode_in(&pool, &registry);
    assert_eq!(
        value(&text, r#"loopguard_pool_in_use{pool="self"}"#),
        0.0,
        "{text}"
    );
    assert_eq!(value(&text, r#"loopguard_pool_capacity{pool="self"}"#), 2.0);

    // One job running: the scrape sees it, and still not itself. (A slot comes back just
    // after its outcome was delivered: wait for that first.)
    block_on(pool.wait_idle());
    let release = Latch::new();
    let held = hold(&pool, &release);
    pool.publish_metrics();
    let text = encode_in(&pool, &registry);
    assert_eq!(
        value(&text, r#"loopguard_pool_in_use{pool="self"}"#),
        1.0,
        "{text}"
    );
    let age = value(&text, r#"loopguard_pool_oldest_job_seconds{pool="self"}"#);
    assert!(age >= 0.0, "{text}");
    release.open();
    block_on(held).unwrap();

    // Counters and histograms are read at encode time: the encode above and the held job
    // have finished, and the first encode is in the job histogram.
    block_on(pool.wait_idle());
    let text = encode_in(&pool, &registry);
    assert_eq!(
        value(
            &text,
            r#"loopguard_pool_jobs_total{pool="self",outcome="ok"}"#
        ),
        3.0,
        "{text}"
    );
    assert_eq!(
        value(&text, r#"loopguard_pool_job_seconds_count{pool="self"}"#),
        3.0
    );
    assert_eq!(
        value(&text, r#"loopguard_pool_wait_seconds_count{pool="self"}"#),
        4.0
    );
}

#[test]
fn the_same_series_as_the_metrics_facade() {
    let facade = PrometheusBuilder::new()
        .set_buckets(&DURATION_BUCKETS)
        .unwrap()
        .install_recorder()
        .expect("the only recorder of this binary");
    loopguard::telemetry::describe_metrics();
    let (handler, mut reports) = OrphanHandler::channel(16);
    let pool = Pool::builder()
        .name("same")
        .workers(1)
        .on_orphan(handler)
        .build()
        .unwrap();

    // Every outcome, a refusal and an orphaned failure.
    common::quiet_expected_panics();
    block_on(pool.run(|| 1)).unwrap();
    assert!(
        block_on(pool.run(Fallible(|| Err::<(), _>("no"))))
            .unwrap()
            .is_err()
    );
    assert!(block_on(pool.run(|| -> () { panic!("expected") })).is_err());
    // A slot comes back after its outcome was delivered: wait for it.
    block_on(pool.wait_idle());
    let release = Latch::new();
    let held = hold(&pool, &release);
    assert!(pool.try_run(|| ()).is_err(), "refused while held");
    release.open();
    block_on(held).unwrap();
    block_on(pool.wait_idle());
    let gate = Latch::new();
    let opened = gate.clone();
    let orphan = pool.try_run(Fallible(move || {
        opened.wait();
        Err::<(), _>("orphaned")
    }));
    drop(orphan.expect("a free slot"));
    gate.open();
    block_on(common::bounded(LIMIT, reports.recv())).unwrap();
    block_on(pool.wait_idle());

    // A refresh cache on the pool: one collection, then a hit.
    let cache = Refresh::builder("cached")
        .ttl(Duration::from_secs(3600))
        .on_pool(&pool, || Ok::<_, String>("up 1\n".to_string()))
        .unwrap();
    for _ in 0..2 {
        let deadline = Deadline::after(LIMIT);
        assert_eq!(block_on(cache.get(deadline)).unwrap().as_str(), "up 1\n");
    }
    block_on(pool.wait_idle());

    // A keyed gate: a busy key and a refusal.
    let tenants = KeyedGate::<String>::new("tenants").unwrap();
    let busy = tenants.try_acquire("a".to_string()).unwrap();
    assert!(tenants.try_acquire("a".to_string()).is_err());
    drop(tenants.try_acquire("b".to_string()).unwrap());
    // A keyed layer's waiting request whose budget was spent on arrival: an expiry.
    let waiting = AdmissionLayer::keyed(tenants.clone(), tenant_of).wait_within_deadline();
    let mut spent = http::Request::get("/b").body(()).unwrap();
    spent
        .extensions_mut()
        .insert(Deadline::after(Duration::ZERO));
    let expired = block_on(waiting.layer(Hello).call(spent)).unwrap();
    assert_eq!(expired.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!((tenants.rejected(), tenants.expired()), (1, 1));

    // A layer of its own: one request served, one refused while a response holds the slot.
    let layer = AdmissionLayer::new("api", 1).unwrap();
    let mut service = layer.layer(Hello);
    let first = block_on(call(&mut service)).unwrap();
    let refused = block_on(call(&mut service)).unwrap();
    assert_eq!(refused.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    drop((first, refused));
    assert_eq!((layer.in_use(), layer.rejected()), (0, 1));

    pool.publish_metrics();
    tenants.publish_metrics();
    layer.publish_metrics();
    drop(busy);
    // A key tracked after the publish is not in the encode: the encode shows what the
    // publish set, as the facade's recorder does.
    let late_key = tenants.try_acquire("late".to_string()).unwrap();
    let facade_text = facade.render();
    let mut registry = Registry::default();
    // The pool given three times (itself, a clone, a layer on its slots): read once.
    let collector = Collector::new()
        .pool(&pool)
        .refresh(&cache)
        .keyed(&tenants)
        .layer(&layer)
        .pool(&pool.clone())
        .layer(&AdmissionLayer::for_pool(&pool))
        .refresh(&cache.clone())
        .keyed(&tenants.clone())
        .layer(&AdmissionLayer::keyed(tenants.clone(), tenant_of));
    registry.register_collector(Box::new(collector));
    let mut ours = String::new();
    prometheus_client::encoding::text::encode(&mut ours, &registry).unwrap();
    for once in [
        "loopguard_pool_capacity{pool=\"same\"}",
        "loopguard_refresh_hits_total{cache=\"cached\"}",
        "loopguard_keyed_rejected_total{gate=\"tenants\"}",
        "loopguard_keyed_expired_total{gate=\"tenants\"}",
        "loopguard_pool_capacity{pool=\"api\"}",
    ] {
        let lines = ours.lines().filter(|l| l.starts_with(once)).count();
        assert_eq!(lines, 1, "{once} encoded {lines} times in:\n{ours}");
    }

    let sources = [
        ("pool", "same"),
        ("cache", "cached"),
        ("gate", "tenants"),
        ("pool", "api"),
    ];
    let mut theirs = Samples::new();
    let mut mine = Samples::new();
    for (key, value) in sources {
        theirs.extend(samples(&facade_text, key, value));
        mine.extend(samples(&ours, key, value));
    }
    assert_same_samples(&theirs, &mine, (&facade_text, &ours));
    // The workload reached every counter, so equal maps are not equal zeros.
    for (series, expected) in [
        (
            r#"loopguard_pool_jobs_total{pool="same",outcome="ok"}"#,
            3.0,
        ),
        (
            r#"loopguard_pool_jobs_total{pool="same",outcome="error"}"#,
            2.0,
        ),
        (
            r#"loopguard_pool_jobs_total{pool="same",outcome="panicked"}"#,
            1.0,
        ),
        (r#"loopguard_pool_rejected_total{pool="same"}"#, 1.0),
        (r#"loopguard_orphaned_failures_total{pool="same"}"#, 1.0),
        (r#"loopguard_pool_job_seconds_count{pool="same"}"#, 6.0),
        (
            r#"loopguard_refresh_runs_total{cache="cached",outcome="ok"}"#,
            1.0,
        ),
        (r#"loopguard_refresh_hits_total{cache="cached"}"#, 1.0),
        (r#"loopguard_pool_in_use{pool="same"}"#, 0.0),
        (r#"loopguard_keyed_rejected_total{gate="tenants"}"#, 1.0),
        (r#"loopguard_keyed_expired_total{gate="tenants"}"#, 1.0),
        (r#"loopguard_pool_rejected_total{pool="api"}"#, 1.0),
        (r#"loopguard_pool_capacity{pool="api"}"#, 1.0),
        (r#"loopguard_pool_wait_seconds_count{pool="api"}"#, 1.0),
    ] {
        assert_eq!(value(&ours, series), expected, "{series} in:\n{ours}");
    }
    // The busy key had demand when it was published; the key that came and went has an
    // entry (its demand is recent) and a value of its own.
    let key_a = value(
        &ours,
        r#"loopguard_keyed_demand_avg{gate="tenants",key="a"}"#,
    );
    assert!(key_a > 0.0, "key a's demand in:\n{ours}");
    value(
        &ours,
        r#"loopguard_keyed_demand_avg{gate="tenants",key="b"}"#,
    );
    assert!(!ours.contains("key=\"late\""), "{ours}");
    drop(late_key);
    assert_eq!(types(&facade_text), types(&ours));
    assert_eq!(helps(&facade_text), helps(&ours));
    assert_eq!(
        helps(&ours).len(),
        types(&ours).len(),
        "every family has its help"
    );

    // A keyed layer alone brings its gate's series.
    let mut registry = Registry::default();
    let layer = AdmissionLayer::keyed(tenants.clone(), tenant_of);
    registry.register_collector(Box::new(Collector::new().layer(&layer)));
    let mut alone = String::new();
    prometheus_client::encoding::text::encode(&mut alone, &registry).unwrap();
    assert_eq!(
        value(&alone, r#"loopguard_keyed_rejected_total{gate="tenants"}"#),
        1.0,
        "{alone}"
    );
    assert_eq!(
        value(
            &alone,
            r#"loopguard_keyed_demand_avg{gate="tenants",key="a"}"#
        ),
        key_a
    );
}

/// Two keyed gates in one collector are two sources (a gate given twice, by a clone, is
/// one): each is encoded once.
#[test]
fn two_keyed_gates_are_each_encoded_once() {
    let a = KeyedGate::<String>::new("gate-a").unwrap();
    let b = KeyedGate::<String>::new("gate-b").unwrap();
    let collector = Collector::new().keyed(&a).keyed(&b).keyed(&a.clone());
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for gate in ["gate-a", "gate-b"] {
        let series = format!("loopguard_keyed_rejected_total{{gate=\"{gate}\"}}");
        let lines = text.lines().filter(|l| l.starts_with(&series)).count();
        assert_eq!(lines, 1, "{series} encoded {lines} times in:\n{text}");
    }
}

/// The key of a keyed layer: the request's path.
fn tenant_of(parts: &http::request::Parts) -> String {
    parts.uri.path().to_string()
}

/// Always ready; answers at once.
#[derive(Clone)]
struct Hello;

impl Service<http::Request<()>> for Hello {
    type Response = http::Response<&'static str>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        std::future::ready(Ok(http::Response::new("hello")))
    }
}

/// One request through `service`, as a server sends it: made ready, then called.
fn call<S: Service<http::Request<()>>>(service: &mut S) -> S::Future {
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(service.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    service.call(http::Request::get("/").body(()).unwrap())
}
