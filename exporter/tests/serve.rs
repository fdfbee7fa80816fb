//! The exporter served for real over loopback, on every executor: the status mapping, the
//! budget, negotiation, `/healthz`, several listeners, shutdown.

mod common;

use std::io::Read as _;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Latch, get, serving, source_part};
use loopguard_exporter::{Exporter, Offload, PROMETHEUS_TEXT, render_fn};

/// An exporter of one worker whose render writes `up 1` once `latch` opens (an open
/// latch: at once), counting renders.
fn held(latch: &Latch, renders: &Arc<AtomicUsize>) -> loopguard_exporter::ExporterBuilder {
    let (latch, renders) = (latch.clone(), renders.clone());
    Exporter::builder()
        .source(render_fn(PROMETHEUS_TEXT, move |buffer| {
            renders.fetch_add(1, Ordering::SeqCst);
            latch.wait();
            buffer.extend_from_slice(b"up 1\n");
            Ok(())
        }))
        .workers(1)
        .worker_sched_idle(false)
        .worker_nice(0)
}

fn open_latch() -> Latch {
    let latch = Latch::default();
    latch.open();
    latch
}

on_every_executor! {
    async fn a_scrape_is_served_with_the_source_s_content_type() {
        let exporter = held(&open_latch(), &Default::default()).build().unwrap();
        let answer = serving(&exporter, |addr| get(addr, "/metrics", &[])).await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-type"), Some(PROMETHEUS_TEXT));
        assert_eq!(answer.header("vary"), Some("accept-encoding, accept"));
        assert_eq!(answer.header("content-encoding"), None);
        assert_eq!(source_part(&answer.text()), "up 1\n");
    }
}

on_every_executor! {
    async fn no_free_slot_is_503_with_retry_after_and_healthz_never_waits() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let exporter = held(&latch, &renders).build().unwrap();
        let gate = latch.clone();
        let (first, refused, health, page) = serving(&exporter, move |addr| {
            let first = std::thread::spawn(move || get(addr, "/metrics", &[]));
            gate.arrived(1); // the only slot is held by a render
            let refused = get(addr, "/metrics", &[]);
            let health = get(addr, "/healthz", &[]);
            let page = get(addr, "/", &[]);
            gate.open();
            (first.join().unwrap(), refused, health, page)
        })
        .await;
        assert_eq!(first.status, 200);
        assert_eq!(refused.status, 503, "{}", refused.text());
        assert_eq!(refused.header("retry-after"), Some("1"));
        let nosniff = refused.header("x-content-type-options");
        assert_eq!(nosniff, Some("nosniff"), "as Go's http.Error");
        assert_eq!(health.header("x-content-type-options"), None, "errors only");
        assert_eq!((health.status, health.text().as_str()), (200, "ok\n"));
        let first_line = page.text().lines().next().unwrap_or_default().to_string();
        assert!(first_line.ends_with(" connections"), "{first_line}");
        assert!(page.text().contains("in_use: 1"), "{}", page.text());
        assert_eq!(renders.load(Ordering::SeqCst), 1, "the refusal never rendered");
    }
}

on_every_executor! {
    async fn a_spent_budget_is_504_without_retry_after_and_the_walk_keeps_its_slot() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let exporter = held(&latch, &renders)
            .scrape_timeout_offset(Duration::from_millis(500))
            .build()
            .unwrap();
        let gate = latch.clone();
        let (spent, next) = serving(&exporter, move |addr| {
            // 0.6 s less the 0.5 s offset: a 100 ms budget.
            let budget = [("X-Prometheus-Scrape-Timeout-Seconds", "0.6")];
            let spent = get(addr, "/metrics", &budget);
            let next = get(addr, "/metrics", &[]);
            gate.open();
            (spent, next)
        })
        .await;
        assert_eq!(spent.status, 504, "{}", spent.text());
        assert_eq!(spent.header("retry-after"), None);
        assert_eq!(next.status, 503, "the spent walk still holds the only slot");
        assert_eq!(renders.load(Ordering::SeqCst), 1);
    }
}

on_every_executor! {
    async fn a_render_that_fails_or_panics_is_500() {
        for panics in [false, true] {
            let source = render_fn(PROMETHEUS_TEXT, move |_| {
                if panics {
                    panic!("the registry is gone");
                }
                Err(std::io::Error::other("the registry is gone"))
            });
            let exporter = Exporter::builder().source(source).build().unwrap();
            let answer = serving(&exporter, |addr| get(addr, "/metrics", &[])).await;
            assert_eq!(answer.status, 500, "panics: {panics}");
            assert!(answer.text().contains("the registry is gone"), "{}", answer.text());
            assert_eq!(answer.header("retry-after"), None);
        }
    }
}

on_every_executor! {
    async fn gzip_is_negotiated_and_decompresses_to_the_rendering() {
        let body: Vec<u8> = (0..399_996).map(|i| b"abcdefgh\n"[i % 9]).collect();
        let expected = body.clone();
        let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
            buffer.extend_from_slice(&body);
            Ok(())
        });
        let exporter = Exporter::builder().source(source).build().unwrap();
        let answers = serving(&exporter, |addr| {
            ["gzip", "x-gzip;q=0.5", "gzip;q=0, zstd;q=0, *", "br"].map(|accept| {
                get(addr, "/metrics", &[("Accept-Encoding", accept)])
            })
        })
        .await;
        for (i, answer) in answers.iter().enumerate() {
            assert_eq!(answer.status, 200);
            let gzipped = answer.header("content-encoding") == Some("gzip");
            assert_eq!(gzipped, i < 2, "answer {i}");
            let mut plain = Vec::new();
            if gzipped {
                let mut decoder = flate2::read::GzDecoder::new(&answer.body[..]);
                decoder.read_to_end(&mut plain).unwrap();
            } else {
                plain = answer.body.clone();
            }
            let plain = source_part(&String::from_utf8(plain).unwrap());
            assert!(plain.as_bytes() == expected, "answer {i}: every byte of a body over a slice");
        }
    }
}

on_every_executor! {
    async fn shutdown_finishes_the_scrape_in_flight_then_serve_returns() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let exporter = held(&latch, &renders).build().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (handle, gate) = (exporter.clone(), latch.clone());
        let client = blocking::unblock(move || {
            let scrape = std::thread::spawn(move || get(addr, "/metrics", &[]));
            gate.arrived(1);
            handle.shutdown(); // a clone shuts every serve of the exporter down
            // Draining once the listener is gone: only then may the walk end.
            while std::net::TcpStream::connect(addr).is_ok() {
                std::thread::yield_now();
            }
            gate.open();
            scrape.join().unwrap()
        });
        let (served, answer) = futures_lite::future::zip(exporter.serve(listener), client).await;
        served.unwrap();
        assert_eq!((answer.status, source_part(&answer.text()).as_str()), (200, "up 1\n"));
        assert!(exporter.pool().is_closed(), "the pool closes with the drain");
        assert!(std::net::TcpStream::connect(addr).is_err(), "no more connections");
    }
}

on_every_executor! {
    async fn two_listeners_share_one_pool() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let exporter = held(&latch, &renders).build().unwrap();
        let second = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = second.local_addr().unwrap();
        let gate = latch.clone();
        let both = futures_lite::future::zip(
            exporter.serve(second),
            serving(&exporter, move |addr| {
                let first = std::thread::spawn(move || get(addr, "/metrics", &[]));
                gate.arrived(1);
                let refused = get(other, "/metrics", &[]);
                gate.open();
                (first.join().unwrap(), refused)
            }),
        );
        let (served, (first, refused)) = both.await;
        served.unwrap();
        assert_eq!((first.status, refused.status), (200, 503));
    }
}

on_every_executor! {
    async fn the_last_serve_to_drain_closes_the_pool_not_the_first() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let exporter = held(&latch, &renders).build().unwrap();
        let idle = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = TcpListener::bind("127.0.0.1:0").unwrap();
        let busy_addr = busy.local_addr().unwrap();
        let (handle, gate) = (exporter.clone(), latch.clone());
        let (drained, idle_returned) = std::sync::mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let scrape = std::thread::spawn(move || get(busy_addr, "/metrics", &[]));
            gate.arrived(1);
            handle.shutdown();
            // The idle listener's serve returns while the busy one drains its scrape.
            idle_returned.recv().unwrap();
            gate.open();
            scrape.join().unwrap()
        });
        let first_out = async {
            exporter.serve(idle).await.unwrap();
            let closed = exporter.pool().is_closed();
            drained.send(()).unwrap();
            closed
        };
        let (closed_early, served) =
            futures_lite::future::zip(first_out, exporter.serve(busy)).await;
        served.unwrap();
        let answer = blocking::unblock(move || client.join().unwrap()).await;
        assert!(!closed_early, "a serve that drains first leaves the pool open");
        assert_eq!((answer.status, source_part(&answer.text()).as_str()), (200, "up 1\n"));
        assert!(exporter.pool().is_closed(), "the last serve to drain closes the pool");
    }
}

on_every_executor! {
    async fn coalesced_scrapes_share_one_walk_per_ttl() {
        let renders = Arc::new(AtomicUsize::new(0));
        let exporter = held(&open_latch(), &renders)
            .coalesce(Duration::from_secs(60))
            .build()
            .unwrap();
        let answers = serving(&exporter, |addr| {
            [None, Some("gzip"), None].map(|accept| {
                let headers: Vec<_> = accept.map(|a| ("Accept-Encoding", a)).into_iter().collect();
                get(addr, "/metrics", &headers)
            })
        })
        .await;
        assert!(answers.iter().all(|a| a.status == 200));
        assert_eq!(answers[1].header("content-encoding"), Some("gzip"));
        assert_eq!(renders.load(Ordering::SeqCst), 1, "one walk for three scrapes");
    }
}

on_every_executor! {
    async fn the_baselines_differ_only_in_where_the_render_runs() {
        for offload in [Offload::Unbounded, Offload::OnLoop] {
            let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
            let exporter = held(&latch, &renders).offload(offload).build().unwrap();
            if offload == Offload::OnLoop {
                latch.open(); // a render on the loop would hold the loop itself
            }
            let gate = latch.clone();
            let answers = serving(&exporter, move |addr| {
                let scrapes: Vec<_> = (0..3)
                    .map(|_| std::thread::spawn(move || get(addr, "/metrics", &[])))
                    .collect();
                if offload == Offload::Unbounded {
                    gate.arrived(3); // three renders at once on one worker's budget
                    gate.open();
                }
                scrapes.into_iter().map(|s| s.join().unwrap().status).collect::<Vec<_>>()
            })
            .await;
            assert_eq!(answers, [200, 200, 200], "{offload:?} refuses nothing");
            assert_eq!(renders.load(Ordering::SeqCst), 3);
        }
    }
}

on_every_executor! {
    async fn past_the_cap_the_oldest_idle_connection_is_shed_never_one_mid_request() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let exporter = held(&latch, &renders).max_connections(2).build().unwrap();
        let (gate, handle) = (latch.clone(), exporter.clone());
        let (busy, health, idle_read) = serving(&exporter, move |addr| {
            let busy = std::thread::spawn(move || get(addr, "/metrics", &[]));
            gate.arrived(1); // mid-request: it must not be shed
            let mut idle = std::net::TcpStream::connect(addr).unwrap();
            idle.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let health = get(addr, "/healthz", &[]); // the third: the idle one makes room
            let mut rest = Vec::new();
            let idle_read = idle.read_to_end(&mut rest).map(|_| rest.len());
            gate.open();
            (busy.join().unwrap(), health, idle_read.ok())
        })
        .await;
        assert_eq!(health.status, 200);
        assert_eq!(idle_read, Some(0), "the idle connection was closed");
        assert_eq!(busy.status, 200, "the one mid-request was not");
        assert_eq!(handle.shed_connections(), 1);
    }
}

#[cfg(feature = "prometheus-client")]
on_every_executor! {
    async fn a_prometheus_client_registry_is_served_as_openmetrics() {
        use prometheus_client::metrics::counter::Counter;
        let mut registry = prometheus_client::registry::Registry::default();
        let counter = Counter::<u64>::default();
        counter.inc_by(7);
        registry.register("jobs", "Jobs done", counter);
        let exporter = Exporter::builder().source(Arc::new(registry)).build().unwrap();
        let answer = serving(&exporter, |addr| get(addr, "/metrics", &[])).await;
        assert_eq!(answer.status, 200);
        let content_type = answer.header("content-type").unwrap_or_default().to_string();
        assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
        let text = answer.text();
        assert!(text.contains("jobs_total 7"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}

#[test]
fn bad_settings_are_invalid_input_not_clamped() {
    let source = || render_fn(PROMETHEUS_TEXT, |_| Ok(()));
    let bad = [
        Exporter::builder(),
        Exporter::builder().source(source()).workers(0),
        Exporter::builder()
            .source(source())
            .workers(loopguard::pool::MAX_WORKERS + 1),
        Exporter::builder().source(source()).worker_nice(20),
        Exporter::builder()
            .source(source())
            .scrape_budget(Duration::ZERO),
        Exporter::builder()
            .source(source())
            .demand_window(Duration::ZERO),
        Exporter::builder()
            .source(source())
            .header_read_timeout(Duration::ZERO),
        Exporter::builder()
            .source(source())
            .coalesce(Duration::ZERO),
        Exporter::builder().source(source()).max_header_bytes(100),
        Exporter::builder().source(source()).max_connections(0),
        Exporter::builder().source(source()).gzip_level(10),
        Exporter::builder()
            .source(source())
            .coalesce(Duration::from_secs(1))
            .offload(Offload::OnLoop),
    ];
    for (i, builder) in bad.into_iter().enumerate() {
        let err = builder.build().expect_err(&format!("case {i}"));
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "case {i}: {err}"
        );
    }
    let ok = Exporter::builder()
        .source(source())
        .workers(loopguard::pool::MAX_WORKERS.min(4));
    assert!(ok.build().is_ok());
}

#[test]
fn the_handle_is_send_sync_and_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Exporter>();
}

#[test]
fn serve_raises_the_listen_backlog_when_called_before_any_poll() {
    // Linux drops a SYN while the accept queue is full: with std's 128 the 130th handshake
    // cannot complete while nobody accepts.
    let max = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok();
    let max = max
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let n = max.min(400).saturating_sub(10);
    if n < 200 {
        return eprintln!("somaxconn {max}: too small to tell a raised backlog from std's");
    }
    let exporter = held(&open_latch(), &Default::default()).build().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = exporter.serve(listener); // never polled: nobody accepts
    let queued: Vec<_> = (0..n)
        .map(|i| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("connection {i} of {n} not queued: {e}"))
        })
        .collect();
    assert_eq!(queued.len(), n);
    drop(serve);
}
