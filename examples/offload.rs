//! Offloading blocking registry walks from a smol loop: fail fast, wait, orphan.
//!
//! Run with `cargo run --example offload`.

use std::time::{Duration, Instant};

use loopguard::Fallible;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, TryRunError};

/// A stand-in for serializing a whole metrics registry: blocking, and slow.
fn walk_registry(series: usize, delay: Duration) -> String {
    std::thread::sleep(delay);
    (0..series).map(|i| format!("series_{i} 1\n")).collect()
}

fn main() -> std::io::Result<()> {
    smol::block_on(async {
        let (handler, mut reports) = OrphanHandler::channel(16);
        let pool = Pool::builder()
            .name("registry-serve")
            .workers(2)
            .on_orphan(handler)
            .build()?;

        // A scrape storm: six HTTP handlers at once. Two walks run, four get a 503 at once.
        let began = Instant::now();
        let mut admitted = Vec::new();
        for scrape in 0..6 {
            match pool.try_run(move || walk_registry(1000, Duration::from_millis(200))) {
                Ok(job) => admitted.push((scrape, job)),
                Err(TryRunError::Saturated(busy)) => println!(
                    "scrape {scrape}: 503 Service Unavailable, Retry-After: {} (after {:?})",
                    busy.retry_after_secs(),
                    began.elapsed()
                ),
                Err(err) => return Err(err.into()),
            }
        }

        // The background cardinality walk waits for a slot instead of failing.
        let cardinality = pool.run(|| walk_registry(10, Duration::from_millis(50)).lines().count());

        for (scrape, job) in admitted {
            let body = job.await.map_err(std::io::Error::from)?;
            println!(
                "scrape {scrape}: 200 OK, {} bytes (after {:?})",
                body.len(),
                began.elapsed()
            );
        }
        let series = cardinality.await.map_err(std::io::Error::from)?;
        println!("cardinality walk: {series} series (waited its turn)");

        // A client disconnects mid-walk: its job runs on, keeps its slot, and its failure
        // is reported once on the loop.
        let orphan = pool.try_run(Fallible(|| -> Result<String, String> {
            std::thread::sleep(Duration::from_millis(50));
            Err("registry lock poisoned".into())
        }));
        drop(orphan);
        println!("client left; slots in use: {}", pool.in_use());
        if let Some(report) = reports.recv().await {
            println!("orphan report: {report}");
        }
        pool.wait_idle().await;

        let stats = pool.stats();
        println!(
            "done: {} ok, {} rejected, {} orphaned failure(s), {} in use",
            stats.jobs_ok, stats.rejected, stats.orphaned_failures, stats.in_use
        );
        pool.shutdown().await;
        Ok(())
    })
}
