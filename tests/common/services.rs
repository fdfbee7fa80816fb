//! Inner services for the tower layer's tests (feature `tower`).

use std::convert::Infallible;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

/// Always ready; answers `hello` at once.
#[derive(Clone)]
pub struct Hello;

impl Service<Request<()>> for Hello {
    type Response = Response<&'static str>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<&'static str>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new("hello")))
    }
}

/// Never ready, and keeps no waker: the request's deadline timer is what wakes it.
#[derive(Clone)]
pub struct NeverReady;

impl Service<Request<()>> for NeverReady {
    type Response = Response<&'static str>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<&'static str>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Pending
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new("never")))
    }
}
