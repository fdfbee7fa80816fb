//! loopguard's exporter side by side with client_golang's promhttp and with
//! metrics-exporter-prometheus's own (tokio) listener, on the same registry.
//!
//! ```text
//! (cd demos/go/promhttp_exporter && GO111MODULE=off GOPATH=/usr/share/gocode \
//!     go build -o ../../../target/go/promhttp_exporter .)
//! cargo build --release -p loopguard-peer-mep-listener
//! cargo run --release --example promhttp_side_by_side -- --go-bin target/go/promhttp_exporter
//!     [--mep-bin target/release/loopguard-peer-mep-listener] [--runs 1]
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
//! requests reached") and their p99s, `/healthz` p99, peak RSS, the server's CPU per
//! served scrape, answers that were neither, and loopguard/promhttp ratios.
//!
//! With `--mep-bin`, a third server: metrics-exporter-prometheus's `with_http_listener`
//! (`peers/mep_listener`, a workspace member of its own so that its tokio features never
//! reach the crates' builds) on the same series. It renders on tokio's blocking pool for
//! every request, without a limit, so it refuses nothing; its `/health` is probed instead of
//! `/healthz`. `--runs N` repeats every load N times (fresh processes each time) and adds
//! the medians of the runs and the goals' ratios on them.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use loopguard_demos::cli;
use loopguard_demos::server::{Config, DEFAULT_WORKER_NICE, DEFAULT_WORKER_SCHED_IDLE, Mode};
use loopguard_demos::storm::{
    Load, Priority, Run, child_args, drive_probing, quantile, serve_child, spawn_child,
    spawn_server,
};

const USAGE: &str = "promhttp_side_by_side --go-bin PATH [--mep-bin PATH] [--runs 1] [--series 100000] \
[--workers 2] [--worker-nice 10] [--worker-class idle] [--scrapes 64] [--rate 40] [--secs 5] [--json]";

struct Options {
    go_bin: Option<PathBuf>,
    mep_bin: Option<PathBuf>,
    runs: usize,
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
        mep_bin: None,
        runs: 1,
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
            "--mep-bin" => o.mep_bin = Some(args.value::<String>(&flag, inline)?.into()),
            "--runs" => o.runs = args.value(&flag, inline)?,
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
    if o.nice > 19
        || o.workers == 0
        || o.scrapes == 0
        || o.rate == 0
        || o.series == 0
        || o.runs == 0
    {
        return Err("--worker-nice 0 to 19; the others above zero".into());
    }
    Ok(o)
}

/// Which server.
#[derive(Clone, Copy, PartialEq)]
enum Server {
    Loopguard,
    Promhttp,
    TokioListener,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::Loopguard => "loopguard",
            Server::Promhttp => "promhttp",
            Server::TokioListener => "tokio_listener",
        }
    }

    /// The path it answers without rendering.
    fn health(self) -> &'static str {
        match self {
            Server::TokioListener => "/health",
            _ => "/healthz",
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
            spawn_server(go, &[format!("--series={}", o.series)])?
        }
        Server::TokioListener => {
            let mep = o.mep_bin.as_deref().expect("listed only with --mep-bin");
            spawn_server(mep, &[format!("--series={}", o.series)])?
        }
    };
    let gzip = [("Accept-Encoding", "gzip")];
    let mut run = drive_probing(child.addr, load, &gzip, server.health())?;
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

/// The server's CPU per served scrape, ms (`None` without a CPU figure or a served scrape).
fn cpu_per_scrape(run: &Run) -> Option<f64> {
    let served = run.served.len();
    run.server_cpu_ms
        .filter(|_| served > 0)
        .map(|cpu| cpu / served as f64)
}

/// The figures the goals read, for one load and server: medians over the runs.
struct Medians {
    served: f64,
    served_p99_ms: f64,
    refused_p99_ms: f64,
    peak_rss_mib: f64,
    cpu_ms_per_scrape: Option<f64>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    quantile(&values, 0.5)
}

fn medians(runs: &[&Run]) -> Medians {
    let of = |f: &dyn Fn(&Run) -> f64| median(runs.iter().map(|r| f(r)).collect());
    let cpu: Vec<f64> = runs.iter().filter_map(|r| cpu_per_scrape(r)).collect();
    Medians {
        served: of(&|r| r.served.len() as f64),
        served_p99_ms: of(&|r| quantile(&r.served, 0.99)),
        refused_p99_ms: of(&|r| quantile(&r.rejected, 0.99)),
        peak_rss_mib: of(&|r| r.peak_rss_kib as f64 / 1024.0),
        cpu_ms_per_scrape: (!cpu.is_empty()).then(|| median(cpu)),
    }
}

fn json_number(value: Option<f64>) -> String {
    value.map_or("null".to_string(), |v| format!("{v:.3}"))
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
        "promhttp side by side: {} series, 2 walks at a time each (loopguard: {} workers, {} class, nice {}; promhttp: MaxRequestsInFlight 2){}, gzip, {} run(s)",
        o.series,
        o.workers,
        Priority {
            idle: o.idle,
            nice: o.nice
        }
        .class(),
        o.nice,
        if o.mep_bin.is_some() {
            "; metrics-exporter-prometheus's tokio listener: unbounded"
        } else {
            ""
        },
        o.runs
    );
    let loads = [
        Load::Burst(o.scrapes),
        Load::Sustained {
            rate: o.rate,
            secs: o.secs,
        },
    ];
    let mut servers = vec![Server::Loopguard, Server::Promhttp];
    if o.mep_bin.is_some() {
        servers.push(Server::TokioListener);
    }
    let mut single = Vec::new();
    for &server in &servers {
        eprintln!("{}: one scrape at a time...", server.name());
        match one_scrape(&o, server) {
            Ok(ms) => single.push(ms),
            Err(err) => cli::fail(USAGE, &format!("{}: {err}", server.name())),
        }
    }
    let mut rows = Vec::new();
    for round in 1..=o.runs {
        for load in loads {
            for &server in &servers {
                eprintln!("run {round}: {}: {}...", server.name(), load.name());
                match run_once(&o, server, load) {
                    Ok(run) => rows.push((round, load, server, run)),
                    Err(err) => cli::fail(USAGE, &format!("{}: {err}", server.name())),
                }
            }
        }
    }
    let ms = |v: &[f64]| match v.is_empty() {
        true => "-".to_string(),
        false => format!("{:.1} ms", quantile(v, 0.99)),
    };
    let singles: Vec<String> = servers
        .iter()
        .zip(&single)
        .map(|(server, ms)| format!("{} {ms:.1} ms", server.name()))
        .collect();
    println!(
        "\none scrape, idle server (median of 5): {}; loopguard / promhttp {:.2}x",
        singles.join(", "),
        single[0] / single[1]
    );
    println!(
        "{:>3} {:<9} {:<14} {:>6} {:>7} {:>11} {:>11} {:>11} {:>8} {:>10} {:>5}",
        "run",
        "load",
        "server",
        "served",
        "refused",
        "served p99",
        "503 p99",
        "healthz p99",
        "peak RSS",
        "CPU/scrape",
        "other"
    );
    for (round, load, server, run) in &rows {
        println!(
            "{:>3} {:<9} {:<14} {:>6} {:>7} {:>11} {:>11} {:>11} {:>4.0} MiB {:>10} {:>5}",
            round,
            load.name(),
            server.name(),
            run.served.len(),
            run.rejected.len(),
            ms(&run.served),
            ms(&run.rejected),
            ms(&run.healthz),
            run.peak_rss_kib as f64 / 1024.0,
            cpu_per_scrape(run).map_or("-".to_string(), |c| format!("{c:.1} ms")),
            run.other
        );
    }
    let summary = |load: &str, server: Server| {
        let runs: Vec<&Run> = rows
            .iter()
            .filter(|(_, l, s, _)| l.name() == load && *s == server)
            .map(|(_, _, _, r)| r)
            .collect();
        medians(&runs)
    };
    let (lb, gb) = (
        summary("burst", Server::Loopguard),
        summary("burst", Server::Promhttp),
    );
    let (ls, gs) = (
        summary("sustained", Server::Loopguard),
        summary("sustained", Server::Promhttp),
    );
    let refused_ratio = lb.refused_p99_ms / gb.refused_p99_ms.max(1e-9);
    let served_ratio = ls.served / gs.served.max(1.0);
    println!(
        "loopguard / promhttp (medians of {} run(s)): burst 503 p99 {refused_ratio:.2}x (goal at most 0.5x), sustained served {served_ratio:.2}x ({} against {}; goal at least 1.5x), peak RSS {:.2}x",
        o.runs,
        ls.served,
        gs.served,
        ls.peak_rss_mib / gs.peak_rss_mib.max(1e-9),
    );
    let tokio = servers
        .contains(&Server::TokioListener)
        .then(|| summary("burst", Server::TokioListener));
    let tokio_ratio = tokio
        .as_ref()
        .map(|t| t.served_p99_ms / lb.served_p99_ms.max(1e-9));
    if let (Some(t), Some(ratio)) = (&tokio, tokio_ratio) {
        println!(
            "tokio listener / loopguard: burst served p99 {ratio:.1}x ({:.0} ms against {:.0} ms; goal at least 10x), burst peak RSS {:.0} MiB against {:.0} MiB",
            t.served_p99_ms, lb.served_p99_ms, t.peak_rss_mib, lb.peak_rss_mib
        );
    }
    if o.json {
        let objects: Vec<String> = rows
            .iter()
            .map(|(round, load, server, run)| {
                format!(
                    "{{\"run\":{round},\"load\":\"{}\",\"server\":\"{}\",\"served\":{},\"refused\":{},\"served_p99_ms\":{:.3},\"refused_p99_ms\":{:.3},\"healthz_p99_ms\":{:.3},\"peak_rss_mib\":{:.1},\"cpu_ms_per_scrape\":{},\"other\":{}}}",
                    load.name(),
                    server.name(),
                    run.served.len(),
                    run.rejected.len(),
                    quantile(&run.served, 0.99),
                    quantile(&run.rejected, 0.99),
                    quantile(&run.healthz, 0.99).min(1e12),
                    run.peak_rss_kib as f64 / 1024.0,
                    json_number(cpu_per_scrape(run)),
                    run.other
                )
            })
            .collect();
        let mut medians_json = Vec::new();
        for load in loads {
            for &server in &servers {
                let m = summary(load.name(), server);
                medians_json.push(format!(
                    "{{\"load\":\"{}\",\"server\":\"{}\",\"served\":{:.1},\"served_p99_ms\":{:.3},\"refused_p99_ms\":{:.3},\"peak_rss_mib\":{:.1},\"cpu_ms_per_scrape\":{}}}",
                    load.name(),
                    server.name(),
                    m.served,
                    m.served_p99_ms,
                    m.refused_p99_ms,
                    m.peak_rss_mib,
                    json_number(m.cpu_ms_per_scrape)
                ));
            }
        }
        let singles: Vec<String> = servers
            .iter()
            .zip(&single)
            .map(|(server, ms)| format!("\"{}\":{ms:.3}", server.name()))
            .collect();
        println!(
            "{{\"one_scrape_ms\":{{{}}},\"runs\":[{}],\"medians\":[{}],\"goals\":{{\"refused_p99_vs_promhttp\":{refused_ratio:.3},\"sustained_served_vs_promhttp\":{served_ratio:.3},\"tokio_burst_served_p99_vs_loopguard\":{}}}}}",
            singles.join(","),
            objects.join(","),
            medians_json.join(","),
            json_number(tokio_ratio)
        );
    }
}
