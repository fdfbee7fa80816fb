//! HTTP plumbing: replies, content negotiation, and connections, where a flood of idle
//! or trickling connections cannot lock scrapers out:
//!
//! - The listen backlog is the system's maximum (std listens with 128), so a burst of
//!   connections waits in the kernel rather than being refused.
//! - Every connection is accepted at once. Over [`MAX_CONNECTIONS`], or when the process is
//!   out of file descriptors, the connection idle the longest is closed to make room; one
//!   with a request in progress never is.
//! - A connection holds no HTTP buffers until its first byte arrives, and has 10 s to start
//!   a request head and 10 s to finish it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use futures_lite::FutureExt as _;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::ACCEPT_ENCODING;
use hyper::{HeaderMap, Request, Response, server::conn::http1, service::service_fn};
use smol::channel::{Receiver, Sender, bounded};
use smol::{Async, Timer};
use smol_hyper::rt::{FuturesIo, SmolTimer};

pub const MAX_CONNECTIONS: usize = 10_000;
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
const EMFILE: i32 = rustix::io::Errno::MFILE.raw_os_error();

pub type Reply = Response<Sliced>;

pub fn reply(status: u16, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Sliced(body.into(), None));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    response
}

/// A body hyper gets 256 KiB per poll of its connection's task: a 2 MB scrape handed over
/// whole holds the loop for its copy and its `send` (0.6 to 2 ms over loopback) while
/// refusals and `/healthz` wait. Asked for more in the same poll (hyper asks again after
/// each flush), it returns `Pending` with the task woken, so whatever else is ready runs
/// first. [`Turns`] numbers the polls; outside one the body never yields.
pub struct Sliced(Bytes, Option<u64>);

thread_local! {
    /// The [`Turns`] poll under way on this thread, and the last number given.
    static TURN: Cell<(Option<u64>, u64)> = const { Cell::new((None, 0)) };
}

/// A connection's future whose every poll is a turn of its own, for [`Sliced`].
pub struct Turns<F>(F);

impl<F: Future + Unpin> Future for Turns<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        struct Restore(Option<u64>); // puts back the turn it replaced, however the poll ends
        impl Drop for Restore {
            fn drop(&mut self) {
                TURN.set((self.0, TURN.get().1));
            }
        }
        let (outer, last) = TURN.get();
        TURN.set((Some(last + 1), last + 1));
        let _restore = Restore(outer);
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl Body for Sliced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        use std::task::Poll;
        if self.0.is_empty() {
            return Poll::Ready(None);
        }
        let turn = TURN.get().0;
        if turn.is_some() && self.1 == turn {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.1 = turn;
        let n = self.0.len().min(256 * 1024);
        Poll::Ready(Some(Ok(Frame::data(self.0.split_to(n)))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.len() as u64)
    }
}

/// Whether `Accept-Encoding` allows gzip (`gzip` or `*`, not with `q=0`).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    let values = headers.get_all(ACCEPT_ENCODING).iter();
    // The `q` parameter's name is case-insensitive (`Q=0` refuses too).
    let refused = |p: &str| {
        let q = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q="));
        q.is_some_and(|q| q.parse().map_or(true, |q: f32| q <= 0.0))
    };
    let items = values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    items.into_iter().any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let gzip = parts
            .next()
            .is_some_and(|c| c.eq_ignore_ascii_case("gzip") || c == "*");
        gzip && !parts.any(refused)
    })
}

/// Awaits `fut`, then gives `value`.
pub async fn then<T>(fut: impl Future, value: T) -> T {
    fut.await;
    value
}

/// Binds `addr` with the system's largest listen backlog.
pub fn listen(addr: SocketAddr) -> io::Result<Async<TcpListener>> {
    let listener = TcpListener::bind(addr)?;
    rustix::net::listen(&listener, i32::MAX)?; // capped by the kernel at somaxconn
    Async::new(listener)
}

/// The open connections, and the idle ones in the order they went idle.
#[derive(Default)]
pub struct Connections {
    idle: RefCell<BTreeMap<u64, Sender<()>>>,
    next: Cell<u64>,
    open: Cell<usize>,
}

impl Connections {
    pub fn open(&self) -> usize {
        self.open.get()
    }

    /// Closes the connection idle the longest; `false` if none is idle.
    fn shed_oldest_idle(&self) -> bool {
        let oldest = self.idle.borrow_mut().pop_first();
        oldest.map(|(_, conn)| conn.close()).is_some()
    }

    fn set_idle(&self, conn: &Sender<()>) -> u64 {
        let key = self.next.replace(self.next.get() + 1);
        self.idle.borrow_mut().insert(key, conn.clone());
        key
    }

    /// Accepts every connection, making room when needed, and hands each to `spawn`.
    pub async fn accept(&self, listener: &Async<TcpListener>, spawn: impl Fn(Async<TcpStream>)) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) if self.open() < MAX_CONNECTIONS || self.shed_oldest_idle() => {
                    spawn(stream)
                }
                Ok(_) => {} // every connection has a request in progress: drop this one
                Err(e) if e.raw_os_error() == Some(EMFILE) && self.shed_oldest_idle() => {}
                Err(_) => {
                    Timer::after(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Serves HTTP/1.1 on `stream` with `handle` until the client leaves, the connection is
    /// shed, or `stop` closes (then the request in flight finishes).
    pub async fn serve<H, F>(&self, stream: Async<TcpStream>, stop: &Receiver<()>, handle: H)
    where
        H: Fn(Request<Incoming>) -> F,
        F: Future<Output = Result<Reply, Infallible>>,
    {
        let _ = stream.get_ref().set_nodelay(true);
        let (conn, shed) = bounded::<()>(1); // `shed.recv()` ends once `conn` is closed
        let key = Cell::new(self.set_idle(&conn));
        self.open.set(self.open.get() + 1);
        let ended = |on_stop| then(stop.recv(), on_stop).or(then(shed.recv(), false));
        // Nothing sent yet: no HTTP buffers until there is something to read.
        let first_byte = then(stream.readable(), true).or(then(Timer::after(HEAD_TIMEOUT), false));
        if first_byte.or(ended(false)).await {
            let service = service_fn(|request| {
                self.idle.borrow_mut().remove(&key.get()); // a request in progress: never shed
                let (conn, key, reply) = (&conn, &key, handle(request));
                async move {
                    let reply = reply.await;
                    key.set(self.set_idle(conn));
                    reply
                }
            });
            let mut http = http1::Builder::new();
            http.timer(SmolTimer::new())
                .header_read_timeout(HEAD_TIMEOUT);
            // At most 16 KiB of head (431 past it). smol's TcpStream shuts its write side on
            // close, so such an error reaches the client before the connection resets.
            let io = FuturesIo::new(smol::net::TcpStream::from(stream));
            let http = http.max_buf_size(16 << 10).serve_connection(io, service);
            let mut http = std::pin::pin!(http);
            if then(Turns(http.as_mut()), false).or(ended(true)).await {
                http.as_mut().graceful_shutdown(); // finish the request in flight
                let _ = Turns(http).await;
            }
        }
        self.idle.borrow_mut().remove(&key.get());
        self.open.set(self.open.get() - 1);
    }
}
