//! One scrape storm, three ways: what admission control and coalescing buy.
//!
//! ```text
//! cargo run --release --example storm -- [--scrapes 64] [--workers 2] [--series 100000]
//!     [--walk-delay-ms 0] [--cache-ttl-ms 5000] [--json] [--svg FILE]
//! ```
//!
//! In one process it starts the registry exporter's serving code three times, on loopback:
//!
//! - `unbounded`: every walk through `blocking::unblock`, which queues without bound;
//! - `loopguard`: walks on the `registry-serve` pool, 503 + `Retry-After` when saturated;
//! - `loopguard_coalesced`: the same pool behind a `Refresh`, so concurrent scrapes share
//!   one walk.
//!
//! Against each it opens `--scrapes` connections, sends one `GET /metrics` on all of them at
//! once, and reports how many were served (200) and rejected (503), how many registry walks
//! ran, and the latencies. A walk is CPU work proportional to `--series` (the recorder's
//! rendering plus synthetic series), plus `--walk-delay-ms` of blocking sleep. With `--json`
//! the last line is machine-readable; latencies of a category with no responses print as
//! `-` in the table and `0.0` in JSON. With `--svg FILE` it also writes the latency curves.

use loopguard_demos::{cli, client, exporter};

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use exporter::{Config, Exporter, Mode, Registry, WalkKind};
use smol::LocalExecutor;

const USAGE: &str = "storm [--scrapes 64] [--workers 2] [--series 100000] [--walk-delay-ms 0] \
[--cache-ttl-ms 5000] [--json] [--svg FILE]";

#[derive(Debug)]
struct Options {
    scrapes: usize,
    workers: usize,
    series: usize,
    walk_delay: Duration,
    cache_ttl: Duration,
    json: bool,
    svg: Option<String>,
}

fn parse(mut args: cli::Args) -> Result<Options, String> {
    let mut o = Options {
        scrapes: 64,
        workers: 2,
        series: 100_000,
        walk_delay: Duration::ZERO,
        cache_ttl: Duration::from_secs(5),
        json: false,
        svg: None,
    };
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        match flag.as_str() {
            "--scrapes" => o.scrapes = args.value(&flag, inline)?,
            "--workers" => o.workers = args.value(&flag, inline)?,
            "--series" => o.series = args.value(&flag, inline)?,
            "--walk-delay-ms" => o.walk_delay = Duration::from_millis(args.value(&flag, inline)?),
            "--cache-ttl-ms" => o.cache_ttl = Duration::from_millis(args.value(&flag, inline)?),
            "--json" if inline.is_none() => o.json = true,
            "--svg" => o.svg = Some(args.value(&flag, inline)?),
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0)
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if !(1..=2000).contains(&o.scrapes) {
        return Err("--scrapes must be between 1 and 2000".into());
    }
    if o.workers == 0 || o.workers > loopguard::MAX_WORKERS {
        return Err(format!(
            "--workers must be between 1 and {}",
            loopguard::MAX_WORKERS
        ));
    }
    if o.series > 10_000_000 {
        return Err("--series must be at most 10000000".into());
    }
    if o.cache_ttl.is_zero() {
        return Err("--cache-ttl-ms must be above zero (the coalesced mode needs it)".into());
    }
    Ok(o)
}

/// What one mode did with the storm.
#[derive(Debug)]
struct Outcome {
    mode: Mode,
    served: Vec<f64>,
    rejected: Vec<f64>,
    other: usize,
    walks: u64,
}

/// The `q` quantile (nearest rank) of sorted milliseconds; 0.0 when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn storm_once(mode: Mode, o: &Options) -> io::Result<Outcome> {
    let config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        workers: o.workers,
        series: o.series,
        walk_delay: o.walk_delay,
        cache_ttl: if mode == Mode::LoopguardCoalesced {
            o.cache_ttl
        } else {
            Duration::ZERO
        },
        cardinality_interval: Duration::ZERO,
        mode,
        max_connections: o.scrapes + 16,
        ..Config::default()
    };
    let exporter = Exporter::spawn(config, Arc::new(Registry::new(o.series, o.walk_delay)))?;
    let addr = exporter.addr();
    let request = client::get_request("/metrics", &[]);
    let ex = LocalExecutor::new();
    let results = smol::block_on(ex.run(async {
        // Connect first, so the storm is the requests, not the handshakes.
        let mut streams = Vec::with_capacity(o.scrapes);
        for _ in 0..o.scrapes {
            streams.push(smol::net::TcpStream::connect(addr).await?);
        }
        let tasks: Vec<_> = streams
            .into_iter()
            .map(|stream| ex.spawn(client::exchange(stream, &request)))
            .collect();
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(task.await);
        }
        // Orphaned or queued walks finish before the walks are counted.
        exporter.shared().pool().wait_idle().await;
        io::Result::Ok(results)
    }))?;
    let mut outcome = Outcome {
        mode,
        served: Vec::new(),
        rejected: Vec::new(),
        other: 0,
        walks: exporter.shared().registry().walks(WalkKind::Scrape),
    };
    for result in results {
        match result {
            Ok(r) if r.status == 200 => outcome.served.push(r.elapsed.as_secs_f64() * 1e3),
            Ok(r) if r.status == 503 => outcome.rejected.push(r.elapsed.as_secs_f64() * 1e3),
            Ok(r) => {
                eprintln!("{}: unexpected status {}", mode.name(), r.status);
                outcome.other += 1;
            }
            Err(err) => {
                eprintln!("{}: request failed: {err}", mode.name());
                outcome.other += 1;
            }
        }
    }
    outcome.served.sort_by(f64::total_cmp);
    outcome.rejected.sort_by(f64::total_cmp);
    exporter.stop()?;
    Ok(outcome)
}

fn ms(sorted: &[f64], q: f64) -> String {
    if sorted.is_empty() {
        "-".into()
    } else {
        format!("{:.1} ms", quantile(sorted, q))
    }
}

fn json_line(outcomes: &[Outcome]) -> String {
    let modes: Vec<String> = outcomes
        .iter()
        .map(|o| {
            format!(
                "{{\"name\":\"{}\",\"served\":{},\"rejected\":{},\"walks\":{},\"served_p50_ms\":{:.3},\"served_p99_ms\":{:.3},\"rejected_p99_ms\":{:.3}}}",
                o.mode.name(),
                o.served.len(),
                o.rejected.len(),
                o.walks,
                quantile(&o.served, 0.5),
                quantile(&o.served, 0.99),
                quantile(&o.rejected, 0.99),
            )
        })
        .collect();
    format!("{{\"modes\":[{}]}}", modes.join(","))
}

fn svg(path: &str, outcomes: &[Outcome], o: &Options) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let curves: Vec<(String, Vec<(f64, f64)>)> = outcomes
        .iter()
        .map(|out| {
            let mut all: Vec<f64> = out.served.iter().chain(&out.rejected).copied().collect();
            all.sort_by(f64::total_cmp);
            let n = all.len().max(1) as f64;
            let points = all
                .iter()
                .enumerate()
                .map(|(i, &ms)| ((i + 1) as f64 / n * 100.0, ms.max(0.01)))
                .collect();
            let label = format!(
                "{}: {} served, {} rejected, {} walks",
                out.mode.name(),
                out.served.len(),
                out.rejected.len(),
                out.walks
            );
            (label, points)
        })
        .collect();
    let top = curves
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(1.0_f64, f64::max)
        * 1.5;

    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{} concurrent scrapes, {} workers, {} series: latency by percentile",
                o.scrapes, o.workers, o.series
            ),
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..100.0, (0.01..top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile of responses (served and rejected)")
        .y_desc("latency, ms (log)")
        .draw()?;
    let colors = [RED, BLUE, GREEN];
    for ((label, points), color) in curves.into_iter().zip(colors) {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() {
    let o = match parse(cli::Args::from_env()) {
        Ok(o) => o,
        Err(message) => cli::fail(USAGE, &message),
    };
    println!(
        "storm: {} concurrent GET /metrics per mode, {} workers, {} series per walk, {} ms walk delay, cache TTL {} ms",
        o.scrapes,
        o.workers,
        o.series,
        o.walk_delay.as_millis(),
        o.cache_ttl.as_millis()
    );
    let mut outcomes = Vec::new();
    for mode in [Mode::Unbounded, Mode::Loopguard, Mode::LoopguardCoalesced] {
        match storm_once(mode, &o) {
            Ok(outcome) => outcomes.push(outcome),
            Err(err) => {
                eprintln!("storm: {}: {err}", mode.name());
                std::process::exit(1);
            }
        }
    }
    println!();
    println!(
        "{:<20} {:>7} {:>9} {:>6} {:>12} {:>12} {:>13}",
        "mode", "served", "rejected", "walks", "served p50", "served p99", "rejected p99"
    );
    for out in &outcomes {
        println!(
            "{:<20} {:>7} {:>9} {:>6} {:>12} {:>12} {:>13}",
            out.mode.name(),
            out.served.len(),
            out.rejected.len(),
            out.walks,
            ms(&out.served, 0.5),
            ms(&out.served, 0.99),
            ms(&out.rejected, 0.99),
        );
    }
    let failed: usize = outcomes.iter().map(|o| o.other).sum();
    if failed > 0 {
        println!("({failed} responses were neither 200 nor 503; see stderr)");
    }
    if let Some(path) = &o.svg {
        match svg(path, &outcomes, &o) {
            Ok(()) => println!("chart written to {path}"),
            Err(err) => {
                eprintln!("storm: cannot write {path}: {err}");
                std::process::exit(1);
            }
        }
    }
    if o.json {
        println!("{}", json_line(&outcomes));
    }
}
