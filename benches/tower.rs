//! The tower admission layer's cost, side by side with the bare service and with tower's
//! own `ConcurrencyLimit` + `LoadShed` on a tokio current-thread runtime, in one run.
//!
//! - `in_process/*`: one request through a no-op service, called and polled in place
//!   (`poll_ready`, `call`, the future, the response dropped), a whole sample under one
//!   `block_on`: `bare`, `loopguard_admitted`, `loopguard_refused` (the one slot held), and
//!   the reference `bare_tokio`, `tower_admitted`, `tower_refused` (tower's `Overloaded`
//!   error turned into the same 503 + `Retry-After` a server must send).
//! - `loopback/*`: one no-op `GET` over a kept-alive loopback connection to hyper on smol
//!   (the server on its own thread, the client under `smol::block_on`): `bare` and
//!   `loopguard_admitted`.
//!
//! Run with `cargo bench --features tower --bench tower`; the last lines printed are the
//! medians and ratios, read back from criterion's estimates. See BENCHMARKS.md.

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use criterion::Criterion;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use loopguard::tower::AdmissionLayer;
use tower::{ServiceBuilder, ServiceExt};
use tower_layer::Layer;
use tower_service::Service;

mod loopback;
use loopback::{Boxed, Sender, connect, serve};

/// The bare service: an empty 200.
#[derive(Clone, Copy)]
struct Noop;

impl<B> Service<Request<B>> for Noop {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        std::future::ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
    }
}

/// What a server sends for tower's `Overloaded`: the same answer the layer gives.
fn busy() -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let one = http::HeaderValue::from_static("1");
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, one);
    response
}

/// One request through `service`: readiness, call, the response (dropped by the caller).
async fn once<S>(service: &mut S) -> Result<S::Response, S::Error>
where
    S: Service<Request<()>>,
{
    futures_lite::future::poll_fn(|cx| service.poll_ready(cx)).await?;
    service.call(Request::new(())).await
}

/// A sample under `futures_lite::future::block_on`, timed.
fn on_lite(sample: impl Future<Output = ()>) -> Duration {
    let start = Instant::now();
    futures_lite::future::block_on(sample);
    start.elapsed()
}

/// A sample under a tokio current-thread runtime's `block_on`, timed.
fn on_tokio(rt: &tokio::runtime::Runtime, sample: impl Future<Output = ()>) -> Duration {
    let start = Instant::now();
    rt.block_on(sample);
    start.elapsed()
}

fn in_process(c: &mut Criterion) {
    let mut group = c.benchmark_group("in_process");

    group.bench_function("bare", |b| {
        b.iter_custom(|iters| {
            let mut service = Noop;
            on_lite(async move {
                for _ in 0..iters {
                    black_box(once(&mut service).await.unwrap());
                }
            })
        })
    });

    group.bench_function("loopguard_admitted", |b| {
        let layer = AdmissionLayer::new("test", 1).unwrap();
        b.iter_custom(|iters| {
            let mut service = layer.layer(Noop);
            on_lite(async move {
                for _ in 0..iters {
                    // Dropping the response (its body) frees the slot for the next one.
                    let response = once(&mut service).await.unwrap();
                    assert_eq!(black_box(response).status(), StatusCode::OK);
                }
            })
        });
        assert_eq!(layer.in_use(), 0);
    });

    group.bench_function("loopguard_refused", |b| {
        let layer = AdmissionLayer::new("test", 1).unwrap();
        b.iter_custom(|iters| {
            let mut service = layer.layer(Noop);
            on_lite(async move {
                let held = once(&mut service).await.unwrap();
                for _ in 0..iters {
                    let response = once(&mut service).await.unwrap();
                    assert_eq!(
                        black_box(response).status(),
                        StatusCode::SERVICE_UNAVAILABLE
                    );
                }
                drop(held);
            })
        });
        assert!(layer.rejected() > 0);
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");

    group.bench_function("bare_tokio", |b| {
        b.iter_custom(|iters| {
            let mut service = Noop;
            on_tokio(&rt, async move {
                for _ in 0..iters {
                    black_box(once(&mut service).await.unwrap());
                }
            })
        })
    });

    group.bench_function("tower_admitted", |b| {
        b.iter_custom(|iters| {
            let mut service = ServiceBuilder::new()
                .load_shed()
                .concurrency_limit(1)
                .service(Noop);
            on_tokio(&rt, async move {
                for _ in 0..iters {
                    let response = once(&mut service).await.unwrap();
                    assert_eq!(black_box(response).status(), StatusCode::OK);
                }
            })
        })
    });

    group.bench_function("tower_refused", |b| {
        b.iter_custom(|iters| {
            let mut service = ServiceBuilder::new()
                .load_shed()
                .concurrency_limit(1)
                .service(Noop);
            on_tokio(&rt, async move {
                // ConcurrencyLimit holds its permit in the response future: keep one.
                let ready = ServiceExt::<Request<()>>::ready(&mut service).await;
                let held = ready.unwrap().call(Request::new(()));
                for _ in 0..iters {
                    let response = once(&mut service).await.unwrap_or_else(|_| busy());
                    assert_eq!(
                        black_box(response).status(),
                        StatusCode::SERVICE_UNAVAILABLE
                    );
                }
                drop(held);
            })
        })
    });
    group.finish();
}

/// One GET, its body read in full.
async fn get(sender: &mut Sender) {
    sender.ready().await.expect("ready");
    let request = Request::get("/").header("host", "127.0.0.1");
    let request = request.body(Empty::<Bytes>::new()).expect("request");
    let response = sender.send_request(request).await.expect("response");
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "no request may be refused"
    );
    black_box(response.into_body().collect().await.expect("body"));
}

/// `iters` sequential GETs on one kept-alive connection.
fn get_loop(addr: SocketAddr, iters: u64) -> Duration {
    smol::block_on(async {
        let mut sender = connect(addr).await;
        let start = Instant::now();
        for _ in 0..iters {
            get(&mut sender).await;
        }
        start.elapsed()
    })
}

/// `pairs` pairs of GETs, one to each server, alternating which goes first, each timed:
/// both sides see the same moments of a shared machine. Returns the medians of each side
/// and of the per-pair difference, in nanoseconds.
fn paired(bare: SocketAddr, layered: SocketAddr, pairs: usize) -> (f64, f64, f64) {
    smol::block_on(async {
        let (mut a, mut b) = (connect(bare).await, connect(layered).await);
        let (mut ta, mut tb, mut diff) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..pairs {
            let time = |d: Duration| d.as_nanos() as f64;
            let (da, db) = if i % 2 == 0 {
                let start = Instant::now();
                get(&mut a).await;
                let mid = Instant::now();
                get(&mut b).await;
                (time(mid - start), time(mid.elapsed()))
            } else {
                let start = Instant::now();
                get(&mut b).await;
                let mid = Instant::now();
                get(&mut a).await;
                (time(mid.elapsed()), time(mid - start))
            };
            ta.push(da);
            tb.push(db);
            diff.push(db - da);
        }
        (median_of(ta), median_of(tb), median_of(diff))
    })
}

fn median_of(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn loopback(c: &mut Criterion) {
    let bare = serve(Boxed(Noop));
    // Enough slots that a body still being dropped on the server never refuses the next.
    let layered = serve(Boxed(AdmissionLayer::new("bench", 64).unwrap().layer(Noop)));
    let mut group = c.benchmark_group("loopback");
    group.bench_function("bare", |b| b.iter_custom(|iters| get_loop(bare, iters)));
    group.bench_function("loopguard_admitted", |b| {
        b.iter_custom(|iters| get_loop(layered, iters))
    });
    group.finish();
    let pairs = 20_000;
    let (a, b, d) = paired(bare, layered, pairs);
    PAIRED.with(|p| p.set(Some((pairs, a, b, d))));
}

thread_local! {
    static PAIRED: std::cell::Cell<Option<(usize, f64, f64, f64)>> = const { std::cell::Cell::new(None) };
}

/// The median of `group/id` in criterion's estimates of this run, in nanoseconds.
fn median(group: &str, id: &str) -> Option<f64> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = target
        .join("criterion")
        .join(group)
        .join(id)
        .join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn report() {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nmedians and ratios (load average {})", load.trim());
    let rows = [
        ("in_process", "bare", "in_process", "bare"),
        ("in_process", "loopguard_admitted", "in_process", "bare"),
        ("in_process", "loopguard_refused", "in_process", "bare"),
        ("in_process", "bare_tokio", "in_process", "bare"),
        ("in_process", "tower_admitted", "in_process", "bare_tokio"),
        ("in_process", "tower_refused", "in_process", "bare_tokio"),
        ("loopback", "bare", "loopback", "bare"),
        ("loopback", "loopguard_admitted", "loopback", "bare"),
    ];
    println!(
        "{:<32} {:>12} {:>10} {:>12}  vs",
        "id", "median", "ratio", "over"
    );
    for (group, id, base_group, base) in rows {
        let (Some(value), Some(reference)) = (median(group, id), median(base_group, base)) else {
            println!("{group}/{id}: no estimate (filtered out?)");
            continue;
        };
        println!(
            "{:<32} {:>9.1} ns {:>9.3}× {:>+9.1} ns  {base_group}/{base}",
            format!("{group}/{id}"),
            value,
            value / reference,
            value - reference
        );
    }
}

fn report_paired() {
    let Some((pairs, bare, layered, diff)) = PAIRED.with(|p| p.get()) else {
        return;
    };
    println!(
        "loopback paired, {pairs} pairs: bare {:.1} µs, loopguard_admitted {:.1} µs, \
         median difference {:+.2} µs = {:+.2} % of bare",
        bare / 1e3,
        layered / 1e3,
        diff / 1e3,
        100.0 * diff / bare
    );
}

fn main() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
        .configure_from_args();
    in_process(&mut c);
    loopback(&mut c);
    c.final_summary();
    report();
    report_paired();
}
