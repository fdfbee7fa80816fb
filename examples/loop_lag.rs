//! The loop measuring itself, side by side with Node's `monitorEventLoopDelay`
//! (`examples/loop_lag.js` is the same program on Node): a smol loop busy-blocks itself for
//! `B` ms every `E` ms while a `LoopLag` probe runs on it, then prints what the probe read.
//!
//! ```sh
//! cargo run --release --example loop_lag -- --block-ms 50 --every-ms 200 --secs 10 --resolution-ms 10 --json
//! node examples/loop_lag.js --block-ms 50 --every-ms 200 --secs 10 --resolution-ms 10 --json
//! ```
//!
//! `--json` prints one line with `p50_ms`, `p99_ms`, `max_ms` (the probe's lateness over the
//! run), `samples`, `probe_cpu_ms_per_s` (the CPU time of the loop thread spent inside the
//! probe's polls, per second of wall time, read with `CLOCK_THREAD_CPUTIME_ID` around each
//! poll) and `process_cpu_ms_per_s` (the whole process, `CLOCK_PROCESS_CPUTIME_ID`, the
//! user and system time `getrusage` reports). `--block-ms 0` is an idle loop.
//! `--resolution-ms 0` runs the same loop without a probe (the percentiles are then
//! `null`): its process CPU is the baseline, and the difference from a run with a probe is
//! the probe's whole cost, the reactor's work for its timer included.
//!
//! loopguard's figures are lateness (how long after its timer was due the probe was
//! polled); Node's histogram records the time between firings, the resolution included:
//! compare Node's figures less the resolution.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;
use futures_lite::StreamExt;
use loopguard::lag::LoopLag;
use rustix::time::{ClockId, clock_gettime};

struct Args {
    block: Duration,
    every: Duration,
    secs: u64,
    resolution: Duration,
    json: bool,
}

const USAGE: &str =
    "usage: loop_lag [--block-ms B] [--every-ms E] [--secs S] [--resolution-ms R] [--json]";

fn args() -> Result<Args, String> {
    let mut parsed = Args {
        block: Duration::ZERO,
        every: Duration::from_millis(200),
        secs: 10,
        resolution: Duration::from_millis(10),
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--json" {
            parsed.json = true;
            continue;
        }
        let value: u64 = args
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a whole number\n{USAGE}"))?;
        match flag.as_str() {
            "--block-ms" => parsed.block = Duration::from_millis(value),
            "--every-ms" => parsed.every = Duration::from_millis(value),
            "--secs" => parsed.secs = value,
            "--resolution-ms" => parsed.resolution = Duration::from_millis(value),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if !parsed.block.is_zero() && parsed.every.is_zero() {
        return Err(format!("--every-ms must be positive\n{USAGE}"));
    }
    if parsed.secs == 0 {
        return Err(format!("--secs must be positive\n{USAGE}"));
    }
    Ok(parsed)
}

fn cpu(clock: ClockId) -> Duration {
    let t = clock_gettime(clock);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// `inner`, with the CPU time of the polling thread spent inside its polls added to `spent`.
struct CpuTimed<F> {
    inner: F,
    spent: Rc<Cell<Duration>>,
}

impl<F: Future + Unpin> Future for CpuTimed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let before = cpu(ClockId::ThreadCPUTime);
        let output = Pin::new(&mut self.inner).poll(cx);
        let after = cpu(ClockId::ThreadCPUTime);
        self.spent
            .set(self.spent.get() + after.saturating_sub(before));
        output
    }
}

/// Holds the thread for `d`, spinning: the loop's blocking work.
fn busy(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn main() -> std::io::Result<()> {
    let args = args().unwrap_or_else(|message| {
        eprintln!("{message}");
        std::process::exit(2)
    });
    let run = Duration::from_secs(args.secs);
    let lag = if args.resolution.is_zero() {
        None
    } else {
        // The window covers the whole run, as Node's histogram does.
        let window = run + Duration::from_secs(1);
        Some(
            LoopLag::builder("loop_lag")
                .resolution(args.resolution)
                .window(window)
                .build()?,
        )
    };

    let ex = async_executor::LocalExecutor::new();
    let probe_cpu = Rc::new(Cell::new(Duration::ZERO));
    let probe = lag.as_ref().map(|lag| {
        ex.spawn(CpuTimed {
            inner: lag.probe(),
            spent: probe_cpu.clone(),
        })
    });
    let (block, every) = (args.block, args.every);
    let blocker = (!block.is_zero()).then(|| {
        ex.spawn(async move {
            let mut ticks = Timer::interval(every);
            while ticks.next().await.is_some() {
                busy(block);
            }
        })
    });

    let (cpu_before, began) = (cpu(ClockId::ProcessCPUTime), Instant::now());
    smol::block_on(ex.run(Timer::after(run)));
    let (cpu_spent, wall) = (cpu(ClockId::ProcessCPUTime) - cpu_before, began.elapsed());
    drop((probe, blocker));

    let per_s = |d: Duration| (d.as_secs_f64() * 1e3 / wall.as_secs_f64() * 1e3).round() / 1e3;
    let stats = lag.as_ref().map(LoopLag::stats);
    let or_null = |v: Option<f64>| v.map_or("null".to_string(), |v| v.to_string());
    // The fields in the order Node's script prints them.
    let line = format!(
        r#"{{"p50_ms":{},"p99_ms":{},"max_ms":{},"samples":{},"probe_cpu_ms_per_s":{},"process_cpu_ms_per_s":{}}}"#,
        or_null(stats.map(|s| ms(s.p50))),
        or_null(stats.map(|s| ms(s.p99))),
        or_null(stats.map(|s| ms(s.max))),
        stats.map_or(0, |s| s.samples),
        or_null(lag.as_ref().map(|_| per_s(probe_cpu.get()))),
        per_s(cpu_spent),
    );
    if args.json {
        println!("{line}");
    } else {
        println!(
            "loopguard probe, resolution {:?}, blocking {:?} every {:?} for {run:?}: {line}",
            args.resolution, block, every
        );
    }
    Ok(())
}
