//! Soak: drive a pool with a seeded random mix of outcomes and cancellations, then check
//! that every slot came back and every failure was seen exactly once.
//!
//! ```sh
//! cargo run --release --example soak -- [--jobs N] [--workers W] [--seed S] [--json]
//!     [--faults P] [--panic-handler P] [--panic-logger P] [--panic-recorder P]
//!     [--panic-wakers P]
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
//! With `--panic-handler P`, `--panic-logger P`, `--panic-recorder P` or `--panic-wakers P`
//! (a probability; `--faults P` sets all four), the code loopguard calls panics at random:
//! the orphan handler and the logger after recording a report, a metrics recorder on any
//! update, and the clients' wakers after waking their task. loopguard must contain every
//! one of them: the counts above stay 0 and `shutdown()` still returns.

use std::cell::Cell;
use std::future::Future;
use std::panic;
use std::pin::pin;
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
use loopguard_demos::faults::{self, FaultyWakers, PanickingRecorder, TracingLogger};

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

/// A failure value that names its job, so a report can be traced back to it.
#[derive(Debug)]
struct Failure(#[allow(dead_code)] u64);

struct Options {
    jobs: u64,
    workers: usize,
    seed: u64,
    json: bool,
    faults: Faults,
}

/// How likely each kind of code loopguard calls is to panic.
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    handler: f64,
    logger: f64,
    recorder: f64,
    wakers: f64,
}

impl Faults {
    fn any(&self) -> bool {
        self.handler + self.logger + self.recorder + self.wakers > 0.0
    }
}

const USAGE: &str = "usage: soak [--jobs N] [--workers W] [--seed S] [--json] [--faults P] \
[--panic-handler P] [--panic-logger P] [--panic-recorder P] [--panic-wakers P]";

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        jobs: 200_000,
        workers: 4,
        seed: DEFAULT_SEED,
        json: false,
        faults: Faults::default(),
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
            "--faults" => {
                let p = probability("--faults", value("--faults")?)?;
                *faults = Faults {
                    handler: p,
                    logger: p,
                    recorder: p,
                    wakers: p,
                };
            }
            "--panic-handler" => faults.handler = probability(&arg, value(&arg)?)?,
            "--panic-logger" => faults.logger = probability(&arg, value(&arg)?)?,
            "--panic-recorder" => faults.recorder = probability(&arg, value(&arg)?)?,
            "--panic-wakers" => faults.wakers = probability(&arg, value(&arg)?)?,
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
) -> Fallible<impl FnOnce() -> Result<u64, Failure> + Send + 'static> {
    Fallible(move || {
        let now = ledger.running[pool].fetch_add(1, Ordering::AcqRel) + 1;
        ledger.max_running[pool].fetch_max(now, Ordering::AcqRel);
        ledger.ran[id as usize].store(true, Ordering::Release);
        if !sleep.is_zero() {
            std::thread::sleep(sleep);
        }
        ledger.running[pool].fetch_sub(1, Ordering::AcqRel);
        match outcome {
            Outcome::Ok => Ok(id),
            Outcome::Err => Err(Failure(id)),
            Outcome::Panic => panic!("{PANIC_PREFIX}{id}"),
        }
    })
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

/// Records what an awaiting caller got back.
fn settle<E>(ledger: &Ledger, id: u64, result: Result<Result<u64, Failure>, E>, panicked: bool) {
    match result {
        Ok(Ok(got)) => assert_eq!(got, id, "job {id} returned another job's value"),
        Ok(Err(Failure(got))) => {
            assert_eq!(got, id, "job {id} failed with another job's error");
            ledger.returned(id);
        }
        Err(_) if panicked => ledger.returned(id),
        Err(_) => unreachable!("only panics and closing fail an await, and nothing closes"),
    }
}

async fn client(
    pools: [Pool; 2],
    ledger: Arc<Ledger>,
    next: Rc<Cell<u64>>,
    jobs: u64,
    seed: u64,
    tally: Rc<Tally>,
) {
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
        let body = job(ledger.clone(), which, id, outcome, sleep);
        let pool = &pools[which];

        match submit {
            Submit::RunAwait => {
                let result = pool.run(body).await;
                let panicked = matches!(result, Err(RunError::Panicked(_)));
                settle(&ledger, id, result, panicked);
                bump(&tally.awaited);
            }
            Submit::TryAwait => match pool.try_run(body) {
                Ok(handle) => {
                    let result = handle.await;
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
                let mut run = pin!(pool.run(body));
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
                let mut run = pin!(pool.run(body));
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

    let clients = 4 * options.workers;
    let tally = Rc::new(Tally::default());
    let began = Instant::now();
    let executor = smol::LocalExecutor::new();
    let settled = smol::block_on(executor.run(async {
        let next = Rc::new(Cell::new(0u64));
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                let client = client(
                    pools.clone(),
                    ledger.clone(),
                    next.clone(),
                    jobs,
                    options.seed,
                    tally.clone(),
                );
                executor.spawn(FaultyWakers::new(Box::pin(client), faults.wakers))
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
    if finished != ran {
        problems.push(format!("pool counted {finished} finished jobs, {ran} ran"));
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
    for problem in &problems {
        println!("FAIL: {problem}");
    }
    if options.json {
        println!(
            "{{\"jobs\":{jobs},\"secs\":{secs:.3},\"leaked_slots\":{leaked_slots},\
             \"lost_failures\":{lost},\"duplicated_failures\":{duplicated},\
             \"faults_injected\":{injected},\"contained_panics\":{contained},\
             \"shutdown\":{shut_down}}}"
        );
    }
    if leaked_slots == 0 && lost == 0 && duplicated == 0 && problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
