//! A scrape publishes the pool's gauges on the loop before it asks for its slot: it counts
//! the walk already running, never itself, and an idle exporter reads `in_use 0`. Its own
//! test binary: the recorder is global.

mod common;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Latch, get, serving};
use loopguard_exporter::{Exporter, Format, Source, render_fn};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .expect("installs")
        })
        .clone()
}

on_every_executor! {
    async fn a_scrape_counts_the_walk_already_running_but_never_itself() {
        static RUN: AtomicUsize = AtomicUsize::new(0);
        let pool = format!("honest-{}", RUN.fetch_add(1, Ordering::SeqCst));
        let (latch, handle) = (Latch::default(), recorder());
        let (gate, walks) = (latch.clone(), AtomicUsize::new(0));
        let source = render_fn(handle.content_type(Format::PrometheusText), move |buffer| {
            if walks.fetch_add(1, Ordering::SeqCst) == 1 {
                gate.wait(); // the second walk is held
            }
            Source::render(&handle, Format::PrometheusText, buffer)
        });
        let exporter = Exporter::builder()
            .source(source)
            .pool_name(&pool)
            .workers(2)
            .worker_sched_idle(false)
            .build()
            .unwrap();
        let gate = latch.clone();
        let (idle, held, counted) = serving(&exporter, move |addr| {
            let idle = get(addr, "/metrics", &[]).text();
            let held = std::thread::spawn(move || get(addr, "/metrics", &[]));
            gate.arrived(1);
            let counted = get(addr, "/metrics", &[]).text();
            gate.open();
            (idle, held.join().unwrap().status, counted)
        })
        .await;
        let line = |n: u32| format!("loopguard_pool_in_use{{pool=\"{pool}\"}} {n}");
        assert!(idle.lines().any(|l| l == line(0)), "idle reads 0: {idle}");
        assert_eq!(held, 200);
        assert!(counted.lines().any(|l| l == line(1)), "the running walk, not itself: {counted}");
    }
}
