//! The pool's metrics through a real Prometheus recorder, installed globally in this test
//! binary of its own (worker threads emit too, so a thread-local recorder would miss them).

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{Counter, Latch, poll_once};
use loopguard::Fallible;
use loopguard::keyed::KeyedGate;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0])
            .expect("buckets")
            .install_recorder()
            .expect("the only recorder of this binary");
        loopguard::telemetry::describe_metrics();
        handle
    })
}

/// The value of the series whose line starts with `series ` in `text`.
fn value(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn every_series_exists_from_creation_with_zeros() {
    let handle = recorder();
    let _pool = Pool::builder().name("fresh").workers(3).build().unwrap();
    let text = handle.render();
    assert_eq!(
        value(&text, r#"loopguard_pool_capacity{pool="fresh"}"#),
        3.0
    );
    for gauge in [
        "loopguard_pool_in_use",
        "loopguard_pool_waiting",
        "loopguard_pool_oldest_job_seconds",
        "loopguard_pool_demand_avg",
    ] {
        assert_eq!(value(&text, &format!(r#"{gauge}{{pool="fresh"}}"#)), 0.0);
    }
    for outcome in ["ok", "error", "panicked"] {
        let series = format!(r#"loopguard_pool_jobs_total{{pool="fresh",outcome="{outcome}"}}"#);
        assert_eq!(value(&text, &series), 0.0);
    }
    for counter in [
        "loopguard_pool_rejected_total",
        "loopguard_orphaned_failures_total",
        "loopguard_pool_stuck_jobs_total",
    ] {
        assert_eq!(value(&text, &format!(r#"{counter}{{pool="fresh"}}"#)), 0.0);
    }
    assert!(text.contains("# HELP loopguard_pool_in_use "), "{text}");
    assert!(
        text.contains("# TYPE loopguard_pool_jobs_total counter"),
        "{text}"
    );
}

#[test]
fn counts_match_what_happened_through_saturation() {
    let handle = recorder();
    let (reports, mut receiver) = OrphanHandler::channel(8);
    let pool = Pool::builder()
        .name("storm")
        .workers(2)
        .no_stuck_reports()
        .on_orphan(reports)
        .build()
        .unwrap();
    futures_lite::future::block_on(async {
        let (started, release) = (Counter::new(), Latch::new());
        let held: Vec<_> = (0..2)
            .map(|_| {
                let (s, r) = (started.clone(), release.clone());
                pool.try_run(move || {
                    s.add();
                    r.wait();
                })
                .unwrap()
            })
            .collect();
        started.wait_for(2);
        // Saturated: three rejections and one waiter.
        for _ in 0..3 {
            assert!(pool.try_run(|| ()).is_err());
        }
        let mut waiter = pool.run(Fallible(|| -> Result<(), &str> {
            Err("queued then failed")
        }));
        assert!(poll_once(&mut waiter).await.is_none());

        pool.publish_metrics();
        let text = handle.render();
        assert_eq!(value(&text, r#"loopguard_pool_in_use{pool="storm"}"#), 2.0);
        assert_eq!(value(&text, r#"loopguard_pool_waiting{pool="storm"}"#), 1.0);
        assert_eq!(
            value(&text, r#"loopguard_pool_rejected_total{pool="storm"}"#),
            3.0
        );
        assert!(value(&text, r#"loopguard_pool_demand_avg{pool="storm"}"#) > 0.0);

        release.open();
        for job in held {
            job.await.unwrap();
        }
        assert_eq!(waiter.await.unwrap(), Err("queued then failed"));
        // Slots go back just after delivery (the slot rule).
        pool.wait_idle().await;
        let orphan = pool.try_run(|| -> () { panic!("orphaned walk") }).unwrap();
        drop(orphan);
        assert!(receiver.recv().await.is_some());
        pool.wait_idle().await;
        // The recorder hears of a job after its slot is free (src/pool/job.rs): only once
        // the workers have exited has it heard of every job.
        pool.shutdown().await;
    });

    pool.publish_metrics();
    let text = handle.render();
    let jobs = |outcome: &str| {
        value(
            &text,
            &format!(r#"loopguard_pool_jobs_total{{pool="storm",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(jobs("ok"), 2.0);
    assert_eq!(jobs("error"), 1.0);
    assert_eq!(jobs("panicked"), 1.0);
    assert_eq!(
        value(&text, r#"loopguard_orphaned_failures_total{pool="storm"}"#),
        1.0
    );
    assert_eq!(value(&text, r#"loopguard_pool_in_use{pool="storm"}"#), 0.0);
    assert_eq!(
        value(&text, r#"loopguard_pool_wait_seconds_count{pool="storm"}"#),
        4.0
    );
    assert_eq!(
        value(&text, r#"loopguard_pool_job_seconds_count{pool="storm"}"#),
        4.0
    );
    assert!(
        text.contains("# HELP loopguard_pool_wait_seconds "),
        "{text}"
    );
    assert!(text.contains(r#"loopguard_pool_wait_seconds_bucket{pool="storm",le="0.001"}"#));
}

#[test]
fn keyed_gate_metrics_are_published() {
    let handle = recorder();
    let gate: KeyedGate<String> = KeyedGate::new("repos").unwrap();
    let held = gate.try_acquire("backend".to_string()).unwrap();
    assert!(gate.try_acquire("backend".to_string()).is_err());
    std::thread::sleep(Duration::from_millis(5));
    gate.publish_metrics();
    let text = handle.render();
    assert_eq!(
        value(&text, r#"loopguard_keyed_rejected_total{gate="repos"}"#),
        1.0
    );
    assert!(
        value(
            &text,
            r#"loopguard_keyed_demand_avg{gate="repos",key="backend"}"#
        ) > 0.0
    );
    drop(held);
}
