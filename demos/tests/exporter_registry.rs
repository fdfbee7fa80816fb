//! The exporter's answers on the real registry, over loopback: gzip as Prometheus asks for
//! it, gauges that never count the scrape reading them, budgets from every caller header.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use loopguard::header::SCRAPE_TIMEOUT_HEADER;

/// The header in which Envoy sends its route timeout, in milliseconds.
const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";
use loopguard_demos::client;
use loopguard_demos::exporter::registry::{Registry, SERIES_METRIC};
use loopguard_demos::exporter::{Config, Exporter};
use loopguard_demos::testing::{Latch, run, until};

fn start(pool_name: &str, workers: usize, registry: Registry) -> Exporter {
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        pool_name: pool_name.to_string(),
        workers,
        cardinality_interval: Duration::ZERO,
        // The normal class: an idle-class walk could starve behind the test run's own busy
        // threads (worker_priority.rs checks the exporter's default).
        worker_sched_idle: false,
        ..Config::default()
    };
    Exporter::spawn(config, registry.into()).expect("the exporter starts")
}

fn registry() -> Registry {
    Registry::new(100, Duration::ZERO).expect("the recorder installs")
}

/// The registry's own series (`name{labels}`) in a rendering. Other tests in this binary
/// share the recorder and add their pools' series; these are the same for all of them.
fn own_series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with(SERIES_METRIC))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series.to_string()))
        .collect()
}

#[test]
fn a_gzip_scrape_decompresses_to_the_same_series_as_a_plain_one() {
    let exporter = start("gzip-test", 2, registry());
    run(async {
        let addr = exporter.addr();
        let plain = client::get(addr, "/metrics", &[]).await.unwrap();
        let gzip = client::get(addr, "/metrics", &[("Accept-Encoding", "gzip")])
            .await
            .unwrap();
        assert_eq!((plain.status, gzip.status), (200, 200));
        assert_eq!(plain.header("content-encoding"), None);
        assert_eq!(gzip.header("content-encoding"), Some("gzip"));
        assert_eq!(gzip.header("vary"), Some("accept-encoding"));
        assert!(
            gzip.body.len() * 2 < plain.body.len(),
            "{} compressed bytes for {} plain",
            gzip.body.len(),
            plain.body.len()
        );
        let (plain, unzipped) = (plain.decoded().unwrap(), gzip.decoded().unwrap());
        assert_eq!(own_series(&plain).len(), 100);
        assert_eq!(own_series(&plain), own_series(&unzipped));
        assert!(unzipped.contains(&format!("# TYPE {SERIES_METRIC} gauge")));

        // A client that refuses gzip gets plain text.
        let refused = client::get(addr, "/metrics", &[("Accept-Encoding", "gzip;q=0, br")])
            .await
            .unwrap();
        assert_eq!(refused.header("content-encoding"), None);
        assert_eq!(own_series(&refused.decoded().unwrap()).len(), 100);

        // Two `Accept-Encoding` lines are one list: gzip on the second one counts.
        let two_lines = [("Accept-Encoding", "br"), ("Accept-Encoding", "gzip")];
        let answer = client::get(addr, "/metrics", &two_lines).await.unwrap();
        assert_eq!(answer.header("content-encoding"), Some("gzip"));
        assert_eq!(own_series(&answer.decoded().unwrap()).len(), 100);
    });
    exporter.stop().unwrap();
}

#[test]
fn an_idle_exporter_reports_in_use_0_on_every_scrape() {
    let exporter = start("idle-test", 1, registry());
    let pool = exporter.shared().pool().clone();
    run(async {
        for _ in 0..5 {
            // The previous walk's slot is freed just after its answer: wait for it.
            until("idle", || pool.in_use() == 0).await;
            let scrape = client::get(exporter.addr(), "/metrics", &[("Accept-Encoding", "gzip")])
                .await
                .unwrap();
            assert_eq!(scrape.status, 200);
            let text = scrape.decoded().unwrap();
            for (name, value) in [
                ("loopguard_pool_in_use", "0"),
                ("loopguard_pool_waiting", "0"),
                ("loopguard_pool_capacity", "1"),
            ] {
                let line = format!("{name}{{pool=\"idle-test\"}} {value}");
                assert!(
                    text.lines().any(|l| l == line),
                    "no `{line}` in:\n{}",
                    text.lines()
                        .filter(|l| l.contains("idle-test"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
        }
    });
    exporter.stop().unwrap();
}

#[test]
fn the_status_page_shows_the_pool_s_own_numbers() {
    let latch = Latch::new();
    let held = {
        let latch = latch.clone();
        registry().with_hook(move |kind| {
            if kind == loopguard_demos::exporter::registry::WalkKind::Scrape {
                latch.wait();
            }
        })
    };
    let exporter = start("status-test", 2, held);
    run(async {
        let addr = exporter.addr();
        let scrape = smol::spawn(client::get(addr, "/metrics", &[]));
        until("the scrape holds a slot", || {
            exporter.shared().pool().in_use() == 1
        })
        .await;
        let page = client::get(addr, "/", &[]).await.unwrap();
        assert_eq!(page.status, 200);
        let html = page.text();
        // Read from Pool::stats() before the page's own walk took the second slot.
        for row in [
            "<th>capacity (workers)</th><td>2</td>",
            "<th>in use</th><td>1</td>",
            "<th>waiting</th><td>0</td>",
        ] {
            assert!(html.contains(row), "{row} missing from {html}");
        }
        latch.open();
        assert_eq!(scrape.await.unwrap().status, 200);
    });
    exporter.stop().unwrap();
}

#[test]
fn the_earliest_caller_budget_wins_envoy_s_included() {
    let latch = Latch::new();
    let held = {
        let latch = latch.clone();
        registry().with_hook(move |_| latch.wait())
    };
    let exporter = start("budget-test", 3, held);
    run(async {
        let addr = exporter.addr();
        for headers in [
            // 700 ms less the 500 ms offset: a 200 ms budget, with or without Prometheus'.
            vec![(ENVOY_TIMEOUT_HEADER, "700")],
            vec![(ENVOY_TIMEOUT_HEADER, "700"), (SCRAPE_TIMEOUT_HEADER, "10")],
            vec![
                (ENVOY_TIMEOUT_HEADER, "15000"),
                (SCRAPE_TIMEOUT_HEADER, "0.7"),
            ],
        ] {
            until("a free slot", || exporter.shared().pool().in_use() < 3).await;
            let began = Instant::now();
            let late = client::get(addr, "/metrics", &headers).await.unwrap();
            let waited = began.elapsed();
            assert_eq!(late.status, 504, "{headers:?}: {}", late.text());
            assert!(late.text().contains("budget"));
            assert!(
                waited >= Duration::from_millis(190) && waited < Duration::from_secs(5),
                "{headers:?}: 504 after {waited:?}, budget 200 ms"
            );
        }
        latch.open();
        // Malformed Envoy values are ignored: the default budget stands.
        for value in ["banana", "-5", "1.5", "", "99999999999999999999999"] {
            until("idle", || exporter.shared().pool().in_use() == 0).await;
            let served = client::get(addr, "/metrics", &[(ENVOY_TIMEOUT_HEADER, value)])
                .await
                .unwrap();
            assert_eq!(served.status, 200, "{ENVOY_TIMEOUT_HEADER}: {value:?}");
        }
    });
    exporter.stop().unwrap();
}
