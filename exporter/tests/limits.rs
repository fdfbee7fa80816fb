//! What the loop answers without the pool: unknown paths, wrong methods, garbage, heads and
//! bodies too large, clients that stall.

mod common;

use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{get, send, serving};
use loopguard_exporter::{Exporter, PROMETHEUS_TEXT, render_fn};

fn counted(renders: &Arc<AtomicUsize>) -> loopguard_exporter::ExporterBuilder {
    let renders = renders.clone();
    Exporter::builder().source(render_fn(PROMETHEUS_TEXT, move |buffer| {
        renders.fetch_add(1, Ordering::SeqCst);
        buffer.extend_from_slice(b"up 1\n");
        Ok(())
    }))
}

on_every_executor! {
    async fn unknown_paths_wrong_methods_and_garbage_get_their_status_and_no_render() {
        let renders = Arc::new(AtomicUsize::new(0));
        let exporter = counted(&renders).status_page(false).build().unwrap();
        let statuses = serving(&exporter, |addr| {
            let mut statuses = vec![
                get(addr, "/nope", &[]).status,
                get(addr, "/metrics/x", &[]).status,
                get(addr, "/", &[]).status, // the status page is off
            ];
            for method in ["POST", "PUT", "DELETE"] {
                let raw = format!("{method} /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                let answer = send(addr, raw.as_bytes());
                assert_eq!(answer.header("allow"), Some("GET"), "{method}");
                statuses.push(answer.status);
            }
            statuses.push(send(addr, b"\x16\x03\x01 hello\r\n\r\n").status);
            statuses
        })
        .await;
        assert_eq!(statuses, [404, 404, 404, 405, 405, 405, 400]);
        assert_eq!(renders.load(Ordering::SeqCst), 0);
    }
}

on_every_executor! {
    async fn head_and_body_limits_and_the_header_read_timeout_protect_the_loop() {
        let renders = Arc::new(AtomicUsize::new(0));
        let exporter = counted(&renders)
            .header_read_timeout(Duration::from_millis(200))
            .max_body_bytes(1024)
            .build()
            .unwrap();
        let (huge, large, stalled, idle, health) = serving(&exporter, |addr| {
            let huge = get(addr, "/healthz", &[("X-Huge", &"a".repeat(64 * 1024))]).status;
            let mut raw = b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\nConnection: close\r\n\r\n".to_vec();
            raw.extend_from_slice(&[b'x'; 4096]);
            let large = send(addr, &raw).status;
            // Half a request head, then nothing: cut at the header timeout.
            let began = Instant::now();
            let mut half = std::net::TcpStream::connect(addr).unwrap();
            half.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
            let _ = half.read_to_end(&mut Vec::new());
            let stalled = began.elapsed();
            // A connection that says nothing is closed as well.
            let began = Instant::now();
            let mut silent = std::net::TcpStream::connect(addr).unwrap();
            silent.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let idle = silent.read_to_end(&mut Vec::new()).ok().map(|n| (n, began.elapsed()));
            (huge, large, stalled, idle, get(addr, "/healthz", &[]).status)
        })
        .await;
        assert_eq!((huge, large, health), (431, 413, 200));
        assert!(stalled >= Duration::from_millis(150) && stalled < Duration::from_secs(10), "{stalled:?}");
        let (read, waited) = idle.expect("closed, not timed out");
        assert!(read == 0 && waited >= Duration::from_millis(150), "{waited:?}");
        assert_eq!(renders.load(Ordering::SeqCst), 0, "no limit reached the render");
    }
}

on_every_executor! {
    async fn a_body_that_stalls_past_the_scrape_budget_gets_504_at_the_budget() {
        let renders = Arc::new(AtomicUsize::new(0));
        // The read timeout (10 s by default) is not the ceiling: the scraper's budget is.
        let exporter = counted(&renders).build().unwrap();
        let (status, took) = serving(&exporter, |addr| {
            let began = Instant::now();
            let mut stalled = std::net::TcpStream::connect(addr).unwrap();
            stalled.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            // 0.4 s less the offset (at most half of it): a 200 ms budget; 10 of 100 bytes.
            stalled
                .write_all(
                    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Prometheus-Scrape-Timeout-Seconds: 0.4\r\n\
                      Content-Length: 100\r\nConnection: close\r\n\r\n0123456789",
                )
                .unwrap();
            let mut raw = Vec::new();
            let _ = stalled.read_to_end(&mut raw);
            let head = String::from_utf8_lossy(&raw).lines().next().unwrap_or_default().to_string();
            (head, began.elapsed())
        })
        .await;
        assert!(status.starts_with("HTTP/1.1 504"), "{status}");
        assert!(took < Duration::from_secs(5), "answered at the budget, not the read timeout: {took:?}");
        assert_eq!(renders.load(Ordering::SeqCst), 0);
    }
}
