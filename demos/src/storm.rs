//! The storm harness: the exporter in a child process, a load against it over loopback, and
//! `/healthz` probed all the while.
//!
//! Each run starts a fresh server process (this same executable, told to serve by
//! [`serve_child`]) so that its peak RSS is its own and no walk of an earlier run is still
//! going. The load is either a *burst* (connections opened first, then one `GET /metrics`
//! on each at once) or *sustained* (open loop: a new connection and scrape every `1/rate`
//! seconds, whatever the answers). A prober on a thread of its own sends `GET /healthz` on a
//! fresh connection every 10 ms from the start of the load to its last answer: its latency
//! is the loop's. A burst starts once the server has accepted its connections.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use smol::LocalExecutor;

use crate::client;
use crate::registry::{Registry, WalkKind};
use crate::server::{Config, Exporter, Mode};

/// How the scrapes arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// `n` scrapes sent at once on connections opened beforehand.
    Burst(usize),
    /// `rate` scrapes per second for `secs` seconds, each on a new connection.
    Sustained {
        /// Scrapes per second.
        rate: u32,
        /// How long.
        secs: u32,
    },
}

impl Load {
    /// `burst` or `sustained`, for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Load::Burst(_) => "burst",
            Load::Sustained { .. } => "sustained",
        }
    }
}

/// What one server did with one load.
#[derive(Debug, Default)]
pub struct Run {
    /// Latencies of 200 answers, ms, sorted.
    pub served: Vec<f64>,
    /// Latencies of refusals (503 with `Retry-After`: no free slot), ms, sorted.
    pub rejected: Vec<f64>,
    /// The same refusals, timed to the kernel's receipt of each answer rather than to the
    /// client's reading it ([`client::exchange_stamped`]), ms, sorted.
    pub rejected_arrived: Vec<f64>,
    /// The same for the 200 answers, ms, sorted.
    pub served_arrived: Vec<f64>,
    /// Refusals and 200 answers the kernel did not timestamp, left out of the two above.
    pub unstamped: usize,
    /// Latencies of budget expiries (504: the budget ran out before the walk finished),
    /// ms, sorted.
    pub expired: Vec<f64>,
    /// Answers that were neither, and failed requests.
    pub other: usize,
    /// What those were (a status, or the error), with how many of each.
    pub other_kinds: std::collections::BTreeMap<String, usize>,
    /// `/healthz` latencies during the load, ms, sorted.
    pub healthz: Vec<f64>,
    /// Scrape walks the server ran.
    pub walks: u64,
    /// The server's peak resident set, KiB (0 where unknown).
    pub peak_rss_kib: u64,
    /// The server's loop lag, p99 and max, ms, from its own probe over the run (the
    /// exporter's default `LoopLag`); `None` for a server without one (the Go reference).
    pub loop_lag_ms: Option<(f64, f64)>,
}

/// The `q` quantile (nearest rank) of sorted values; 0.0 when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// This process's peak resident set size in KiB (`VmHWM`), where the system says.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The server side, in the child: serves `config` until its stdin closes, then prints one
/// JSON line with the scrape walks it ran, its peak RSS and its loop's lag.
pub fn serve_child(config: Config) -> io::Result<()> {
    let registry = Arc::new(Registry::new(config.series, config.walk_delay)?);
    let exporter = Exporter::spawn(config, registry.clone())?;
    println!("listening on http://{}", exporter.addr());
    io::stdout().flush()?;
    // The parent closes our stdin when its load is done.
    io::stdin().read_to_end(&mut Vec::new())?;
    // Read before the stop: the probe ends with the serve.
    let lag = exporter.shared().loop_lag();
    exporter.stop()?;
    let lag = lag.map_or(String::new(), |l| {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        format!(
            ",\"loop_lag_p99_ms\":{:.3},\"loop_lag_max_ms\":{:.3}",
            ms(l.p99),
            ms(l.max)
        )
    });
    println!(
        "{{\"walks\":{},\"peak_rss_kib\":{}{lag}}}",
        registry.walks(WalkKind::Scrape),
        peak_rss_kib().unwrap_or(0)
    );
    Ok(())
}

/// A server started by [`spawn_child`].
#[derive(Debug)]
pub struct ChildServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

/// Starts this executable with `args` (which must make it call [`serve_child`]) and
/// waits for its address.
pub fn spawn_child(args: &[String]) -> io::Result<ChildServer> {
    spawn_server(&std::env::current_exe()?, args)
}

/// Starts `program` with `args` and waits for its address: any server that prints
/// `listening on http://ADDR` first, serves until its stdin closes, then prints
/// `{"walks":N,"peak_rss_kib":N}` (the Go reference in `demos/go/` does), and
/// `"loop_lag_p99_ms"` and `"loop_lag_max_ms"` where it measures its loop.
pub fn spawn_server(program: &std::path::Path, args: &[String]) -> io::Result<ChildServer> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    let stdout = child.stdout.as_mut().ok_or(io::ErrorKind::BrokenPipe)?;
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| io::Error::other(format!("server said {line:?}")))?;
    Ok(ChildServer { child, addr })
}

impl ChildServer {
    /// Stops the server and reads its walks and peak RSS into `run`.
    pub fn finish(mut self, run: &mut Run) -> io::Result<()> {
        drop(self.child.stdin.take());
        let mut out = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            stdout.read_to_string(&mut out)?;
        }
        self.child.wait()?;
        let field = |key: &str| -> Option<String> {
            let at = out.find(&format!("\"{key}\":"))? + key.len() + 3;
            let digits = |c: &char| c.is_ascii_digit() || *c == '.';
            Some(out[at..].chars().take_while(digits).collect())
        };
        let number = |key: &str| field(key)?.parse::<u64>().ok();
        let real = |key: &str| field(key)?.parse::<f64>().ok();
        run.walks = number("walks").ok_or_else(|| io::Error::other(out.clone()))?;
        run.peak_rss_kib = number("peak_rss_kib").unwrap_or(0);
        run.loop_lag_ms = real("loop_lag_p99_ms").zip(real("loop_lag_max_ms"));
        Ok(())
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        // Only if `finish` was not reached: this child, by its own handle.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `load` against `addr` with `headers` on every scrape, probing `/healthz` meanwhile.
pub fn drive(addr: SocketAddr, load: Load, headers: &[(&str, &str)]) -> io::Result<Run> {
    let ex = Rc::new(LocalExecutor::new());
    let request = client::get_request("/metrics", headers);
    let _stamps = client::keep_timestamps()?;
    smol::block_on(ex.run(async {
        let scrapes = async {
            let mut tasks = Vec::new();
            match load {
                Load::Burst(n) => {
                    // Connect first, so the storm is the requests, not the handshakes.
                    let mut streams = Vec::with_capacity(n);
                    for _ in 0..n {
                        streams.push(smol::net::TcpStream::connect(addr).await?);
                    }
                    // A connection is established before the server accepts it: one
                    // round trip on a connection opened after them all, which the server
                    // accepts after them, shows that it holds them all.
                    client::get(addr, "/healthz", &[]).await?;
                    for stream in streams {
                        let request = request.clone();
                        tasks.push(ex.spawn(async move {
                            client::exchange_stamped(stream, &request).await
                        }));
                    }
                }
                Load::Sustained { rate, secs } => {
                    let began = Instant::now();
                    for i in 0..rate * secs {
                        let at = began + Duration::from_secs_f64(f64::from(i) / f64::from(rate));
                        smol::Timer::at(at).await;
                        let request = request.clone();
                        tasks.push(ex.spawn(async move {
                            let sent = Instant::now();
                            let stream = smol::net::TcpStream::connect(addr).await?;
                            let connected = sent.elapsed();
                            let mut response = client::exchange_stamped(stream, &request).await?;
                            response.elapsed = sent.elapsed();
                            response.arrived = response.arrived.map(|a| a + connected);
                            Ok(response)
                        }));
                    }
                }
            }
            let mut results = Vec::with_capacity(tasks.len());
            for task in tasks {
                results.push(task.await);
            }
            io::Result::Ok(results)
        };
        // The prober has a thread and a loop of its own: sharing the client's, a probe
        // sent during the burst would wait for the client to read every scrape's answer,
        // and time the client rather than the server's loop.
        let done = Arc::new(AtomicBool::new(false));
        let prober = {
            let done = done.clone();
            std::thread::Builder::new()
                .name("storm-prober".into())
                .spawn(move || probe_healthz(addr, &done))?
        };
        let results = scrapes.await;
        done.store(true, Ordering::SeqCst);
        let healthz = prober
            .join()
            .map_err(|_| io::Error::other("the /healthz prober panicked"))?;
        let results = results?;
        let mut run = Run::default();
        for result in results {
            let ms = |r: &client::Response| r.elapsed.as_secs_f64() * 1e3;
            let arrived = |r: &client::Response| r.arrived.map(|a| a.as_secs_f64() * 1e3);
            match result {
                Ok(r) if r.status == 200 => {
                    run.served.push(ms(&r));
                    match arrived(&r) {
                        Some(at) => run.served_arrived.push(at),
                        None => run.unstamped += 1,
                    }
                }
                Ok(r) if is_refusal(&r) => {
                    run.rejected.push(ms(&r));
                    match arrived(&r) {
                        Some(at) => run.rejected_arrived.push(at),
                        None => run.unstamped += 1,
                    }
                }
                // A status of its own (`loopguard_exporter::Unserved::BudgetSpent`).
                Ok(r) if r.status == 504 => run.expired.push(ms(&r)),
                other => {
                    run.other += 1;
                    let kind = match other {
                        Ok(r) => format!("status {}", r.status),
                        Err(err) => err.to_string(),
                    };
                    *run.other_kinds.entry(kind).or_default() += 1;
                }
            }
        }
        run.healthz = healthz;
        for v in [
            &mut run.served,
            &mut run.served_arrived,
            &mut run.rejected_arrived,
            &mut run.rejected,
            &mut run.expired,
            &mut run.healthz,
        ] {
            v.sort_by(f64::total_cmp);
        }
        Ok(run)
    }))
}

/// Sends `GET /healthz` on a fresh connection every 10 ms until `done`; the latencies, ms
/// (a failed probe counts as never answered).
fn probe_healthz(addr: SocketAddr, done: &AtomicBool) -> Vec<f64> {
    smol::block_on(async {
        let mut healthz = Vec::new();
        while !done.load(Ordering::SeqCst) {
            let began = Instant::now();
            let ok = matches!(client::get(addr, "/healthz", &[]).await, Ok(r) if r.status == 200);
            let took = if ok { began.elapsed() } else { Duration::MAX };
            healthz.push(took.as_secs_f64() * 1e3);
            smol::Timer::after(Duration::from_millis(10)).await;
        }
        healthz
    })
}

/// What client_golang's promhttp says in the 503 of `MaxRequestsInFlight` (it sends no
/// `Retry-After`), for the side by side in `examples/promhttp_side_by_side.rs`.
const PROMHTTP_REFUSAL: &str = "Limit of concurrent requests reached";

/// Whether `r` is a refusal: a 503 sent at once because no slot was free. loopguard's
/// carries `Retry-After`; promhttp's says so in its body.
pub fn is_refusal(r: &client::Response) -> bool {
    r.status == 503 && (r.header("retry-after").is_some() || r.text().contains(PROMHTTP_REFUSAL))
}

/// How a pool's workers run against the loop: their scheduling class and nice value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// In the idle scheduling class (`PoolBuilder::worker_sched_idle`).
    pub idle: bool,
    /// At this nice value (`PoolBuilder::worker_nice`).
    pub nice: u8,
}

impl Priority {
    /// The class's name for `--worker-class`, tables and JSON: `idle` or `normal`.
    pub fn class(self) -> &'static str {
        if self.idle { "idle" } else { "normal" }
    }

    /// Whether `name` is the idle class (`idle`) or the normal one (`normal`).
    pub fn parse_class(name: &str) -> Option<bool> {
        match name {
            "idle" => Some(true),
            "normal" => Some(false),
            _ => None,
        }
    }
}

/// The arguments that make a child serve `mode` (see [`serve_child`]), its workers at
/// `priority`.
pub fn child_args(
    mode: Mode,
    series: usize,
    workers: usize,
    priority: Priority,
    delay: Duration,
    ttl: Duration,
) -> Vec<String> {
    let ms = |d: Duration| d.as_millis().to_string();
    [
        "--serve",
        mode.name(),
        "--series",
        &series.to_string(),
        "--workers",
        &workers.to_string(),
        "--worker-nice",
        &priority.nice.to_string(),
        "--worker-class",
        priority.class(),
        "--walk-delay-ms",
        &ms(delay),
        "--cache-ttl-ms",
        &ms(ttl),
    ]
    .map(String::from)
    .to_vec()
}
