//! What early refusal buys under sustained load: scrapers waiting in a pool's line within
//! their budget, with and without `Run::refuse_early`, in one run.
//!
//! ```text
//! cargo run --release --example refuse_early -- [--json] [--workers 2] [--job-ms 50]
//!     [--callers 12] [--interval-ms 200] [--budget-ms 150] [--secs 10]
//! ```
//!
//! A `--workers` pool runs blocking jobs of `--job-ms` on average (a sleep drawn uniformly
//! from half to one and a half times it, seeded: a blocking collector's cost, not a CPU
//! load). `--callers` scrapers on one smol thread each start a call every `--interval-ms`
//! (a scrape interval: a call that ends early waits for the next tick, one that ends late
//! starts the next at once) with `pool.run_within(Deadline::after(--budget-ms), job)`, for
//! `--secs`; the offered load is `callers × 1000 / interval` jobs a second against the
//! pool's `workers × 1000 / job-ms`. The run is made twice on fresh pools, the same seed:
//! waiting out the budget (the default), then with `.refuse_early()`.
//!
//! Reported for each: calls served in time, calls that expired in line and while running
//! (the job orphaned, holding its slot), calls refused early, the median and p99 time a
//! caller that was not served spent before its answer, and the slot time of jobs that ended
//! past their caller's deadline (`orphaned_slot_ms`). `--json` prints one line.
//!
//! This is a measurement, not a test: run it on an idle machine.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use loopguard::deadline::{Deadline, Phase};
use loopguard::pool::{Pool, RunError};
use loopguard_demos::cli::{Args, fail};

const USAGE: &str = "refuse_early [--json] [--workers 2] [--job-ms 50] [--callers 12] \
[--interval-ms 200] [--budget-ms 150] [--secs 10]";

#[derive(Clone, Copy)]
struct Options {
    json: bool,
    workers: usize,
    job: Duration,
    callers: usize,
    interval: Duration,
    budget: Duration,
    secs: u64,
}

fn parse() -> Result<Options, String> {
    let ms = Duration::from_millis;
    let mut o = Options {
        json: false,
        workers: 2,
        job: ms(50),
        callers: 12,
        interval: ms(200),
        budget: ms(150),
        secs: 10,
    };
    let mut args = Args::from_env();
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        match flag.as_str() {
            "--json" => o.json = true,
            "--workers" => o.workers = args.value(&flag, inline)?,
            "--job-ms" => o.job = ms(args.value(&flag, inline)?),
            "--callers" => o.callers = args.value(&flag, inline)?,
            "--interval-ms" => o.interval = ms(args.value(&flag, inline)?),
            "--budget-ms" => o.budget = ms(args.value(&flag, inline)?),
            "--secs" => o.secs = args.value(&flag, inline)?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if o.workers == 0 || o.callers == 0 || o.interval.is_zero() || o.job.is_zero() {
        return Err("--workers, --callers, --interval-ms and --job-ms must be above 0".into());
    }
    Ok(o)
}

#[derive(Default)]
struct Tally {
    served: u64,
    expired_in_line: u64,
    expired_running: u64,
    refused: u64,
    other: u64,
    /// How long each caller that was not served waited for its answer.
    unserved_waits: Vec<Duration>,
}

impl Tally {
    fn calls(&self) -> u64 {
        self.served + self.expired_in_line + self.expired_running + self.refused + self.other
    }
}

/// The job's length for call `n` of caller `c`: the same in both runs.
fn job_length(o: &Options, c: usize, n: u64) -> Duration {
    let mut rng = fastrand::Rng::with_seed((c as u64) << 32 | n);
    let half = o.job / 2;
    half + o.job.mul_f64(rng.f64())
}

/// One run: every caller scrapes until the end, then the pool drains.
fn run(o: &Options, early: bool) -> (Tally, Duration) {
    let pool = Pool::builder()
        .name(if early { "refuse-early" } else { "wait" })
        .workers(o.workers)
        .no_stuck_reports()
        .build()
        .unwrap_or_else(|e| fail(USAGE, &e.to_string()));
    let tally = Rc::new(RefCell::new(Tally::default()));
    // Slot time of jobs whose caller left: summed by the jobs themselves.
    let orphaned = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ex = smol::LocalExecutor::new();
    let start = Instant::now();
    let end = start + Duration::from_secs(o.secs);
    let tasks: Vec<_> = (0..o.callers)
        .map(|c| {
            let (pool, tally, orphaned, o) = (pool.clone(), tally.clone(), orphaned.clone(), *o);
            ex.spawn(async move {
                // Scrapers start spread over one interval, as independent ones would.
                let mut tick = start + o.interval.mul_f64(c as f64 / o.callers as f64);
                let mut n = 0_u64;
                while tick < end {
                    async_io::Timer::at(tick).await;
                    let called = Instant::now();
                    let length = job_length(&o, c, n);
                    let deadline = Deadline::after(o.budget);
                    let left = orphaned.clone();
                    let job = move || {
                        let began = Instant::now();
                        std::thread::sleep(length);
                        if deadline.is_expired() {
                            let ran = began.elapsed().as_micros() as u64;
                            left.fetch_add(ran, std::sync::atomic::Ordering::Relaxed);
                        }
                    };
                    let call = pool.run_within(deadline, job);
                    let out = if early {
                        call.refuse_early().await
                    } else {
                        call.await
                    };
                    let waited = called.elapsed();
                    let mut t = tally.borrow_mut();
                    match out {
                        Ok(()) => t.served += 1,
                        Err(err) => {
                            match err {
                                RunError::Expired(s) if s.phase() == Phase::InLine => {
                                    t.expired_in_line += 1
                                }
                                RunError::Expired(_) => t.expired_running += 1,
                                RunError::WouldExpire { .. } => t.refused += 1,
                                _ => t.other += 1,
                            }
                            t.unserved_waits.push(waited);
                        }
                    }
                    drop(t);
                    n += 1;
                    // The next scrape at the next tick, or at once if this one ran past it.
                    tick = (tick + o.interval).max(Instant::now());
                }
            })
        })
        .collect();
    futures_lite::future::block_on(ex.run(async {
        for task in tasks {
            task.await;
        }
        pool.wait_idle().await;
    }));
    let orphaned = Duration::from_micros(orphaned.load(std::sync::atomic::Ordering::Relaxed));
    let tally = Rc::try_unwrap(tally)
        .ok()
        .expect("callers done")
        .into_inner();
    (tally, orphaned)
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at].as_secs_f64() * 1e3
}

fn report(name: &str, t: &mut Tally, orphaned: Duration) -> String {
    t.unserved_waits.sort();
    format!(
        "\"{name}\":{{\"calls\":{},\"served\":{},\"expired_in_line\":{},\"expired_running\":{},\
\"refused_early\":{},\"other\":{},\"unserved_wait_ms_p50\":{:.1},\"unserved_wait_ms_p99\":{:.1},\
\"orphaned_slot_ms\":{:.0}}}",
        t.calls(),
        t.served,
        t.expired_in_line,
        t.expired_running,
        t.refused,
        t.other,
        quantile(&t.unserved_waits, 0.5),
        quantile(&t.unserved_waits, 0.99),
        orphaned.as_secs_f64() * 1e3,
    )
}

fn main() {
    let o = parse().unwrap_or_else(|e| fail(USAGE, &e));
    let offered = o.callers as f64 * 1e3 / o.interval.as_millis() as f64;
    let capacity = o.workers as f64 * 1e3 / o.job.as_millis() as f64;
    let (mut wait, wait_orphaned) = run(&o, false);
    let (mut early, early_orphaned) = run(&o, true);
    let served_ratio = early.served as f64 / wait.served.max(1) as f64;
    let line = format!(
        "{{\"workers\":{},\"job_ms\":{},\"callers\":{},\"interval_ms\":{},\"budget_ms\":{},\
\"secs\":{},\"offered_per_sec\":{offered:.1},\"capacity_per_sec\":{capacity:.1},{},{},\
\"served_early_over_wait\":{served_ratio:.3}}}",
        o.workers,
        o.job.as_millis(),
        o.callers,
        o.interval.as_millis(),
        o.budget.as_millis(),
        o.secs,
        report("wait", &mut wait, wait_orphaned),
        report("refuse_early", &mut early, early_orphaned),
    );
    if o.json {
        println!("{line}");
    } else {
        println!(
            "offered {offered:.1}/s against {capacity:.1}/s; served: waiting {} of {}, \
             refusing early {} of {} ({served_ratio:.3}x)\n\
             waiting: {} expired in line, {} while running; unserved p50 {:.1} ms\n\
             refusing early: {} refused, {} expired in line, {} while running; unserved p50 {:.1} ms",
            wait.served,
            wait.calls(),
            early.served,
            early.calls(),
            wait.expired_in_line,
            wait.expired_running,
            quantile(&wait.unserved_waits, 0.5),
            early.refused,
            early.expired_in_line,
            early.expired_running,
            quantile(&early.unserved_waits, 0.5),
        );
    }
}
