//! Scrape storms against `loopguard-exporter` on a real registry, side by side: the crate as
//! shipped, its own baselines (`Offload::Unbounded`, `Offload::OnLoop`), and the floor.
//!
//! ```text
//! cargo run --release --example storm -- [--scrapes 64] [--rate 40] [--secs 5] [--workers 2]
//!     [--worker-nice 10] [--worker-class idle] [--series 10000,100000] [--modes unbounded,loopguard,loopguard_coalesced,on_loop,floor]
//!     [--walk-delay-ms 0] [--cache-ttl-ms 5000] [--plain] [--json] [--svg FILE]
//! ```
//!
//! For each registry size and each mode it starts the crate's exporter
//! (`loopguard_demos::server`) in a fresh child process and drives it over loopback twice:
//! a burst of `--scrapes` concurrent `GET /metrics`, then `--rate` scrapes per second for
//! `--secs` seconds (open loop, a new connection each). Scrapes send `Accept-Encoding: gzip`
//! as Prometheus does (`--plain`: not). Meanwhile `/healthz` is probed every 10 ms. Modes:
//!
//! - `unbounded`: every walk through `blocking::unblock`, which queues without bound;
//! - `loopguard`: walks on the `registry-serve` pool, 503 + `Retry-After` when saturated;
//! - `loopguard_coalesced`: the same pool behind a `Refresh`: concurrent scrapes share a walk;
//! - `on_loop`: the render on the loop thread itself;
//! - `floor`: `loopguard`, but each walk sleeps as long as a real walk (render and gzip,
//!   timed as the server starts) instead of rendering, and answers a few bytes: the loop
//!   competes only with the client, so its refusal and `/healthz` latencies are the floor the
//!   rendering modes are compared with.

//!
//! The modes differ only in where the render runs (`loopguard_exporter::Offload`) or what it
//! renders: connections, negotiation, slicing and status codes are the crate's in all.
//!
//! The pool's workers run in scheduling class `--worker-class` (default `idle`: Linux's
//! `SCHED_IDLE`, the loop takes a CPU from a walk at once; `normal`: the loop's own class) at
//! nice value `--worker-nice` (default 10: below the loop; 0: the loop's own). Lists
//! (`--worker-class idle,normal --worker-nice 0,10`) run each loopguard mode once per
//! class and value, side by side in the same run.
//!
//! Reported per run: served (200), rejected (503 + `Retry-After`: refused at once, no free
//! slot) and expired (504: the scrape's budget ran out first) counts and latencies, walks run,
//! `/healthz` p99 during the load, the server's peak RSS, and its loop's lag p99 and max
//! (`loop_lag_p99_ms`, `loop_lag_max_ms`: the exporter's own probe, 10 ms resolution, over
//! the run; `null` for a server without one). A latency runs from a scrape's
//! first byte sent to its answer read; the client reads 64 answers one after the other on the
//! server's own machine, so the JSON also gives the refusals' and the 200s' p99 to the
//! moment the kernel received each answer (`rejected_p99_arrival_ms`,
//! `served_p99_arrival_ms`: `SO_TIMESTAMPNS`, Linux), what a client reading each answer as it
//! came would see (less its own wake-up); `unstamped` counts the answers left out of them.
//! `/healthz` is probed from a thread of its own. `--json` adds a last line:
//! `modes` (the burst on the largest registry at the first `--worker-class` and
//! `--worker-nice`, as before) and `runs` (every run, with its `worker_nice` and
//! `worker_class`; `null` for modes without a pool); latencies
//! of a category with no answers print `-` in the table and `0.0` in JSON. `--svg FILE` draws
//! the burst latencies on the largest registry.

use std::io;
use std::time::Duration;

use loopguard_demos::server::{Config, Mode};
use loopguard_demos::storm::{
    Load, Priority, Run, child_args, drive, quantile, serve_child, spawn_child,
};
use loopguard_demos::{chart, cli};

const USAGE: &str = "storm [--scrapes 64] [--rate 40] [--secs 5] [--workers 2] [--worker-nice 10] [--worker-class idle] \
[--series 10000,100000] [--modes unbounded,loopguard,loopguard_coalesced,on_loop,floor] \
[--walk-delay-ms 0] [--cache-ttl-ms 5000] [--plain] [--json] [--svg FILE]";

#[derive(Debug)]
struct Options {
    scrapes: usize,
    rate: u32,
    secs: u32,
    workers: usize,
    worker_nice: Vec<u8>,
    /// Idle class (`true`) or normal (`false`), per run.
    worker_class: Vec<bool>,
    series: Vec<usize>,
    modes: Vec<Mode>,
    walk_delay: Duration,
    cache_ttl: Duration,
    plain: bool,
    json: bool,
    svg: Option<String>,
    /// Internal: serve this mode in this process (a child of the storm).
    serve: Option<Mode>,
}

fn parse(mut args: cli::Args) -> Result<Options, String> {
    let all = Mode::ALL;
    let mut o = Options {
        scrapes: 64,
        rate: 40,
        secs: 5,
        workers: 2,
        worker_nice: vec![loopguard_demos::server::DEFAULT_WORKER_NICE],
        worker_class: vec![loopguard_demos::server::DEFAULT_WORKER_SCHED_IDLE],
        series: vec![10_000, 100_000],
        modes: all.to_vec(),
        walk_delay: Duration::ZERO,
        cache_ttl: Duration::from_secs(5),
        plain: false,
        json: false,
        svg: None,
        serve: None,
    };
    let mode = |name: &str| Mode::from_name(name).ok_or(format!("unknown mode `{name}`"));
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        match flag.as_str() {
            "--scrapes" => o.scrapes = args.value(&flag, inline)?,
            "--rate" => o.rate = args.value(&flag, inline)?,
            "--secs" => o.secs = args.value(&flag, inline)?,
            "--workers" => o.workers = args.value(&flag, inline)?,
            "--worker-nice" => {
                o.worker_nice = cli::list(&flag, &args.value::<String>(&flag, inline)?)?
            }
            "--worker-class" => {
                let names: Vec<String> = cli::list(&flag, &args.value::<String>(&flag, inline)?)?;
                o.worker_class = names
                    .iter()
                    .map(|n| {
                        Priority::parse_class(n)
                            .ok_or(format!("--worker-class: idle or normal, got `{n}`"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--series" => o.series = cli::list(&flag, &args.value::<String>(&flag, inline)?)?,
            "--modes" => {
                let names: Vec<String> = cli::list(&flag, &args.value::<String>(&flag, inline)?)?;
                o.modes = names.iter().map(|n| mode(n)).collect::<Result<_, _>>()?;
            }
            "--walk-delay-ms" => o.walk_delay = Duration::from_millis(args.value(&flag, inline)?),
            "--cache-ttl-ms" => o.cache_ttl = Duration::from_millis(args.value(&flag, inline)?),
            "--plain" if inline.is_none() => o.plain = true,
            "--json" if inline.is_none() => o.json = true,
            "--svg" => o.svg = Some(args.value(&flag, inline)?),
            "--serve" => o.serve = Some(mode(&args.value::<String>(&flag, inline)?)?),
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0)
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if !(1..=2000).contains(&o.scrapes) || !(1..=1000).contains(&o.rate) || o.secs > 600 {
        return Err("--scrapes: 1 to 2000; --rate: 1 to 1000; --secs: at most 600".into());
    }
    if o.workers == 0 || o.workers > loopguard::pool::MAX_WORKERS {
        let max = loopguard::pool::MAX_WORKERS;
        return Err(format!("--workers must be between 1 and {max}"));
    }
    if o.worker_nice.is_empty() || o.worker_nice.iter().any(|&n| n > 19) {
        return Err("--worker-nice: 0 to 19 each".into());
    }
    if o.worker_class.is_empty() {
        return Err("--worker-class: idle or normal, at least one".into());
    }
    if o.series.is_empty() || o.series.iter().any(|&n| n > 10_000_000) || o.modes.is_empty() {
        return Err("--series: 1 to 10000000 each; --modes: at least one".into());
    }
    if o.cache_ttl.is_zero() {
        return Err("--cache-ttl-ms must be above zero (the coalesced mode needs it)".into());
    }
    o.series.sort_unstable();
    Ok(o)
}

/// One row of the results.
struct Row {
    series: usize,
    load: Load,
    mode: Mode,
    /// The workers' class and nice value; `None` for modes without a pool.
    priority: Option<Priority>,
    run: Run,
}

/// Whether `mode` walks on a loopguard pool (and so has a worker nice value).
fn pooled(mode: Mode) -> bool {
    mode.pooled()
}

fn run_once(
    o: &Options,
    series: usize,
    mode: Mode,
    priority: Priority,
    load: Load,
) -> io::Result<Run> {
    let server = spawn_child(&child_args(
        mode,
        series,
        o.workers,
        priority,
        o.walk_delay,
        o.cache_ttl,
    ))?;
    let gzip: &[(&str, &str)] = if o.plain {
        &[]
    } else {
        &[("Accept-Encoding", "gzip")]
    };
    let mut run = drive(server.addr, load, gzip)?;
    server.finish(&mut run)?;
    Ok(run)
}

fn ms(sorted: &[f64], q: f64) -> String {
    match sorted.is_empty() {
        true => "-".into(),
        false if quantile(sorted, q) > 1e9 => "never".into(),
        false => format!("{:.1} ms", quantile(sorted, q)),
    }
}

fn json_object(row: &Row, extra: &str) -> String {
    let (name, run) = (row.mode.name(), &row.run);
    let nice = row
        .priority
        .map_or("null".to_string(), |p| p.nice.to_string());
    let class = row
        .priority
        .map_or("null".to_string(), |p| format!("\"{}\"", p.class()));
    let (lag_p99, lag_max) = run
        .loop_lag_ms
        .map_or(("null".into(), "null".into()), |(p, m)| {
            (format!("{p:.3}"), format!("{m:.3}"))
        });
    format!(
        "{{{extra}\"name\":\"{name}\",\"served\":{},\"rejected\":{},\"expired\":{},\"walks\":{},\"served_p50_ms\":{:.3},\"served_p99_ms\":{:.3},\"rejected_p99_ms\":{:.3},\"expired_p99_ms\":{:.3},\"rejected_p99_arrival_ms\":{:.3},\"served_p99_arrival_ms\":{:.3},\"healthz_p99_ms\":{:.3},\"peak_rss_mib\":{:.1},\"loop_lag_p99_ms\":{lag_p99},\"loop_lag_max_ms\":{lag_max},\"other\":{},\"unstamped\":{},\"worker_nice\":{nice},\"worker_class\":{class}}}",
        run.served.len(),
        run.rejected.len(),
        run.expired.len(),
        run.walks,
        quantile(&run.served, 0.5),
        quantile(&run.served, 0.99),
        quantile(&run.rejected, 0.99),
        quantile(&run.expired, 0.99),
        quantile(&run.rejected_arrived, 0.99),
        quantile(&run.served_arrived, 0.99),
        quantile(&run.healthz, 0.99).min(1e12),
        run.peak_rss_kib as f64 / 1024.0,
        run.other,
        run.unstamped,
    )
}

fn main() {
    let o = match parse(cli::Args::from_env()) {
        Ok(o) => o,
        Err(message) => cli::fail(USAGE, &message),
    };
    if let Some(mode) = o.serve {
        let config = Config {
            listen: ([127, 0, 0, 1], 0).into(),
            workers: o.workers,
            worker_nice: o.worker_nice[0],
            worker_sched_idle: o.worker_class[0],
            series: o.series[0],
            walk_delay: o.walk_delay,
            cache_ttl: match mode {
                Mode::LoopguardCoalesced => o.cache_ttl,
                _ => Duration::ZERO,
            },
            cardinality_interval: Duration::ZERO,
            mode,
            max_connections: 10_000,
            ..Config::default()
        };
        if let Err(err) = serve_child(config) {
            eprintln!("storm server: {err}");
            std::process::exit(1);
        }
        return;
    }
    let encoding = if o.plain { "plain" } else { "gzip" };
    println!(
        "storm: per mode, a burst of {} scrapes, then {} scrapes/s for {} s; {} workers, class {:?}, nice {:?}, {encoding}, series {:?}, walk delay {} ms, cache TTL {} ms",
        o.scrapes,
        o.rate,
        o.secs,
        o.workers,
        o.worker_class
            .iter()
            .map(|&idle| Priority { idle, nice: 0 }.class())
            .collect::<Vec<_>>(),
        o.worker_nice,
        o.series,
        o.walk_delay.as_millis(),
        o.cache_ttl.as_millis()
    );
    let loads = [
        Load::Burst(o.scrapes),
        Load::Sustained {
            rate: o.rate,
            secs: o.secs,
        },
    ];
    let mut rows = Vec::new();
    for &series in &o.series {
        for load in loads {
            for &mode in &o.modes {
                let priorities: Vec<Option<Priority>> = match pooled(mode) {
                    true => o
                        .worker_class
                        .iter()
                        .flat_map(|&idle| {
                            o.worker_nice
                                .iter()
                                .map(move |&nice| Some(Priority { idle, nice }))
                        })
                        .collect(),
                    false => vec![None],
                };
                for priority in priorities {
                    let at = priority.map_or(String::new(), |p| {
                        format!(", {} class, nice {}", p.class(), p.nice)
                    });
                    eprintln!("{series} series, {}, {}{at}...", load.name(), mode.name());
                    let given = priority.unwrap_or(Priority {
                        idle: false,
                        nice: 0,
                    });
                    match run_once(&o, series, mode, given, load) {
                        Ok(run) => rows.push(Row {
                            series,
                            load,
                            mode,
                            priority,
                            run,
                        }),
                        Err(err) => {
                            eprintln!("storm: {}: {err}", mode.name());
                            std::process::exit(1);
                        }
                    }
                }
            }
        }
    }
    println!();
    println!(
        "{:>7} {:<9} {:<20} {:>6} {:>4} {:>6} {:>8} {:>7} {:>6} {:>11} {:>11} {:>10} {:>11} {:>10} {:>10} {:>9}",
        "series",
        "load",
        "mode",
        "class",
        "nice",
        "served",
        "rejected",
        "expired",
        "walks",
        "served p50",
        "served p99",
        "503 p99",
        "healthz p99",
        "lag p99",
        "lag max",
        "peak RSS"
    );
    for row in &rows {
        let r = &row.run;
        println!(
            "{:>7} {:<9} {:<20} {:>6} {:>4} {:>6} {:>8} {:>7} {:>6} {:>11} {:>11} {:>10} {:>11} {:>10} {:>10} {:>6.0} MiB",
            row.series,
            row.load.name(),
            row.mode.name(),
            row.priority.map_or("-", |p| p.class()),
            row.priority.map_or("-".to_string(), |p| p.nice.to_string()),
            r.served.len(),
            r.rejected.len(),
            r.expired.len(),
            r.walks,
            ms(&r.served, 0.5),
            ms(&r.served, 0.99),
            ms(&r.rejected, 0.99),
            ms(&r.healthz, 0.99),
            r.loop_lag_ms
                .map_or("-".into(), |(p99, _)| format!("{p99:.1} ms")),
            r.loop_lag_ms
                .map_or("-".into(), |(_, max)| format!("{max:.1} ms")),
            r.peak_rss_kib as f64 / 1024.0,
        );
    }
    let failed: usize = rows.iter().map(|r| r.run.other).sum();
    if failed > 0 {
        println!("({failed} answers were neither 200, a refusal nor an expiry, or failed:");
        for row in rows.iter().filter(|r| r.run.other > 0) {
            for (kind, n) in &row.run.other_kinds {
                let (series, load) = (row.series, row.load.name());
                println!(
                    "  {series} series, {load}, {}: {n} x {kind}",
                    row.mode.name()
                );
            }
        }
        println!(")");
    }
    for row in rows.iter().filter(|r| r.mode == Mode::Loopguard) {
        let twin = rows
            .iter()
            .find(|u| u.mode == Mode::Unbounded && u.series == row.series && u.load == row.load);
        if let Some(unbounded) =
            twin.filter(|u| !row.run.served.is_empty() && !u.run.served.is_empty())
        {
            let ratio = quantile(&unbounded.run.served, 0.99) / quantile(&row.run.served, 0.99);
            let at = row.priority.map_or(String::new(), |p| {
                format!(" ({} class, nice {})", p.class(), p.nice)
            });
            println!(
                "{} series, {}: loopguard's served p99{at} is {ratio:.1}x better than unbounded's",
                row.series,
                row.load.name()
            );
        }
    }
    // Workers below the loop against workers at its priority, same mode, same run.
    let same = Priority {
        idle: false,
        nice: 0,
    };
    for row in rows
        .iter()
        .filter(|r| r.priority.is_some_and(|p| p != same))
    {
        let twin = rows.iter().find(|u| {
            u.priority == Some(same)
                && u.mode == row.mode
                && u.series == row.series
                && u.load == row.load
        });
        if let (Some(base), Some(p)) = (twin, row.priority) {
            let p99 = |v: &[f64]| ms(v, 0.99);
            println!(
                "{} series, {}, {}: {} class at nice {} against normal at 0: 503 p99 {} against {}, healthz p99 {} against {}, served p99 {} against {}",
                row.series,
                row.load.name(),
                row.mode.name(),
                p.class(),
                p.nice,
                p99(&row.run.rejected),
                p99(&base.run.rejected),
                p99(&row.run.healthz),
                p99(&base.run.healthz),
                p99(&row.run.served),
                p99(&base.run.served),
            );
        }
    }
    let largest = o.series[o.series.len() - 1];
    let bursts: Vec<&Row> = rows
        .iter()
        .filter(|r| r.series == largest && matches!(r.load, Load::Burst(_)))
        .filter(|r| {
            r.priority.is_none_or(|p| {
                p == Priority {
                    idle: o.worker_class[0],
                    nice: o.worker_nice[0],
                }
            })
        })
        .collect();
    if let Some(path) = &o.svg {
        let title = format!(
            "{} concurrent scrapes, {} workers, {largest} series: latency by percentile",
            o.scrapes, o.workers
        );
        let runs: Vec<(Mode, &Run)> = bursts.iter().map(|r| (r.mode, &r.run)).collect();
        match chart::svg(path, &title, &runs) {
            Ok(()) => println!("chart written to {path}"),
            Err(err) => {
                eprintln!("storm: cannot write {path}: {err}");
                std::process::exit(1);
            }
        }
    }
    if o.json {
        let modes: Vec<String> = bursts.iter().map(|r| json_object(r, "")).collect();
        let runs: Vec<String> = rows
            .iter()
            .map(|r| {
                let extra = format!("\"series\":{},\"load\":\"{}\",", r.series, r.load.name());
                json_object(r, &extra)
            })
            .collect();
        println!(
            "{{\"modes\":[{}],\"runs\":[{}]}}",
            modes.join(","),
            runs.join(",")
        );
    }
}
