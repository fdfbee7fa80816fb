//! What a retry budget saves a failing dependency: callers retrying into an outage, with
//! and without a shared `RetryBudget`, in one run.
//!
//! ```text
//! cargo run --release --example retry_budget -- [--json] [--callers 200] [--attempts 3]
//!     [--outage-ms 10000] [--recovery-ms 3000] [--healthy-ms 0] [--call-budget-ms 2000]
//!     [--think-ms 0] [--backoff-ms 10,20] [--min-per-sec 1,100] [--ttl-ms 10000]
//!     [--ratio 0.1]
//! ```
//!
//! The dependency is a real HTTP/1.1 server on loopback (its own thread) that answers 503
//! to everything for `--outage-ms` and then recovers (after `--healthy-ms` of healthy
//! service first, 0 by default: the outage starts with the run). `--callers` tasks on one
//! smol thread each call it one call after another (a closed loop, no think time) through
//! `Retry` with `--attempts` attempts, a `--backoff-ms` fixed backoff with equal jitter and
//! a `--call-budget-ms` deadline per call (`--think-ms` pauses a caller after each call). The run is made once without a budget, then once
//! per `--min-per-sec` value with `RetryBudget::new(--ttl-ms, min_per_sec, --ratio)` shared
//! by every caller, each against a fresh server.
//!
//! Reported for each: the requests the dependency received during the outage per first
//! attempt it received (1.0: nothing retried; the attempt limit: everything retried),
//! attempts per call, the calls the budget ended, and the time from the recovery to every
//! caller's first success after it. `--json` prints one line.
//!
//! This is a measurement, not a test: run it on an idle machine.

use std::time::Duration;

use loopguard::retry::Backoff;
use loopguard_demos::cli::{Args, fail, list};
use loopguard_demos::outage::{BudgetSettings, Report, Scenario, run_all};

const USAGE: &str = "retry_budget [--json] [--callers 200] [--attempts 3] [--outage-ms 10000] \
[--recovery-ms 3000] [--healthy-ms 0] [--call-budget-ms 2000] [--think-ms 0] \
[--backoff-ms 10,20] [--min-per-sec 1,100] [--ttl-ms 10000] [--ratio 0.1]";

struct Options {
    json: bool,
    scenario: Scenario,
    min_per_sec: Vec<u32>,
    ttl: Duration,
    ratio: f64,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        json: false,
        scenario: Scenario {
            callers: 200,
            attempts: 3,
            healthy: Duration::ZERO,
            outage: ms(10_000),
            recovery: ms(3_000),
            call_budget: ms(2_000),
            think: Duration::ZERO,
            backoff: Backoff::fixed([ms(10), ms(20)]).with_jitter(),
        },
        min_per_sec: vec![1, 100],
        ttl: ms(10_000),
        ratio: 0.1,
    };
    let mut args = Args::from_env();
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        let s = &mut o.scenario;
        match flag.as_str() {
            "--json" => o.json = true,
            "--callers" => s.callers = args.value(&flag, inline)?,
            "--attempts" => s.attempts = args.value(&flag, inline)?,
            "--outage-ms" => s.outage = ms(args.value(&flag, inline)?),
            "--recovery-ms" => s.recovery = ms(args.value(&flag, inline)?),
            "--healthy-ms" => s.healthy = ms(args.value(&flag, inline)?),
            "--call-budget-ms" => s.call_budget = ms(args.value(&flag, inline)?),
            "--think-ms" => s.think = ms(args.value(&flag, inline)?),
            "--backoff-ms" => {
                let raw: String = args.value(&flag, inline)?;
                let pauses: Vec<u64> = list(&flag, &raw)?;
                s.backoff = Backoff::fixed(pauses.into_iter().map(ms)).with_jitter();
            }
            "--min-per-sec" => {
                let raw: String = args.value(&flag, inline)?;
                o.min_per_sec = list(&flag, &raw)?;
            }
            "--ttl-ms" => o.ttl = ms(args.value(&flag, inline)?),
            "--ratio" => o.ratio = args.value(&flag, inline)?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if o.scenario.callers == 0 || o.scenario.attempts == 0 {
        return Err("--callers and --attempts must be at least 1".into());
    }
    Ok(o)
}

fn budget_name(b: &Option<BudgetSettings>) -> String {
    match b {
        None => "none".to_string(),
        Some(b) => format!(
            "RetryBudget::new({} ms, {}, {})",
            b.ttl.as_millis(),
            b.min_per_sec,
            b.retry_ratio
        ),
    }
}

fn millis(d: Option<Duration>) -> String {
    d.map_or("null".to_string(), |d| {
        format!("{:.1}", d.as_secs_f64() * 1e3)
    })
}

fn json(o: &Options, reports: &[Report]) -> String {
    let runs: Vec<String> = reports
        .iter()
        .map(|r| {
            let (outage, calls) = (r.outage(), &r.calls[1]);
            let reserve = r
                .budget
                .map_or(0.0, |b| f64::from(b.min_per_sec) * b.ttl.as_secs_f64());
            let p50 = r.served_again.get(r.served_again.len() / 2).copied();
            format!(
                concat!(
                    r#"{{"budget":"{}","reserve":{},"outage":{{"first_attempts":{},"requests":{},"#,
                    r#""requests_by_attempt":{:?},"ratio":{:.4},"calls":{},"calls_by_attempts":{:?},"#,
                    r#""attempts_per_call":{:.4},"budget_exhausted":{},"deadline":{}}},"#,
                    r#""after":{{"requests":{},"calls":{},"succeeded":{},"attempts_per_call":{:.4}}},"#,
                    r#""refused":{},"served_again_p50_ms":{},"all_served_again_ms":{},"never_served_again":{}}}"#
                ),
                budget_name(&r.budget),
                reserve,
                outage.first(),
                outage.total(),
                outage.by_attempt,
                outage.ratio(),
                calls.total(),
                calls.by_attempts,
                calls.attempts_per_call(),
                calls.budget_exhausted,
                calls.deadline,
                r.received[2].total(),
                r.calls[2].total(),
                r.calls[2].succeeded,
                r.calls[2].attempts_per_call(),
                r.refused,
                millis(p50),
                millis(r.all_served_again()),
                r.never_served_again,
            )
        })
        .collect();
    let s = &o.scenario;
    format!(
        r#"{{"callers":{},"attempts":{},"healthy_ms":{},"outage_ms":{},"recovery_ms":{},"call_budget_ms":{},"think_ms":{},"runs":[{}]}}"#,
        s.callers,
        s.attempts,
        s.healthy.as_millis(),
        s.outage.as_millis(),
        s.recovery.as_millis(),
        s.call_budget.as_millis(),
        s.think.as_millis(),
        runs.join(",")
    )
}

fn table(reports: &[Report]) {
    println!(
        "{:<34} {:>10} {:>10} {:>7} {:>9} {:>9} {:>10} {:>12}",
        "budget", "first", "requests", "ratio", "att/call", "refused", "p50 back", "all back"
    );
    for r in reports {
        let outage = r.outage();
        let p50 = r.served_again.get(r.served_again.len() / 2).copied();
        println!(
            "{:<34} {:>10} {:>10} {:>7.3} {:>9.3} {:>9} {:>10} {:>12}",
            budget_name(&r.budget),
            outage.first(),
            outage.total(),
            outage.ratio(),
            r.calls[1].attempts_per_call(),
            r.refused,
            millis(p50),
            millis(r.all_served_again()),
        );
    }
    println!(
        "(first, requests, ratio: received by the dependency during the outage; back: ms from recovery)"
    );
}

fn main() {
    let o = parse().unwrap_or_else(|e| fail(USAGE, &e));
    let mut budgets = vec![None];
    budgets.extend(o.min_per_sec.iter().map(|&min_per_sec| {
        Some(BudgetSettings {
            ttl: o.ttl,
            min_per_sec,
            retry_ratio: o.ratio,
        })
    }));
    let reports = run_all(&o.scenario, &budgets);
    if o.json {
        println!("{}", json(&o, &reports));
    } else {
        table(&reports);
    }
}
