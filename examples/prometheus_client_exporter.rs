//! A prometheus-client registry served on smol, its encode offloaded to a pool: loopguard's
//! own series come from `loopguard::telemetry::Collector`, next to the application's.
//!
//! Run with `cargo run --example prometheus_client_exporter --features prometheus-client`
//! (from the repository, `cargo test` and `cargo run` already have the feature), then
//! `curl -s localhost:9185/metrics`. `--addr HOST:PORT` to listen elsewhere, `--scrapes N`
//! to exit after N scrapes.
//!
//! Each scrape: `publish_metrics()` on the loop, then `try_run` of the encode, so the
//! scrape never counts itself (`loopguard_pool_in_use` reads 0 on an idle exporter), and a
//! scrape that finds every worker busy gets a 503 with `Retry-After` at once.

use std::sync::Arc;

use futures_lite::{AsyncReadExt as _, AsyncWriteExt as _};
use loopguard::pool::{Pool, TryRunError};
use loopguard::telemetry::Collector;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use smol::net::{TcpListener, TcpStream};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut addr, mut scrapes) = ("127.0.0.1:9185".to_string(), u64::MAX);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--addr" => addr = value,
            "--scrapes" => scrapes = value.parse().expect("--scrapes takes a number"),
            _ => panic!("unknown flag {flag}: --addr HOST:PORT, --scrapes N"),
        }
    }

    let pool = Pool::builder().name("metrics-encode").workers(2).build()?;
    let served = Counter::<u64>::default();
    let mut registry = Registry::default();
    registry.register("exporter_scrapes", "Scrapes answered", served.clone());
    registry.register_collector(Box::new(Collector::new().pool(&pool)));
    let registry = Arc::new(registry);

    smol::block_on(async {
        let listener = TcpListener::bind(&addr).await?;
        println!("serving http://{}/metrics", listener.local_addr()?);
        for _ in 0..scrapes {
            let (stream, _) = listener.accept().await?;
            served.inc();
            // One connection at a time keeps the example short; spawn on a LocalExecutor
            // to serve several.
            if let Err(err) = scrape(stream, &pool, &registry).await {
                eprintln!("scrape failed: {err}");
            }
        }
        Ok(())
    })
}

async fn scrape(
    mut stream: TcpStream,
    pool: &Pool,
    registry: &Arc<Registry>,
) -> std::io::Result<()> {
    // Read the request head; the path does not matter here.
    let mut head = Vec::new();
    let mut buf = [0; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }

    // On the loop, before asking for a slot: the scrape does not count itself.
    pool.publish_metrics();
    let registry = registry.clone();
    let encode = move || {
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &registry).map(|()| body)
    };
    let response = match pool.try_run(encode) {
        Ok(job) => match job.await {
            Ok(Ok(body)) => format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            ),
            Ok(Err(_)) | Err(_) => "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string(),
        },
        Err(TryRunError::Saturated(busy)) => format!(
            "HTTP/1.1 503 Service Unavailable\r\nretry-after: {}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            busy.retry_after_secs()
        ),
        Err(err) => return Err(err.into()),
    };
    stream.write_all(response.as_bytes()).await?;
    stream.flush().await
}
