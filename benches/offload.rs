//! Offload latency side by side: a loopguard `Pool` against `blocking::unblock`, tokio's
//! `spawn_blocking`, and a bare two-thread ping-pong (the floor), all driven from smol's
//! `block_on`, one round trip at a time. Plus the cost of a refused `try_run`, a burst of
//! 100 µs jobs, and the overhead of running a ready future under a `Deadline`.
//!
//! Run with `cargo bench --bench offload`; see BENCHMARKS.md for the figures and what they
//! mean. Ids (`group/function`) are stable so results compare run to run:
//! `roundtrip/{loopguard,loopguard_no_spin,blocking_unblock,tokio_spawn_blocking,thread_pingpong}`,
//! `reject/try_run_saturated`, `roundtrip_recorded/{loopguard,loopguard_no_recorder}`,
//! `reject_recorded/try_run_saturated`, `burst/{loopguard_run,blocking_unblock}`,
//! `deadline/{ready_bare,ready_within}`. The groups run in that order; from
//! `roundtrip_recorded` on, a Prometheus recorder is installed.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use loopguard::deadline::Deadline;
use loopguard::pool::Pool;

/// The pool as an application builds it: every counter, histogram handle and orphan
/// tracking on (the defaults), one worker per slot.
fn pool(workers: usize) -> Pool {
    Pool::builder()
        .name("bench")
        .workers(workers)
        .build()
        .expect("pool")
}

/// Two threads handing a token back and forth: the floor under every pool. The peer thread
/// sleeps in `park` and is woken by `unpark` with one flag; the caller awaits the reply
/// under the same `smol::block_on` as the pools, woken through its `Waker` (registered once
/// and reused: `will_wake`), so the comparison includes the same executor parking.
struct PingPong {
    shared: Arc<PingShared>,
    peer: Thread,
    handle: Option<thread::JoinHandle<()>>,
}

struct PingShared {
    request: AtomicBool,
    reply: AtomicBool,
    stop: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl PingPong {
    fn new() -> PingPong {
        let shared = Arc::new(PingShared {
            request: AtomicBool::new(false),
            reply: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let handle = {
            let shared = shared.clone();
            thread::spawn(move || {
                loop {
                    while !shared.request.swap(false, Ordering::Acquire) {
                        if shared.stop.load(Ordering::Acquire) {
                            return;
                        }
                        thread::park();
                    }
                    black_box(()); // the no-op job
                    shared.reply.store(true, Ordering::Release);
                    if let Some(waker) = shared.waker.lock().unwrap().as_ref() {
                        waker.wake_by_ref();
                    }
                }
            })
        };
        PingPong {
            peer: handle.thread().clone(),
            shared,
            handle: Some(handle),
        }
    }

    async fn round_trip(&self) {
        self.shared.request.store(true, Ordering::Release);
        self.peer.unpark();
        futures_lite::future::poll_fn(|cx| {
            if self.shared.reply.swap(false, Ordering::Acquire) {
                return Poll::Ready(());
            }
            {
                let mut waker = self.shared.waker.lock().unwrap();
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
            }
            if self.shared.reply.swap(false, Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.peer.unpark();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn roundtrip(c: &mut Criterion) {
    let mut group = c.benchmark_group("roundtrip");

    let loopguard = pool(2);
    group.bench_function("loopguard", |b| {
        b.iter(|| smol::block_on(async { loopguard.run(|| black_box(1u64)).await.unwrap() }))
    });

    // The same pool with workers that always park at once (no spinning between jobs).
    let parking = Pool::builder()
        .name("bench-no-spin")
        .workers(2)
        .spin(Duration::ZERO)
        .build()
        .expect("pool");
    group.bench_function("loopguard_no_spin", |b| {
        b.iter(|| smol::block_on(async { parking.run(|| black_box(1u64)).await.unwrap() }))
    });

    group.bench_function("blocking_unblock", |b| {
        b.iter(|| smol::block_on(blocking::unblock(|| black_box(1u64))))
    });

    // tokio's blocking pool belongs to a runtime; its `JoinHandle` is a plain future, so
    // smol's `block_on` can await it while nothing drives the runtime itself.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio runtime");
    let handle = runtime.handle().clone();
    group.bench_function("tokio_spawn_blocking", |b| {
        b.iter(|| smol::block_on(handle.spawn_blocking(|| black_box(1u64))).unwrap())
    });

    let ping = PingPong::new();
    group.bench_function("thread_pingpong", |b| {
        b.iter(|| smol::block_on(ping.round_trip()))
    });
    drop(ping);
    group.finish();
    drop(runtime);
}

fn reject(c: &mut Criterion) {
    saturated_try_run(c, "reject");
}

/// The loopguard round trip with a real recorder installed (Prometheus, no exporter thread),
/// so every counter and histogram call records, next to a pool built before the recorder
/// (whose handles are no-ops) in the same process state. A global recorder cannot be
/// removed: the groups after this one (`reject_recorded`, `burst`) record into it too.
fn roundtrip_recorded(c: &mut Criterion) {
    let plain = pool(2);
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0])
        .expect("buckets")
        .build_recorder();
    let handle = recorder.handle();
    let installed = metrics::set_global_recorder(recorder).is_ok();
    let recorded = pool(2);
    let mut group = c.benchmark_group("roundtrip_recorded");
    if installed {
        group.bench_function("loopguard", |b| {
            b.iter(|| smol::block_on(async { recorded.run(|| black_box(1u64)).await.unwrap() }))
        });
        group.bench_function("loopguard_no_recorder", |b| {
            b.iter(|| smol::block_on(async { plain.run(|| black_box(1u64)).await.unwrap() }))
        });
    }
    group.finish();
    // Prove the recorder saw the pool (and keep the render out of the timed loops).
    handle.run_upkeep();
    assert!(!installed || handle.render().contains("loopguard_pool_jobs_total"));
}

/// `reject/try_run_saturated` again on a pool built with the Prometheus recorder installed:
/// the refusal counter is then a real counter.
fn reject_recorded(c: &mut Criterion) {
    saturated_try_run(c, "reject_recorded");
}

/// A `try_run` on a one-slot pool whose slot is held: refused, the closure handed back.
fn saturated_try_run(c: &mut Criterion, group: &str) {
    let mut group = c.benchmark_group(group);
    let loopguard = pool(1);
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let held = loopguard
        .try_run(move || {
            let _ = release_rx.recv();
        })
        .expect("idle pool");
    group.bench_function("try_run_saturated", |b| {
        b.iter(|| {
            let refused = loopguard.try_run(black_box(|| 1u64));
            black_box(refused.is_err())
        })
    });
    group.finish();
    drop(release_tx);
    smol::block_on(held).unwrap();
}

fn burst(c: &mut Criterion) {
    const JOB: Duration = Duration::from_micros(100);
    let workers = 2;
    let submissions = 4 * workers;
    // A 100 µs job that spins rather than sleeps, so timer slack does not dominate.
    let job = move || {
        let start = Instant::now();
        while start.elapsed() < JOB {
            std::hint::spin_loop();
        }
    };

    let mut group = c.benchmark_group("burst");
    group.throughput(Throughput::Elements(submissions as u64));
    let loopguard = pool(workers);
    group.bench_function("loopguard_run", |b| {
        b.iter(|| {
            smol::block_on(async {
                let runs = (0..submissions).map(|_| loopguard.run(job)).collect();
                for result in JoinAll::new(runs).await {
                    result.unwrap();
                }
            })
        })
    });
    group.bench_function("blocking_unblock", |b| {
        b.iter(|| {
            smol::block_on(async {
                let tasks = (0..submissions).map(|_| blocking::unblock(job)).collect();
                JoinAll::new(tasks).await;
            })
        })
    });
    group.finish();
}

fn deadline(c: &mut Criterion) {
    let mut group = c.benchmark_group("deadline");
    group.bench_function("ready_bare", |b| {
        b.iter(|| smol::block_on(async { black_box(futures_lite::future::ready(1u64)).await }))
    });
    group.bench_function("ready_within", |b| {
        b.iter(|| {
            smol::block_on(async {
                Deadline::after(Duration::from_secs(1))
                    .run(black_box(futures_lite::future::ready(1u64)))
                    .await
            })
            .unwrap()
        })
    });
    group.finish();
}

/// Polls every future of a set on each wake-up until all are done: concurrent submissions
/// without spawning tasks, the same for both contenders.
struct JoinAll<F: Future> {
    futures: Vec<Option<F>>,
    outputs: Vec<Option<F::Output>>,
}

impl<F: Future + Unpin> JoinAll<F> {
    fn new(futures: Vec<F>) -> Self {
        let outputs = futures.iter().map(|_| None).collect();
        JoinAll {
            futures: futures.into_iter().map(Some).collect(),
            outputs,
        }
    }
}

impl<F: Future + Unpin> Future for JoinAll<F>
where
    F::Output: Unpin,
{
    type Output = Vec<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut pending = false;
        for (slot, output) in this.futures.iter_mut().zip(this.outputs.iter_mut()) {
            if let Some(future) = slot {
                match Pin::new(future).poll(cx) {
                    Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            return Poll::Pending;
        }
        Poll::Ready(this.outputs.iter_mut().map(|o| o.take().unwrap()).collect())
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = roundtrip, reject, roundtrip_recorded, reject_recorded, burst, deadline
}
criterion_main!(benches);
