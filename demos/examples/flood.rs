//! Connection floods against `exporter/examples/registry_exporter/` (the
//! `loopguard-exporter` crate's example): do scrapers still get in?
//!
//! ```text
//! cargo build --release --example registry_exporter
//! cargo run --release --example flood -- [--exporter PATH] [--idle 5000] [--trickle 1000]
//!     [--trickle-interval-ms 50] [--secs 10] [--series 10000] [--json]
//! ```
//!
//! Three phases, each against a fresh exporter process (the example's binary, by default
//! the one next to this one in `target/<profile>/examples/`):
//!
//! - `quiet`: no flood, the baseline;
//! - `idle`: `--idle` connections opened and left silent;
//! - `trickle`: `--trickle` connections each sending a request head one byte every
//!   `--trickle-interval-ms`, reconnecting when the server cuts them.
//!
//! During each phase, for `--secs`, a prober alternates `GET /healthz` and a gzip
//! `GET /metrics` on fresh connections, one at a time. Reported: the probes' p50/p99/max,
//! failed probes, how long the idle flood took to be accepted (as the status page counts
//! connections), trickling connections cut, and the exporter's peak RSS.

use std::cell::Cell;
use std::io::{self, BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::future;
use loopguard_demos::storm::quantile;
use loopguard_demos::testing::raise_fd_limit;
use loopguard_demos::{cli, client};
use smol::LocalExecutor;
use smol::io::AsyncWriteExt as _;

const USAGE: &str = "flood [--exporter PATH] [--idle 5000] [--trickle 1000] \
[--trickle-interval-ms 50] [--secs 10] [--series 10000] [--json]";

struct Options {
    exporter: PathBuf,
    idle: usize,
    trickle: usize,
    interval: Duration,
    secs: u64,
    series: usize,
    json: bool,
}

fn parse(mut args: cli::Args) -> Result<Options, String> {
    let here = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut o = Options {
        exporter: here.with_file_name(format!("registry_exporter{}", std::env::consts::EXE_SUFFIX)),
        idle: 5000,
        trickle: 1000,
        interval: Duration::from_millis(50),
        secs: 10,
        series: 10_000,
        json: false,
    };
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        match flag.as_str() {
            "--exporter" => o.exporter = args.value::<String>(&flag, inline)?.into(),
            "--idle" => o.idle = args.value(&flag, inline)?,
            "--trickle" => o.trickle = args.value(&flag, inline)?,
            "--trickle-interval-ms" => {
                o.interval = Duration::from_millis(args.value(&flag, inline)?)
            }
            "--secs" => o.secs = args.value(&flag, inline)?,
            "--series" => o.series = args.value(&flag, inline)?,
            "--json" if inline.is_none() => o.json = true,
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0)
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if o.idle > 50_000 || o.trickle > 50_000 || !(1..=600).contains(&o.secs) || o.interval.is_zero()
    {
        return Err("--idle, --trickle: at most 50000; --secs: 1 to 600; interval above 0".into());
    }
    if !o.exporter.exists() {
        let path = o.exporter.display();
        return Err(format!(
            "{path} not found: `cargo build --release --example registry_exporter` first, or --exporter PATH"
        ));
    }
    Ok(o)
}

/// An exporter process of ours, killed (by its own handle) when dropped.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Exporter {
    fn start(o: &Options) -> io::Result<Exporter> {
        let mut child = Command::new(&o.exporter)
            .args(["--listen", "127.0.0.1:0", "--series", &o.series.to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or(io::ErrorKind::BrokenPipe)?)
            .read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .and_then(|a| a.parse().ok());
        let addr = addr.ok_or_else(|| io::Error::other(format!("exporter said {line:?}")))?;
        Ok(Exporter { child, addr })
    }

    /// Peak resident set of the exporter, MiB (0 where unknown).
    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()));
        let kib = status.ok().and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        });
        kib.unwrap_or(0.0) / 1024.0
    }

    /// Connections the exporter says are open (its status page's first number).
    async fn connections(&self) -> Option<usize> {
        let page = client::get(self.addr, "/", &[]).await.ok()?;
        page.text().split(' ').next()?.parse().ok()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Default)]
struct Phase {
    name: &'static str,
    connections: usize,
    healthz: Vec<f64>,
    metrics: Vec<f64>,
    failed: usize,
    accepted_ms: f64,
    cut: usize,
    rss_mib: f64,
}

/// Probes `/healthz` and `/metrics` alternately, one at a time, for `secs`.
async fn probe(addr: SocketAddr, secs: u64, phase: &mut Phase) {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut turn = 0_u64;
    while Instant::now() < end {
        turn += 1;
        let (path, headers): (&str, &[(&str, &str)]) = match turn % 2 {
            0 => ("/metrics", &[("Accept-Encoding", "gzip")]),
            _ => ("/healthz", &[]),
        };
        let began = Instant::now();
        let answer = client::get(addr, path, headers).await;
        let ms = began.elapsed().as_secs_f64() * 1e3;
        match answer {
            Ok(r) if r.status == 200 && path == "/healthz" => phase.healthz.push(ms),
            Ok(r) if r.status == 200 => phase.metrics.push(ms),
            _ => phase.failed += 1,
        }
        smol::Timer::after(Duration::from_millis(20)).await;
    }
    phase.healthz.sort_by(f64::total_cmp);
    phase.metrics.sort_by(f64::total_cmp);
}

async fn idle_flood(o: &Options, exporter: &Exporter, phase: &mut Phase) -> io::Result<()> {
    let began = Instant::now();
    let mut idle = Vec::with_capacity(o.idle);
    for _ in 0..o.idle {
        idle.push(smol::net::TcpStream::connect(exporter.addr).await?);
    }
    // Every one accepted: the status page counts them, plus its own connection.
    while exporter.connections().await.unwrap_or(0) < o.idle + 1 {
        if began.elapsed() > Duration::from_secs(60) {
            return Err(io::Error::other(
                "the idle flood was not accepted within 60 s",
            ));
        }
        smol::Timer::after(Duration::from_millis(5)).await;
    }
    phase.accepted_ms = began.elapsed().as_secs_f64() * 1e3;
    phase.connections = o.idle;
    probe(exporter.addr, o.secs, phase).await;
    drop(idle);
    Ok(())
}

async fn trickle_flood(
    ex: &LocalExecutor<'_>,
    o: &Options,
    exporter: &Exporter,
    phase: &mut Phase,
) {
    let (stop, cut) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(0_usize)));
    // A head that never ends: the server has to cut it.
    let head: Rc<[u8]> = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}",
        "p".repeat(1 << 16)
    )
    .into_bytes()
    .into();
    for _ in 0..o.trickle {
        let (stop, cut, head, addr, interval) = (
            stop.clone(),
            cut.clone(),
            head.clone(),
            exporter.addr,
            o.interval,
        );
        ex.spawn(async move {
            while !stop.get() {
                let Ok(mut stream) = smol::net::TcpStream::connect(addr).await else {
                    smol::Timer::after(interval).await;
                    continue;
                };
                for byte in head.chunks(1) {
                    if stop.get() || stream.write_all(byte).await.is_err() {
                        break;
                    }
                    smol::Timer::after(interval).await;
                }
                cut.set(cut.get() + usize::from(!stop.get()));
            }
        })
        .detach();
    }
    phase.connections = o.trickle;
    probe(exporter.addr, o.secs, phase).await;
    stop.set(true);
    phase.cut = cut.get();
}

fn ms(sorted: &[f64], q: f64) -> String {
    if sorted.is_empty() {
        "-".into()
    } else {
        format!("{:.1}", quantile(sorted, q))
    }
}

fn main() {
    let o = parse(cli::Args::from_env()).unwrap_or_else(|message| cli::fail(USAGE, &message));
    let limit = raise_fd_limit((2 * o.idle.max(o.trickle) + 1024) as u64);
    println!(
        "flood: {} idle, {} trickling (a byte every {} ms), {} s of probes per phase, {} series; open-file limit {limit}",
        o.idle,
        o.trickle,
        o.interval.as_millis(),
        o.secs,
        o.series
    );
    let ex = LocalExecutor::new();
    let mut phases = Vec::new();
    for name in ["quiet", "idle", "trickle"] {
        let run = async {
            let exporter = Exporter::start(&o)?;
            let mut phase = Phase {
                name,
                ..Phase::default()
            };
            match name {
                "quiet" => probe(exporter.addr, o.secs, &mut phase).await,
                "idle" => idle_flood(&o, &exporter, &mut phase).await?,
                _ => trickle_flood(&ex, &o, &exporter, &mut phase).await,
            }
            phase.rss_mib = exporter.peak_rss_mib();
            io::Result::Ok(phase)
        };
        match smol::block_on(ex.run(future::or(run, async {
            smol::Timer::after(Duration::from_secs(o.secs + 120)).await;
            Err(io::Error::other("phase took two minutes too long"))
        }))) {
            Ok(phase) => phases.push(phase),
            Err(err) => {
                eprintln!("flood: {name}: {err}");
                std::process::exit(1);
            }
        }
    }
    println!(
        "\n{:<8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>10} {:>5} {:>8}",
        "phase",
        "conns",
        "hz p50",
        "hz p99",
        "hz max",
        "met p50",
        "met p99",
        "met max",
        "failed",
        "accepted",
        "cut",
        "peak RSS"
    );
    for p in &phases {
        println!(
            "{:<8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>10} {:>5} {:>4.0} MiB",
            p.name,
            p.connections,
            ms(&p.healthz, 0.5),
            ms(&p.healthz, 0.99),
            ms(&p.healthz, 1.0),
            ms(&p.metrics, 0.5),
            ms(&p.metrics, 0.99),
            ms(&p.metrics, 1.0),
            p.failed,
            if p.name == "idle" {
                format!("{:.0} ms", p.accepted_ms)
            } else {
                "-".into()
            },
            p.cut,
            p.rss_mib
        );
    }
    println!("(latencies in ms: hz = GET /healthz, met = gzip GET /metrics)");
    if o.json {
        let items: Vec<String> = phases.iter().map(|p| format!(
            "{{\"name\":\"{}\",\"connections\":{},\"healthz_p50_ms\":{:.3},\"healthz_p99_ms\":{:.3},\"metrics_p50_ms\":{:.3},\"metrics_p99_ms\":{:.3},\"failed\":{},\"accepted_ms\":{:.1},\"cut\":{},\"peak_rss_mib\":{:.1}}}",
            p.name, p.connections, quantile(&p.healthz, 0.5), quantile(&p.healthz, 0.99), quantile(&p.metrics, 0.5),
            quantile(&p.metrics, 0.99), p.failed, p.accepted_ms, p.cut, p.rss_mib)).collect();
        println!("{{\"phases\":[{}]}}", items.join(","));
    }
}
