//! The catalog client against a server behind the tower admission layer (hyper on smol,
//! port 0): the layer's `503` + `Retry-After` is honoured instead of the client's backoff,
//! and a hint that lands past the client's budget ends the operation at once.
//!
//! Each scenario runs with the client on smol and on async-std; the server runs on its own
//! thread with its own smol executor and stops when dropped.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::future;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use loopguard::tower::AdmissionLayer;
use loopguard_demos::catalog::client::{CatalogError, Client, Config, Event, Spawn};
use smol::channel::{Receiver, Sender, unbounded};
use smol_hyper::rt::FuturesIo;
use tower_layer::Layer;
use tower_service::Service;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Awaits `fut`, failing the test instead of hanging if it takes over 10 s.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    future::or(fut, async {
        Timer::after(Duration::from_secs(10)).await;
        panic!("still waiting after 10 s");
    })
    .await
}

/// `GET /hold` answers when the test says so; every other path at once. One slot.
#[derive(Clone)]
struct Catalog {
    release: Receiver<()>,
    holding: Sender<()>,
}

impl Service<Request<Incoming>> for Catalog {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Incoming>) -> Self::Future {
        let hold = request.uri().path() == "/hold";
        let (release, holding) = (self.release.clone(), self.holding.clone());
        Box::pin(async move {
            if hold {
                let _ = holding.send(()).await;
                let _ = release.recv().await;
            }
            Ok(Response::new(Full::new(Bytes::from_static(
                b"catalog data",
            ))))
        })
    }
}

struct Server {
    addr: SocketAddr,
    layer: AdmissionLayer,
    release: Sender<()>,
    holding: Receiver<()>,
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let layer = AdmissionLayer::new("test", 1).unwrap();
        let (release, released) = unbounded();
        let (holding_tx, holding) = unbounded();
        let service = layer.layer(Catalog {
            release: released,
            holding: holding_tx,
        });
        let (stop, stopped) = unbounded::<()>();
        let thread = std::thread::spawn(move || {
            let ex = smol::Executor::new();
            let listener = smol::net::TcpListener::try_from(listener).unwrap();
            let accept = async {
                while let Ok((stream, _)) = listener.accept().await {
                    let service = service.clone();
                    let service = hyper::service::service_fn(move |request| {
                        let mut service = service.clone();
                        async move { service.call(request).await }
                    });
                    ex.spawn(async move {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(FuturesIo::new(stream), service)
                            .await;
                    })
                    .detach();
                }
            };
            smol::block_on(ex.run(future::or(accept, async {
                let _ = stopped.recv().await;
            })));
        });
        Server {
            addr,
            layer,
            release,
            holding,
            stop,
            thread: Some(thread),
        }
    }

    /// Takes the only slot with a `GET /hold` that answers on [`Server::release`].
    async fn hold(&self) -> Pin<Box<dyn Future<Output = StatusCode>>> {
        let stream = smol::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(FuturesIo::new(stream))
                .await
                .unwrap();
        let request = Request::get("/hold")
            .header("host", "127.0.0.1")
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request);
        let held = Box::pin(async move {
            let (response, _) = future::zip(response, connection).await;
            response.unwrap().status()
        });
        let mut held: Pin<Box<dyn Future<Output = StatusCode>>> = held;
        // Drive the request until the handler has it (it then holds the slot).
        future::or(
            async {
                (&mut held).await;
                panic!("answered before release");
            },
            async {
                self.holding.recv().await.unwrap();
            },
        )
        .await;
        held
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.try_send(());
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

fn config(budget: Duration) -> Config {
    Config {
        budget,
        attempt_timeout: Some(ms(400)),
        attempts: 3,
        backoff: vec![ms(100), ms(200)],
        concurrency: 4,
        pool_size: 4,
    }
}

fn client(server: &Server, config: &Config, spawn: &Spawn) -> (Client, Receiver<Event>) {
    let url = format!("http://{}/", server.addr).parse().unwrap();
    let (tx, rx) = unbounded();
    (
        Client::with_events(&url, config, spawn.clone(), Some(tx)).unwrap(),
        rx,
    )
}

/// Defines `$name::smol` and `$name::async_std`, each running `$body(spawn)`.
macro_rules! on_smol_and_async_std {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn smol() {
                let ex = Arc::new(smol::Executor::new());
                let spawner = ex.clone();
                let spawn: Spawn = Arc::new(move |f| spawner.spawn(f).detach());
                smol::block_on(ex.run(bounded(($body)(spawn))));
            }

            #[test]
            fn async_std() {
                let spawn: Spawn = Arc::new(|f| {
                    async_std::task::spawn(f);
                });
                async_std::task::block_on(bounded(($body)(spawn)));
            }
        }
    };
}

async fn a_retry_after_past_the_budget_ends_the_call_at_once(spawn: Spawn) {
    let server = Server::start();
    let held = server.hold().await;
    let (client, events) = client(&server, &config(ms(600)), &spawn);

    let start = Instant::now();
    let result = client.get("/catalog").await;
    let took = start.elapsed();
    // `Retry-After: 1` with 600 ms of budget: no sleep into expiry, no second attempt.
    assert!(
        matches!(result, Err(CatalogError::Deadline { attempts: 1 })),
        "{result:?}"
    );
    assert!(took < ms(400), "took {took:?}");
    assert_eq!(server.layer.rejected(), 1);
    let seen: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(
        seen,
        [Event::AttemptStarted(1), Event::AttemptEnded(1, Some(503))]
    );

    server.release.send(()).await.unwrap();
    assert_eq!(held.await, StatusCode::OK);
}

on_smol_and_async_std!(retry_after_past_the_budget, |spawn| {
    a_retry_after_past_the_budget_ends_the_call_at_once(spawn)
});

async fn a_retry_after_within_the_budget_replaces_the_backoff(spawn: Spawn) {
    let server = Server::start();
    let held = server.hold().await;
    let (client, events) = client(&server, &config(ms(3000)), &spawn);

    let start = Instant::now();
    let call = client.get("/catalog");
    let release = async {
        // The first attempt is refused with `Retry-After: 1`; free the slot at once. A
        // client on its 100 ms backoff would be served 100 ms later, not a second.
        while server.layer.rejected() == 0 {
            Timer::after(ms(2)).await;
        }
        server.release.send(()).await.unwrap();
        held.await
    };
    let (result, status) = future::zip(call, release).await;
    let took = start.elapsed();
    assert_eq!(status, StatusCode::OK);
    let done = result.unwrap();
    assert_eq!(done.attempts, 2);
    assert_eq!(done.body, "catalog data");
    assert!(took >= ms(1000) && took < ms(1600), "took {took:?}");
    let seen: Vec<Event> = std::iter::from_fn(|| events.try_recv().ok()).collect();
    assert_eq!(seen[1], Event::AttemptEnded(1, Some(503)));
    assert_eq!(seen[3], Event::AttemptEnded(2, Some(200)));
}

on_smol_and_async_std!(retry_after_within_the_budget, |spawn| {
    a_retry_after_within_the_budget_replaces_the_backoff(spawn)
});
