//! The registry exporter over real loopback sockets: storms, budgets, limits, shutdown.
//!
//! Each test starts the exporter's serving code on port 0 on a thread of its own and drives
//! it with a small HTTP/1.1 client. Walks are held on a latch inside the synthetic registry,
//! and every ordering is by explicit state (walk counters, pool gauges), never by sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loopguard::header::SCRAPE_TIMEOUT_HEADER;
use loopguard_demos::client;
use loopguard_demos::exporter::registry::{Registry, WalkKind};
use loopguard_demos::exporter::{Config, Exporter, Mode};
use loopguard_demos::testing::{Latch, run, until};
use smol::channel;

fn config(workers: usize) -> Config {
    Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers,
        series: 100,
        cardinality_interval: Duration::ZERO,
        // The normal class: an idle-class walk could starve behind the test run's own busy
        // threads (worker_priority.rs checks the exporter's default).
        worker_sched_idle: false,
        ..Config::default()
    }
}

/// Walks of the kinds in `hold` block on `latch`; `held` counts the walks blocked so far.
struct Held {
    latch: Latch,
    held: Arc<AtomicUsize>,
}

impl Held {
    fn registry(hold: &'static [WalkKind]) -> (Held, Registry) {
        let latch = Latch::new();
        let held = Arc::new(AtomicUsize::new(0));
        let registry = registry(100).with_hook({
            let (latch, held) = (latch.clone(), held.clone());
            move |kind| {
                if hold.contains(&kind) {
                    held.fetch_add(1, Ordering::SeqCst);
                    latch.wait();
                }
            }
        });
        (Held { latch, held }, registry)
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

fn registry(series: usize) -> Registry {
    Registry::new(series, Duration::ZERO).expect("the recorder installs")
}

fn start(config: Config, registry: Registry) -> Exporter {
    Exporter::spawn(config, Arc::new(registry)).expect("the exporter starts")
}

/// Fires `n` concurrent `GET path`s; responses arrive on the channel as they complete.
fn storm(
    exporter: &Exporter,
    n: usize,
    path: &'static str,
) -> channel::Receiver<std::io::Result<client::Response>> {
    let (tx, rx) = channel::unbounded();
    for _ in 0..n {
        let (tx, addr) = (tx.clone(), exporter.addr());
        smol::spawn(async move {
            let _ = tx.send(client::get(addr, path, &[]).await).await;
        })
        .detach();
    }
    rx
}

fn retry_after(response: &client::Response) -> u64 {
    response
        .header("retry-after")
        .expect("a 503 for saturation carries Retry-After")
        .parse()
        .expect("Retry-After is whole seconds")
}

#[test]
fn a_storm_is_refused_with_503_while_exactly_workers_walks_run() {
    let (held, registry) = Held::registry(&[WalkKind::Scrape]);
    let exporter = start(config(2), registry);
    run(async {
        let responses = storm(&exporter, 8, "/metrics");
        until("two walks held", || held.held() == 2).await;
        for _ in 0..6 {
            let response = responses.recv().await.unwrap().unwrap();
            assert_eq!(response.status, 503, "{}", response.text());
            assert!(retry_after(&response) >= 1);
            assert!(response.text().contains("busy"));
        }
        let registry = exporter.shared().registry();
        assert_eq!(registry.walks(WalkKind::Scrape), 2);
        assert_eq!(registry.active(), 2);
        assert_eq!(exporter.shared().pool().in_use(), 2);

        held.latch.open();
        for _ in 0..2 {
            let response = responses.recv().await.unwrap().unwrap();
            assert_eq!(response.status, 200);
            let body = response.text();
            assert!(body.contains("synthetic_registry_series{"));
            assert!(body.contains("loopguard_pool_in_use"));
            assert!(body.contains("loopguard_pool_demand_avg"));
            assert!(body.contains("loopguard_pool_rejected_total"));
        }
        assert_eq!(registry.peak(), 2, "never more walks than workers");
        assert_eq!(registry.walks(WalkKind::Scrape), 2);
        assert!(exporter.shared().pool().stats().rejected >= 6);
    });
    exporter.stop().unwrap();
}

#[test]
fn a_scrape_out_of_budget_gets_504_and_its_walk_keeps_the_slot() {
    let (held, registry) = Held::registry(&[WalkKind::Scrape]);
    let exporter = start(config(1), registry);
    run(async {
        // 0.7 s minus the 500 ms offset: a 200 ms budget.
        let began = Instant::now();
        let late = client::get(
            exporter.addr(),
            "/metrics",
            &[(SCRAPE_TIMEOUT_HEADER, "0.7")],
        )
        .await
        .unwrap();
        let waited = began.elapsed();
        // 504, not the 503 of a refusal: a proxy retrying 503s must not retry it.
        assert_eq!(late.status, 504, "{}", late.text());
        assert!(late.text().contains("budget"));
        assert!(late.header("retry-after").is_none());
        assert!(
            waited >= Duration::from_millis(190) && waited < Duration::from_secs(5),
            "504 near the 200 ms budget, got it after {waited:?}"
        );
        assert_eq!(held.held(), 1, "the walk is still running");
        assert_eq!(exporter.shared().pool().in_use(), 1, "and keeps its slot");

        // The next scrape is refused at once while that walk runs.
        let next = client::get(exporter.addr(), "/metrics", &[]).await.unwrap();
        assert_eq!(next.status, 503);
        assert!(retry_after(&next) >= 1);
        assert!(next.elapsed < Duration::from_secs(2), "{:?}", next.elapsed);
        assert_eq!(exporter.shared().registry().walks(WalkKind::Scrape), 1);

        held.latch.open();
        until("the orphaned walk ends", || {
            exporter.shared().pool().in_use() == 0
        })
        .await;
        let served = client::get(exporter.addr(), "/metrics", &[]).await.unwrap();
        assert_eq!(served.status, 200);
    });
    exporter.stop().unwrap();
}

#[test]
fn malformed_scrape_timeout_headers_are_ignored() {
    // A walk's slot is freed just after its answer is delivered (by a worker that runs
    // below the loop, so on a busy machine possibly much later): each scrape waits for an
    // idle pool first, or a sequential scrape may find the previous walks still holding
    // both slots. ("0.4" is not in the list: a timeout shorter than the offset is a
    // ceiling now, half of it spent; see tests/header_ceiling.rs.)
    let exporter = start(config(2), registry(100));
    let idle = || until("idle", || exporter.shared().pool().in_use() == 0);
    run(async {
        for value in ["banana", "-1", "NaN", "inf", "0", "", "1e999", "0x10"] {
            idle().await;
            let response = client::get(
                exporter.addr(),
                "/metrics",
                &[(SCRAPE_TIMEOUT_HEADER, value)],
            )
            .await
            .unwrap();
            assert_eq!(response.status, 200, "header value {value:?}");
        }
        // Not UTF-8 at all.
        let mut raw = client::get_request("/metrics", &[]);
        let at = raw.len() - 2;
        raw.splice(
            at..at,
            b"X-Prometheus-Scrape-Timeout-Seconds: \xff\xfe\r\n"
                .iter()
                .copied(),
        );
        idle().await;
        let response = client::send(exporter.addr(), &raw).await.unwrap();
        assert_eq!(response.status, 200);
    });
    exporter.stop().unwrap();
}

#[test]
fn healthz_answers_and_the_status_page_is_gated_while_the_pool_is_saturated() {
    let (held, registry) = Held::registry(&[WalkKind::Scrape]);
    let exporter = start(config(1), registry);
    run(async {
        let responses = storm(&exporter, 1, "/metrics");
        until("the walk is held", || held.held() == 1).await;

        let health = client::get(exporter.addr(), "/healthz", &[]).await.unwrap();
        assert_eq!((health.status, health.text().as_str()), (200, "ok\n"));
        let page = client::get(exporter.addr(), "/", &[]).await.unwrap();
        assert_eq!(page.status, 503);
        assert!(retry_after(&page) >= 1);
        assert_eq!(exporter.shared().registry().walks(WalkKind::Status), 0);

        held.latch.open();
        assert_eq!(responses.recv().await.unwrap().unwrap().status, 200);
        until("idle", || exporter.shared().pool().in_use() == 0).await;
        let page = client::get(exporter.addr(), "/", &[]).await.unwrap();
        assert_eq!(page.status, 200);
        assert_eq!(
            page.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        let html = page.text();
        for row in [
            "capacity",
            "in use",
            "waiting",
            "demand",
            "rejections",
            "orphaned failures",
            "oldest job age",
        ] {
            assert!(html.contains(row), "{row} missing from {html}");
        }
        assert!(html.contains("<th>rejections</th><td>"));
        assert_eq!(exporter.shared().registry().walks(WalkKind::Status), 1);
    });
    exporter.stop().unwrap();
}

#[test]
fn the_background_cardinality_walk_waits_for_a_slot_instead_of_failing() {
    let (held, registry) = Held::registry(&[WalkKind::Scrape]);
    let exporter = start(
        Config {
            cardinality_interval: Duration::from_millis(20),
            ..config(1)
        },
        registry,
    );
    run(async {
        // Occupy the only slot with a scrape; a quick cardinality walk may win the slot
        // first, then the scrape is refused and tried again.
        loop {
            let responses = storm(&exporter, 1, "/metrics");
            until("a scrape is held or refused", || {
                held.held() == 1 || !responses.is_empty()
            })
            .await;
            if held.held() == 1 {
                break;
            }
            assert_eq!(responses.recv().await.unwrap().unwrap().status, 503);
        }
        let shared = exporter.shared();
        until("the cardinality walk queues", || {
            shared.pool().waiting() == 1
        })
        .await;
        let before = shared.cardinality();

        held.latch.open();
        until("the queued cardinality walk ran", || {
            shared.cardinality().runs > before.runs
        })
        .await;
        let after = shared.cardinality();
        assert_eq!(
            after.failures, 0,
            "the background walk never fails for a busy pool"
        );
        assert!(after.series >= 100);
        assert!(after.families >= 1);
    });
    exporter.stop().unwrap();
}

#[test]
fn with_a_cache_ttl_a_storm_causes_one_walk() {
    let (held, registry) = Held::registry(&[WalkKind::Scrape]);
    let exporter = start(
        Config {
            mode: Mode::LoopguardCoalesced,
            cache_ttl: Duration::from_secs(60),
            ..config(2)
        },
        registry,
    );
    run(async {
        let responses = storm(&exporter, 8, "/metrics");
        until("one walk held", || held.held() == 1).await;
        let shared = exporter.shared();
        until("the other seven joined it", || {
            shared.cache_stats().is_some_and(|s| s.joins == 7)
        })
        .await;
        held.latch.open();
        let mut bodies = Vec::new();
        for _ in 0..8 {
            let response = responses.recv().await.unwrap().unwrap();
            assert_eq!(
                response.status, 200,
                "none is rejected while a walk is in flight"
            );
            bodies.push(response.body);
        }
        assert!(
            bodies.windows(2).all(|w| w[0] == w[1]),
            "one walk, one body"
        );
        // Within the TTL, later scrapes are served from the cache.
        let again = client::get(exporter.addr(), "/metrics", &[]).await.unwrap();
        assert_eq!(again.status, 200);
        assert_eq!(shared.registry().walks(WalkKind::Scrape), 1);
        assert_eq!(shared.pool().stats().rejected, 0);
    });
    exporter.stop().unwrap();
}

#[test]
fn unknown_paths_wrong_methods_and_bad_requests_get_proper_status_codes() {
    let exporter = start(config(1), registry(10));
    run(async {
        let addr = exporter.addr();
        assert_eq!(client::get(addr, "/nope", &[]).await.unwrap().status, 404);
        assert_eq!(
            client::get(addr, "/metrics/x", &[]).await.unwrap().status,
            404
        );
        for method in ["POST", "PUT", "DELETE"] {
            let raw = client::request_bytes(method, "/metrics", &[("Content-Length", "0")]);
            let response = client::send(addr, &raw).await.unwrap();
            assert_eq!(response.status, 405, "{method}");
            assert_eq!(response.header("allow"), Some("GET"));
        }
        let garbage = client::send(addr, b"\x16\x03\x01 hello\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(garbage.status, 400);
        assert_eq!(exporter.shared().registry().walks(WalkKind::Scrape), 0);
    });
    exporter.stop().unwrap();
}

#[test]
fn header_and_body_limits_and_the_header_read_timeout_protect_the_loop() {
    let exporter = start(
        Config {
            header_read_timeout: Duration::from_millis(200),
            max_body_bytes: 1024,
            ..config(1)
        },
        registry(10),
    );
    run(async {
        let addr = exporter.addr();
        let huge = "a".repeat(64 * 1024);
        let response = client::get(addr, "/healthz", &[("X-Huge", &huge)])
            .await
            .unwrap();
        assert_eq!(response.status, 431);

        let body = vec![b'x'; 4096];
        let mut raw = client::request_bytes("GET", "/metrics", &[("Content-Length", "4096")]);
        raw.extend_from_slice(&body);
        let response = client::send(addr, &raw).await.unwrap();
        assert_eq!(response.status, 413);

        // A client that sends half a request head and stalls is disconnected.
        use smol::io::{AsyncReadExt, AsyncWriteExt};
        let began = Instant::now();
        let mut stalled = smol::net::TcpStream::connect(addr).await.unwrap();
        stalled
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let _ = stalled.read_to_end(&mut rest).await;
        assert!(began.elapsed() >= Duration::from_millis(150));

        // So is one that connects and says nothing.
        let mut idle = smol::net::TcpStream::connect(addr).await.unwrap();
        let _ = idle.read_to_end(&mut rest).await;

        assert_eq!(
            client::get(addr, "/healthz", &[]).await.unwrap().status,
            200
        );
    });
    exporter.stop().unwrap();
}

#[test]
fn stop_finishes_the_request_in_flight_and_closes_the_listener() {
    let (held, registry) = Held::registry(&[WalkKind::Scrape]);
    let exporter = start(config(1), registry);
    let addr = exporter.addr();
    let responses = run(async {
        let responses = storm(&exporter, 1, "/metrics");
        until("the walk is held", || held.held() == 1).await;
        responses
    });
    let stop = exporter.stop_signal();
    let stopper = std::thread::spawn(move || exporter.stop());
    run(until("stopping", || stop.is_triggered()));
    // The loop is draining now; let the walk end.
    held.latch.open();
    run(async {
        assert_eq!(responses.recv().await.unwrap().unwrap().status, 200);
    });
    stopper.join().unwrap().unwrap();
    run(async {
        assert!(smol::net::TcpStream::connect(addr).await.is_err());
    });
}
