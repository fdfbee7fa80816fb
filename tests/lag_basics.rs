//! `LoopLag` on every executor: a loop blocked for a known time reads a max of at least
//! that time less one resolution (the documented bound) and not much more; an idle loop
//! reads under a few resolutions; the window slides; a slow poll is counted under the task
//! that made it, once per poll; a dropped probe takes no more samples, in-task or spawned;
//! and invalid configurations are refused (any input: `tests/api_inputs.rs`).
//!
//! The probe runs in the same task as the work it measures (`future::or`), so the test
//! works under a plain `block_on` too; spawned probes are tested on smol and a
//! `LocalExecutor`. Timing assertions are generous: the exact figures belong to
//! `examples/loop_lag.rs`.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;
use common::bounded;
use futures_lite::future;
use loopguard::lag::{LagStats, LoopLag};

const LIMIT: Duration = Duration::from_secs(30);
/// The default resolution, which these tests use unless they say otherwise.
const RESOLUTION: Duration = Duration::from_millis(10);

/// A name of its own for each test run: tests run in parallel, once per executor.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Waits on timers (the loop stays free) until `lag` has taken `n` samples in its window.
async fn until_samples(lag: &LoopLag, n: u64) -> LagStats {
    loop {
        let stats = lag.stats();
        if stats.samples >= n {
            return stats;
        }
        Timer::after(Duration::from_millis(1)).await;
    }
}

/// Runs `work` beside `lag`'s probe in one task: the probe is polled whenever the task is,
/// so a `work` that blocks its poll blocks the probe too. Returns once `work` is done.
async fn with_probe<T>(lag: &LoopLag, work: impl Future<Output = T>) -> T {
    let probe = async {
        lag.probe().await;
        unreachable!("a probe never completes")
    };
    bounded(LIMIT, future::or(work, probe)).await
}

/// A future whose `i`th poll holds the thread for `holds[i]`, then wakes itself; ready
/// after the last one.
struct Holds {
    holds: Vec<Duration>,
    next: usize,
}

fn holds(holds: &[u64]) -> Holds {
    Holds {
        holds: holds.iter().map(|&ms| Duration::from_millis(ms)).collect(),
        next: 0,
    }
}

impl Future for Holds {
    type Output = usize;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<usize> {
        let hold = self.holds[self.next];
        std::thread::sleep(hold);
        self.next += 1;
        if self.next == self.holds.len() {
            Poll::Ready(self.next)
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

on_every_executor! {
    async fn a_blocked_loop_reads_the_stall_less_at_most_one_resolution() {
        const BLOCK: Duration = Duration::from_millis(150);
        let lag = LoopLag::new(&unique("blocked")).unwrap();
        assert_eq!(lag.resolution(), RESOLUTION, "the default");
        let before = with_probe(&lag, async {
            let before = until_samples(&lag, 3).await;
            // The loop is held: nothing else in this task (the probe) can run.
            std::thread::sleep(BLOCK);
            until_samples(&lag, before.samples + 2).await;
            before
        })
        .await;
        let stats = lag.stats();
        assert!(
            stats.max >= BLOCK - RESOLUTION,
            "a {BLOCK:?} stall read as {stats:?} (idle before: {before:?})"
        );
        assert!(stats.max < BLOCK + Duration::from_secs(1), "{stats:?}");
        assert!(stats.p50 <= stats.p99 && stats.p99 <= stats.max, "{stats:?}");
    }
}

on_every_executor! {
    async fn an_idle_loop_reads_under_a_few_resolutions() {
        let lag = LoopLag::new(&unique("idle")).unwrap();
        let stats = with_probe(&lag, until_samples(&lag, 20)).await;
        assert!(stats.p50 < 3 * RESOLUTION, "idle: {stats:?}");
        assert!(stats.p50 <= stats.p99 && stats.p99 <= stats.max, "{stats:?}");
        let age = stats.since_last_sample.expect("samples were taken");
        assert!(age < Duration::from_secs(5), "{stats:?}");
        assert_eq!(stats.slow_polls, 0);

        // Lateness, not the time between wake-ups (Node's figure, resolution included): at a
        // coarse resolution an idle loop reads far under it.
        let coarse = Duration::from_millis(50);
        let lag = LoopLag::builder(&unique("idle-coarse")).resolution(coarse).build().unwrap();
        let stats = with_probe(&lag, until_samples(&lag, 6)).await;
        assert!(stats.p50 < coarse / 2, "idle at {coarse:?}: {stats:?}");
    }
}

on_every_executor! {
    async fn a_slow_poll_is_counted_under_its_task_once_per_poll() {
        let lag = LoopLag::new(&unique("slow")).unwrap();
        assert_eq!(lag.slow_poll_threshold(), Duration::from_millis(50), "the default");
        // Two polls over the default threshold and one under it, one over, none over.
        let render = lag.instrument("render", holds(&[80, 0, 80]));
        let status = lag.instrument("status", holds(&[0, 65]));
        let quick = lag.instrument("quick", holds(&[0, 20, 0, 5]));
        assert_eq!(future::zip(future::zip(render, status), quick).await, ((3, 2), 4));
        assert_eq!(lag.slow_polls("render"), 2);
        assert_eq!(lag.slow_polls("status"), 1);
        assert_eq!(lag.slow_polls("quick"), 0);
        assert_eq!(lag.slow_polls("never-instrumented"), 0);
        // Two futures of one task count together.
        let again = lag.instrument("render", holds(&[70]));
        assert_eq!(again.await, 1);
        assert_eq!(lag.slow_polls("render"), 3);
        assert_eq!(lag.stats().slow_polls, 4);
    }
}

/// Checks that `lag`'s probe, stopped just now, takes no more samples while the loop is
/// free for ten resolutions.
async fn stays_stopped(lag: &LoopLag) {
    let taken = lag.stats().samples;
    // A live probe would take about ten samples meanwhile.
    Timer::after(10 * RESOLUTION).await;
    let stats = lag.stats();
    assert_eq!(stats.samples, taken, "{stats:?}");
    assert!(
        stats.since_last_sample.unwrap() >= 10 * RESOLUTION,
        "{stats:?}"
    );
}

on_every_executor! {
    async fn a_dropped_probe_takes_no_more_samples() {
        let lag = LoopLag::new(&unique("dropped")).unwrap();
        let mut probe = lag.probe();
        bounded(LIMIT, future::or(until_samples(&lag, 3), async {
            (&mut probe).await;
            unreachable!("a probe never completes")
        }))
        .await;
        drop(probe);
        stays_stopped(&lag).await;
    }
}

#[test]
fn a_probe_spawned_on_smol_stops_when_its_task_is_dropped() {
    let lag = LoopLag::new(&unique("smol-task")).unwrap();
    smol::block_on(async {
        let task = smol::spawn(lag.probe());
        bounded(LIMIT, until_samples(&lag, 3)).await;
        drop(task);
        stays_stopped(&lag).await;
    });
}

#[test]
fn a_probe_spawned_on_a_local_executor_stops_when_its_task_is_dropped() {
    let lag = LoopLag::new(&unique("local-task")).unwrap();
    let ex = async_executor::LocalExecutor::new();
    future::block_on(ex.run(async {
        let task = ex.spawn(lag.probe());
        bounded(LIMIT, until_samples(&lag, 3)).await;
        drop(task);
        stays_stopped(&lag).await;
    }));
}

#[test]
fn a_probe_spawned_on_tokio_current_thread_stops_when_aborted() {
    let lag = LoopLag::new(&unique("tokio-task")).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let task = tokio::task::spawn_local(lag.probe());
        bounded(LIMIT, until_samples(&lag, 3)).await;
        task.abort();
        let _ = task.await;
        stays_stopped(&lag).await;
    });
}

#[test]
fn the_window_slides_past_an_old_stall() {
    let window = Duration::from_millis(100);
    let lag = LoopLag::builder(&unique("sliding"))
        .window(window)
        .build()
        .unwrap();
    assert_eq!(lag.window(), window);
    future::block_on(with_probe(&lag, async {
        until_samples(&lag, 2).await;
        std::thread::sleep(Duration::from_millis(200));
        let n = lag.stats().samples;
        until_samples(&lag, n + 1).await;
        let stalled = lag.stats();
        assert!(stalled.max >= Duration::from_millis(190), "{stalled:?}");
        // Twice the window later the stall has left it.
        let since = Instant::now();
        while since.elapsed() < 2 * window {
            Timer::after(Duration::from_millis(5)).await;
        }
        let later = lag.stats();
        assert!(later.max < Duration::from_millis(150), "{later:?}");
        // At most one sample per resolution fits in the window.
        assert!(later.samples <= 11, "{later:?}");
    }));
    // With the probe gone, its samples age out of the window by time alone.
    future::block_on(Timer::after(2 * window));
    let aged = lag.stats();
    assert_eq!((aged.samples, aged.max), (0, Duration::ZERO), "{aged:?}");
    assert!(aged.since_last_sample.unwrap() >= 2 * window, "{aged:?}");
}

#[test]
fn a_probe_created_before_its_loop_runs_does_not_read_the_wait_as_lag() {
    let lag = LoopLag::new(&unique("late-start")).unwrap();
    let probe = lag.probe();
    std::thread::sleep(Duration::from_millis(100));
    future::block_on(bounded(
        LIMIT,
        future::or(until_samples(&lag, 3), async {
            probe.await;
            unreachable!()
        }),
    ));
    let stats = lag.stats();
    assert!(stats.max < Duration::from_millis(90), "{stats:?}");
}

#[test]
fn debug_names_the_loop_and_the_task() {
    let lag = LoopLag::new("debugged").unwrap();
    assert!(format!("{lag:?}").contains("debugged"));
    assert!(format!("{:?}", lag.probe()).contains("debugged"));
    let timed = format!("{:?}", lag.instrument("status-page", async {}));
    assert!(
        timed.contains("debugged") && timed.contains("status-page"),
        "{timed}"
    );
    assert!(format!("{:?}", LoopLag::builder("b")).contains("LoopLagBuilder"));
}

#[test]
fn clones_share_samples_and_counts() {
    let lag = LoopLag::new(&unique("clone")).unwrap();
    let other = lag.clone();
    future::block_on(with_probe(&lag, until_samples(&lag, 2)));
    future::block_on(other.instrument("t", holds(&[60])));
    assert!(other.stats().samples >= 2);
    assert_eq!(lag.slow_polls("t"), 1);
}

#[test]
fn invalid_configurations_are_refused() {
    use std::io::ErrorKind::InvalidInput;
    let ms = Duration::from_millis;
    let refused = [
        LoopLag::new(""),
        LoopLag::new("a\0b"),
        LoopLag::builder("x").resolution(Duration::ZERO).build(),
        LoopLag::builder("x")
            .resolution(Duration::from_secs(3601))
            .build(),
        LoopLag::builder("x")
            .slow_poll_threshold(Duration::ZERO)
            .build(),
        LoopLag::builder("x").window(ms(9)).build(),
        LoopLag::builder("x").window(Duration::ZERO).build(),
        LoopLag::builder("x")
            .resolution(ms(1))
            .window(Duration::from_secs(101))
            .build(),
    ];
    for result in refused {
        let err = result.unwrap_err();
        assert_eq!(err.kind(), InvalidInput, "{err}");
        let message = err.to_string();
        // "a loop lag name ..." (the rule every name follows) or "a loop lag's window ...".
        assert!(message.starts_with("a loop lag"), "{message}");
    }
    // The edges that are allowed, as given.
    let lag = LoopLag::builder("x")
        .resolution(ms(1))
        .window(Duration::from_secs(100))
        .slow_poll_threshold(Duration::from_nanos(1))
        .report_interval(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(lag.resolution(), ms(1));
    assert_eq!(lag.slow_poll_threshold(), Duration::from_nanos(1));
    let lag = LoopLag::builder("x").window(ms(10)).build().unwrap();
    assert_eq!(lag.window(), ms(10));
    let defaults = LoopLag::new("x").unwrap();
    assert_eq!(defaults.window(), Duration::from_secs(60));
}
