//! The admission layer in front of a hyper server over loopback, on a multi-threaded smol
//! executor and on a `LocalExecutor`: saturation gives 503 + `Retry-After` at once, the slot
//! is held until a slow body has been written, a dropped connection frees the slot only
//! when the handler's work has finished, waiting in line is FIFO within the deadline, and
//! the headers' deadline reaches the handler. Every wait is bounded by a watchdog.

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{Latch, bounded};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use loopguard::deadline::Deadline;
use loopguard::keyed::KeyedGate;
use loopguard::pool::Pool;
use loopguard::tower::{Admission, AdmissionBody, AdmissionLayer, Keyed, ResponseFuture, Slot};
use smol::channel::{Receiver, Sender, unbounded};
use smol_hyper::rt::FuturesIo;
use tower_layer::Layer;
use tower_service::Service;

const WATCHDOG: Duration = Duration::from_secs(30);

type Spawn = Arc<dyn Fn(BoxFuture<()>) + Send + Sync>;
type Frames = Receiver<Result<Frame<Bytes>, Infallible>>;
type Body = StreamBody<Frames>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs `body` on a smol executor with two threads, and on a `LocalExecutor`.
macro_rules! on_smol_and_local {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn smol() {
                let ex = Arc::new(smol::Executor::new());
                let (stop, stopped) = smol::channel::bounded::<()>(1);
                let helper = {
                    let ex = ex.clone();
                    std::thread::spawn(move || smol::block_on(ex.run(stopped.recv())))
                };
                let spawn: Spawn = {
                    let ex = ex.clone();
                    Arc::new(move |f| ex.spawn(f).detach())
                };
                smol::block_on(ex.run(bounded(WATCHDOG, ($body)(spawn))));
                drop(stop);
                helper.join().unwrap().ok();
            }

            #[test]
            fn local_executor() {
                // Spawned futures reach the one thread's executor through a channel.
                let ex = Rc::new(async_executor::LocalExecutor::new());
                let (tx, rx) = unbounded::<BoxFuture<()>>();
                let spawn: Spawn = Arc::new(move |f| {
                    let _ = tx.try_send(f);
                });
                let local = ex.clone();
                ex.spawn(async move {
                    while let Ok(f) = rx.recv().await {
                        local.spawn(f).detach();
                    }
                })
                .detach();
                futures_lite::future::block_on(ex.run(bounded(WATCHDOG, ($body)(spawn))));
            }
        }
    };
}

/// What the handler sees of a request, and how it answers.
#[derive(Clone)]
struct Handler {
    /// Told when a request reaches the handler, with its deadline's time left.
    seen: Sender<Option<Duration>>,
    /// The body's frames; the body ends when the sender goes.
    body: Arc<Mutex<Option<Frames>>>,
    /// The handler's work on a pool, if any; it keeps the request's `Slot` until it ends.
    work: Option<Walk>,
    /// Told when the handler's future is dropped.
    dropped: Sender<()>,
}

struct DropSignal(Sender<()>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        let _ = self.0.try_send(());
    }
}

impl Service<Request<Incoming>> for Handler {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let left = request
            .extensions()
            .get::<Deadline>()
            .and_then(|d| d.remaining());
        let slot = request.extensions().get::<Slot>().cloned();
        assert!(slot.is_some(), "an admitted request carries its slot");
        let _ = self.seen.try_send(left);
        let frames = self.body.lock().unwrap().take();
        let work = self.work.clone();
        let guard = DropSignal(self.dropped.clone());
        Box::pin(async move {
            let _guard = guard;
            if let Some(Walk {
                pool,
                started,
                release,
            }) = work
            {
                // The walk keeps the slot until it ends, whoever still waits for it.
                let walk = pool.run(move || {
                    let _slot = slot;
                    started.open();
                    release.wait();
                });
                walk.await.unwrap();
            }
            let frames = frames.unwrap_or_else(|| {
                let (tx, rx) = unbounded();
                let _ = tx.try_send(Ok(Frame::data(Bytes::from_static(b"ok"))));
                rx
            });
            Ok(Response::new(StreamBody::new(frames)))
        })
    }
}

/// Work the handler runs on a pool before it answers: it opens `started`, then blocks
/// until `release` opens.
#[derive(Clone)]
struct Walk {
    pool: Pool,
    started: Latch,
    release: Latch,
}

/// A handler, and the receiving ends of what it reports.
fn handler(work: Option<Walk>) -> (Handler, Receiver<Option<Duration>>, Receiver<()>) {
    let (seen, seen_rx) = unbounded();
    let (dropped, dropped_rx) = unbounded();
    let handler = Handler {
        seen,
        body: Arc::default(),
        work,
        dropped,
    };
    (handler, seen_rx, dropped_rx)
}

/// Serves `service` on 127.0.0.1, port 0, until the test's executor goes.
fn serve<S, B>(service: S, spawn: &Spawn) -> SocketAddr
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let listener = smol::net::TcpListener::try_from(listener).unwrap();
    let inner = spawn.clone();
    spawn(Box::pin(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service.clone();
            let hyper_service = hyper::service::service_fn(move |request| {
                let mut service = service.clone();
                async move {
                    futures_lite::future::poll_fn(|cx| service.poll_ready(cx)).await?;
                    service.call(request).await
                }
            });
            inner(Box::pin(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(FuturesIo::new(stream), hyper_service)
                    .await;
            }));
        }
    }));
    addr
}

/// An HTTP/1.1 client connection.
struct Client {
    sender: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

impl Client {
    async fn connect(addr: SocketAddr, spawn: &Spawn) -> Client {
        let stream = smol::net::TcpStream::connect(addr).await.unwrap();
        let (sender, connection) = hyper::client::conn::http1::handshake(FuturesIo::new(stream))
            .await
            .unwrap();
        spawn(Box::pin(async move {
            let _ = connection.await;
        }));
        Client { sender }
    }

    async fn get(&mut self, headers: &[(&str, &str)]) -> Response<Incoming> {
        let mut request = Request::get("/").header("host", "127.0.0.1");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.sender.ready().await.unwrap();
        let request = request.body(Empty::new()).unwrap();
        self.sender.send_request(request).await.unwrap()
    }
}

async fn read_body(response: Response<Incoming>) -> Bytes {
    response.into_body().collect().await.unwrap().to_bytes()
}

fn retry_after(response: &Response<Incoming>) -> u64 {
    let value = response.headers().get("retry-after").expect("Retry-After");
    value.to_str().unwrap().parse().unwrap()
}

/// Polls `cond` until it holds (each check after a short timer, bounded by the watchdog),
/// for state the layer reports only when asked (`waiting()`, a key's `in_use`): the timer
/// paces the checks, it orders nothing.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WATCHDOG, "never: {what}");
        async_io::Timer::after(Duration::from_millis(2)).await;
    }
}

on_smol_and_local!(
    saturation_gives_503_with_retry_after_at_once,
    |spawn: Spawn| async move {
        let (handler, seen, _) = handler(None);
        let (frames, body) = unbounded();
        *handler.body.lock().unwrap() = Some(body);
        let layer = AdmissionLayer::new("test", 1).unwrap();
        let addr = serve(layer.layer(handler), &spawn);

        let mut first = Client::connect(addr, &spawn).await;
        let held = first.get(&[]).await;
        assert_eq!(held.status(), StatusCode::OK);
        seen.recv().await.unwrap();
        assert_eq!(layer.in_use(), 1);

        // The only slot is held by a body still being written: refused at once.
        let mut second = Client::connect(addr, &spawn).await;
        let start = Instant::now();
        let refused = second.get(&[]).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after(&refused), 1, "1 s before any request finished");
        assert!(start.elapsed() < Duration::from_secs(1));
        assert!(read_body(refused).await.is_empty());
        assert_eq!(layer.rejected(), 1);
        assert!(
            seen.try_recv().is_err(),
            "the handler never saw the refused request"
        );

        frames
            .try_send(Ok(Frame::data(Bytes::from_static(b"done"))))
            .unwrap();
        drop(frames);
        assert_eq!(read_body(held).await, "done");
        layer.wait_idle().await;
        let again = second.get(&[]).await;
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(read_body(again).await, "ok");
    }
);

on_smol_and_local!(
    the_slot_is_held_until_a_slow_body_finishes,
    |spawn: Spawn| async move {
        let (handler, seen, _) = handler(None);
        let (frames, body) = unbounded();
        *handler.body.lock().unwrap() = Some(body);
        let layer = AdmissionLayer::new("test", 1).unwrap();
        let addr = serve(layer.layer(handler), &spawn);

        let mut client = Client::connect(addr, &spawn).await;
        let response = client.get(&[]).await;
        seen.recv().await.unwrap();
        // The handler has returned; its body has sent one frame and is not done.
        frames
            .try_send(Ok(Frame::data(Bytes::from_static(b"first "))))
            .unwrap();
        let mut body = response.into_body();
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "first ");
        assert_eq!(
            layer.in_use(),
            1,
            "the handler returned, the body is not written"
        );

        let mut other = Client::connect(addr, &spawn).await;
        assert_eq!(
            other.get(&[]).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );

        // The last frame, then the end: the slot is free.
        frames
            .try_send(Ok(Frame::data(Bytes::from_static(b"last"))))
            .unwrap();
        drop(frames);
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, "last");
        layer.wait_idle().await;
        assert_eq!(other.get(&[]).await.status(), StatusCode::OK);
    }
);

on_smol_and_local!(
    a_dropped_connection_frees_the_slot_when_the_work_ends,
    |spawn: Spawn| async move {
        let pool = Pool::builder()
            .name("tower-walk")
            .workers(1)
            .build()
            .unwrap();
        let (started, latch) = (Latch::new(), Latch::new());
        let walk = Walk {
            pool: pool.clone(),
            started: started.clone(),
            release: latch.clone(),
        };
        let (handler, seen, dropped) = handler(Some(walk));
        let layer = AdmissionLayer::new("test", 1).unwrap();
        let addr = serve(layer.layer(handler), &spawn);

        // A raw connection: send the request, wait until the handler runs, hang up.
        let mut stream = smol::net::TcpStream::connect(addr).await.unwrap();
        use futures_lite::AsyncWriteExt;
        stream
            .write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        seen.recv().await.unwrap();
        blocking::unblock(move || started.wait()).await;
        assert_eq!(pool.in_use(), 1, "the walk runs");
        drop(stream);
        // hyper notices the hang-up and drops the handler's future; the walk runs on.
        dropped.recv().await.unwrap();
        assert_eq!(
            layer.in_use(),
            1,
            "the walk still runs: the slot stays held"
        );
        let mut client = Client::connect(addr, &spawn).await;
        assert_eq!(
            client.get(&[]).await.status(),
            StatusCode::SERVICE_UNAVAILABLE
        );

        latch.open();
        pool.wait_idle().await;
        layer.wait_idle().await;
        assert_eq!(layer.in_use(), 0);
    }
);

on_smol_and_local!(
    header_deadlines_reach_the_handler,
    |spawn: Spawn| async move {
        let (handler, seen, _) = handler(None);
        let layer = AdmissionLayer::new("test", 4)
            .unwrap()
            .deadline_from_headers(Duration::from_secs(30), Duration::from_millis(500));
        let addr = serve(layer.layer(handler), &spawn);
        let mut client = Client::connect(addr, &spawn).await;

        let cases: &[(&[(&str, &str)], Duration)] = &[
            (&[], Duration::from_secs(30)),
            (
                &[("X-Prometheus-Scrape-Timeout-Seconds", "10")],
                Duration::from_millis(9_500),
            ),
            (
                &[("x-envoy-expected-rq-timeout-ms", "2000")],
                Duration::from_millis(1_500),
            ),
            (&[("grpc-timeout", "3S")], Duration::from_millis(2_500)),
            // The earliest valid one wins; hostile values are ignored.
            (
                &[
                    ("X-Prometheus-Scrape-Timeout-Seconds", "5"),
                    ("x-envoy-expected-rq-timeout-ms", "1200"),
                    ("grpc-timeout", "NaN"),
                ],
                Duration::from_millis(700),
            ),
            (
                &[("X-Prometheus-Scrape-Timeout-Seconds", "-3")],
                Duration::from_secs(30),
            ),
        ];
        for (headers, budget) in cases {
            let start = Instant::now();
            let response = client.get(headers).await;
            assert_eq!(response.status(), StatusCode::OK);
            read_body(response).await;
            let left = seen
                .recv()
                .await
                .unwrap()
                .expect("a deadline in the extensions");
            assert!(left <= *budget, "{headers:?}: {left:?} > {budget:?}");
            assert!(
                left + start.elapsed() >= *budget,
                "{headers:?}: {left:?} left"
            );
        }
    }
);

on_smol_and_local!(
    waiters_are_served_in_order_within_their_deadline,
    |spawn: Spawn| async move {
        let (handler, seen, _) = handler(None);
        let (frames, body) = unbounded();
        *handler.body.lock().unwrap() = Some(body);
        let layer = AdmissionLayer::new("test", 1)
            .unwrap()
            .wait_within_deadline()
            .deadline_from_headers(Duration::from_secs(20), Duration::ZERO);
        let addr = serve(layer.layer(handler), &spawn);

        let mut holder = Client::connect(addr, &spawn).await;
        let held = holder.get(&[]).await;
        seen.recv().await.unwrap();

        // One waiter with time to spare, then one whose budget is 300 ms.
        let (done, results) = unbounded();
        for (name, budget) in [("patient", "20000"), ("hurried", "300")] {
            let mut client = Client::connect(addr, &spawn).await;
            let done = done.clone();
            let start = Instant::now();
            spawn(Box::pin(async move {
                let response = client
                    .get(&[("x-envoy-expected-rq-timeout-ms", budget)])
                    .await;
                let _ = done.send((name, response.status(), start.elapsed())).await;
            }));
            let waiting = layer.waiting();
            until("the request waits in line", || layer.waiting() > waiting).await;
        }
        let (name, status, took) = results.recv().await.unwrap();
        assert_eq!((name, status), ("hurried", StatusCode::SERVICE_UNAVAILABLE));
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "{took:?}"
        );
        assert_eq!(layer.waiting(), 1);

        drop(frames);
        read_body(held).await;
        let (name, status, _) = results.recv().await.unwrap();
        assert_eq!((name, status), ("patient", StatusCode::OK));
        assert_eq!(layer.rejected(), 1);
    }
);

on_smol_and_local!(
    a_busy_key_is_refused_and_other_keys_are_not,
    |spawn: Spawn| async move {
        let (handler, seen, _) = handler(None);
        let (frames, body) = unbounded();
        *handler.body.lock().unwrap() = Some(body);
        let gate = KeyedGate::new("tenants").unwrap();
        let layer = AdmissionLayer::keyed(gate.clone(), |parts: &http::request::Parts| {
            let tenant = parts.headers.get("x-tenant");
            tenant.map_or_else(Vec::new, |v| v.as_bytes().to_vec())
        });
        let addr = serve(layer.layer(handler), &spawn);

        let mut a = Client::connect(addr, &spawn).await;
        let held = a.get(&[("x-tenant", "a")]).await;
        seen.recv().await.unwrap();
        assert_eq!(gate.in_use(&b"a".to_vec()), 1);

        let mut b = Client::connect(addr, &spawn).await;
        let refused = b.get(&[("x-tenant", "a")]).await;
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(retry_after(&refused) >= 1);
        let other = b.get(&[("x-tenant", "b")]).await;
        assert_eq!(other.status(), StatusCode::OK);
        read_body(other).await;
        assert_eq!(layer.rejected(), 1);

        drop(frames);
        read_body(held).await;
        until("the key is free", || gate.in_use(&b"a".to_vec()) == 0).await;
        assert_eq!(b.get(&[("x-tenant", "a")]).await.status(), StatusCode::OK);
    }
);

/// The layer's types are what a multi-threaded server needs: `Send` services, futures and
/// bodies, in both modes.
#[test]
fn services_futures_and_bodies_are_send() {
    fn send<T: Send>() {}
    type Key = fn(&http::request::Parts) -> u8;
    send::<Admission<Handler>>();
    send::<ResponseFuture<Handler, Incoming>>();
    send::<Admission<Handler, Keyed<u8, Key>>>();
    send::<ResponseFuture<Handler, Incoming, Keyed<u8, Key>>>();
    send::<AdmissionBody<Body>>();
    send::<Slot>();
}
