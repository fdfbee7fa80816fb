//! A retry budget's cost beside tower's `TpsBudget` (the reference: the same semantics, a
//! mutex taken on every call), in one run.
//!
//! Run with `cargo bench --bench retry_budget`; BENCHMARKS.md has the figures. Ids, each
//! `retry_budget/<what>/<loopguard|tower>`:
//!
//! - `deposit`: one first attempt's deposit (a clock read each, in both).
//! - `withdraw_granted`: one withdrawal from a budget whose reserve never runs out.
//! - `withdraw_refused`: one withdrawal from an empty budget (an outage's steady state).
//! - `threads_N`, N in 1, 2, 4: N threads share one budget, each looping a deposit and a
//!   withdrawal (the ratio is 1, so about half of the withdrawals are granted); the time is
//!   per deposit-and-withdrawal pair, from the start barrier to the last thread's end.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use loopguard::retry::RetryBudget;
use tower::retry::budget::{Budget, TpsBudget};

/// The operations both budgets offer.
trait Ops: Send + Sync + 'static {
    fn deposit(&self);
    fn withdraw(&self) -> bool;
}

impl Ops for RetryBudget {
    fn deposit(&self) {
        RetryBudget::deposit(self)
    }
    fn withdraw(&self) -> bool {
        RetryBudget::withdraw(self)
    }
}

impl Ops for TpsBudget {
    fn deposit(&self) {
        Budget::deposit(self)
    }
    fn withdraw(&self) -> bool {
        Budget::withdraw(self)
    }
}

/// Both budgets with the same settings (tower takes the ratio as `f32`).
fn both(ttl: Duration, min_per_sec: u32, ratio: f32) -> [(&'static str, Arc<dyn Ops>); 2] {
    let ours = RetryBudget::new(ttl, min_per_sec, f64::from(ratio)).expect("valid settings");
    [
        ("loopguard", Arc::new(ours)),
        ("tower", Arc::new(TpsBudget::new(ttl, min_per_sec, ratio))),
    ]
}

fn single(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry_budget");
    group.throughput(Throughput::Elements(1));
    for (name, budget) in both(Duration::from_secs(10), 0, 0.2) {
        group.bench_function(BenchmarkId::new("deposit", name), |b| {
            b.iter(|| budget.deposit())
        });
    }
    // A reserve of a million a second over 60 s: never spent within a run.
    for (name, budget) in both(Duration::from_secs(60), 1_000_000, 0.0) {
        group.bench_function(BenchmarkId::new("withdraw_granted", name), |b| {
            b.iter(|| black_box(budget.withdraw()))
        });
    }
    for (name, budget) in both(Duration::from_secs(10), 0, 0.0) {
        group.bench_function(BenchmarkId::new("withdraw_refused", name), |b| {
            b.iter(|| assert!(!black_box(budget.withdraw())))
        });
    }
    group.finish();
}

/// `threads` threads share `budget`, `pairs` deposit-and-withdrawal pairs between them.
fn run_pairs(budget: &Arc<dyn Ops>, threads: usize, pairs: u64) -> Duration {
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads as u64)
        .map(|i| {
            let share = pairs / threads as u64 + u64::from(i < pairs % threads as u64);
            let (budget, start) = (budget.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..share {
                    budget.deposit();
                    black_box(budget.withdraw());
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for handle in handles {
        handle.join().expect("a thread");
    }
    began.elapsed()
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("retry_budget");
    group.throughput(Throughput::Elements(1));
    for threads in [1, 2, 4] {
        for (name, budget) in both(Duration::from_secs(10), 0, 1.0) {
            let id = BenchmarkId::new(format!("threads_{threads}"), name);
            group.bench_function(id, |b| {
                b.iter_custom(|iters| run_pairs(&budget, threads, iters))
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = single, threads
}
criterion_main!(benches);
