//! loopguard's exporter side by side with client_golang's promhttp on the same registry.
//!
//! ```text
//! (cd demos/go/promhttp_exporter && GO111MODULE=off GOPATH=/usr/share/gocode \
//!     go build -o ../../../target/go/promhttp_exporter .)
//! cargo run --release --example promhttp_side_by_side -- --go-bin target/go/promhttp_exporter
//!     [--series 100000] [--workers 2] [--worker-nice 10] [--worker-class idle] [--scrapes 64] [--rate 40] [--secs 5]
//!     [--json]
//! ```
//!
//! Both servers hold `--series` gauges `synthetic_registry_series{shard, id}` with the same
//! label shape and values, 1 % of them changed every 100 ms, and both walk at most two at
//! a time: `loopguard-exporter` (`loopguard_demos::server`, `--workers` workers in scheduling
//! class `--worker-class` at nice `--worker-nice`, 503 + `Retry-After` when both are busy) and promhttp
//! (`demos/go/promhttp_exporter`: `HandlerFor` with `MaxRequestsInFlight: 2`, 503 over it).
//! Each load runs on a fresh process of each, driven by the storm's client
//! (`loopguard_demos::storm::drive`, gzip asked): one scrape at a time on an idle server
//! (five, the median), a burst of `--scrapes` concurrent scrapes, then `--rate` scrapes/s
//! for `--secs` s; `/healthz` probed every 10 ms meanwhile. Reported: served, refused (a
//! 503 sent at once: loopguard's with `Retry-After`, promhttp's "Limit of concurrent
//! requests reached") and their p99s, `/healthz` p99, peak RSS, answers that were neither,
//! and loopguard/promhttp ratios.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use loopguard_demos::cli;
use loopguard_demos::server::{Config, DEFAULT_WORKER_NICE, DEFAULT_WORKER_SCHED_IDLE, Mode};
use loopguard_demos::storm::{
    Load, Priority, Run, child_args, drive, quantile, serve_child, spawn_child, spawn_server,
};

const USAGE: &str = "promhttp_side_by_side --go-bin PATH [--series 100000] [--workers 2] \
[--worker-nice 10] [--worker-class idle] [--scrapes 64] [--rate 40] [--secs 5] [--json]";

struct Options {
    go_bin: Option<PathBuf>,
    series: usize,
    workers: usize,
    nice: u8,
    idle: bool,
    scrapes: usize,
    rate: u32,
    secs: u32,
    json: bool,
    serve: bool,
}

fn parse(mut args: cli::Args) -> Result<Options, String> {
    let mut o = Options {
        go_bin: None,
        series: 100_000,
        workers: 2,
        nice: DEFAULT_WORKER_NICE,
        idle: DEFAULT_WORKER_SCHED_IDLE,
        scrapes: 64,
        rate: 40,
        secs: 5,
        json: false,
        serve: false,
    };
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        match flag.as_str() {
            "--go-bin" => o.go_bin = Some(args.value::<String>(&flag, inline)?.into()),
            "--series" => o.series = args.value(&flag, inline)?,
            "--workers" => o.workers = args.value(&flag, inline)?,
            "--worker-nice" => o.nice = args.value(&flag, inline)?,
            "--worker-class" => {
                let class: String = args.value(&flag, inline)?;
                o.idle = Priority::parse_class(&class)
                    .ok_or(format!("--worker-class: idle or normal, got `{class}`"))?;
            }
            "--scrapes" => o.scrapes = args.value(&flag, inline)?,
            "--rate" => o.rate = args.value(&flag, inline)?,
            "--secs" => o.secs = args.value(&flag, inline)?,
            "--json" if inline.is_none() => o.json = true,
            // Internal: serve loopguard's exporter in this process (a child of the run).
            "--serve" => {
                let _: String = args.value(&flag, inline)?;
                o.serve = true;
            }
            // The rest of what `child_args` passes, for the child.
            "--walk-delay-ms" | "--cache-ttl-ms" => {
                let _: u64 = args.value(&flag, inline)?;
            }
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0)
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if o.go_bin.is_none() && !o.serve {
        return Err("--go-bin is required".into());
    }
    if o.nice > 19 || o.workers == 0 || o.scrapes == 0 || o.rate == 0 || o.series == 0 {
        return Err("--worker-nice 0 to 19; the others above zero".into());
    }
    Ok(o)
}

/// Which server.
#[derive(Clone, Copy, PartialEq)]
enum Server {
    Loopguard,
    Promhttp,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Loopguard => "loopguard",
            Server::Promhttp => "promhttp",
        }
    }
}

/// One load against a fresh process of `server`.
fn run_once(o: &Options, server: Server, load: Load) -> io::Result<Run> {
    let child = match server {
        Server::Loopguard => spawn_child(&child_args(
            Mode::Loopguard,
            o.series,
            o.workers,
            Priority {
                idle: o.idle,
                nice: o.nice,
            },
            Duration::ZERO,
            Duration::from_secs(5),
        ))?,
        Server::Promhttp => {
            let go = o.go_bin.as_deref().expect("checked by parse");
            let args = [format!("--series={}", o.series)];
            spawn_server(go, &args)?
        }
    };
    let mut run = drive(child.addr, load, &[("Accept-Encoding", "gzip")])?;
    child.finish(&mut run)?;
    Ok(run)
}

/// The median of five scrapes one at a time on an idle server, ms.
fn one_scrape(o: &Options, server: Server) -> io::Result<f64> {
    let mut times = Vec::new();
    for _ in 0..5 {
        let run = run_once(o, server, Load::Burst(1))?;
        times.extend(run.served);
    }
    times.sort_by(f64::total_cmp);
    Ok(quantile(&times, 0.5))
}

fn main() {
    let o = match parse(cli::Args::from_env()) {
        Ok(o) => o,
        Err(message) => cli::fail(USAGE, &message),
    };
    if o.serve {
        let config = Config {
            listen: ([127, 0, 0, 1], 0).into(),
            workers: o.workers,
            worker_nice: o.nice,
            worker_sched_idle: o.idle,
            series: o.series,
            cardinality_interval: Duration::ZERO,
            mode: Mode::Loopguard,
            ..Config::default()
        };
        if let Err(err) = serve_child(config) {
            eprintln!("side by side server: {err}");
            std::process::exit(1);
        }
        return;
    }
    println!(
        "promhttp side by side: {} series, 2 walks at a time each (loopguard: {} workers, {} class, nice {}; promhttp: MaxRequestsInFlight 2), gzip",
        o.series,
        o.workers,
        Priority {
            idle: o.idle,
            nice: o.nice
        }
        .class(),
        o.nice
    );
    let loads = [
        Load::Burst(o.scrapes),
        Load::Sustained {
            rate: o.rate,
            secs: o.secs,
        },
    ];
    let servers = [Server::Loopguard, Server::Promhttp];
    let mut single = Vec::new();
    for server in servers {
        eprintln!("{}: one scrape at a time...", server.name());
        match one_scrape(&o, server) {
            Ok(ms) => single.push(ms),
            Err(err) => cli::fail(USAGE, &format!("{}: {err}", server.name())),
        }
    }
    let mut rows = Vec::new();
    for load in loads {
        for server in servers {
            eprintln!("{}: {}...", server.name(), load.name());
            match run_once(&o, server, load) {
                Ok(run) => rows.push((load, server, run)),
                Err(err) => cli::fail(USAGE, &format!("{}: {err}", server.name())),
            }
        }
    }
    let ms = |v: &[f64]| match v.is_empty() {
        true => "-".to_string(),
        false => format!("{:.1} ms", quantile(v, 0.99)),
    };
    println!(
        "\none scrape, idle server (median of 5): loopguard {:.1} ms, promhttp {:.1} ms ({:.2}x)",
        single[0],
        single[1],
        single[0] / single[1]
    );
    println!(
        "{:<9} {:<9} {:>6} {:>7} {:>11} {:>11} {:>11} {:>8} {:>5}",
        "load",
        "server",
        "served",
        "refused",
        "served p99",
        "503 p99",
        "healthz p99",
        "peak RSS",
        "other"
    );
    for (load, server, run) in &rows {
        println!(
            "{:<9} {:<9} {:>6} {:>7} {:>11} {:>11} {:>11} {:>4.0} MiB {:>5}",
            load.name(),
            server.name(),
            run.served.len(),
            run.rejected.len(),
            ms(&run.served),
            ms(&run.rejected),
            ms(&run.healthz),
            run.peak_rss_kib as f64 / 1024.0,
            run.other
        );
    }
    let find = |load: &str, server: Server| {
        rows.iter()
            .find(|(l, s, _)| l.name() == load && *s == server)
            .map(|(_, _, r)| r)
            .expect("every run")
    };
    let (lb, gb) = (
        find("burst", Server::Loopguard),
        find("burst", Server::Promhttp),
    );
    let (ls, gs) = (
        find("sustained", Server::Loopguard),
        find("sustained", Server::Promhttp),
    );
    println!(
        "loopguard / promhttp: burst 503 p99 {:.2}x, sustained served {:.2}x ({} against {}), peak RSS {:.2}x",
        quantile(&lb.rejected, 0.99) / quantile(&gb.rejected, 0.99).max(1e-9),
        ls.served.len() as f64 / gs.served.len().max(1) as f64,
        ls.served.len(),
        gs.served.len(),
        ls.peak_rss_kib as f64 / gs.peak_rss_kib.max(1) as f64,
    );
    if o.json {
        let objects: Vec<String> = rows
            .iter()
            .map(|(load, server, run)| {
                format!(
                    "{{\"load\":\"{}\",\"server\":\"{}\",\"served\":{},\"refused\":{},\"served_p99_ms\":{:.3},\"refused_p99_ms\":{:.3},\"healthz_p99_ms\":{:.3},\"peak_rss_mib\":{:.1},\"other\":{}}}",
                    load.name(),
                    server.name(),
                    run.served.len(),
                    run.rejected.len(),
                    quantile(&run.served, 0.99),
                    quantile(&run.rejected, 0.99),
                    quantile(&run.healthz, 0.99).min(1e12),
                    run.peak_rss_kib as f64 / 1024.0,
                    run.other
                )
            })
            .collect();
        println!(
            "{{\"one_scrape_ms\":{{\"loopguard\":{:.3},\"promhttp\":{:.3}}},\"runs\":[{}]}}",
            single[0],
            single[1],
            objects.join(",")
        );
    }
}
