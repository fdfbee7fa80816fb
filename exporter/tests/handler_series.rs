//! The handler's own series, as promhttp names and counts them, served for real on every
//! executor: `promhttp_metric_handler_requests_total{code}` moves by exactly one per
//! answered scrape under its status code (200, 405, 503, 504 …), and
//! `promhttp_metric_handler_requests_in_flight` counts the scrape being served.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Latch, get, send, serving};
use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};

/// The value of the sample `name` (a whole line's first field) in `text`.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

fn requests(text: &str, code: u16) -> Option<f64> {
    value(
        text,
        &format!("promhttp_metric_handler_requests_total{{code=\"{code}\"}}"),
    )
}

fn in_flight(text: &str) -> Option<f64> {
    value(text, "promhttp_metric_handler_requests_in_flight")
}

on_every_executor! {
    async fn each_answer_counts_once_under_its_code_and_in_flight_counts_the_scrape_served() {
        // Two workers; the third and fourth renders wait at the latch.
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let (gate, count) = (latch.clone(), renders.clone());
        let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
            if (2..4).contains(&count.fetch_add(1, Ordering::SeqCst)) {
                gate.wait();
            }
            buffer.extend_from_slice(b"up 1\n");
            Ok(())
        });
        let exporter = Exporter::builder()
            .source(source)
            .workers(2)
            .worker_sched_idle(false)
            .worker_nice(0)
            .scrape_timeout_offset(Duration::from_millis(500))
            .build()
            .unwrap();
        let (gate, pool) = (latch.clone(), exporter.pool().clone());
        let texts = serving(&exporter, move |addr| {
            let first = get(addr, "/metrics", &[]).text();
            let second = get(addr, "/metrics", &[]).text();
            // The third render holds one worker; a scrape with 100 ms of budget holds the
            // other past its deadline (504); then no slot is free (503).
            let held = std::thread::spawn(move || get(addr, "/metrics", &[]));
            gate.arrived(1);
            let spent = get(addr, "/metrics", &[("X-Prometheus-Scrape-Timeout-Seconds", "0.6")]);
            gate.arrived(2);
            let refused = get(addr, "/metrics", &[]);
            let post = send(addr, b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let healthz = get(addr, "/healthz", &[]);
            gate.open();
            let held = held.join().unwrap();
            futures_lite::future::block_on(pool.wait_idle());
            let last = get(addr, "/metrics", &[]).text();
            let statuses = [held.status, spent.status, refused.status, post.status, healthz.status];
            (first, second, statuses, last)
        })
        .await;
        let (first, second, statuses, last) = texts;
        assert_eq!(statuses, [200, 504, 503, 405, 200]);
        // promhttp's codes start at zero; a scrape counts once it is answered, so its own
        // rendering reads those before it, and in flight, itself.
        assert_eq!((requests(&first, 200), requests(&first, 503)), (Some(0.0), Some(0.0)));
        assert_eq!(requests(&first, 500), Some(0.0));
        assert_eq!(in_flight(&first), Some(1.0), "{first}");
        assert_eq!(requests(&second, 200), Some(1.0), "exactly one more: {second}");
        assert_eq!(in_flight(&second), Some(1.0));
        // first, second and held: 200; spent 504, refused 503, the POST 405; /healthz is
        // not a scrape.
        assert_eq!(requests(&last, 200), Some(3.0), "{last}");
        assert_eq!(requests(&last, 504), Some(1.0), "{last}");
        assert_eq!(requests(&last, 503), Some(1.0), "{last}");
        assert_eq!(requests(&last, 405), Some(1.0), "{last}");
        assert_eq!(requests(&last, 500), Some(0.0), "{last}");
        assert_eq!(in_flight(&last), Some(1.0), "{last}");
        assert_eq!(renders.load(Ordering::SeqCst), 5, "the refusal and the POST rendered nothing");
    }
}

on_every_executor! {
    async fn a_failed_render_counts_500_and_concurrent_scrapes_read_each_other_in_flight() {
        let (latch, renders) = (Latch::default(), Arc::new(AtomicUsize::new(0)));
        let (gate, count) = (latch.clone(), renders.clone());
        let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
            match count.fetch_add(1, Ordering::SeqCst) {
                0 => return Err(std::io::Error::other("the registry is gone")),
                1 => gate.wait(), // held while the next one renders
                _ => {}
            }
            buffer.extend_from_slice(b"up 1\n");
            Ok(())
        });
        let exporter = Exporter::builder()
            .source(source)
            .workers(2)
            .worker_sched_idle(false)
            .build()
            .unwrap();
        let gate = latch.clone();
        let (failed, held, during) = serving(&exporter, move |addr| {
            let failed = get(addr, "/metrics", &[]);
            let held = std::thread::spawn(move || get(addr, "/metrics", &[]));
            gate.arrived(1);
            let during = get(addr, "/metrics", &[]).text();
            gate.open();
            (failed, held.join().unwrap(), during)
        })
        .await;
        assert_eq!((failed.status, held.status), (500, 200));
        assert_eq!(requests(&during, 500), Some(1.0), "{during}");
        assert_eq!(in_flight(&during), Some(2.0), "itself and the held one: {during}");
        assert_eq!(requests(&held.text(), 500), Some(1.0));
    }
}

on_every_executor! {
    async fn coalesced_scrapes_share_the_walk_s_counts() {
        let renders = Arc::new(AtomicUsize::new(0));
        let count = renders.clone();
        let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
            count.fetch_add(1, Ordering::SeqCst);
            buffer.extend_from_slice(b"up 1\n");
            Ok(())
        });
        let exporter = Exporter::builder()
            .source(source)
            .coalesce(Duration::from_secs(60))
            .build()
            .unwrap();
        let (a, b) = serving(&exporter, |addr| {
            (get(addr, "/metrics", &[]).text(), get(addr, "/metrics", &[]).text())
        })
        .await;
        // One walk: both answers carry the values of the moment it rendered (documented).
        assert_eq!(renders.load(Ordering::SeqCst), 1);
        assert_eq!((requests(&a, 200), requests(&b, 200)), (Some(0.0), Some(0.0)));
    }
}
