//! What spinning before parking buys and costs, both ways in one run: a pool whose idle
//! workers park at once (`spin(Duration::ZERO)`) against the default, whose workers spin up
//! to 50 µs for the next job, but only when their jobs come back to back.
//!
//! For each, from smol's `block_on`:
//!
//! - back to back: one no-op job after another, the round trip (median, p99) and the
//!   process CPU time per job;
//! - spaced: one no-op job every millisecond (the loop doing other work in between), the
//!   round trip and the CPU time per job: what a spinning worker burns on a machine whose
//!   loop needs the core.
//!
//! CPU time is the sum of every thread's time on CPU (`/proc/self/task/*/schedstat`), so
//! the figures are Linux-only; elsewhere they read 0. Run with
//! `cargo bench --bench spin` (`-- --json` adds one JSON line per setting).

use std::hint::black_box;
use std::time::{Duration, Instant};

use loopguard::pool::Pool;

const BACK_TO_BACK: usize = 20_000;
const SPACED: usize = 2_000;
const GAP: Duration = Duration::from_millis(1);

/// Nanoseconds every thread of this process has spent on a CPU.
fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

struct Figures {
    median: Duration,
    p99: Duration,
    cpu_per_job: Duration,
}

fn measure(pool: &Pool, jobs: usize, gap: Option<Duration>) -> Figures {
    let mut took = Vec::with_capacity(jobs);
    let cpu_start = cpu_ns();
    for _ in 0..jobs {
        let start = Instant::now();
        smol::block_on(pool.run(|| black_box(1u64))).expect("the job runs");
        took.push(start.elapsed());
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
    }
    let cpu = cpu_ns().saturating_sub(cpu_start);
    took.sort();
    Figures {
        median: took[jobs / 2],
        p99: took[jobs * 99 / 100],
        cpu_per_job: Duration::from_nanos(cpu / jobs as u64),
    }
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    println!(
        "{:<10} {:>14} {:>12} {:>12} {:>14} {:>12} {:>12}",
        "spin", "b2b median", "b2b p99", "b2b cpu/job", "spaced median", "spaced p99", "spaced cpu"
    );
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let pool = Pool::builder()
            .name("spin-bench")
            .workers(2)
            .spin(spin)
            .no_stuck_reports()
            .build()
            .expect("pool");
        measure(&pool, 2_000, None); // warm-up
        let b2b = measure(&pool, BACK_TO_BACK, None);
        let spaced = measure(&pool, SPACED, Some(GAP));
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{:<10} {:>11.1} us {:>9.1} us {:>9.1} us {:>11.1} us {:>9.1} us {:>9.1} us",
            format!("{} us", spin.as_micros()),
            us(b2b.median),
            us(b2b.p99),
            us(b2b.cpu_per_job),
            us(spaced.median),
            us(spaced.p99),
            us(spaced.cpu_per_job),
        );
        if json {
            println!(
                "{{\"spin_us\":{},\"b2b_median_us\":{:.2},\"b2b_p99_us\":{:.2},\"b2b_cpu_per_job_us\":{:.2},\"spaced_median_us\":{:.2},\"spaced_p99_us\":{:.2},\"spaced_cpu_per_job_us\":{:.2}}}",
                spin.as_micros(),
                us(b2b.median),
                us(b2b.p99),
                us(b2b.cpu_per_job),
                us(spaced.median),
                us(spaced.p99),
                us(spaced.cpu_per_job),
            );
        }
    }
}
