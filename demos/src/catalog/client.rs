//! The catalog client: one deadline over the semaphore wait, the connection-pool wait,
//! every attempt, every backoff pause and the body read.
//!
//! Used by the `catalog_client` example and `tests/catalog.rs`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_lock::{Semaphore, SemaphoreGuardArc};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Uri, header};
use loopguard::deadline::Deadline;
use loopguard::operation::{Classify, Measure, Operation, Outcome};
use loopguard::retry::{Backoff, BoxedRule, Decision, Retry, RetryError};
use smol_hyper::rt::FuturesIo;

/// Spawns a connection's background future on the caller's executor.
pub type Spawn = Arc<dyn Fn(Pin<Box<dyn Future<Output = ()> + Send>>) + Send + Sync>;

/// What a client is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// Budget of one operation, from the call to its end.
    pub budget: Duration,
    /// Limit of one attempt (connection wait, request, headers and body); `None`: none.
    pub attempt_timeout: Option<Duration>,
    /// Most attempts per operation.
    pub attempts: u32,
    /// Pauses between attempts.
    pub backoff: Vec<Duration>,
    /// Operations admitted at once (the semaphore).
    pub concurrency: usize,
    /// Connections kept open at most (the pool).
    pub pool_size: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            budget: Duration::from_millis(1000),
            attempt_timeout: Some(Duration::from_millis(400)),
            attempts: 3,
            backoff: vec![Duration::from_millis(100), Duration::from_millis(200)],
            concurrency: 20,
            pool_size: 20,
        }
    }
}

/// What a client tells an observer (tests) as it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Attempt `n` started (it may still wait for a connection).
    AttemptStarted(u32),
    /// Attempt `n` got a full response with this status, or failed (`None`).
    AttemptEnded(u32, Option<u16>),
}

/// How one attempt failed.
#[derive(Debug)]
pub enum FetchError {
    /// A full response with a status other than 2xx, and the server's `Retry-After`.
    Status(u16, Option<Duration>),
    /// Connecting, sending, or reading failed.
    Connection(String),
    /// The connection-pool wait ran out of the operation's budget.
    PoolWait,
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Status(s, _) => write!(f, "http status {s}"),
            FetchError::Connection(e) => write!(f, "connection failed: {e}"),
            FetchError::PoolWait => f.write_str("deadline expired waiting for a connection"),
        }
    }
}

impl std::error::Error for FetchError {}

/// A successful operation.
#[derive(Debug)]
pub struct Fetched {
    /// The response body, read in full.
    pub body: Bytes,
    /// Attempts started.
    pub attempts: u32,
}

/// Why an operation failed.
#[derive(Debug)]
pub enum CatalogError {
    /// The budget ran out (in the semaphore queue, the pool queue, an attempt or a pause).
    Deadline {
        /// Attempts started.
        attempts: u32,
    },
    /// Attempts ended without success (retries exhausted, or a non-retryable failure).
    Failed {
        /// Attempts started.
        attempts: u32,
        /// The last failure.
        last: String,
    },
}

impl CatalogError {
    /// Attempts started.
    pub fn attempts(&self) -> u32 {
        match self {
            CatalogError::Deadline { attempts } | CatalogError::Failed { attempts, .. } => {
                *attempts
            }
        }
    }
}

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CatalogError::Deadline { attempts } => {
                write!(
                    f,
                    "catalog unavailable: deadline expired after {attempts} attempts"
                )
            }
            CatalogError::Failed { attempts, last } => {
                write!(f, "catalog unavailable after {attempts} attempts: {last}")
            }
        }
    }
}

impl std::error::Error for CatalogError {}

impl Classify for CatalogError {
    fn outcome(&self) -> Outcome {
        match self {
            CatalogError::Deadline { .. } => Outcome::Deadline,
            CatalogError::Failed { .. } => Outcome::Error,
        }
    }
}

/// The result of one operation.
pub type CatalogResult = Result<Fetched, CatalogError>;

type Sender = SendRequest<Empty<Bytes>>;

struct Inner {
    authority: String,
    retry: Retry<BoxedRule<FetchError>>,
    budget: Duration,
    semaphore: Arc<Semaphore>,
    pool: Pool,
    operation: Operation,
    spawn: Spawn,
    events: Option<smol::channel::Sender<Event>>,
}

/// A client of one catalog host. Cheap to clone: clones share the semaphore and the pool.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// A 503 is retried, when the server says (`Retry-After`) or else after the backoff.
fn retryable(error: &FetchError) -> Decision {
    match error {
        FetchError::Status(503, Some(after)) => Decision::RetryAfter(*after),
        FetchError::Status(503, None) => Decision::Retry,
        _ => Decision::Stop,
    }
}

/// `host:port` of an `http://` URL.
pub fn authority_of(url: &Uri) -> Result<String, String> {
    match url.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(format!("unsupported scheme {other:?}: only http:// URLs")),
        None => return Err("the URL needs a scheme: http://HOST[:PORT]/PATH".into()),
    }
    let host = url.host().ok_or("the URL has no host")?;
    Ok(format!("{host}:{}", url.port_u16().unwrap_or(80)))
}

impl Client {
    /// A client of the host of `url` (`http://` only).
    pub fn new(url: &Uri, config: &Config, spawn: Spawn) -> Result<Client, String> {
        Client::with_events(url, config, spawn, None)
    }

    /// Like [`Client::new`], reporting [`Event`]s on `events`.
    pub fn with_events(
        url: &Uri,
        config: &Config,
        spawn: Spawn,
        events: Option<smol::channel::Sender<Event>>,
    ) -> Result<Client, String> {
        let mut retry = Retry::new()
            .attempts(config.attempts)
            .map_err(|e| e.to_string())?
            .backoff(Backoff::fixed(config.backoff.iter().copied()))
            .decide(retryable)
            .boxed();
        if let Some(timeout) = config.attempt_timeout {
            retry = retry.attempt_timeout(timeout).map_err(|e| e.to_string())?;
        }
        Ok(Client {
            inner: Arc::new(Inner {
                authority: authority_of(url)?,
                retry,
                budget: config.budget,
                semaphore: Arc::new(Semaphore::new(config.concurrency.max(1))),
                pool: Pool {
                    idle: Mutex::new(Vec::new()),
                    slots: Arc::new(Semaphore::new(config.pool_size.max(1))),
                },
                operation: Operation::new("catalog").map_err(|e| e.to_string())?,
                spawn,
                events,
            }),
        })
    }

    /// The semaphore every operation queues on first.
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.inner.semaphore
    }

    /// GETs `path` within the configured budget.
    pub fn get(
        &self,
        path: &str,
    ) -> Measure<
        impl Future<Output = CatalogResult> + Send + 'static + use<>,
        fn(&CatalogResult) -> Outcome,
    > {
        self.get_within(path, self.inner.budget)
    }

    /// GETs `path` within `budget`, which starts now: before the semaphore queue.
    ///
    /// The returned future is measured as operation `catalog`.
    pub fn get_within(
        &self,
        path: &str,
        budget: Duration,
    ) -> Measure<
        impl Future<Output = CatalogResult> + Send + 'static + use<>,
        fn(&CatalogResult) -> Outcome,
    > {
        let deadline = Deadline::after(budget);
        let this = self.clone();
        let path = path.to_string();
        self.inner
            .operation
            .measure(async move { this.call(path, deadline).await })
    }

    async fn call(self, path: String, deadline: Deadline) -> CatalogResult {
        let inner = &self.inner;
        // The semaphore wait spends the budget; a permit granted after expiry is dropped,
        // which hands it back to the next waiter.
        let Ok(_permit) = deadline.run(inner.semaphore.acquire_arc()).await else {
            return Err(CatalogError::Deadline { attempts: 0 });
        };
        let result = inner
            .retry
            .run(deadline, |n| {
                let this = self.clone();
                let path = path.clone();
                async move {
                    this.emit(Event::AttemptStarted(n));
                    let result = this.fetch_once(&path, deadline).await;
                    let status = match &result {
                        Ok(_) => Some(200),
                        Err(FetchError::Status(s, _)) => Some(*s),
                        Err(_) => None,
                    };
                    this.emit(Event::AttemptEnded(n, status));
                    result
                }
            })
            .await;
        match result {
            Ok(done) => Ok(Fetched {
                body: done.value,
                attempts: done.attempts,
            }),
            Err(RetryError::Deadline { attempts, .. }) => Err(CatalogError::Deadline { attempts }),
            Err(e) => Err(CatalogError::Failed {
                attempts: e.attempts(),
                last: match e.error() {
                    Some(last) => last.to_string(),
                    None => "attempt timed out".to_string(),
                },
            }),
        }
    }

    fn emit(&self, event: Event) {
        if let Some(events) = &self.inner.events {
            let _ = events.try_send(event);
        }
    }

    /// One attempt: a pooled connection (waiting within the deadline), the request, the
    /// headers and the whole body.
    async fn fetch_once(&self, path: &str, deadline: Deadline) -> Result<Bytes, FetchError> {
        let inner = &self.inner;
        let mut conn = inner
            .pool
            .checkout(&inner.authority, deadline, &inner.spawn)
            .await?;
        let sender = conn.sender.as_mut().expect("a checked-out connection");
        // A reused connection may still be finishing its previous response on its task:
        // wait until it takes a new request (the attempt's deadline cuts this wait too).
        sender
            .ready()
            .await
            .map_err(|e| FetchError::Connection(e.to_string()))?;
        let request = Request::get(path)
            .header(header::HOST, inner.authority.as_str())
            .body(Empty::new())
            .map_err(|e| FetchError::Connection(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| FetchError::Connection(e.to_string()))?;
        let status = response.status();
        let retry_after = response.headers().get(header::RETRY_AFTER);
        let retry_after = retry_after.and_then(|v| loopguard::header::retry_after(v.as_bytes()));
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| FetchError::Connection(e.to_string()))?
            .to_bytes();
        // Read to the end: the connection can serve the next request.
        conn.reusable = true;
        if status.is_success() {
            Ok(body)
        } else {
            Err(FetchError::Status(status.as_u16(), retry_after))
        }
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("authority", &self.inner.authority)
            .finish_non_exhaustive()
    }
}

/// A bounded pool of HTTP/1.1 connections to one host.
struct Pool {
    idle: Mutex<Vec<Sender>>,
    slots: Arc<Semaphore>,
}

/// A connection checked out of the pool. Back to the pool on drop if its last response
/// was read in full; closed otherwise. Its slot is freed either way.
struct Pooled<'a> {
    sender: Option<Sender>,
    reusable: bool,
    pool: &'a Pool,
    _slot: SemaphoreGuardArc,
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take() {
            if self.reusable && !sender.is_closed() {
                self.pool.idle.lock().unwrap().push(sender);
            }
        }
        // `_slot` is released after this: a waiter that gets it finds the idle connection.
    }
}

impl Pool {
    /// Waits for a slot within `deadline`, then reuses an idle connection or opens one.
    async fn checkout(
        &self,
        authority: &str,
        deadline: Deadline,
        spawn: &Spawn,
    ) -> Result<Pooled<'_>, FetchError> {
        let slot = deadline
            .run(self.slots.acquire_arc())
            .await
            .map_err(|_| FetchError::PoolWait)?;
        let reused = {
            let mut idle = self.idle.lock().unwrap();
            loop {
                match idle.pop() {
                    Some(sender) if sender.is_closed() => continue,
                    other => break other,
                }
            }
        };
        let sender = match reused {
            Some(sender) => sender,
            None => {
                let connect = async {
                    let stream = smol::net::TcpStream::connect(authority).await?;
                    stream.set_nodelay(true)?;
                    http1::handshake(FuturesIo::new(stream))
                        .await
                        .map_err(std::io::Error::other)
                };
                let (sender, connection) = deadline
                    .run(connect)
                    .await
                    .map_err(|_| FetchError::PoolWait)?
                    .map_err(|e| FetchError::Connection(e.to_string()))?;
                spawn(Box::pin(async move {
                    let _ = connection.await;
                }));
                sender
            }
        };
        Ok(Pooled {
            sender: Some(sender),
            reusable: false,
            pool: self,
            _slot: slot,
        })
    }
}

/// One JSON line describing a finished operation.
pub fn json_line(result: &CatalogResult, elapsed: Duration) -> String {
    let outcome = result.outcome();
    let elapsed_ms = elapsed.as_secs_f64() * 1000.0;
    match result {
        Ok(done) => format!(
            r#"{{"outcome":"{outcome}","elapsed_ms":{elapsed_ms:.3},"attempts":{},"bytes":{}}}"#,
            done.attempts,
            done.body.len()
        ),
        Err(e) => format!(
            r#"{{"outcome":"{outcome}","elapsed_ms":{elapsed_ms:.3},"attempts":{},"error":"{}"}}"#,
            e.attempts(),
            escape(&e.to_string())
        ),
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}
