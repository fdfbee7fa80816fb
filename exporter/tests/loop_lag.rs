//! The exporter measures its own loop by default: a probe on the loop each `serve` runs on,
//! every connection's polls timed, the figures on the status page; on every executor.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use futures_lite::future;

use common::{get, serving};
use loopguard::lag::LoopLag;
use loopguard_exporter::{Exporter, Offload, PROMETHEUS_TEXT, render_fn};

fn up() -> impl loopguard_exporter::Source {
    render_fn(PROMETHEUS_TEXT, |buffer| {
        buffer.extend_from_slice(b"up 1\n");
        Ok(())
    })
}

/// Waits (from the client's thread, bounded) until `done` holds of the lag's stats.
fn until(lag: &LoopLag, what: &str, done: impl Fn(&loopguard::lag::LagStats) -> bool) {
    let began = Instant::now();
    while !done(&lag.stats()) {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "{what}: {:?}",
            lag.stats()
        );
        std::thread::yield_now();
    }
}

on_every_executor! {
    async fn the_default_exporter_probes_its_loop_and_shows_it_on_the_status_page() {
        // The shipped default: nothing asked for, the probe runs.
        let exporter = Exporter::builder().source(up()).build().unwrap();
        let lag = exporter.loop_lag().expect("a probe by default").clone();
        assert_eq!(lag.name(), "registry-serve");
        assert_eq!(lag.resolution(), Duration::from_millis(10));
        let probe = lag.clone();
        let page = serving(&exporter, move |addr| {
            until(&probe, "the probe never sampled", |s| s.samples >= 3);
            get(addr, "/", &[])
        })
        .await;
        assert_eq!(page.status, 200);
        let text = page.text();
        let line = text.lines().nth(1).unwrap_or_default();
        assert!(line.starts_with("loop lag over 60s: p50 "), "{text}");
        assert!(line.contains(" samples; 0 slow polls"), "{text}");
    }
}

on_every_executor! {
    async fn a_render_on_the_loop_is_a_slow_poll_of_its_connection_and_the_probe_sees_it() {
        let exporter = Exporter::builder()
            .source(render_fn(PROMETHEUS_TEXT, |buffer| {
                // The work: a render that holds the loop it runs on for 150 ms.
                std::thread::sleep(Duration::from_millis(150));
                buffer.extend_from_slice(b"up 1\n");
                Ok(())
            }))
            .offload(Offload::OnLoop)
            .build()
            .unwrap();
        let lag = exporter.loop_lag().unwrap().clone();
        let probe = lag.clone();
        let answer = serving(&exporter, move |addr| {
            until(&probe, "the probe never sampled", |s| s.samples >= 1);
            let answer = get(addr, "/metrics", &[]);
            // The probe, due during the stall, is polled once the render's poll ends.
            until(&probe, "the stall was not seen", |s| {
                s.max >= Duration::from_millis(100)
            });
            answer
        })
        .await;
        assert_eq!(answer.status, 200);
        assert_eq!(lag.slow_polls("connection"), 1, "one slow poll, once");
        assert_eq!(lag.stats().slow_polls, 1);
    }
}

on_every_executor! {
    async fn a_lag_of_one_s_own_is_shared_and_none_turns_the_probe_off() {
        let mine = LoopLag::new("app").unwrap();
        let shared = Exporter::builder()
            .source(up())
            .loop_lag(Some(mine.clone()))
            .build()
            .unwrap();
        let probe = mine.clone();
        serving(&shared, move |_| {
            until(&probe, "the shared lag never sampled", |s| s.samples >= 1)
        })
        .await;

        let off = Exporter::builder().source(up()).loop_lag(None).build().unwrap();
        assert!(off.loop_lag().is_none());
        let page = serving(&off, |addr| get(addr, "/", &[])).await;
        assert!(!page.text().contains("loop lag"), "{}", page.text());
    }
}

/// Waits, on the loop, until the lag holds `n` samples (bounded: a probe that never runs
/// fails the test).
async fn samples(lag: &LoopLag, n: u64) {
    let began = Instant::now();
    while lag.stats().samples < n {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "{:?}",
            lag.stats()
        );
        async_io::Timer::after(Duration::from_millis(5)).await;
    }
}

on_every_executor! {
    async fn one_probe_per_exporter_handed_over_when_its_serve_ends() {
        let exporter = Exporter::builder().source(up()).build().unwrap();
        let lag = exporter.loop_lag().unwrap().clone();
        let bind = || TcpListener::bind("127.0.0.1:0").unwrap();
        let first = exporter.serve(bind());
        let mut second = Box::pin(exporter.serve(bind()));
        let began = Instant::now();
        // Both serving: one sample per resolution (10 ms) at most, not two.
        let both = async {
            let _ = future::zip(first, second.as_mut()).await;
        };
        future::or(both, samples(&lag, 30)).await;
        let (taken, elapsed) = (lag.stats().samples, began.elapsed());
        assert!(
            taken <= elapsed.as_millis() as u64 / 10 + 3,
            "{taken} samples in {elapsed:?}: two probes"
        );
        // The first serve is gone (dropped with `both`): the second takes the probe over.
        let more = async {
            samples(&lag, taken + 10).await;
            exporter.shutdown();
        };
        let (served, ()) = future::zip(second, more).await;
        served.unwrap();
    }
}
