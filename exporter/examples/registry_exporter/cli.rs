//! The exporter's command line.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use loopguard_exporter::ExporterBuilder;

pub const USAGE: &str = "registry_exporter [--listen 127.0.0.1:9898] [--web.listen-address ADDR]... [--web.systemd-socket] \
[--web.config.file PATH] [--workers 2] [--worker-nice 10] [--worker-class idle] \
[--series 10000] [--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000] \
[--scrape-timeout-offset-ms 500] [--demand-window-ms 5000] [--cardinality-interval-ms 30000]";

/// Everything the exporter can be told.
pub struct Config {
    /// The addresses to listen on, in order: `--listen` (default 127.0.0.1:9898, unless
    /// only `--web.listen-address` flags are given), then each `--web.listen-address`.
    pub listen: Vec<SocketAddr>,
    /// `--web.systemd-socket`: serve the sockets systemd passed (`LISTEN_FDS`) instead.
    pub systemd_socket: bool,
    /// `--web.config.file`: exporter-toolkit's web config (basic auth, headers, rate limit;
    /// TLS with loopguard-exporter's feature `tls`).
    pub web_config: Option<PathBuf>,
    pub workers: usize,
    /// The workers' nice value (0 to 19): above the loop's, so the loop wins the CPU.
    pub worker_nice: u8,
    /// `idle` (true): the workers run in Linux's idle scheduling class, so the loop takes a
    /// CPU from a walk the moment it wakes; `normal` (false): the loop's own class.
    pub worker_sched_idle: bool,
    pub series: usize,
    /// Extra time each walk takes (for tests and demos).
    pub walk_delay: Duration,
    /// Above zero, scrapes share one walk per TTL.
    pub cache_ttl: Duration,
    /// The longest a scrape may take, however long the caller says it will wait.
    pub scrape_budget: Duration,
    /// Kept from the caller's budget to encode, send and parse the answer.
    pub timeout_offset: Duration,
    pub demand_window: Duration,
    /// Zero: no background cardinality walk.
    pub cardinality_interval: Duration,
}

/// Parses `--flag value` and `--flag=value` arguments; an error says what was wrong.
pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
    let ms = Duration::from_millis;
    let mut listen = None;
    let mut c = Config {
        listen: Vec::new(),
        systemd_socket: false,
        web_config: None,
        workers: 2,
        worker_nice: 10,
        worker_sched_idle: true,
        series: 10_000,
        walk_delay: ms(0),
        cache_ttl: ms(0),
        scrape_budget: ms(30_000),
        timeout_offset: ms(500),
        demand_window: ms(5_000),
        cardinality_interval: ms(30_000),
    };
    while let Some(arg) = args.next() {
        // exporter-toolkit's one flag without a value.
        if arg == "--web.systemd-socket" {
            c.systemd_socket = true;
            continue;
        }
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg, args.next()),
        };
        let value = value.ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        let number = || value.parse::<u32>().map_err(|e| bad(&e));
        let millis = || number().map(|n| ms(n.into()));
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|e| bad(&e))?),
            // exporter-toolkit's `:PORT` is every interface (IPv4 here).
            "--web.listen-address" => c.listen.push(match value.strip_prefix(':') {
                Some(port) => (
                    std::net::Ipv4Addr::UNSPECIFIED,
                    port.parse().map_err(|e| bad(&e))?,
                )
                    .into(),
                None => value.parse().map_err(|e| bad(&e))?,
            }),
            "--web.config.file" => c.web_config = Some(value.into()),
            "--workers" => c.workers = number()? as usize,
            "--worker-nice" => match number()? {
                n @ 0..=19 => c.worker_nice = n as u8,
                _ => return Err(bad(&"between 0 and 19")),
            },
            "--worker-class" => match value.as_str() {
                "idle" => c.worker_sched_idle = true,
                "normal" => c.worker_sched_idle = false,
                _ => return Err(bad(&"idle or normal")),
            },
            "--series" => c.series = number()?.min(100_000_000) as usize,
            "--walk-delay-ms" => c.walk_delay = millis()?,
            "--cache-ttl-ms" => c.cache_ttl = millis()?,
            "--scrape-budget-ms" => c.scrape_budget = millis()?,
            "--scrape-timeout-offset-ms" => c.timeout_offset = millis()?,
            "--demand-window-ms" => c.demand_window = millis()?,
            "--cardinality-interval-ms" => c.cardinality_interval = millis()?,
            _ => return Err(format!("unknown flag `{flag}`")),
        }
    }
    let addresses = listen.is_some() || !c.listen.is_empty();
    if c.systemd_socket && addresses {
        return Err("--web.systemd-socket serves the sockets systemd passes: \
                    drop --listen and --web.listen-address"
            .into());
    }
    if !c.systemd_socket && (listen.is_some() || c.listen.is_empty()) {
        c.listen
            .insert(0, listen.unwrap_or(([127, 0, 0, 1], 9898).into()));
    }
    let max = loopguard::pool::MAX_WORKERS;
    if !(1..=max).contains(&c.workers) {
        return Err(format!("--workers must be between 1 and {max}"));
    }
    if c.scrape_budget.is_zero() || c.demand_window.is_zero() {
        return Err("--scrape-budget-ms and --demand-window-ms must be above 0".into());
    }
    Ok(c)
}

/// `--web.config.file`, given to the exporter (loopguard-exporter's feature `web-config`).
pub fn web_config(builder: ExporterBuilder, config: &Config) -> io::Result<ExporterBuilder> {
    match &config.web_config {
        None => Ok(builder),
        #[cfg(feature = "web-config")]
        Some(path) => Ok(builder.web_config_file(path)),
        #[cfg(not(feature = "web-config"))]
        Some(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--web.config.file needs loopguard-exporter's feature `web-config`",
        )),
    }
}
