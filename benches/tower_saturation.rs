//! The tower admission layer's throughput at saturation over loopback, side by side with
//! hyper alone, in one run: how many requests per second one server thread answers when
//! many kept-alive connections send as fast as they can.
//!
//! - `bare`: hyper on smol (`LocalExecutor`, one thread) serving a no-op 200.
//! - `admitted`: the same behind `AdmissionLayer::new(_, 64)`: every request admitted (64
//!   slots for 16 connections), the slot held until the response body is done.
//! - `refused`: the same layer with 1 slot, held for the whole measurement by a request
//!   that never completes: every other request is refused (503 + `Retry-After`).
//!
//! The client is one thread (`LocalExecutor`, 16 connections, each sending its next request
//! as soon as the last response's body is read); on a two-core machine client and server
//! each have a core. The three servers are measured in turns, for several rounds, so each
//! sees the same moments of a shared machine; the figures are the medians of the rounds and
//! their ratios to `bare`. Not a criterion bench (a throughput under load, not a latency):
//! run with `cargo bench --features tower --bench tower_saturation [-- --json]`, about 30 s.
//! See BENCHMARKS.md.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use loopguard::tower::AdmissionLayer;
use tower_layer::Layer;
use tower_service::Service;

mod loopback;
use loopback::{Boxed, Sender, connect, serve};

/// Client connections, each with one request in flight.
const CONNECTIONS: usize = 16;
/// How long each server is measured in a round.
const MEASURE: Duration = Duration::from_secs(2);
/// Rounds of the three servers, in turns.
const ROUNDS: usize = 5;

/// A no-op 200, except for `/hold`, which never answers (it keeps its slot).
#[derive(Clone, Copy)]
struct NoopOrHold;

impl<B> Service<Request<B>> for NoopOrHold {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.uri().path() == "/hold" {
            Box::pin(std::future::pending())
        } else {
            let ok = Response::new(Full::new(Bytes::from_static(b"ok")));
            Box::pin(std::future::ready(Ok(ok)))
        }
    }
}

fn request(path: &str) -> Request<Empty<Bytes>> {
    Request::get(path)
        .header("host", "127.0.0.1")
        .body(Empty::new())
        .expect("request")
}

/// Requests per second `addr` answers with `expected` over [`MEASURE`], from
/// [`CONNECTIONS`] connections; any other status fails the bench.
fn throughput(addr: SocketAddr, expected: StatusCode) -> f64 {
    let ex = smol::LocalExecutor::new();
    smol::block_on(ex.run(async {
        let mut senders = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            senders.push(connect(addr).await);
        }
        let answered = Rc::new(Cell::new(0_u64));
        let start = Instant::now();
        let end = start + MEASURE;
        let tasks: Vec<_> = senders
            .into_iter()
            .map(|mut sender: Sender| {
                let answered = answered.clone();
                ex.spawn(async move {
                    while Instant::now() < end {
                        sender.ready().await.expect("ready");
                        let response = sender.send_request(request("/")).await.expect("response");
                        assert_eq!(response.status(), expected);
                        response.into_body().collect().await.expect("body");
                        answered.set(answered.get() + 1);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        answered.get() as f64 / start.elapsed().as_secs_f64()
    }))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let json = std::env::args().any(|arg| arg == "--json");
    let bare = serve(Boxed(NoopOrHold));
    let admitted = serve(Boxed(
        AdmissionLayer::new("admitted", 64)
            .expect("a layer")
            .layer(NoopOrHold),
    ));
    let one_slot = AdmissionLayer::new("refused", 1).expect("a layer");
    let refused = serve(Boxed(one_slot.clone().layer(NoopOrHold)));

    // Hold the refusing server's one slot: a request that never completes, its connection
    // task and its send kept alive on a thread of their own until the process ends.
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        smol::block_on(async {
            let mut sender = connect(refused).await;
            sender.ready().await.expect("ready");
            let pending = sender.send_request(request("/hold"));
            held_tx.send(()).expect("main waits");
            let _never = pending.await;
        })
    });
    held_rx.recv().expect("the hold was sent");
    // The request is on the wire; the slot is held once the server has read it.
    let waited = Instant::now();
    while one_slot.in_use() == 0 {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the hold never arrived"
        );
        std::thread::yield_now();
    }

    let (mut b, mut a, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        b.push(throughput(bare, StatusCode::OK));
        a.push(throughput(admitted, StatusCode::OK));
        r.push(throughput(refused, StatusCode::SERVICE_UNAVAILABLE));
    }
    let (b, a, r) = (median(b), median(a), median(r));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?").to_string();
    if json {
        println!(
            "{{\"connections\":{CONNECTIONS},\"rounds\":{ROUNDS},\"measure_s\":{},\
             \"bare_rps\":{b:.0},\"admitted_rps\":{a:.0},\"refused_rps\":{r:.0},\
             \"admitted_ratio\":{:.3},\"refused_ratio\":{:.3},\"load\":\"{load}\"}}",
            MEASURE.as_secs(),
            a / b,
            r / b
        );
    } else {
        println!(
            "loopback saturation, {CONNECTIONS} connections, median of {ROUNDS} rounds of {} s \
             (load {load}):",
            MEASURE.as_secs()
        );
        println!("  bare (hyper alone)      {b:>9.0} req/s  1");
        println!(
            "  admitted (64 slots)     {a:>9.0} req/s  {:.3}× bare",
            a / b
        );
        println!(
            "  refused (1 slot, held)  {r:>9.0} req/s  {:.3}× bare",
            r / b
        );
    }
}
