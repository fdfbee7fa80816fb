//! The command line of `catalog_client`: parsing by hand, and running the operations.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Uri;

use super::client::{Client, Config, Spawn, json_line};

/// The usage line.
pub const USAGE: &str = "usage: catalog_client [--budget-ms 1000] [--attempt-timeout-ms 400] \
[--attempts 3] [--backoff-ms 100,200] [--concurrency 20] [--requests 1] URL";

/// A parsed command line.
#[derive(Clone, Debug)]
pub struct Args {
    /// Client settings (`--attempt-timeout-ms 0` means no per-attempt timeout).
    pub config: Config,
    /// Operations to run at once.
    pub requests: usize,
    /// The URL to GET.
    pub url: Uri,
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Parsed {
    /// Run.
    Run(Args),
    /// `-h` / `--help`.
    Help,
}

fn number(flag: &str, value: &str) -> Result<u64, String> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("{flag}: expected a whole number, got {value:?}"))
}

fn positive(flag: &str, value: &str) -> Result<u64, String> {
    match number(flag, value)? {
        0 => Err(format!("{flag}: must be at least 1")),
        n => Ok(n),
    }
}

fn count(flag: &str, value: &str, max: u64) -> Result<u64, String> {
    let n = positive(flag, value)?;
    if n > max {
        return Err(format!("{flag}: at most {max}"));
    }
    Ok(n)
}

/// Parses the arguments after the program name.
pub fn parse(args: &[String]) -> Result<Parsed, String> {
    let mut config = Config::default();
    let mut requests = 1;
    let mut url = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        if flag == "-h" || flag == "--help" {
            return Ok(Parsed::Help);
        }
        if !flag.starts_with("--") {
            if url.is_some() {
                return Err(format!("unexpected argument {arg:?}: only one URL"));
            }
            let parsed: Uri = arg
                .parse()
                .map_err(|e| format!("invalid URL {arg:?}: {e}"))?;
            super::client::authority_of(&parsed)?;
            url = Some(parsed);
            continue;
        }
        let known = [
            "--budget-ms",
            "--attempt-timeout-ms",
            "--attempts",
            "--backoff-ms",
            "--concurrency",
            "--requests",
        ];
        if !known.contains(&flag) {
            return Err(format!("unknown option {flag:?}"));
        }
        let value = match inline {
            Some(v) => v,
            None => it
                .next()
                .cloned()
                .ok_or_else(|| format!("{flag}: missing value"))?,
        };
        match flag {
            "--budget-ms" => config.budget = Duration::from_millis(positive(flag, &value)?),
            "--attempt-timeout-ms" => {
                config.attempt_timeout = match number(flag, &value)? {
                    0 => None,
                    ms => Some(Duration::from_millis(ms)),
                }
            }
            "--attempts" => config.attempts = count(flag, &value, 100)? as u32,
            "--backoff-ms" => {
                config.backoff = if value.trim().is_empty() {
                    Vec::new()
                } else {
                    value
                        .split(',')
                        .map(|ms| number(flag, ms).map(Duration::from_millis))
                        .collect::<Result<_, _>>()?
                }
            }
            "--concurrency" => config.concurrency = count(flag, &value, 10_000)? as usize,
            "--requests" => requests = count(flag, &value, 100_000)? as usize,
            _ => unreachable!("checked against the known flags"),
        }
    }
    let url = url.ok_or("missing URL")?;
    config.pool_size = config.concurrency;
    Ok(Parsed::Run(Args {
        config,
        requests,
        url,
    }))
}

/// Runs every operation at once, calling `line` with one JSON line per operation as it
/// finishes. Returns the exit code: 0 if every operation succeeded, 1 otherwise.
pub async fn run(args: &Args, spawn: Spawn, mut line: impl FnMut(&str)) -> i32 {
    let client = match Client::new(&args.url, &args.config, spawn.clone()) {
        Ok(client) => client,
        Err(e) => {
            line(&format!(
                r#"{{"outcome":"error","elapsed_ms":0,"attempts":0,"error":"{e}"}}"#
            ));
            return 1;
        }
    };
    let path = args
        .url
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let (tx, rx) = smol::channel::unbounded();
    for _ in 0..args.requests {
        let started = Instant::now();
        // The budget (and the measured duration) starts here, before the semaphore.
        let operation = client.get(&path);
        let tx = tx.clone();
        spawn(Box::pin(async move {
            let result = operation.await;
            let _ = tx
                .send((json_line(&result, started.elapsed()), result.is_ok()))
                .await;
        }));
    }
    drop(tx);
    let mut failed = false;
    let mut finished = 0;
    while let Ok((json, ok)) = rx.recv().await {
        line(&json);
        finished += 1;
        failed |= !ok;
    }
    // A task that never reported (its executor went away) counts as a failure.
    i32::from(failed || finished != args.requests)
}

/// Parses `args` and runs, printing to stdout and stderr; returns the exit code
/// (2 for a bad command line).
pub async fn main_with(args: &[String], spawn: Spawn) -> i32 {
    match parse(args) {
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            0
        }
        Ok(Parsed::Run(args)) => run(&args, spawn, |l| println!("{l}")).await,
        Err(e) => {
            eprintln!("catalog_client: {e}\n{USAGE}");
            2
        }
    }
}

/// A spawner onto `executor`.
pub fn spawner(executor: Arc<smol::Executor<'static>>) -> Spawn {
    Arc::new(move |f| executor.spawn(f).detach())
}
