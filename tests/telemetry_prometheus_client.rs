//! `loopguard::telemetry::Collector` in a real prometheus-client `Registry`: an encode that
//! runs inside a job of the pool it reports on encodes what `publish_metrics` read on the
//! loop, not itself; and the series are those the `metrics` facade gives a real
//! metrics-exporter-prometheus recorder (installed globally in this binary of its own,
//! since worker threads emit too), same names, labels, types and values, for a pool and a
//! refresh cache.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::{Latch, hold};
use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use loopguard::telemetry::{Collector, DURATION_BUCKETS};
use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus_client::registry::Registry;

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

/// A sample line's series: its name and its labels, sorted, `le` as a number.
fn series(line: &str) -> (String, BTreeSet<(String, String)>) {
    let (name, labels) = match line.split_once('{') {
        Some((name, rest)) => (name, rest.rsplit_once('}').unwrap().0),
        None => (line.split_once(' ').unwrap().0, ""),
    };
    let labels = labels
        .split(',')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap();
            let value = value.trim_matches('"');
            let value = match key {
                "le" if value == "+Inf" => "inf".to_string(),
                "le" => value.parse::<f64>().unwrap().to_string(),
                _ => value.to_string(),
            };
            (key.to_string(), value)
        })
        .collect();
    (name.to_string(), labels)
}

/// Every `loopguard_` sample labelled `key="value"` in `text`, with its value.
type Samples = BTreeMap<(String, BTreeSet<(String, String)>), f64>;

fn samples(text: &str, key: &str, value: &str) -> Samples {
    let label = (key.to_string(), value.to_string());
    text.lines()
        .filter(|line| line.starts_with("loopguard_"))
        .map(|line| {
            let value = line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
            (series(line), value)
        })
        .filter(|((_, labels), _)| labels.contains(&label))
        .collect()
}

/// Each `loopguard_` family's type, named by its samples' stem (`_total` stripped: OpenMetrics
/// names a counter family without it, the Prometheus text format with it).
fn types(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE loopguard_"))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').unwrap();
            let name = name.strip_suffix("_total").unwrap_or(name);
            (format!("loopguard_{name}"), kind.to_string())
        })
        .collect()
}

#[test]
fn the_same_series_as_the_metrics_facade() {
    let facade = PrometheusBuilder::new()
        .set_buckets(&DURATION_BUCKETS)
        .unwrap()
        .install_recorder()
        .expect("the only recorder of this binary");
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
        .on_pool(&pool, || Ok::<_, String>("up 1\n".to_string()));
    for _ in 0..2 {
        let deadline = Deadline::after(LIMIT);
        assert_eq!(block_on(cache.get(deadline)).unwrap().as_str(), "up 1\n");
    }
    block_on(pool.wait_idle());

    pool.publish_metrics();
    let facade_text = facade.render();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collector::new().pool(&pool).refresh(&cache)));
    let mut ours = String::new();
    prometheus_client::encoding::text::encode(&mut ours, &registry).unwrap();

    let mut theirs = samples(&facade_text, "pool", "same");
    theirs.extend(samples(&facade_text, "cache", "cached"));
    let mut mine = samples(&ours, "pool", "same");
    mine.extend(samples(&ours, "cache", "cached"));
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        mine.keys().collect::<Vec<_>>(),
        "facade:\n{facade_text}\nprometheus-client:\n{ours}"
    );
    for (key, theirs) in &theirs {
        let mine = mine[key];
        let close = if key.0.ends_with("_sum") {
            (mine - theirs).abs() < 1e-6
        } else {
            mine == *theirs
        };
        assert!(close, "{key:?}: facade {theirs}, prometheus-client {mine}");
    }
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
    ] {
        assert_eq!(value(&ours, series), expected, "{series} in:\n{ours}");
    }
    assert_eq!(types(&facade_text), types(&ours));
}
