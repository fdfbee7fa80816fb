//! What one registry walk costs, and what gzip adds at each level: the measurement behind
//! the exporter's compression level.
//!
//! ```text
//! cargo run --release --example walk_cost -- [--series 10000,100000] [--rounds 7] [--json]
//! ```
//!
//! For each size it registers that many gauge series (two labels) in a real
//! `metrics-exporter-prometheus` recorder, then times, on this thread, the median of
//! `--rounds` runs of: `render()`; gzip of that rendering at every level 0 to 9 (flate2,
//! miniz_oxide backend); and `render_to_write` streamed straight into a level-1 encoder. With
//! `--json` the last line is machine-readable.

use std::io::BufWriter;
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::GzEncoder;
use loopguard_demos::cli;
use loopguard_demos::exporter::registry::{gzip_at, recorder, register_series};

const USAGE: &str = "walk_cost [--series 10000,100000] [--rounds 7] [--json]";

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

fn time<T>(rounds: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut last = f();
    let samples = (0..rounds)
        .map(|_| {
            let began = Instant::now();
            last = f();
            began.elapsed()
        })
        .collect();
    (median(samples), last)
}

fn main() {
    let mut args = cli::Args::from_env();
    let (mut sizes, mut rounds, mut json) = (vec![10_000, 100_000], 7_usize, false);
    let parsed = (|| {
        while let Some(flag) = args.next_flag() {
            let (flag, inline) = flag?;
            match flag.as_str() {
                "--series" => sizes = cli::list(&flag, &args.value::<String>(&flag, inline)?)?,
                "--rounds" => rounds = args.value(&flag, inline)?,
                "--json" if inline.is_none() => json = true,
                "--help" | "-h" => {
                    println!("usage: {USAGE}");
                    std::process::exit(0)
                }
                other => return Err(format!("unknown flag `{other}`")),
            }
        }
        if rounds == 0 || sizes.is_empty() || sizes.iter().any(|&n| n > 10_000_000) {
            return Err("--rounds must be above zero, --series at most 10000000".into());
        }
        Ok(())
    })();
    if let Err(message) = parsed {
        cli::fail(USAGE, &message);
    }
    let handle = match recorder() {
        Ok(handle) => handle,
        Err(err) => {
            eprintln!("walk_cost: {err}");
            std::process::exit(1);
        }
    };
    sizes.sort_unstable();
    let mut records = Vec::new();
    let mut gauges = Vec::new();
    for &series in &sizes {
        gauges = register_series(series.max(gauges.len()));
        let (render_ms, plain) = time(rounds, || handle.render());
        println!(
            "\n{series} series: render() {render_ms:.1} ms, {} bytes",
            plain.len()
        );
        println!(
            "{:>5} {:>12} {:>12} {:>7} {:>16}",
            "level", "gzip ms", "bytes", "ratio", "render+gzip ms"
        );
        for level in 0..=9 {
            let (gzip_ms, packed) = time(rounds, || gzip_at(plain.as_bytes(), level));
            let packed = packed.map(|p| p.len()).unwrap_or(0);
            let ratio = plain.len() as f64 / packed.max(1) as f64;
            println!(
                "{level:>5} {gzip_ms:>12.1} {packed:>12} {ratio:>6.1}x {:>16.1}",
                render_ms + gzip_ms
            );
            records.push(format!(
                "{{\"series\":{series},\"level\":{level},\"render_ms\":{render_ms:.3},\"gzip_ms\":{gzip_ms:.3},\"plain_bytes\":{},\"gzip_bytes\":{packed}}}",
                plain.len()
            ));
        }
        let (streamed_ms, _) = time(rounds, || -> std::io::Result<usize> {
            let mut out = BufWriter::with_capacity(
                64 * 1024,
                GzEncoder::new(Vec::new(), Compression::new(1)),
            );
            handle.render_to_write(&mut out)?;
            let encoder = out.into_inner().map_err(|e| e.into_error())?;
            Ok(encoder.finish()?.len())
        });
        println!("render_to_write into a level-1 encoder: {streamed_ms:.1} ms");
        records.push(format!(
            "{{\"series\":{series},\"level\":1,\"streamed_ms\":{streamed_ms:.3}}}"
        ));
    }
    drop(gauges);
    if json {
        println!("{{\"walks\":[{}]}}", records.join(","));
    }
}
