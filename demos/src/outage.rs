//! A scripted outage and the callers that retry into it, for `examples/retry_budget.rs`.
//!
//! The dependency is a real HTTP/1.1 server (hyper on smol, its own thread, a loopback
//! socket) that answers `503` to every request for the outage and `200 ok` after it,
//! counting what it receives by attempt number (each request says which attempt of its
//! call it is in `x-attempt`). The callers are tasks on one smol thread, each with a
//! keep-alive connection of its own, each calling one call after another (a closed loop,
//! no think time) through one [`Retry`] policy, with or without a shared [`RetryBudget`].
//! A 503 is retried; the server sends no `Retry-After`, so only the backoff and the budget
//! decide.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_lite::future;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use loopguard::deadline::Deadline;
use loopguard::retry::{Backoff, Retry, RetryBudget, RetryError};
use smol_hyper::rt::FuturesIo;

/// What a run does.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Callers, each in a closed loop.
    pub callers: usize,
    /// Attempts per call, the first included.
    pub attempts: u32,
    /// Healthy time before the outage (deposits a budget can spend in it).
    pub healthy: Duration,
    /// How long every request is answered 503.
    pub outage: Duration,
    /// Healthy time after the outage, measured too.
    pub recovery: Duration,
    /// Each call's deadline.
    pub call_budget: Duration,
    /// A caller's pause after each call (zero: one call right after another).
    pub think: Duration,
    /// The pauses between attempts.
    pub backoff: Backoff,
}

/// A budget to run with: `RetryBudget::new(ttl, min_per_sec, retry_ratio)`, or none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetSettings {
    /// Deposits' lifetime.
    pub ttl: Duration,
    /// The reserve, a second.
    pub min_per_sec: u32,
    /// Retries per first attempt.
    pub retry_ratio: f64,
}

/// Requests the dependency received in one period, by attempt number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// `by_attempt[n - 1]`: requests that were attempt `n` of their call.
    pub by_attempt: Vec<u64>,
}

impl Received {
    /// Every request received.
    pub fn total(&self) -> u64 {
        self.by_attempt.iter().sum()
    }

    /// First attempts received.
    pub fn first(&self) -> u64 {
        self.by_attempt.first().copied().unwrap_or(0)
    }

    /// Requests per first attempt: 1.0 when nothing is retried.
    pub fn ratio(&self) -> f64 {
        self.total() as f64 / self.first().max(1) as f64
    }
}

/// Calls that started in one period, as the callers saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// `by_attempts[n - 1]`: calls that made `n` attempts.
    pub by_attempts: Vec<u64>,
    /// Calls that succeeded.
    pub succeeded: u64,
    /// Calls that ended because the budget refused a retry.
    pub budget_exhausted: u64,
    /// Calls that ended at their deadline.
    pub deadline: u64,
}

impl Calls {
    /// Calls started.
    pub fn total(&self) -> u64 {
        self.by_attempts.iter().sum()
    }

    /// Mean attempts per call.
    pub fn attempts_per_call(&self) -> f64 {
        let attempts: u64 = (1..).zip(&self.by_attempts).map(|(n, c)| n * c).sum();
        attempts as f64 / self.total().max(1) as f64
    }
}

/// One run's outcome.
#[derive(Clone, Debug)]
pub struct Report {
    /// The budget, if any.
    pub budget: Option<BudgetSettings>,
    /// What the dependency received before, during and after the outage.
    pub received: [Received; 3],
    /// Calls started before, during and after the outage.
    pub calls: [Calls; 3],
    /// From the end of the outage to each caller's first success after it, sorted.
    pub served_again: Vec<Duration>,
    /// Callers that had no success after the outage.
    pub never_served_again: usize,
    /// Retries the budget refused.
    pub refused: u64,
}

impl Report {
    /// What the dependency received during the outage.
    pub fn outage(&self) -> &Received {
        &self.received[1]
    }

    /// The time by which every caller had a success after the outage, if all did.
    pub fn all_served_again(&self) -> Option<Duration> {
        match self.never_served_again {
            0 => self.served_again.last().copied(),
            _ => None,
        }
    }
}

/// The periods of a run.
const HEALTHY: usize = 0;
const OUTAGE: usize = 1;
const RECOVERY: usize = 2;

/// The script the server follows and the counts it keeps, shared with the callers.
struct Script {
    start: Instant,
    healthy: Duration,
    outage: Duration,
    /// `[period][attempt - 1]`.
    received: [Vec<AtomicU64>; 3],
}

impl Script {
    fn period(&self, at: Instant) -> usize {
        let since = at.saturating_duration_since(self.start);
        if since < self.healthy {
            HEALTHY
        } else if since < self.healthy + self.outage {
            OUTAGE
        } else {
            RECOVERY
        }
    }

    fn recovered_at(&self) -> Instant {
        self.start + self.healthy + self.outage
    }
}

/// Runs `scenario` once per entry of `budgets` (`None`: no budget), one after another,
/// each against a fresh server and fresh connections.
pub fn run_all(scenario: &Scenario, budgets: &[Option<BudgetSettings>]) -> Vec<Report> {
    budgets.iter().map(|b| run(scenario, *b)).collect()
}

/// Runs `scenario` once with `budget`.
pub fn run(scenario: &Scenario, budget: Option<BudgetSettings>) -> Report {
    let attempts = scenario.attempts as usize;
    let counts = || (0..attempts).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
    let script = Arc::new(Script {
        start: Instant::now() + Duration::from_millis(200),
        healthy: scenario.healthy,
        outage: scenario.outage,
        received: [counts(), counts(), counts()],
    });
    let (addr, stop_server, server) = serve(script.clone());
    let retry_budget = budget.map(|b| {
        RetryBudget::new(b.ttl, b.min_per_sec, b.retry_ratio).expect("valid budget settings")
    });
    let mut policy = Retry::new()
        .attempts(scenario.attempts)
        .expect("at least one attempt")
        .backoff(scenario.backoff.clone())
        .retry_if(|e: &Failure| matches!(e, Failure::Unavailable));
    if let Some(b) = &retry_budget {
        policy = policy.budget(b.clone());
    }
    let end = script.recovered_at() + scenario.recovery;
    // One thread for every caller and its connection, as one event loop would be.
    let ex = Rc::new(smol::LocalExecutor::new());
    let callers: Vec<_> = (0..scenario.callers)
        .map(|_| {
            let (policy, script) = (policy.clone(), script.clone());
            let target = Target {
                addr,
                ex: ex.clone(),
                sender: Rc::new(RefCell::new(None)),
            };
            let pace = Pace {
                end,
                call_budget: scenario.call_budget,
                think: scenario.think,
            };
            ex.spawn(caller(target, policy, script, pace, attempts))
        })
        .collect();
    let results: Vec<CallerLog> = smol::block_on(ex.run(async {
        let mut all = Vec::new();
        for c in callers {
            all.push(c.await);
        }
        all
    }));
    stop_server.store(true, Ordering::SeqCst);
    // Wake the accept loop so it sees the flag.
    let _ = std::net::TcpStream::connect(addr);
    server.join().expect("the server thread");

    let mut calls: [Calls; 3] = Default::default();
    for c in &mut calls {
        c.by_attempts = vec![0; attempts];
    }
    let mut served_again = Vec::new();
    let mut never_served_again = 0;
    for log in &results {
        for (all, mine) in calls.iter_mut().zip(&log.calls) {
            for (a, b) in all.by_attempts.iter_mut().zip(&mine.by_attempts) {
                *a += b;
            }
            all.succeeded += mine.succeeded;
            all.budget_exhausted += mine.budget_exhausted;
            all.deadline += mine.deadline;
        }
        match log.served_again {
            Some(at) => served_again.push(at),
            None => never_served_again += 1,
        }
    }
    served_again.sort();
    let received = std::array::from_fn(|p| Received {
        by_attempt: script.received[p]
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect(),
    });
    Report {
        budget,
        received,
        calls,
        served_again,
        never_served_again,
        refused: retry_budget.map_or(0, |b| b.refused()),
    }
}

/// How one attempt failed.
#[derive(Debug)]
enum Failure {
    /// 503.
    Unavailable,
    /// Anything else: a broken connection, another status.
    Other,
}

/// What one caller saw.
struct CallerLog {
    calls: [Calls; 3],
    served_again: Option<Duration>,
}

/// Where a caller sends its requests: the server, on a connection of its own, driven on
/// the callers' executor.
struct Target {
    addr: SocketAddr,
    ex: Rc<smol::LocalExecutor<'static>>,
    sender: Rc<RefCell<Option<Sender>>>,
}

/// How a caller calls: until `end`, each call within `call_budget`, `think` after each.
struct Pace {
    end: Instant,
    call_budget: Duration,
    think: Duration,
}

/// One caller: calls one after another until the end, on a connection of its own.
async fn caller(
    target: Target,
    policy: Retry<impl loopguard::retry::ShouldRetry<Failure> + Clone>,
    script: Arc<Script>,
    pace: Pace,
    attempts: usize,
) -> CallerLog {
    let mut log = CallerLog {
        calls: Default::default(),
        served_again: None,
    };
    for c in &mut log.calls {
        c.by_attempts = vec![0; attempts];
    }
    // Everyone starts with the script.
    smol::Timer::at(script.start).await;
    let target = Rc::new(target);
    while Instant::now() < pace.end {
        let started = Instant::now();
        let period = script.period(started);
        let result = policy
            .run(Deadline::after(pace.call_budget), |n| {
                attempt(target.clone(), n)
            })
            .await;
        let calls = &mut log.calls[period];
        let made = match &result {
            Ok(done) => done.attempts,
            Err(e) => e.attempts(),
        };
        if made > 0 {
            calls.by_attempts[made as usize - 1] += 1;
        }
        match result {
            Ok(_) => {
                calls.succeeded += 1;
                // A 200 can only come after the outage: the first one served this caller
                // again (its call may have started in the outage).
                let (now, recovered) = (Instant::now(), script.recovered_at());
                if log.served_again.is_none() && now >= recovered {
                    log.served_again = Some(now - recovered);
                }
            }
            Err(RetryError::BudgetExhausted { .. }) => calls.budget_exhausted += 1,
            Err(RetryError::Deadline { .. }) => calls.deadline += 1,
            Err(_) => {}
        }
        if !pace.think.is_zero() {
            smol::Timer::after(pace.think).await;
        }
    }
    log
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// Attempt `n`: a GET on the caller's connection (opened again if it broke).
async fn attempt(target: Rc<Target>, n: u32) -> Result<(), Failure> {
    let taken = target.sender.borrow_mut().take();
    let mut conn = match taken {
        Some(conn) if !conn.is_closed() => conn,
        _ => connect(&target).await.ok_or(Failure::Other)?,
    };
    let request = Request::get("/")
        .header("host", "dependency")
        .header("x-attempt", n.to_string())
        .body(Empty::new())
        .expect("a request");
    conn.ready().await.map_err(|_| Failure::Other)?;
    let response = conn
        .send_request(request)
        .await
        .map_err(|_| Failure::Other)?;
    let status = response.status();
    let body = response.into_body().collect().await;
    *target.sender.borrow_mut() = Some(conn);
    body.map_err(|_| Failure::Other)?;
    match status {
        StatusCode::OK => Ok(()),
        StatusCode::SERVICE_UNAVAILABLE => Err(Failure::Unavailable),
        _ => Err(Failure::Other),
    }
}

async fn connect(target: &Target) -> Option<Sender> {
    let stream = smol::net::TcpStream::connect(target.addr).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (sender, connection) = hyper::client::conn::http1::handshake(FuturesIo::new(stream))
        .await
        .ok()?;
    // It ends when the caller drops its sender.
    target
        .ex
        .spawn(async move {
            let _ = connection.await;
        })
        .detach();
    Some(sender)
}

/// The scripted dependency on a thread of its own: its address, its stop flag, its thread.
fn serve(script: Arc<Script>) -> (SocketAddr, Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("an address");
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let thread = std::thread::spawn(move || {
        let ex = smol::Executor::new();
        let listener = smol::net::TcpListener::try_from(listener).expect("a listener");
        smol::block_on(ex.run(async {
            while let Ok((stream, _)) = listener.accept().await {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let _ = stream.set_nodelay(true);
                let script = script.clone();
                let service = hyper::service::service_fn(move |request: Request<_>| {
                    future::ready(Ok::<_, std::convert::Infallible>(answer(&script, &request)))
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
    (addr, stop, thread)
}

/// The script: count the request, then 503 in the outage and 200 otherwise.
fn answer<B>(script: &Script, request: &Request<B>) -> Response<Full<Bytes>> {
    let period = script.period(Instant::now());
    let attempt: usize = request
        .headers()
        .get("x-attempt")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1);
    let counts = &script.received[period];
    counts[attempt.clamp(1, counts.len()) - 1].fetch_add(1, Ordering::Relaxed);
    let (status, body) = if period == OUTAGE {
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable\n")
    } else {
        (StatusCode::OK, "ok\n")
    };
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .expect("a response")
}
