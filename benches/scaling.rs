//! How cost grows with load: many caller threads on one pool, and keyed admission among
//! many live keys.
//!
//! Run with `cargo bench --bench scaling`; BENCHMARKS.md has the figures. Ids:
//!
//! - `scaling/try_run_threads/N`, N in 1, 2, 4, 8: N caller threads share one two-worker
//!   pool; each loops `try_run` of an empty job (yielding and trying again when it is
//!   refused) and blocks on the job until it completes. The time is per admitted *and*
//!   completed job, from the start barrier to the last caller's last job, so refused
//!   attempts cost what they cost the callers.
//! - `scaling/keyed_keys/N`, N in 10, 10 000, 1 000 000: a `KeyedGate` of two slots per key
//!   with N live keys (each held once, so every key has an entry); one iteration is a
//!   `try_acquire` of a random key among the N, admitted, and its release.
//! - `scaling/hashmap_keys/N`, same N: the floor of any design that keeps per-key state in
//!   one table behind one lock: a `Mutex<HashMap<u64, [u64; 82]>>` (an entry the size of a
//!   `KeyedGate`'s, 656 bytes) with N keys; one iteration locks it twice and updates a
//!   random key's entry each time, as an admission and its release do. How it grows with N
//!   is what a million random keys cost the memory system, whatever the gate does.
//!
//! Printed beside them (stderr, not criterion ids): the resident memory per live key, and
//! per waiter in line (a pool's `run`, a keyed `acquire`).

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::{Arc, Barrier};
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use loopguard::keyed::KeyedGate;
use loopguard::pool::Pool;

/// The pool's workers: the machine's two cores (and a fixed number, so the ids compare
/// across machines).
const WORKERS: usize = 2;

/// `callers` threads sharing `pool` complete `jobs` jobs between them; the time from their
/// common start to the last one's end.
fn run_jobs(pool: &Pool, callers: usize, jobs: u64) -> Duration {
    let start = Arc::new(Barrier::new(callers + 1));
    let threads: Vec<_> = (0..callers as u64)
        .map(|i| {
            // An even share, the remainder to the first callers.
            let share = jobs / callers as u64 + u64::from(i < jobs % callers as u64);
            let (pool, start) = (pool.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let mut done = 0;
                while done < share {
                    match pool.try_run(|| black_box(1_u64)) {
                        Ok(job) => {
                            let out = futures_lite::future::block_on(job).expect("the job ran");
                            done += black_box(out);
                        }
                        Err(_) => std::thread::yield_now(),
                    }
                }
            })
        })
        .collect();
    start.wait();
    let began = Instant::now();
    for thread in threads {
        thread.join().expect("a caller");
    }
    began.elapsed()
}

fn try_run_threads(c: &mut Criterion) {
    waiter_memory();
    let pool = Pool::builder()
        .name("scaling")
        .workers(WORKERS)
        .build()
        .expect("a pool");
    let mut group = c.benchmark_group("scaling");
    group.throughput(Throughput::Elements(1));
    for callers in [1, 2, 4, 8] {
        group.bench_function(BenchmarkId::new("try_run_threads", callers), |b| {
            b.iter_custom(|jobs| run_jobs(&pool, callers, jobs));
        });
    }
    group.finish();
}

fn keyed_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("scaling");
    group.throughput(Throughput::Elements(1));
    for keys in [10_u64, 10_000, 1_000_000] {
        let gate = KeyedGate::builder("scaling")
            .capacity(2)
            .build()
            .expect("a gate");
        // Every key live: one of its two slots held for the whole benchmark.
        let rss = rss_kib();
        let held: Vec<_> = (0..keys)
            .map(|k| gate.try_acquire(k).expect("a fresh key"))
            .collect();
        if let (Some(before), Some(after)) = (rss, rss_kib()) {
            let per_key = after.saturating_sub(before) as f64 * 1024.0 / keys as f64;
            eprintln!("scaling/keyed_keys/{keys}: resident memory per live key {per_key:.0} bytes");
        }
        let mut rng = fastrand::Rng::with_seed(20);
        group.bench_function(BenchmarkId::new("keyed_keys", keys), |b| {
            b.iter(|| {
                let permit = gate.try_acquire(rng.u64(0..keys)).expect("a free slot");
                drop(black_box(permit));
            });
        });
        drop(held);
    }
    group.finish();
}

/// A waiter as an executor's task holds it.
type Waiting = Pin<Box<dyn Future<Output = ()>>>;

/// How many waiters [`waiter_memory`] parks.
const WAITERS: usize = 100_000;

/// Prints the resident memory per waiting caller: `WAITERS` `run` futures in line on a
/// pool whose one slot is held, then as many `acquire` futures in line on one busy key of
/// a `KeyedGate`. Each future is boxed (as an executor's task would hold it) and polled once
/// with a no-op waker, so it is queued; the figure is the growth of `VmRSS` over the
/// waiters, future and queue entry together.
fn waiter_memory() {
    let poll_all = |futures: &mut Vec<Waiting>| {
        let mut cx = Context::from_waker(Waker::noop());
        for future in futures.iter_mut() {
            assert!(future.as_mut().poll(&mut cx).is_pending(), "a waiter waits");
        }
    };
    let per = |before: Option<u64>| match (before, rss_kib()) {
        (Some(before), Some(after)) => {
            after.saturating_sub(before) as f64 * 1024.0 / WAITERS as f64
        }
        _ => f64::NAN,
    };

    let pool = Pool::builder()
        .name("waiters")
        .workers(1)
        .build()
        .expect("a pool");
    let (release, held) = std::sync::mpsc::channel::<()>();
    let holder = pool
        .try_run(move || held.recv().ok())
        .expect("the one slot");
    let rss = rss_kib();
    let mut futures: Vec<Waiting> = (0..WAITERS)
        .map(|_| {
            let run = pool.run(|| black_box(1_u64));
            Box::pin(async move {
                let _ = run.await;
            }) as Waiting
        })
        .collect();
    poll_all(&mut futures);
    assert_eq!(pool.waiting(), WAITERS);
    let run_bytes = per(rss);
    // Kept until the keyed waiters are counted: memory they freed would be reused.
    let run_waiters = futures;

    let gate = KeyedGate::new("waiters").unwrap();
    let permit = gate.try_acquire(0_u64).expect("a fresh key");
    let rss = rss_kib();
    let mut futures: Vec<Waiting> = (0..WAITERS)
        .map(|_| {
            let acquire = gate.acquire(0_u64);
            Box::pin(async move {
                drop(acquire.await);
            }) as Waiting
        })
        .collect();
    poll_all(&mut futures);
    let keyed_bytes = per(rss);
    drop(futures);
    drop(permit);
    drop(run_waiters);
    release.send(()).expect("the holder");
    futures_lite::future::block_on(holder).expect("the holder ran");
    eprintln!(
        "scaling: resident memory per waiter ({WAITERS} in line, boxed future and queue entry): pool run {run_bytes:.0} bytes, keyed acquire {keyed_bytes:.0} bytes"
    );
}

/// This process's resident set in KiB (`VmRSS`), where the system says.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The entry of [`hashmap_keys`]: as large as a `KeyedGate`'s (656 bytes).
type FloorEntry = [u64; 82];

fn hashmap_keys(c: &mut Criterion) {
    let mut group = c.benchmark_group("scaling");
    group.throughput(Throughput::Elements(1));
    for keys in [10_u64, 10_000, 1_000_000] {
        let table: std::sync::Mutex<std::collections::HashMap<u64, FloorEntry>> =
            std::sync::Mutex::new((0..keys).map(|k| (k, [0; 82])).collect());
        let mut rng = fastrand::Rng::with_seed(20);
        group.bench_function(BenchmarkId::new("hashmap_keys", keys), |b| {
            b.iter(|| {
                let key = rng.u64(0..keys);
                for delta in [1, u64::MAX] {
                    let mut table = table.lock().expect("not poisoned");
                    let entry = table.get_mut(&black_box(key)).expect("a live key");
                    // The counters at the front, a history slot further in: two cache lines.
                    entry[0] = entry[0].wrapping_add(delta);
                    let slot = 8 + (key as usize % 64);
                    entry[slot] = entry[slot].wrapping_add(delta);
                }
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = try_run_threads, keyed_keys, hashmap_keys
}
criterion_main!(benches);
