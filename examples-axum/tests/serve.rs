//! The axum example over loopback: a scrape renders the real registry; with the pool's one
//! worker busy, a scrape is refused by the layer at once with `Retry-After`, on the pool's
//! own gate (the pool counts it), and once the worker is free a scrape walks on its own slot.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use loopguard::pool::Pool;
use loopguard_axum_example::{Registry, app};
use metrics_exporter_prometheus::PrometheusBuilder;
use smol::Async;
use smol_hyper::rt::FuturesIo;

/// GETs `path` with `headers` on a new connection: the status, `Retry-After`, the body.
async fn get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Option<String>, String) {
    let stream = smol::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(FuturesIo::new(stream))
        .await
        .unwrap();
    smol::spawn(connection).detach();
    let mut request = Request::get(path).header("host", "127.0.0.1");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

#[test]
fn scrapes_are_admitted_refused_and_cut_by_their_budget() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = Arc::new(recorder.handle());
    metrics::set_global_recorder(recorder).unwrap();
    for shard in 0..5u64 {
        metrics::counter!("catalog_items_total", "shard" => shard.to_string()).increment(shard);
    }
    let pool = Pool::builder()
        .name("registry-serve")
        .workers(1)
        .build()
        .unwrap();
    let router = app(
        Registry {
            pool: pool.clone(),
            handle,
        },
        Duration::from_secs(30),
        Duration::from_millis(500),
    );
    let listener = Async::new(TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let addr = listener.get_ref().local_addr().unwrap();
    std::thread::spawn(move || {
        let ex = Arc::new(smol::Executor::new());
        let _ = smol::block_on(ex.run(smol_axum::serve(ex.clone(), listener, router)));
    });

    let scrape = [("X-Prometheus-Scrape-Timeout-Seconds", "10")];
    let watchdog = async {
        smol::Timer::after(Duration::from_secs(30)).await;
        panic!("not done within 30 s");
    };
    smol::block_on(smol::future::or(
        async {
            assert_eq!(get(addr, "/healthz", &[]).await.0, StatusCode::OK);
            let (status, _, text) = get(addr, "/metrics", &scrape).await;
            assert_eq!(status, StatusCode::OK);
            assert!(
                text.contains("catalog_items_total{shard=\"3\"} 3"),
                "{text}"
            );
            assert!(
                text.contains("loopguard_pool_capacity{pool=\"registry-serve\"} 1"),
                "{text}"
            );

            // Published before admission: the scrape did not count itself.
            assert!(
                text.contains("loopguard_pool_in_use{pool=\"registry-serve\"} 0"),
                "{text}"
            );

            // The scrape's slot comes back once its body has been written and its walk is
            // done, which can be just after the client has read the answer.
            pool.wait_idle().await;
            // The pool's only worker is busy: the layer refuses a scrape at once, on the
            // pool's own gate, and the pool counts the refusal.
            let (release, held) = mpsc::channel::<()>();
            let busy = pool.try_run(move || held.recv().ok()).unwrap();
            let refused_before = pool.stats().rejected;
            let start = Instant::now();
            let (status, retry_after, body) = get(addr, "/metrics", &scrape).await;
            assert_eq!(
                (status, retry_after.as_deref(), body.as_str()),
                (StatusCode::SERVICE_UNAVAILABLE, Some("1"), "")
            );
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "{:?}",
                start.elapsed()
            );
            assert_eq!(pool.stats().rejected, refused_before + 1);

            release.send(()).unwrap();
            busy.await.unwrap();
            pool.wait_idle().await;
            assert_eq!(get(addr, "/metrics", &scrape).await.0, StatusCode::OK);
            // The request's slot and its walk's share of it are both back.
            pool.wait_idle().await;
            assert_eq!((pool.in_use(), pool.waiting()), (0, 0));

            // A budget spent with the walk started: `Unserved`'s 504, no `Retry-After` (a
            // 2 ns timeout leaves a 1 ns budget, spent before the walk is awaited).
            let spent = [("X-Prometheus-Scrape-Timeout-Seconds", "0.000000002")];
            let (status, retry_after, body) = get(addr, "/metrics", &spent).await;
            assert_eq!(
                (status, retry_after.as_deref(), body.as_str()),
                (
                    StatusCode::GATEWAY_TIMEOUT,
                    None,
                    "budget spent; the walk goes on\n"
                )
            );
            pool.wait_idle().await;
        },
        watchdog,
    ));
}
