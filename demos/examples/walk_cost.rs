//! What one registry walk costs, and what gzip adds at each level: the measurement behind
//! the exporter's compression level.
//!
//! ```text
//! cargo run --release --example walk_cost -- [--series 10000,100000] [--rounds 7] [--json]
//!     [--compression-only]
//! ```
//!
//! For each size it registers that many gauge series (two labels) in a real
//! `metrics-exporter-prometheus` recorder, then times, on this thread, the median of
//! `--rounds` runs of: `render()`; gzip of that rendering at every level 0 to 9 (flate2,
//! miniz_oxide backend); and `render_to_write` streamed straight into a level-1 encoder.
//!
//! Then a scrape's walk both ways, side by side in the same run (gzip, as Prometheus asks,
//! and plain): *before*, `render()` into a fresh `String` then gzip
//! (`registry::render_plain`); *after*, `render_to_write` into a buffer the thread keeps,
//! reserved at the last rendering's size, then gzip from it (`registry::render_lean`, what
//! the exporter's workers run). For each: the median walk CPU time of this thread
//! (`CLOCK_THREAD_CPUTIME_ID`), and the allocations and bytes allocated per scrape (a
//! counting global allocator), the two ways alternating round by round.
//!
//! Last, gzip against zstd side by side (`--compression-only`: this part alone): a scrape's
//! walk exactly as a worker runs it (`loopguard_exporter::walk`: the kept buffer, then gzip
//! at `GZIP_LEVEL` or zstd at `ZSTD_LEVEL` from it), plain, gzip and zstd in turn each
//! round (the order rotating), timed by this thread's CPU clock: the whole walk's CPU and
//! the body's bytes; and the compression's CPU alone, from the same walk of a source that
//! copies one rendering (its gzip or zstd walk less its plain walk of the same round).
//!
//! With `--json` the last line is machine-readable: `walks` as before, `scrapes` for the
//! before/after side by side, `compression` for gzip against zstd.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::BufWriter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flate2::Compression;
use flate2::write::GzEncoder;
use loopguard_demos::cli;
use loopguard_demos::registry::{
    Encoding, Format, gzip_at, recorder, register_series, render_lean, render_plain,
};
use loopguard_exporter::{GZIP_LEVEL, PROMETHEUS_TEXT, Source, ZSTD_LEVEL, render_fn, walk};
use metrics_exporter_prometheus::PrometheusHandle;
use rustix::time::{ClockId, clock_gettime};

/// Counts allocations (and bytes asked for) on every thread, then forwards to `System`.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED_BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; counting touches no memory
// the allocator hands out. (The demos library forbids `unsafe`; this example is a crate of
// its own, and a counting allocator needs this one `unsafe impl`.)
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see above).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see above).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED_BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see above).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One way of rendering a scrape.
type Walk = fn(&PrometheusHandle, Encoding) -> std::io::Result<hyper::body::Bytes>;

/// What one scrape's walk cost: CPU time, allocations, bytes allocated.
#[derive(Default)]
struct Cost {
    cpu: Vec<Duration>,
    allocations: Vec<u64>,
    bytes: Vec<u64>,
}

impl Cost {
    /// One walk by `walk`, measured.
    fn add(&mut self, handle: &PrometheusHandle, walk: Walk, encoding: Encoding) {
        let (a0, b0, t0) = (
            ALLOCATIONS.load(Ordering::Relaxed),
            ALLOCATED_BYTES.load(Ordering::Relaxed),
            thread_cpu(),
        );
        let body = walk(handle, encoding).expect("a walk");
        drop(body);
        self.cpu.push(thread_cpu() - t0);
        self.allocations
            .push(ALLOCATIONS.load(Ordering::Relaxed) - a0);
        self.bytes
            .push(ALLOCATED_BYTES.load(Ordering::Relaxed) - b0);
    }

    /// The medians: CPU ms, allocations, bytes.
    fn medians(mut self) -> (f64, u64, u64) {
        self.allocations.sort_unstable();
        self.bytes.sort_unstable();
        let mid = self.bytes.len() / 2;
        (median(self.cpu), self.allocations[mid], self.bytes[mid])
    }
}

/// The median costs of one scrape walked each way in `walks`, over `rounds` rounds after
/// one to warm up (the lean walk's buffer is reserved by then, as on a worker that has
/// walked before). Each round walks every way once, alternating which goes first, so a
/// machine whose load changes slows both alike.
fn scrape_costs<const N: usize>(
    handle: &PrometheusHandle,
    walks: [Walk; N],
    encoding: Encoding,
    rounds: usize,
) -> [(f64, u64, u64); N] {
    for walk in walks {
        let _ = walk(handle, encoding).expect("a walk");
    }
    let mut costs: [Cost; N] = std::array::from_fn(|_| Cost::default());
    for round in 0..rounds {
        for i in 0..N {
            let i = if round % 2 == 0 { i } else { N - 1 - i };
            costs[i].add(handle, walks[i], encoding);
        }
    }
    costs.map(Cost::medians)
}

const USAGE: &str = "walk_cost [--series 10000,100000] [--rounds 7] [--json] [--compression-only]";

/// One scrape's walk in each of `encodings`, as a worker runs it, `rounds` times after one
/// to warm up, the order rotating each round: per encoding, the median CPU ms of the walk,
/// the median CPU ms it adds to the plain walk of the same round (the first encoding must
/// be `Identity`), and the body's bytes.
fn compression_costs<const N: usize>(
    source: &dyn Source,
    encodings: [Encoding; N],
    rounds: usize,
) -> [(f64, f64, usize); N] {
    let once = |encoding| {
        let t0 = thread_cpu();
        let body = walk(source, Format::PrometheusText, encoding, GZIP_LEVEL).expect("a walk");
        (thread_cpu() - t0, body.len())
    };
    for encoding in encodings {
        once(encoding);
    }
    let mut cpu: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
    let mut added: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::new());
    let mut bytes = [0; N];
    for round in 0..rounds {
        let mut this = [Duration::ZERO; N];
        for k in 0..N {
            let i = (k + round) % N;
            let (spent, len) = once(encodings[i]);
            this[i] = spent;
            bytes[i] = len;
        }
        for i in 0..N {
            cpu[i].push(this[i]);
            added[i].push(this[i].saturating_sub(this[0]));
        }
    }
    let mut out = [(0.0, 0.0, 0); N];
    for i in 0..N {
        out[i] = (
            median(std::mem::take(&mut cpu[i])),
            median(std::mem::take(&mut added[i])),
            bytes[i],
        );
    }
    out
}

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
    let mut compression_only = false;
    let parsed = (|| {
        while let Some(flag) = args.next_flag() {
            let (flag, inline) = flag?;
            match flag.as_str() {
                "--series" => sizes = cli::list(&flag, &args.value::<String>(&flag, inline)?)?,
                "--rounds" => rounds = args.value(&flag, inline)?,
                "--json" if inline.is_none() => json = true,
                "--compression-only" if inline.is_none() => compression_only = true,
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
    let mut scrapes = Vec::new();
    let mut compression = Vec::new();
    let mut gauges = Vec::new();
    for &series in &sizes {
        gauges = register_series(series.max(gauges.len()));
        if !compression_only {
            levels_and_walks(&handle, series, rounds, &mut records, &mut scrapes);
        }
        println!(
            "\n{series} series, a scrape's walk (loopguard_exporter::walk), gzip level {GZIP_LEVEL} against zstd level {ZSTD_LEVEL}:"
        );
        println!(
            "{:>9} {:>12} {:>16} {:>12} {:>7}",
            "encoding", "walk CPU ms", "compress CPU ms", "bytes", "ratio"
        );
        let encodings = [Encoding::Identity, Encoding::Gzip, Encoding::Zstd];
        // The compression alone: the same walk of a source that copies one rendering.
        let rendering = handle.render().into_bytes();
        let copied = render_fn(PROMETHEUS_TEXT, move |buffer| {
            buffer.extend_from_slice(&rendering);
            Ok(())
        });
        let packed = compression_costs(&copied, encodings, rounds);
        let walked = compression_costs(&handle, encodings, rounds);
        let plain_bytes = walked[0].2;
        let names = ["identity", "gzip", "zstd"];
        for (i, name) in names.into_iter().enumerate() {
            let ((cpu_ms, _, bytes), (_, added_ms, _)) = (walked[i], packed[i]);
            let ratio = plain_bytes as f64 / bytes.max(1) as f64;
            println!("{name:>9} {cpu_ms:>12.1} {added_ms:>16.1} {bytes:>12} {ratio:>6.1}x");
            compression.push(format!(
                "{{\"series\":{series},\"encoding\":\"{name}\",\"walk_cpu_ms\":{cpu_ms:.3},\"compress_cpu_ms\":{added_ms:.3},\"body_bytes\":{bytes}}}"
            ));
        }
        println!(
            "zstd/gzip: bytes {:.2}x, compression CPU {:.2}x, walk CPU {:.2}x",
            walked[2].2 as f64 / walked[1].2 as f64,
            packed[2].1 / packed[1].1,
            walked[2].0 / walked[1].0
        );
    }
    drop(gauges);
    if json {
        println!(
            "{{\"walks\":[{}],\"scrapes\":[{}],\"compression\":[{}]}}",
            records.join(","),
            scrapes.join(","),
            compression.join(",")
        );
    }
}

/// gzip at every level, the streamed encoder, and the walk before and after the kept
/// buffer, for `series` series.
fn levels_and_walks(
    handle: &PrometheusHandle,
    series: usize,
    rounds: usize,
    records: &mut Vec<String>,
    scrapes: &mut Vec<String>,
) {
    {
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
        println!(
            "a scrape's walk, before (render() then gzip) and after (render_to_write into a kept buffer):"
        );
        println!(
            "{:>9} {:>7} {:>11} {:>12} {:>14}",
            "encoding", "walk", "CPU ms", "allocations", "bytes alloc."
        );
        for (encoding, name) in [(Encoding::Gzip, "gzip"), (Encoding::Identity, "plain")] {
            let measured = scrape_costs(handle, [render_plain, render_lean], encoding, rounds);
            let costs = [("before", measured[0]), ("after", measured[1])].map(
                |(walk_name, (cpu_ms, allocations, bytes))| {
                    println!(
                        "{name:>9} {walk_name:>7} {cpu_ms:>11.1} {allocations:>12} {bytes:>14}"
                    );
                    (walk_name, cpu_ms, allocations, bytes)
                },
            );
            let (before, after) = (costs[0], costs[1]);
            println!(
                "{name:>9}   after/before: CPU {:.2}x, allocations {:.2}x, bytes {:.2}x",
                after.1 / before.1,
                after.2 as f64 / before.2 as f64,
                after.3 as f64 / before.3 as f64,
            );
            for (walk_name, cpu_ms, allocations, bytes) in costs {
                scrapes.push(format!(
                    "{{\"series\":{series},\"encoding\":\"{name}\",\"walk\":\"{walk_name}\",\"cpu_ms\":{cpu_ms:.3},\"allocations\":{allocations},\"allocated_bytes\":{bytes},\"allocations_per_series\":{:.2}}}",
                    allocations as f64 / series.max(1) as f64
                ));
            }
        }
    }
}
