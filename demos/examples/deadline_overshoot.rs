//! How late a deadline fires, and how fast a cancelled retry gives control back, on smol.
//!
//! ```text
//! cargo run --release --example deadline_overshoot -- [--json] [--n 1000]
//! ```
//!
//! - **Overshoot**: `n` deadlines of 5 to 20 ms over a future that never finishes, ten at
//!   a time on one thread; for each, the time from the deadline's instant to the moment
//!   `Deadline::run` returned `Expired` to its awaiter.
//! - **Cancel to return**: `n` retries whose first attempt fails at once and that then
//!   pause for a second; another task waits until the pause has begun, takes the time and
//!   signals cancellation; measured is the time until the awaiting task has dropped the
//!   retry and has control back.
//!
//! This is a measurement, not a test: run it on an idle machine.

use std::time::{Duration, Instant};

use futures_lite::future;
use loopguard::deadline::{Deadline, Expired};
use loopguard::retry::{Backoff, Retry};

fn percentiles(mut samples: Vec<f64>) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), at(1.0))
}

/// Overshoot of expiry past the deadline, in milliseconds.
async fn overshoot(n: usize) -> Vec<f64> {
    const LANES: usize = 10;
    let ex = smol::LocalExecutor::new();
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            ex.spawn(async move {
                let mut late = Vec::new();
                for _ in (lane..n).step_by(LANES) {
                    let budget = Duration::from_micros(fastrand::u64(5_000..=20_000));
                    let deadline = Deadline::after(budget);
                    let out = deadline.run(future::pending::<()>()).await;
                    let now = Instant::now();
                    assert_eq!(out, Err(Expired));
                    let at = deadline.instant().expect("a finite deadline");
                    late.push(now.duration_since(at).as_secs_f64() * 1e3);
                }
                late
            })
        })
        .collect();
    ex.run(async {
        let mut all = Vec::with_capacity(n);
        for lane in lanes {
            all.extend(lane.await);
        }
        all
    })
    .await
}

/// Cancel-to-return latency of a retry cut in its backoff pause, in microseconds.
async fn cancel_to_return(n: usize) -> Vec<f64> {
    let ex = smol::LocalExecutor::new();
    let policy = Retry::new()
        .attempts(3)
        .unwrap()
        .backoff(Backoff::fixed([Duration::from_secs(1)]));
    ex.run(async {
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let (in_pause_tx, in_pause) = smol::channel::bounded::<()>(1);
            let (cancel_tx, cancel) = smol::channel::bounded::<Instant>(1);
            // Another task: once the retry is pausing, cancel it.
            let canceller = ex.spawn(async move {
                in_pause.recv().await.expect("the first attempt ran");
                cancel_tx
                    .send(Instant::now())
                    .await
                    .expect("the awaiter listens");
            });
            let retry = policy.run(Deadline::after(Duration::from_secs(10)), |_| {
                let in_pause_tx = in_pause_tx.clone();
                async move {
                    // Failing now: the retry enters its pause in this same poll.
                    let _ = in_pause_tx.try_send(());
                    Err::<(), _>("busy")
                }
            });
            let cancelled_at = future::or(async { Err(retry.await) }, async {
                Ok(cancel.recv().await.expect("the canceller sends"))
            })
            .await
            .expect("the retry cannot end within its one-second pause");
            // The retry future has been dropped with the `or`: control is back.
            samples.push(cancelled_at.elapsed().as_secs_f64() * 1e6);
            canceller.await;
        }
        samples
    })
    .await
}

fn main() {
    let mut json = false;
    let mut n = 1000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json = true,
            "--n" => match args.next().and_then(|v| v.parse().ok()) {
                Some(v) if v > 0 => n = v,
                _ => {
                    eprintln!("deadline_overshoot: --n needs a positive whole number");
                    std::process::exit(2);
                }
            },
            other => {
                eprintln!(
                    "deadline_overshoot: unknown argument {other:?}\nusage: deadline_overshoot [--json] [--n 1000]"
                );
                std::process::exit(2);
            }
        }
    }
    let (late, cancel) = smol::block_on(async { (overshoot(n).await, cancel_to_return(n).await) });
    let (o50, o99, omax) = percentiles(late);
    let (c50, c99, cmax) = percentiles(cancel);
    if json {
        println!(
            r#"{{"executor":"smol","n":{n},"overshoot_ms":{{"median":{o50:.4},"p99":{o99:.4},"max":{omax:.4}}},"cancel_to_return_us":{{"median":{c50:.2},"p99":{c99:.2},"max":{cmax:.2}}}}}"#
        );
    } else {
        println!("smol, n = {n}");
        println!("expiry overshoot:  median {o50:.3} ms, p99 {o99:.3} ms, max {omax:.3} ms");
        println!("cancel to return:  median {c50:.1} us, p99 {c99:.1} us, max {cmax:.1} us");
    }
}
