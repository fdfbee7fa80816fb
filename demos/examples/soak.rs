//! Soak: drive a pool with a seeded random mix of outcomes and cancellations, then check
//! that every slot came back and every failure was seen exactly once.
//!
//! ```sh
//! cargo run --release --example soak -- [--jobs N] [--workers W] [--seed S] [--json]
//!     [--faults P] [--panic-handler P] [--panic-logger P] [--panic-recorder P]
//!     [--panic-wakers P] [--panic-outputs P] [--reenter P] [--watchdog SECS]
//! ```
//!
//! Each job id gets, from a seeded `fastrand` generator, an outcome (success, `Err`, panic),
//! a duration (most are instant, some sleep up to 200 µs so the pool saturates) and a way of
//! being submitted:
//!
//! - `run` awaited (waits for a slot);
//! - `try_run` awaited, or refused when every slot is held;
//! - `run` dropped before its first poll (cancelled before it asked for a slot);
//! - `run` polled once then dropped (cancelled while queued, or orphaned if admitted);
//! - admitted then dropped at once (orphaned before or while its job runs);
//! - admitted, dropped once its job has started (cancelled mid-run).
//!
//! Concurrent clients on one `LocalExecutor` thread pull ids until all are done. Jobs record
//! that they ran; awaited failures are counted as *returned*, the orphan handler counts
//! *reported* ones, both by id. At the end, after `wait_idle`:
//!
//! - `leaked_slots`: `in_use()` (must be 0);
//! - `lost_failures`: jobs that ran and failed but were neither returned nor reported;
//! - `duplicated_failures`: failures seen more than once.
//!
//! Also checked (reported, and failing the run, but not in the JSON line): no failure was
//! seen for a job that did not fail or never ran, concurrency never exceeded the capacity,
//! the pools' own counters agree, and `shutdown()` returns. `--json` prints one last line
//! with the counts. The exit code is non-zero if any check fails.
//!
//! A quarter of the jobs run on a second pool whose orphan handler is the default one: it
//! logs, and a logger installed here traces each report back to its job.
//!
//! # Faults
//!
//! With `--panic-handler P`, `--panic-logger P`, `--panic-recorder P`, `--panic-wakers P`
//! or `--panic-outputs P` (a probability; `--faults P` sets them all, and `--reenter P`
//! too), the code loopguard calls panics at random: the orphan handler and the logger
//! after recording a report, a metrics recorder on any update, the clients' wakers in
//! `wake` (after waking their task), in `clone` (before cloning) and in `drop` (after
//! dropping), and the `Drop` of job outputs (successes and `Err`s) that loopguard drops
//! because nobody takes them. With `--reenter P` a waker's `wake` and `drop` also call back
//! into the pool first: `in_use()`, or `try_run(..)` of a small job whose `Job` is dropped
//! at once. loopguard must contain every panic and take every call back without a
//! deadlock: the counts above stay 0 and `shutdown()` still returns.
//!
//! A waker's `clone` runs in the caller's own poll, so its panic comes out of that poll
//! (loopguard leaves the future as it was); the client catches it and polls again, as a
//! task whose own code panicked would be restarted. Everything else is contained inside
//! loopguard. The task's own calls to its waker (the soak's adapter cloning and dropping
//! it, the client waking itself) inject nothing.

use std::cell::Cell;
use std::future::Future;
use std::panic;
use std::pin::{Pin, pin};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_lite::future;
use loopguard::Fallible;
use loopguard::orphan::{OrphanHandler, ReportKind};
use loopguard::pool::{Pool, RunError, TryRunError};
use loopguard_demos::faults::{self, PanickingRecorder, TracingLogger};

const DEFAULT_SEED: u64 = 0x5eed_1007_6a2d;
const PANIC_PREFIX: &str = "soak panic job ";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Err,
    Panic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Submit {
    RunAwait,
    TryAwait,
    RunDropBeforePoll,
    RunPollOnceDrop,
    AdmitDrop,
    CancelMidRun,
}

/// Injected faults and calls back into the pool, by kind (all panics are also in
/// `faults::INJECTED`).
static WAKER_FAULTS: AtomicU64 = AtomicU64::new(0);
static OUTPUT_FAULTS: AtomicU64 = AtomicU64::new(0);
static REENTRANT_CALLS: AtomicU64 = AtomicU64::new(0);
/// Jobs admitted by `try_run` from wakers calling back into the pool, and how many of them
/// ran; and jobs of `run` futures those wakers polled once and dropped, that ran.
static REENTRANT_JOBS: AtomicU64 = AtomicU64::new(0);
static REENTRANT_RAN: AtomicU64 = AtomicU64::new(0);
static REENTRANT_RUN_RAN: AtomicU64 = AtomicU64::new(0);

/// Whether a fault of probability `p` strikes now; counted in `kind` when it does.
fn strikes(p: f64, kind: &AtomicU64) -> bool {
    let hit = p > 0.0 && fastrand::f64() < p;
    if hit {
        kind.fetch_add(1, Ordering::Relaxed);
    }
    hit
}

/// Makes a value's `Drop` panic when loopguard drops it: armed on the worker with the
/// `--panic-outputs` probability, disarmed by a client that takes the value (its own drop
/// is not loopguard's call).
#[derive(Debug, Default)]
struct Armed(bool);

impl Armed {
    fn new(p: f64) -> Armed {
        Armed(p > 0.0 && fastrand::f64() < p)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if self.0 && !std::thread::panicking() {
            OUTPUT_FAULTS.fetch_add(1, Ordering::Relaxed);
            faults::maybe_panic(1.0, "output drop");
        }
    }
}

/// A success value that names its job.
#[derive(Debug)]
struct Output {
    id: u64,
    armed: Armed,
}

/// A failure value that names its job, so a report can be traced back to it: its `Debug`
/// is `Failure(ID)`.
struct Failure {
    id: u64,
    armed: Armed,
}

impl std::fmt::Debug for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Failure({})", self.id)
    }
}

struct Options {
    jobs: u64,
    workers: usize,
    seed: u64,
    json: bool,
    faults: Faults,
    /// The run fails (exit code 3) if it has not finished after this long.
    watchdog: Duration,
}

/// How likely each kind of code loopguard calls is to panic (or, for `reenter`, to call
/// back into the pool).
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    handler: f64,
    logger: f64,
    recorder: f64,
    wakers: f64,
    outputs: f64,
    reenter: f64,
}

impl Faults {
    fn any(&self) -> bool {
        self.handler + self.logger + self.recorder + self.wakers + self.outputs > 0.0
    }
}

const USAGE: &str = "usage: soak [--jobs N] [--workers W] [--seed S] [--json] [--faults P] \
[--panic-handler P] [--panic-logger P] [--panic-recorder P] [--panic-wakers P] \
[--panic-outputs P] [--reenter P] [--watchdog SECS]";

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        jobs: 200_000,
        workers: 4,
        seed: DEFAULT_SEED,
        json: false,
        faults: Faults::default(),
        watchdog: Duration::from_secs(120),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let number =
            |name: &str, v: String| v.parse::<u64>().map_err(|e| format!("{name} {v:?}: {e}"));
        let probability = |name: &str, v: String| match v.parse::<f64>() {
            Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
            _ => Err(format!("{name} {v:?}: a probability, between 0 and 1")),
        };
        let faults = &mut options.faults;
        match arg.as_str() {
            "--jobs" => options.jobs = number("--jobs", value("--jobs")?)?,
            "--workers" => {
                let workers = number("--workers", value("--workers")?)?;
                options.workers = usize::try_from(workers).map_err(|e| e.to_string())?
            }
            "--seed" => options.seed = number("--seed", value("--seed")?)?,
            "--json" => options.json = true,
            "--watchdog" => {
                options.watchdog = Duration::from_secs(number("--watchdog", value("--watchdog")?)?)
            }
            "--faults" => {
                let p = probability("--faults", value("--faults")?)?;
                *faults = Faults {
                    handler: p,
                    logger: p,
                    recorder: p,
                    wakers: p,
                    outputs: p,
                    reenter: p,
                };
            }
            "--panic-handler" => faults.handler = probability(&arg, value(&arg)?)?,
            "--panic-logger" => faults.logger = probability(&arg, value(&arg)?)?,
            "--panic-recorder" => faults.recorder = probability(&arg, value(&arg)?)?,
            "--panic-wakers" => faults.wakers = probability(&arg, value(&arg)?)?,
            "--panic-outputs" => faults.outputs = probability(&arg, value(&arg)?)?,
            "--reenter" => faults.reenter = probability(&arg, value(&arg)?)?,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(options)
}

/// Per-job bookkeeping, shared with the worker threads and the orphan handler.
struct Ledger {
    /// The job body started.
    ran: Vec<AtomicBool>,
    /// The job was meant to fail (`Err` or panic).
    fails: Vec<AtomicBool>,
    /// Failures handed back to an awaiting caller.
    returned: Vec<AtomicU32>,
    /// Failures handed to the orphan handler.
    reported: Vec<AtomicU32>,
    /// Orphan reports that could not be traced to a job (must stay 0).
    untraceable: AtomicU64,
    stuck_reports: AtomicU64,
    /// Jobs running now on each pool, and the most there ever were.
    running: [AtomicUsize; 2],
    max_running: [AtomicUsize; 2],
}

impl Ledger {
    fn new(jobs: usize) -> Ledger {
        let vec32 = || (0..jobs).map(|_| AtomicU32::new(0)).collect();
        let vecb = || (0..jobs).map(|_| AtomicBool::new(false)).collect();
        Ledger {
            ran: vecb(),
            fails: vecb(),
            returned: vec32(),
            reported: vec32(),
            untraceable: AtomicU64::new(0),
            stuck_reports: AtomicU64::new(0),
            running: Default::default(),
            max_running: Default::default(),
        }
    }

    /// Traces a logged orphan report (`Report`'s `Display`) to its job.
    fn logged(&self, text: &str) {
        let kind = if text.contains(" panicked after ") {
            ReportKind::Panicked
        } else if text.contains(" failed after ") {
            ReportKind::Failed
        } else {
            ReportKind::Stuck
        };
        let message = text.split_once("s: ").map_or("", |(_, message)| message);
        self.reported(kind, message);
    }

    fn returned(&self, id: u64) {
        self.returned[id as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Traces an orphan report to its job by the id in the message: `Failure(ID)` for an
    /// `Err`, `soak panic job ID` for a panic.
    fn reported(&self, kind: ReportKind, message: &str) {
        let id = match kind {
            ReportKind::Failed => message
                .strip_prefix("Failure(")
                .and_then(|rest| rest.strip_suffix(')')),
            ReportKind::Panicked => message.strip_prefix(PANIC_PREFIX),
            ReportKind::Stuck => {
                self.stuck_reports.fetch_add(1, Ordering::Relaxed);
                return;
            }
            _ => None,
        };
        match id.and_then(|id| id.parse::<usize>().ok()) {
            Some(id) if id < self.reported.len() => {
                self.reported[id].fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.untraceable.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The job body for `id`: marks itself run, takes its time, and ends as told. `Fallible`:
/// its `Err` is a failure to report when nobody awaits it.
fn job(
    ledger: Arc<Ledger>,
    pool: usize,
    id: u64,
    outcome: Outcome,
    sleep: Duration,
    panic_outputs: f64,
) -> Fallible<impl FnOnce() -> Result<Output, Failure> + Send + 'static> {
    Fallible(move || {
        let now = ledger.running[pool].fetch_add(1, Ordering::AcqRel) + 1;
        ledger.max_running[pool].fetch_max(now, Ordering::AcqRel);
        ledger.ran[id as usize].store(true, Ordering::Release);
        if !sleep.is_zero() {
            std::thread::sleep(sleep);
        }
        ledger.running[pool].fetch_sub(1, Ordering::AcqRel);
        let armed = Armed::new(panic_outputs);
        match outcome {
            Outcome::Ok => Ok(Output { id, armed }),
            Outcome::Err => Err(Failure { id, armed }),
            Outcome::Panic => panic!("{PANIC_PREFIX}{id}"),
        }
    })
}

/// What every client works through: ids below `jobs`, drawn from `seed`, with `faults`.
#[derive(Debug, Clone, Copy)]
struct Plan {
    jobs: u64,
    seed: u64,
    faults: Faults,
}

#[derive(Debug, Default)]
struct Tally {
    rejected: Cell<u64>,
    cancelled_unstarted: Cell<u64>,
    orphaned: Cell<u64>,
    awaited: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// Records what an awaiting caller got back (and disarms it: the caller's own drop).
fn settle<E>(ledger: &Ledger, id: u64, result: Result<Result<Output, Failure>, E>, panicked: bool) {
    match result {
        Ok(Ok(mut got)) => {
            got.armed.0 = false;
            assert_eq!(got.id, id, "job {id} returned another job's value");
        }
        Ok(Err(mut failure)) => {
            failure.armed.0 = false;
            assert_eq!(failure.id, id, "job {id} failed with another job's error");
            ledger.returned(id);
        }
        Err(_) if panicked => ledger.returned(id),
        Err(_) => unreachable!("only panics and closing fail an await, and nothing closes"),
    }
}

async fn client(
    pools: [Pool; 2],
    hostile: [Arc<hostile::Behaviour>; 2],
    ledger: Arc<Ledger>,
    next: Rc<Cell<u64>>,
    plan: Plan,
    tally: Rc<Tally>,
) {
    let Plan { jobs, seed, faults } = plan;
    loop {
        let id = next.get();
        if id >= jobs {
            return;
        }
        next.set(id + 1);

        let mut rng = fastrand::Rng::with_seed(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let outcome = match rng.u8(0..10) {
            0..=5 => Outcome::Ok,
            6..=7 => Outcome::Err,
            _ => Outcome::Panic,
        };
        let submit = match rng.u8(0..20) {
            0..=4 => Submit::RunAwait,
            5..=9 => Submit::TryAwait,
            10..=11 => Submit::RunDropBeforePoll,
            12..=13 => Submit::RunPollOnceDrop,
            14..=16 => Submit::AdmitDrop,
            _ => Submit::CancelMidRun,
        };
        let sleep = match rng.u8(0..10) {
            0..=6 => Duration::ZERO,
            _ => Duration::from_micros(rng.u64(20..200)),
        };
        ledger.fails[id as usize].store(outcome != Outcome::Ok, Ordering::Relaxed);
        // A quarter of the jobs go to the pool whose handler logs.
        let which = usize::from(id % 4 == 3);
        let body = job(ledger.clone(), which, id, outcome, sleep, faults.outputs);
        let pool = &pools[which];
        // loopguard's futures see the hostile wakers (the client's own code does not).
        let behaviour = &hostile[which];
        let hostile = |future| hostile::Hostile::new(future, behaviour.clone());

        match submit {
            Submit::RunAwait => {
                let result = hostile(pool.run(body)).await;
                let panicked = matches!(result, Err(RunError::Panicked(_)));
                settle(&ledger, id, result, panicked);
                bump(&tally.awaited);
            }
            Submit::TryAwait => match pool.try_run(body) {
                Ok(handle) => {
                    let result = hostile::Hostile::new(handle, behaviour.clone()).await;
                    let panicked = result.is_err();
                    settle(&ledger, id, result, panicked);
                    bump(&tally.awaited);
                }
                Err(TryRunError::Saturated(_)) => bump(&tally.rejected),
                Err(err) => unreachable!("nothing closes the pool: {err}"),
            },
            Submit::RunDropBeforePoll => {
                drop(pool.run(body));
                bump(&tally.cancelled_unstarted);
            }
            Submit::RunPollOnceDrop => {
                let mut run = pin!(hostile(pool.run(body)));
                match future::poll_once(run.as_mut()).await {
                    Some(result) => {
                        let panicked = matches!(result, Err(RunError::Panicked(_)));
                        settle(&ledger, id, result, panicked);
                        bump(&tally.awaited);
                    }
                    None => bump(&tally.orphaned),
                }
            }
            Submit::AdmitDrop => match pool.try_run(body) {
                Ok(handle) => {
                    drop(handle);
                    bump(&tally.orphaned);
                }
                Err(TryRunError::Saturated(_)) => bump(&tally.rejected),
                Err(err) => unreachable!("nothing closes the pool: {err}"),
            },
            Submit::CancelMidRun => {
                // Wait (as a caller would) until the job has started, then leave.
                let mut run = pin!(hostile(pool.run(body)));
                let started = future::poll_fn(|cx| match run.as_mut().poll(cx) {
                    Poll::Ready(result) => Poll::Ready(Some(result)),
                    Poll::Pending if ledger.ran[id as usize].load(Ordering::Acquire) => {
                        Poll::Ready(None)
                    }
                    Poll::Pending => {
                        // Check again soon: the start of a job wakes nobody.
                        faults::wake_own(cx.waker());
                        Poll::Pending
                    }
                })
                .await;
                match started {
                    Some(result) => {
                        let panicked = matches!(result, Err(RunError::Panicked(_)));
                        settle(&ledger, id, result, panicked);
                        bump(&tally.awaited);
                    }
                    None => bump(&tally.orphaned),
                }
            }
        }
    }
}

/// Whether `fut` finished within `limit`.
async fn within(limit: Duration, fut: impl Future<Output = ()>) -> bool {
    let done = async {
        fut.await;
        true
    };
    let late = async {
        smol::Timer::after(limit).await;
        false
    };
    future::or(done, late).await
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    // Jobs panic on purpose: keep their panics off stderr, let any other panic through.
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !message.starts_with(PANIC_PREFIX) && !message.starts_with(faults::FAULT) {
            default_hook(info);
        }
    }));

    let jobs = options.jobs;
    let Ok(len) = usize::try_from(jobs) else {
        eprintln!("--jobs {jobs} is too many for this platform");
        return ExitCode::from(2);
    };
    let faults = options.faults;
    println!(
        "soak: {jobs} jobs, {} workers, seed {:#x}, faults {faults:?}",
        options.workers, options.seed
    );

    let ledger = Arc::new(Ledger::new(len));
    // Before any pool: handles are taken when a pool is built.
    if faults.recorder > 0.0 {
        let recorder = PanickingRecorder::new(faults.recorder);
        if let Err(err) = metrics::set_global_recorder(recorder) {
            eprintln!("cannot install the recorder: {err}");
            return ExitCode::from(2);
        }
    }
    // The second pool's reports come through the default handler, so through `log`.
    let traced = ledger.clone();
    let logger = TracingLogger::install(faults.logger, move |text| traced.logged(text));
    if let Err(err) = logger {
        eprintln!("cannot install the logger: {err}");
        return ExitCode::from(2);
    }
    let handler = {
        let ledger = ledger.clone();
        OrphanHandler::new(move |report| {
            ledger.reported(report.kind(), report.message());
            faults::maybe_panic(faults.handler, "orphan handler");
        })
    };
    let build = |name: &str, handler: OrphanHandler| {
        Pool::builder()
            .name(name)
            .workers(options.workers)
            .on_orphan(handler)
            .build()
    };
    let pools = match (
        build("soak", handler),
        build("soak-log", OrphanHandler::log()),
    ) {
        (Ok(pool), Ok(logged)) => [pool, logged],
        (Err(err), _) | (_, Err(err)) => {
            eprintln!("cannot build the pools: {err}");
            return ExitCode::from(2);
        }
    };

    // A deadlock (a waker called under a lock that it re-enters, say) would hang the loop
    // or a worker where no timeout can see it: a watchdog ends the run instead.
    let watchdog_limit = options.watchdog;
    std::thread::spawn(move || {
        std::thread::sleep(watchdog_limit);
        println!("FAIL: the soak did not finish within {watchdog_limit:?} (a deadlock?)");
        std::process::exit(3);
    });

    let clients = 4 * options.workers;
    let tally = Rc::new(Tally::default());
    let began = Instant::now();
    let executor = smol::LocalExecutor::new();
    let settled = smol::block_on(executor.run(async {
        let next = Rc::new(Cell::new(0u64));
        let hostile = [0, 1].map(|which| hostile::Behaviour::new(&pools[which], faults));
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                executor.spawn(client(
                    pools.clone(),
                    hostile.clone(),
                    ledger.clone(),
                    next.clone(),
                    Plan {
                        jobs,
                        seed: options.seed,
                        faults,
                    },
                    tally.clone(),
                ))
            })
            .collect();
        for task in tasks {
            task.await;
        }
        // Orphans may still run; a leaked slot would make this wait forever, so bound it.
        within(Duration::from_secs(30), async {
            for pool in &pools {
                pool.wait_idle().await;
            }
        })
        .await
    }));
    let secs = began.elapsed().as_secs_f64();
    let leaked_slots: usize = pools.iter().map(Pool::in_use).sum();
    let shut_down = smol::block_on(within(Duration::from_secs(30), async {
        for pool in &pools {
            pool.shutdown().await;
        }
    }));

    // Tally the ledger.
    let (mut ran, mut failed, mut lost, mut duplicated, mut spurious) = (0u64, 0u64, 0, 0, 0);
    for id in 0..len {
        let did_run = ledger.ran[id].load(Ordering::Acquire);
        let should_fail = did_run && ledger.fails[id].load(Ordering::Relaxed);
        let seen = ledger.returned[id].load(Ordering::Acquire)
            + ledger.reported[id].load(Ordering::Acquire);
        ran += u64::from(did_run);
        failed += u64::from(should_fail);
        match (should_fail, seen) {
            (true, 0) => lost += 1,
            (true, 1) | (false, 0) => {}
            (true, _) => duplicated += 1,
            (false, _) => spurious += 1,
        }
    }
    let stats: Vec<_> = pools.iter().map(Pool::stats).collect();
    let sum = |f: fn(&loopguard::pool::PoolStats) -> u64| stats.iter().map(f).sum::<u64>();
    let finished = sum(|s| s.jobs_ok + s.jobs_error + s.jobs_panicked);
    let orphaned_failures = sum(|s| s.orphaned_failures);
    let rejected = sum(|s| s.rejected);
    let contained = loopguard::telemetry::contained_panics();
    let injected = faults::INJECTED.load(Ordering::Relaxed);
    let reported: u64 = ledger
        .reported
        .iter()
        .map(|n| u64::from(n.load(Ordering::Relaxed)))
        .sum();
    let returned: u64 = ledger
        .returned
        .iter()
        .map(|n| u64::from(n.load(Ordering::Relaxed)))
        .sum();
    let untraceable = ledger.untraceable.load(Ordering::Relaxed);
    let max_running = ledger
        .max_running
        .iter()
        .map(|m| m.load(Ordering::Relaxed))
        .max();
    let max_running = max_running.unwrap_or(0);

    let waker_faults = WAKER_FAULTS.load(Ordering::Relaxed);
    let output_faults = OUTPUT_FAULTS.load(Ordering::Relaxed);
    let reentrant_calls = REENTRANT_CALLS.load(Ordering::Relaxed);
    let clone_retries = hostile::CLONE_RETRIES.load(Ordering::Relaxed);

    let mut problems = Vec::new();
    if !settled {
        problems.push("wait_idle did not resolve within 30 s".to_string());
    }
    if !shut_down {
        problems.push("shutdown did not return within 30 s".to_string());
    }
    if faults.any() && injected == 0 {
        problems.push("faults were asked for, none was injected".to_string());
    }
    // Every injected panic is contained inside loopguard (and counted there), except a
    // waker clone's, which comes out of the caller's own poll by design.
    if injected != contained + clone_retries {
        problems.push(format!(
            "{injected} faults injected, loopguard contained {contained} panics \
             (+{clone_retries} clone panics out of a poll)"
        ));
    }
    if spurious > 0 {
        problems.push(format!(
            "{spurious} failures seen for jobs that did not fail"
        ));
    }
    if untraceable > 0 {
        problems.push(format!(
            "{untraceable} orphan reports not traceable to a job"
        ));
    }
    if max_running > options.workers {
        problems.push(format!(
            "{max_running} jobs ran at once on {} slots",
            options.workers
        ));
    }
    let reentrant_jobs = REENTRANT_JOBS.load(Ordering::Relaxed);
    let reentrant_ran = REENTRANT_RAN.load(Ordering::Relaxed);
    if reentrant_ran != reentrant_jobs {
        problems.push(format!(
            "{reentrant_jobs} jobs submitted from wakers, {reentrant_ran} ran"
        ));
    }
    let reentrant_run_ran = REENTRANT_RUN_RAN.load(Ordering::Relaxed);
    if finished != ran + reentrant_ran + reentrant_run_ran {
        problems.push(format!(
            "pool counted {finished} finished jobs, {ran} ran (+{} from wakers)",
            reentrant_ran + reentrant_run_ran
        ));
    }
    if orphaned_failures != reported + untraceable {
        problems.push(format!(
            "pools counted {orphaned_failures} orphaned failures, the handlers saw {}",
            reported + untraceable
        ));
    }

    println!(
        "ran {ran} ({failed} failed: {returned} returned, {reported} reported), awaited {}, \
         orphaned {}, cancelled before start {}, try_run refused {} (pool counted {}), \
         max concurrency {max_running}/{}, stuck reports {}",
        tally.awaited.get(),
        tally.orphaned.get(),
        tally.cancelled_unstarted.get(),
        tally.rejected.get(),
        rejected,
        options.workers,
        ledger.stuck_reports.load(Ordering::Relaxed),
    );
    println!(
        "leaked slots {leaked_slots}, lost failures {lost}, duplicated failures {duplicated}, \
         faults injected {injected} (loopguard contained {contained} panics), {secs:.2}s"
    );
    println!(
        "of the faults: wakers {waker_faults} (clone panics re-polled {clone_retries}), \
         output drops {output_faults}; wakers called back into the pool {reentrant_calls} \
         times ({reentrant_jobs} jobs admitted by try_run, {reentrant_ran} ran; \
         {reentrant_run_ran} jobs of a run polled once ran)"
    );
    for problem in &problems {
        println!("FAIL: {problem}");
    }
    if options.json {
        println!(
            "{{\"jobs\":{jobs},\"secs\":{secs:.3},\"leaked_slots\":{leaked_slots},\
             \"lost_failures\":{lost},\"duplicated_failures\":{duplicated},\
             \"faults_injected\":{injected},\"contained_panics\":{contained},\
             \"shutdown\":{shut_down},\"waker_faults\":{waker_faults},\
             \"clone_retries\":{clone_retries},\"output_drop_faults\":{output_faults},\
             \"reentrant_calls\":{reentrant_calls},\"reentrant_jobs\":{reentrant_jobs}}}"
        );
    }
    if leaked_slots == 0 && lost == 0 && duplicated == 0 && problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Wakers that misbehave wherever loopguard calls them: they panic in `wake` (after waking
/// the task), in `clone` (before cloning) and in `drop` (after dropping), and their `wake`
/// and `drop` call back into the pool first. `Wake` cannot make `clone` panic, hence a raw
/// vtable (the demos library forbids `unsafe`; an example may use it).
mod hostile {
    use super::*;
    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
    use std::task::{Context, RawWaker, RawWakerVTable, Waker};

    /// Clone panics that came out of a loopguard poll, after which the client polled again.
    pub static CLONE_RETRIES: AtomicU64 = AtomicU64::new(0);

    /// What the hostile wakers of one pool do besides waking.
    pub struct Behaviour {
        pool: Pool,
        panic: f64,
        reenter: f64,
    }

    impl Behaviour {
        pub fn new(pool: &Pool, faults: Faults) -> Arc<Behaviour> {
            Arc::new(Behaviour {
                pool: pool.clone(),
                panic: faults.wakers,
                reenter: faults.reenter,
            })
        }

        /// Panics (a fault) with the configured probability, unless this is the task's
        /// own call.
        fn fault(&self, what: &str) {
            if !faults::is_own() && strikes(self.panic, &WAKER_FAULTS) {
                faults::maybe_panic(1.0, what);
            }
        }

        /// Calls back into the pool with the configured probability, unless this is the
        /// task's own call: reads `in_use()`; submits a small job with `try_run` and drops
        /// its `Job` at once (orphaning it); or polls a `run` of a small job once and drops
        /// it (queueing in the gate under its lock, then leaving the line or orphaning the
        /// job), so a waker called under any of the gate's or the job's locks would deadlock.
        fn reenter(&self) {
            if faults::is_own() || !strikes(self.reenter, &REENTRANT_CALLS) {
                return;
            }
            match fastrand::u8(0..3) {
                0 => {
                    std::hint::black_box(self.pool.in_use());
                }
                1 => {
                    let job = self.pool.try_run(|| {
                        REENTRANT_RAN.fetch_add(1, Ordering::Relaxed);
                    });
                    if let Ok(job) = job {
                        REENTRANT_JOBS.fetch_add(1, Ordering::Relaxed);
                        drop(job);
                    }
                }
                _ => {
                    let mut run = self.pool.run(|| {
                        REENTRANT_RUN_RAN.fetch_add(1, Ordering::Relaxed);
                    });
                    let mut cx = Context::from_waker(Waker::noop());
                    let _ = Pin::new(&mut run).poll(&mut cx);
                    drop(run);
                }
            }
        }
    }

    /// What a hostile waker points to: the task's real waker and the pool's behaviour.
    struct Inner {
        real: Waker,
        behaviour: Arc<Behaviour>,
    }

    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);

    fn waker(inner: Inner) -> Waker {
        let data = Arc::into_raw(Arc::new(inner)).cast::<()>();
        // SAFETY: `data` is a strong reference from `Arc::into_raw`, owned by the new waker;
        // every vtable function below keeps to that (clone adds a reference, wake and drop
        // give theirs back, wake_by_ref borrows), and `Inner` is `Send + Sync`.
        unsafe { Waker::from_raw(RawWaker::new(data, &VTABLE)) }
    }

    /// # Safety
    /// `data` is a live reference made by `waker` (or `clone`).
    unsafe fn clone(data: *const ()) -> RawWaker {
        // SAFETY: the waker being cloned holds its reference for the whole call.
        let inner = unsafe { &*data.cast::<Inner>() };
        // Before anything is made: a panicking clone leaks nothing.
        inner.behaviour.fault("waker clone");
        // SAFETY: as above; the count is given to the new waker.
        unsafe { Arc::increment_strong_count(data.cast::<Inner>()) };
        RawWaker::new(data, &VTABLE)
    }

    /// # Safety
    /// As `clone`; this consumes the waker's reference.
    unsafe fn wake(data: *const ()) {
        // SAFETY: the waker's own reference, given back here (dropped even on a panic).
        let inner = unsafe { Arc::from_raw(data.cast::<Inner>()) };
        inner.behaviour.reenter();
        inner.real.wake_by_ref();
        inner.behaviour.fault("waker wake");
    }

    /// # Safety
    /// As `clone`.
    unsafe fn wake_by_ref(data: *const ()) {
        // SAFETY: the waker holds its reference for the whole call.
        let inner = unsafe { &*data.cast::<Inner>() };
        inner.behaviour.reenter();
        inner.real.wake_by_ref();
        inner.behaviour.fault("waker wake");
    }

    /// # Safety
    /// As `wake`.
    unsafe fn drop_waker(data: *const ()) {
        // SAFETY: the waker's own reference, given back here.
        let inner = unsafe { Arc::from_raw(data.cast::<Inner>()) };
        let behaviour = inner.behaviour.clone();
        behaviour.reenter();
        drop(inner);
        behaviour.fault("waker drop");
    }

    /// Polls a loopguard future with a hostile waker. A `clone` panic that comes out of its
    /// poll is caught and the future polled again (after waking the task); any other panic
    /// goes on.
    pub struct Hostile<F> {
        inner: F,
        behaviour: Arc<Behaviour>,
        /// The task's waker and the hostile one made for it.
        cached: Option<(Waker, Waker)>,
    }

    impl<F> Hostile<F> {
        pub fn new(inner: F, behaviour: Arc<Behaviour>) -> Hostile<F> {
            Hostile {
                inner,
                behaviour,
                cached: None,
            }
        }
    }

    impl<F: Future + Unpin> Future for Hostile<F> {
        type Output = F::Output;

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            let this = self.get_mut();
            // A new hostile waker when the task's waker changed, and now and then anyway (as
            // if the future moved to another task): loopguard then replaces the one it
            // stored and drops it, outside its locks.
            let moved = this.behaviour.panic > 0.0 && fastrand::f64() < this.behaviour.panic;
            let same = matches!(&this.cached, Some((real, _)) if real.will_wake(cx.waker()));
            if moved || !same {
                let real = cx.waker().clone();
                let hostile = waker(Inner {
                    real: real.clone(),
                    behaviour: this.behaviour.clone(),
                });
                let old = this.cached.replace((real, hostile));
                faults::as_own(|| drop(old));
            }
            let Some((_, hostile)) = &this.cached else {
                unreachable!("set above")
            };
            let inner = &mut this.inner;
            let polled = catch_unwind(AssertUnwindSafe(|| {
                Pin::new(inner).poll(&mut Context::from_waker(hostile))
            }));
            match polled {
                Ok(poll) => poll,
                Err(payload) if is_clone_fault(&*payload) => {
                    CLONE_RETRIES.fetch_add(1, Ordering::Relaxed);
                    faults::wake_own(cx.waker());
                    Poll::Pending
                }
                Err(payload) => resume_unwind(payload),
            }
        }
    }

    impl<F> Drop for Hostile<F> {
        fn drop(&mut self) {
            // The task's own copy; the future's (loopguard's) go with `inner`, after this.
            let cached = self.cached.take();
            faults::as_own(|| drop(cached));
        }
    }

    fn is_clone_fault(payload: &(dyn std::any::Any + Send)) -> bool {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied());
        message.is_some_and(|m| m == format!("{}: waker clone", faults::FAULT))
    }
}
