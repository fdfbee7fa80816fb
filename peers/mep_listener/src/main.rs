//! metrics-exporter-prometheus's own HTTP listener (`with_http_listener(..).install()`, a
//! tokio runtime on a thread of its own), serving the registry `promhttp_side_by_side`
//! gives every server: `--series` gauges `synthetic_registry_series{shard, id}` with the
//! demos' label shape and values, 1 % of them changed every 100 ms.
//!
//! ```text
//! cargo build --release -p loopguard-peer-mep-listener
//! target/release/loopguard-peer-mep-listener [--series 100000]
//! ```
//!
//! It prints `listening on http://ADDR` once the listener accepts, serves until its stdin
//! closes, then prints `{"peak_rss_kib":N}`. The listener renders the registry on tokio's
//! blocking pool for every request but `/health` (a `spawn_blocking(render)` each, with no
//! limit), so the side by side probes `/health`.

use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;

fn main() {
    if let Err(err) = run() {
        eprintln!("loopguard-peer-mep-listener: {err}");
        std::process::exit(1);
    }
}

fn run() -> io::Result<()> {
    let series = series()?;
    // The listener takes an address, not a socket: a free port, found by binding port 0.
    let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| io::Error::other(format!("cannot install the listener: {e}")))?;
    let gauges: Vec<metrics::Gauge> = (0..series)
        .map(|i| {
            let gauge = metrics::gauge!(
                "synthetic_registry_series",
                "shard" => (i % 64).to_string(),
                "id" => format!("{:08x}", (i as u32).wrapping_mul(2_654_435_761)),
            );
            gauge.set((i as f64).sqrt() * 1.5);
            gauge
        })
        .collect();
    std::thread::spawn(move || churn(&gauges));
    // `install` spawns the listener on its runtime's thread: announce it once it accepts.
    let began = Instant::now();
    while TcpStream::connect(addr).is_err() {
        if began.elapsed() > Duration::from_secs(10) {
            return Err(io::Error::other(format!("nothing listens on {addr}")));
        }
        std::thread::yield_now();
    }
    println!("listening on http://{addr}");
    io::stdout().flush()?;
    io::stdin().read_to_end(&mut Vec::new())?;
    println!("{{\"peak_rss_kib\":{}}}", peak_rss_kib().unwrap_or(0));
    Ok(())
}

/// `--series N` (default 100 000), the only flag.
fn series() -> io::Result<usize> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    match args.as_slice() {
        [] => Ok(100_000),
        [flag, n] if flag == "--series" => n.parse().map_err(|_| bad("--series: a number")),
        [one] if one.starts_with("--series=") => one["--series=".len()..]
            .parse()
            .map_err(|_| bad("--series: a number")),
        _ => Err(bad("usage: loopguard-peer-mep-listener [--series 100000]")),
    }
}

/// Sets 1 % of the gauges every 100 ms, as the other servers' registries do.
fn churn(gauges: &[metrics::Gauge]) {
    if gauges.is_empty() {
        return;
    }
    let step = (gauges.len() / 100).max(1);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for round in 0.. {
        std::thread::sleep(Duration::from_millis(100));
        let start = (round * step) % gauges.len();
        for k in 0..step {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            gauges[(start + k) % gauges.len()].set((state % 10_000) as f64 / 100.0);
        }
    }
}

/// This process's peak resident set size, KiB (`VmHWM`).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
