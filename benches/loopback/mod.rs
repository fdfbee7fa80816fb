//! A hyper server on smol for the loopback benches (`tower`, `tower_saturation`): the
//! server on a thread of its own, kept-alive client connections.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use smol_hyper::rt::FuturesIo;
use tower_service::Service;

/// Serves `service` on 127.0.0.1:0 on a thread of its own until the process ends.
pub fn serve<S>(service: S) -> SocketAddr
where
    S: Service<Request<hyper::body::Incoming>> + Clone + Send + 'static,
    S::Response: Into<Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>>,
    S::Future: Send,
    S::Error: std::error::Error + Send + Sync + 'static,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        let ex = smol::LocalExecutor::new();
        let listener = smol::net::TcpListener::try_from(listener).expect("listener");
        smol::block_on(ex.run(async {
            while let Ok((stream, _)) = listener.accept().await {
                stream.set_nodelay(true).ok();
                let service = service.clone();
                let service = hyper::service::service_fn(move |request| {
                    let mut service = service.clone();
                    async move { service.call(request).await.map(Into::into) }
                });
                ex.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(FuturesIo::new(stream), service)
                        .await;
                })
                .detach();
            }
        }));
    });
    addr
}

/// Boxes any response body, so that both servers have one response type.
#[derive(Clone)]
pub struct Boxed<S>(pub S);

impl<S, B> Service<Request<hyper::body::Incoming>> for Boxed<S>
where
    S: Service<Request<hyper::body::Incoming>, Response = Response<B>, Error = Infallible>,
    S::Future: Send + 'static,
    B: hyper::body::Body<Data = Bytes, Error = Infallible> + Send + Sync + 'static,
{
    type Response = Response<http_body_util::combinators::BoxBody<Bytes, Infallible>>;
    type Error = Infallible;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<hyper::body::Incoming>) -> Self::Future {
        let future = self.0.call(request);
        Box::pin(async move { Ok(future.await?.map(BodyExt::boxed)) })
    }
}

pub type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// A kept-alive client connection to `addr`, its connection task on smol's global executor.
pub async fn connect(addr: SocketAddr) -> Sender {
    let stream = smol::net::TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).ok();
    let (sender, connection) = hyper::client::conn::http1::handshake(FuturesIo::new(stream))
        .await
        .expect("handshake");
    smol::spawn(connection).detach();
    sender
}
