//! `examples/registry_exporter/` (of this crate), the example a user copies, run as a process and driven over
//! loopback: refusal with `Retry-After`, gzip, honest gauges, a connection flood, shutdown.
//!
//! `cargo test` builds the examples before it runs tests; the binary is found next to this
//! test's own (`target/<profile>/examples/`). Every exporter is killed when its test ends,
//! and every socket read has a timeout.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(20);

/// A running exporter process, killed on drop.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Exporter {
    /// The example's binary, which `cargo test` builds next to this test's own.
    fn binary() -> std::path::PathBuf {
        let test = std::env::current_exe().unwrap();
        let bin = test.parent().unwrap().parent().unwrap().join("examples");
        let bin = bin.join(format!("registry_exporter{}", std::env::consts::EXE_SUFFIX));
        let sources = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/registry_exporter");
        let modified = |path: &std::path::Path| std::fs::metadata(path)?.modified();
        let edited = std::fs::read_dir(sources)
            .into_iter()
            .flatten()
            .filter_map(|entry| modified(&entry.ok()?.path()).ok())
            .max();
        let fresh = match (modified(&bin), edited) {
            (Ok(built), Some(edited)) => built >= edited,
            (built, _) => built.is_ok(),
        };
        // `cargo test --test exporter_example` alone builds no example.
        let hint = "missing or older than its source: `cargo test` builds it";
        assert!(fresh, "{}: {hint}", bin.display());
        bin
    }

    /// Starts the exporter with `args`, its workers in the normal class: an idle-class walk
    /// could starve behind the test run's own busy threads. `start_as_shipped` keeps the
    /// exporter's own default.
    fn start(args: &[&str]) -> Exporter {
        let mut all = vec!["--worker-class", "normal"];
        all.extend_from_slice(args);
        Exporter::start_as_shipped(&all)
    }

    fn start_as_shipped(args: &[&str]) -> Exporter {
        let mut command = Command::new(Exporter::binary());
        command
            .args(["--listen", "127.0.0.1:0", "--cardinality-interval-ms", "0"])
            .args(args);
        let (child, addrs) = spawn(command, 1);
        Exporter {
            child,
            addr: addrs[0],
        }
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        get(self.addr, path, headers)
    }

    /// Polls the status page until `cond` holds on it.
    fn until(&self, what: &str, cond: impl Fn(&str) -> bool) {
        let began = Instant::now();
        while !cond(&self.get("/", &[]).text()) {
            assert!(began.elapsed() < PATIENCE, "never saw: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Starts `command` (the example, however it is wrapped) and reads its first `listeners`
/// lines, each `listening on http://ADDR`.
fn spawn(mut command: Command, listeners: usize) -> (Child, Vec<SocketAddr>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the exporter starts");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let addrs = (0..listeners)
        .map(|_| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix("listening on http://")
                .unwrap_or_else(|| panic!("unexpected line {line:?}"))
                .parse()
                .unwrap()
        })
        .collect();
    (child, addrs)
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn text(&self) -> String {
        match self.header("content-encoding") {
            Some("gzip") => {
                let mut text = String::new();
                flate2::read::GzDecoder::new(&self.body[..])
                    .read_to_string(&mut text)
                    .expect("valid gzip");
                text
            }
            _ => String::from_utf8(self.body.clone()).expect("UTF-8"),
        }
    }
}

/// One request on a fresh connection (`Connection: close`), read to its end.
fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut stream = TcpStream::connect_timeout(&addr, PATIENCE).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    stream
        .write_all(format!("{request}\r\n").as_bytes())
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    Response {
        status,
        head,
        body: raw[end + 4..].to_vec(),
    }
}

/// Series (`name{labels}`) in an exposition, without values.
fn series(text: &str) -> BTreeSet<String> {
    let lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    lines
        .filter_map(|l| Some(l.rsplit_once(' ')?.0.to_string()))
        .collect()
}

#[test]
fn a_saturated_pool_answers_503_with_retry_after_at_once() {
    let exporter = Exporter::start(&[
        "--workers",
        "1",
        "--series",
        "100",
        "--walk-delay-ms",
        "3000",
    ]);
    let barrier = Arc::new(Barrier::new(3));
    let scrapes: Vec<_> = (0..3)
        .map(|_| {
            let (barrier, addr) = (barrier.clone(), exporter.addr);
            std::thread::spawn(move || {
                barrier.wait();
                let began = Instant::now();
                (get(addr, "/metrics", &[]), began.elapsed())
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for scrape in scrapes {
        let (response, took) = scrape.join().unwrap();
        if response.status == 503 {
            let retry: u64 = response
                .header("retry-after")
                .expect("Retry-After")
                .parse()
                .unwrap();
            assert!(retry >= 1);
            assert!(response.text().contains("busy"));
            assert!(took < Duration::from_secs(2), "a refusal took {took:?}");
        }
        statuses.push(response.status);
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [200, 503, 503],
        "one walk at a time, the rest refused"
    );
    let page = exporter.get("/", &[]).text();
    assert!(page.contains("rejected: 2"), "{page}");
}

/// A spent budget is not a refusal: 504 without `Retry-After` (a proxy retrying 503s leaves it
/// alone), while its walk keeps the slot, so the next scrape is refused with 503 +
/// `Retry-After`. Both ways a scrape can run out: its own walk, and a wait on the cache's.
#[test]
fn a_scrape_out_of_budget_gets_504_not_the_503_of_a_refusal() {
    for cache in [&[][..], &["--cache-ttl-ms", "60000"][..]] {
        let mut args = vec![
            "--workers",
            "1",
            "--series",
            "100",
            "--walk-delay-ms",
            "1500",
        ];
        args.extend_from_slice(cache);
        let exporter = Exporter::start(&args);
        // 0.7 s less the 500 ms offset: a 200 ms budget, far below the 1.5 s walk.
        let began = Instant::now();
        let late = exporter.get(
            "/metrics",
            &[("X-Prometheus-Scrape-Timeout-Seconds", "0.7")],
        );
        let waited = began.elapsed();
        assert_eq!(late.status, 504, "{cache:?}: {}", late.text());
        assert_eq!(late.header("retry-after"), None, "{cache:?}");
        assert!(late.text().contains("budget spent"), "{cache:?}");
        assert!(
            waited < Duration::from_millis(1_200),
            "{cache:?}: {waited:?}"
        );
        if cache.is_empty() {
            // The walk goes on and holds the only slot: a refusal, told apart by its status.
            let refused = exporter.get("/metrics", &[]);
            assert_eq!(refused.status, 503, "{}", refused.text());
            assert!(refused.header("retry-after").is_some());
        }
    }
}

#[test]
fn a_gzip_scrape_decompresses_to_the_same_series_as_a_plain_one() {
    let exporter = Exporter::start(&["--series", "500"]);
    // A first walk, so the pool's histograms have samples in both renderings.
    assert_eq!(exporter.get("/metrics", &[]).status, 200);
    exporter.until("idle", |page| page.contains("in_use: 0"));
    let plain = exporter.get("/metrics", &[]);
    exporter.until("idle", |page| page.contains("in_use: 0"));
    let gzip = exporter.get("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!((plain.status, gzip.status), (200, 200));
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    assert!(gzip.body.len() * 2 < plain.body.len());
    let (plain, unzipped) = (series(&plain.text()), series(&gzip.text()));
    assert!(
        plain
            .iter()
            .filter(|s| s.starts_with("synthetic_registry_series{"))
            .count()
            == 500
    );
    assert_eq!(plain, unzipped);

    // `q` is case-insensitive: `Q=0` refuses gzip as `q=0` does.
    for refusal in ["gzip;q=0", "gzip;Q=0", "gzip; Q=0.0, identity"] {
        exporter.until("idle", |page| page.contains("in_use: 0"));
        let answer = exporter.get("/metrics", &[("Accept-Encoding", refusal)]);
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-encoding"), None, "{refusal}");
    }
}

/// A scrape of several slices (the body goes out 256 KiB at a time, the loop given back in
/// between) arrives whole, in order, with the length it announced, in both encodings.
#[test]
fn a_scrape_larger_than_a_slice_arrives_whole() {
    let exporter = Exporter::start(&["--series", "20000"]);
    let plain = exporter.get("/metrics", &[]);
    assert_eq!(plain.status, 200);
    assert!(
        plain.body.len() > 4 * 256 * 1024,
        "{} bytes",
        plain.body.len()
    );
    let announced: usize = plain.header("content-length").unwrap().parse().unwrap();
    assert_eq!(announced, plain.body.len());
    let lines = plain.text();
    assert!(lines.ends_with('\n'));
    let ids: std::collections::BTreeSet<&str> = lines
        .lines()
        .filter(|l| l.starts_with("synthetic_registry_series{"))
        .collect();
    assert_eq!(ids.len(), 20_000);
    exporter.until("idle", |page| page.contains("in_use: 0"));
    let gzip = exporter.get("/metrics", &[("Accept-Encoding", "gzip")]);
    assert_eq!(gzip.header("content-encoding"), Some("gzip"));
    let unzipped = series(&gzip.text());
    let gzip_ids = unzipped
        .iter()
        .filter(|s| s.starts_with("synthetic_registry_series{"))
        .count();
    assert_eq!(gzip_ids, 20_000);
}

#[test]
fn an_idle_exporter_reads_in_use_0_on_every_scrape() {
    let exporter = Exporter::start(&["--workers", "1", "--series", "100"]);
    for _ in 0..5 {
        // The previous walk frees its slot just after its answer: wait for that.
        exporter.until("idle", |page| page.contains("in_use: 0"));
        let text = exporter
            .get("/metrics", &[("Accept-Encoding", "gzip")])
            .text();
        for line in [
            "loopguard_pool_in_use{pool=\"registry-serve\"} 0",
            "loopguard_pool_waiting{pool=\"registry-serve\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}`");
        }
    }
}

#[test]
fn a_scrape_counts_the_walk_already_running_but_never_itself() {
    let exporter = Exporter::start(&["--series", "100", "--walk-delay-ms", "1500"]);
    let addr = exporter.addr;
    let first = std::thread::spawn(move || get(addr, "/metrics", &[]));
    exporter.until("the first walk runs", |page| page.contains("in_use: 1"));
    let text = exporter.get("/metrics", &[]).text();
    let line = "loopguard_pool_in_use{pool=\"registry-serve\"} 1";
    assert!(text.lines().any(|l| l == line), "no `{line}`");
    assert_eq!(first.join().unwrap().status, 200);
}

#[test]
fn the_cardinality_walk_waits_for_a_slot_instead_of_failing() {
    let exporter = Exporter::start(&[
        "--workers",
        "1",
        "--series",
        "100",
        "--walk-delay-ms",
        "400",
        "--cardinality-interval-ms",
        "50",
    ]);
    // Hold the only slot with a scrape (the cardinality walk may hold it first: retry).
    let waited = (0..50).any(|_| {
        let addr = exporter.addr;
        let scrape = std::thread::spawn(move || get(addr, "/metrics", &[]).status);
        let queued = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(2));
            exporter.get("/", &[]).text().contains("waiting: 1")
        });
        scrape.join().unwrap() == 200 && queued
    });
    assert!(waited, "the cardinality walk never queued behind a scrape");
    exporter.until("a cardinality report", |page| {
        page.lines().next().is_some_and(|l| l.ends_with(" series"))
    });
    assert!(!exporter.get("/", &[]).text().contains("failed"));
}

#[test]
fn scrapes_are_answered_while_two_thousand_idle_connections_are_open() {
    // This process and the exporter (which inherits the limit) each hold one end.
    let limit = raise_fd_limit(2000 + 512);
    let n = 2000.min(limit.saturating_sub(256) as usize);
    assert!(
        n >= 500,
        "open-file limit {limit} leaves room for only {n} connections"
    );
    let exporter = Exporter::start(&["--series", "1000"]);
    let idle: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect_timeout(&exporter.addr, Duration::from_secs(5)).unwrap())
        .collect();
    exporter.until("all accepted", |page| {
        page.starts_with(&format!("{} connections", n + 1))
    });
    for path in ["/healthz", "/metrics", "/healthz"] {
        let began = Instant::now();
        assert_eq!(exporter.get(path, &[]).status, 200, "{path}");
        let took = began.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{path} took {took:?} behind {n} connections"
        );
    }
    drop(idle);
}

#[test]
fn the_backlog_queues_hundreds_of_connections_while_the_exporter_is_stopped() {
    // Linux drops a SYN while the accept queue is full: with std's backlog of 128 the 130th
    // handshake cannot complete while nobody accepts.
    let max = std::fs::read_to_string("/proc/sys/net/core/somaxconn").ok();
    let max = max
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let n = max.min(600).saturating_sub(10);
    if n < 200 {
        return eprintln!("somaxconn {max}: too small to tell a raised backlog from std's");
    }
    let exporter = Exporter::start(&["--series", "10"]);
    let pid = rustix::process::Pid::from_child(&exporter.child);
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let queued: Vec<TcpStream> = (0..n)
        .map(|i| {
            TcpStream::connect_timeout(&exporter.addr, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("connection {i} of {n} not queued: {e}"))
        })
        .collect();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    exporter.until("all accepted", |page| {
        page.starts_with(&format!("{} connections", n + 1))
    });
    assert_eq!(exporter.get("/healthz", &[]).status, 200);
    drop(queued);
}

#[test]
fn sigterm_finishes_the_scrape_in_flight_then_exits() {
    let mut exporter = Exporter::start(&["--series", "100", "--walk-delay-ms", "1000"]);
    let addr = exporter.addr;
    let scrape = std::thread::spawn(move || get(addr, "/metrics", &[]));
    exporter.until("the walk runs", |page| page.contains("in_use: 1"));
    let pid = rustix::process::Pid::from_child(&exporter.child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(
        scrape.join().unwrap().status,
        200,
        "the scrape in flight is served"
    );
    let began = Instant::now();
    let status = loop {
        if let Some(status) = exporter.child.try_wait().unwrap() {
            break status;
        }
        assert!(began.elapsed() < PATIENCE, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    let mut stderr = String::new();
    exporter
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(stderr.contains("shutting down"), "{stderr}");
}

#[test]
fn bad_flags_exit_2_with_the_usage() {
    let exporter_bin = Exporter::binary();
    for args in [
        &["--workers", "0"][..],
        &["--series", "many"],
        &["--nope", "1"],
        &["--listen"],
        &["--worker-nice", "20"],
        &["--worker-class", "fast"],
    ] {
        let out = Command::new(&exporter_bin).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("usage: registry_exporter"));
    }
}

/// The nice value of each thread of process `pid` whose name starts with `prefix`, read
/// from `/proc` (field 19 of `stat`).
#[cfg(target_os = "linux")]
fn thread_nice(pid: u32, prefix: &str) -> Vec<(String, i64)> {
    thread_field(pid, prefix, 19)
}

/// Field `n` of `/proc/PID/task/TID/stat` (19: the nice value, 41: the scheduling class)
/// of each thread of process `pid` whose name starts with `prefix`.
#[cfg(target_os = "linux")]
fn thread_field(pid: u32, prefix: &str, n: usize) -> Vec<(String, i64)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The name may hold spaces or parentheses: the fields start after the last ')'.
        let fields: Vec<&str> = match stat.rsplit_once(')') {
            Some((_, rest)) => rest.split_whitespace().collect(),
            None => continue,
        };
        if comm.trim().starts_with(prefix) {
            // `rest` starts at field 3 (state).
            found.push((comm.trim().to_string(), fields[n - 3].parse().unwrap()));
        }
    }
    found.sort();
    found
}

#[cfg(target_os = "linux")]
#[test]
fn workers_run_at_the_nice_value_it_is_given() {
    let own = rustix::process::getpriority_process(None).unwrap();
    assert!(
        own < 7,
        "this test needs a process below nice 7, it runs at {own}"
    );
    let exporter = Exporter::start(&["--workers", "2", "--worker-nice", "7", "--series", "10"]);
    assert_eq!(exporter.get("/metrics", &[]).status, 200);
    // Thread names are cut to 15 bytes in `comm`: `registry-serve-0`, `-1` and `-monitor`
    // all read `registry-serve-`. The two workers lower their priority as they start (wait
    // until both have); the stuck-job monitor keeps the process's own.
    let pid = exporter.child.id();
    until_pool_threads(pid, 19, &[i64::from(own), 7, 7], "nice values");
    // The loop (the main thread, named after the binary, and any helper thread it starts
    // unnamed) keeps the process's own value.
    let main = thread_nice(pid, "registry_export");
    assert!(!main.is_empty());
    assert!(
        main.iter().all(|(_, nice)| *nice == i64::from(own)),
        "{main:?}"
    );
}

/// Waits until field `n` of the pool threads of process `pid` (`registry-serve-`: the two
/// workers and the stuck-job monitor), sorted, reads `want`; the workers set theirs as they
/// start. Polls: the threads' start is not something the test can wait on otherwise.
#[cfg(target_os = "linux")]
fn until_pool_threads(pid: u32, n: usize, want: &[i64], what: &str) {
    let pool_threads = || {
        let mut values: Vec<i64> = thread_field(pid, "registry-serve-", n)
            .into_iter()
            .map(|(_, value)| value)
            .collect();
        values.sort_unstable();
        values
    };
    let began = Instant::now();
    while pool_threads() != want {
        assert!(
            began.elapsed() < PATIENCE,
            "pool threads' {what}: {:?}, want {want:?}",
            pool_threads()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `SCHED_OTHER` and `SCHED_IDLE`, as the kernel numbers them in `stat`'s field 41.
#[cfg(target_os = "linux")]
const CLASS_NORMAL: i64 = 0;
#[cfg(target_os = "linux")]
const CLASS_IDLE: i64 = 5;

#[cfg(target_os = "linux")]
#[test]
fn workers_run_in_the_idle_class_unless_told_otherwise() {
    for (args, want) in [
        (&[][..], vec![CLASS_NORMAL, CLASS_IDLE, CLASS_IDLE]),
        (&["--worker-class", "normal"][..], vec![CLASS_NORMAL; 3]),
    ] {
        let mut all = vec!["--workers", "2", "--series", "10"];
        all.extend_from_slice(args);
        let exporter = Exporter::start_as_shipped(&all);
        assert_eq!(exporter.get("/metrics", &[]).status, 200);
        // As above: `registry-serve-` is both workers and the stuck-job monitor, which
        // stays in the process's class; the workers move as they start.
        let pid = exporter.child.id();
        until_pool_threads(pid, 41, &want, &format!("classes with {args:?}"));
        let main = thread_field(pid, "registry_export", 41);
        assert!(!main.is_empty());
        assert!(
            main.iter().all(|(_, class)| *class == CLASS_NORMAL),
            "{main:?}"
        );
    }
}

/// Raises the open-file limit to at least `wanted` if the hard limit allows; the limit now.
fn raise_fd_limit(wanted: u64) -> u64 {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    let target = limit.maximum.map_or(wanted, |max| max.min(wanted));
    if current >= wanted
        || setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(target),
                ..limit
            },
        )
        .is_err()
    {
        return current;
    }
    target
}

/// One client scraping one request at a time, each on a fresh connection sent only after
/// the previous answer was read, against the exporter *as shipped* (workers in the idle
/// class at nice 10) with 1 and 2 workers: never refused by its own finished walk. (The
/// worker used to wake the caller before it gave the slot back; a woken loop preempts an
/// idle-class worker, and 299 of 300 such scrapes got 503 with one worker.)
#[test]
fn a_sequential_scraper_is_never_refused_with_the_shipped_defaults() {
    for workers in ["1", "2"] {
        let exporter = Exporter::start_as_shipped(&["--workers", workers, "--series", "2000"]);
        let mut refused = 0;
        for _ in 0..300 {
            let response = exporter.get("/metrics", &[("Accept-Encoding", "gzip")]);
            match response.status {
                200 => assert!(response.text().contains("synthetic_registry_series")),
                503 => refused += 1,
                other => panic!("{workers} worker(s): unexpected status {other}"),
            }
        }
        assert_eq!(
            refused, 0,
            "{workers} worker(s): {refused} of 300 scrapes refused"
        );
    }
}

#[test]
fn every_listen_address_is_served_by_one_pool_with_a_line_each() {
    // `--listen` first (as the harness passes it), then two `--web.listen-address`.
    let mut command = Command::new(Exporter::binary());
    command.args([
        "--listen",
        "127.0.0.1:0",
        "--web.listen-address",
        "127.0.0.1:0",
        // exporter-toolkit's form: every interface.
        "--web.listen-address=:0",
        "--workers",
        "1",
        "--series",
        "10",
        "--cardinality-interval-ms",
        "0",
    ]);
    let (child, addrs) = spawn(command, 3);
    let exporter = Exporter {
        child,
        addr: addrs[0],
    };
    assert_eq!(addrs.iter().collect::<BTreeSet<_>>().len(), 3, "{addrs:?}");
    assert!(addrs[2].ip().is_unspecified(), "{addrs:?}");
    for addr in &addrs {
        let mut addr = *addr;
        if addr.ip().is_unspecified() {
            addr.set_ip([127, 0, 0, 1].into());
        }
        let answer = get(addr, "/metrics", &[]);
        assert_eq!(answer.status, 200, "{addr}");
        // One pool behind every listener: one worker, one capacity series.
        assert!(
            answer
                .text()
                .contains("loopguard_pool_capacity{pool=\"registry-serve\"} 1"),
            "{addr}"
        );
    }
    drop(exporter);
}

#[test]
fn the_listen_flags_and_systemd_s_sockets_are_refused_together_or_missing() {
    let refused = Command::new(Exporter::binary())
        .args([
            "--web.systemd-socket",
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("drop --listen and --web.listen-address"),
        "{said}"
    );
    // Asked for systemd's sockets, given none: a clear error, not a default port.
    let none = Command::new(Exporter::binary())
        .arg("--web.systemd-socket")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(1));
    let said = String::from_utf8_lossy(&none.stderr);
    assert!(
        said.contains("systemd passed no socket (LISTEN_FDS)"),
        "{said}"
    );
}

/// Socket activation for real: Debian's `systemd-socket-activate` listens and passes the
/// socket (`LISTEN_FDS`, `LISTEN_PID`) to the example it starts.
#[cfg(target_os = "linux")]
#[test]
fn the_sockets_systemd_passes_are_served() {
    let tool = "systemd-socket-activate";
    if Command::new(tool).arg("--version").output().is_err() {
        // `.ci/run` installs systemd and sets LOOPGUARD_REQUIRE_TOOLS: there it must run.
        assert!(
            std::env::var_os("LOOPGUARD_REQUIRE_TOOLS").is_none(),
            "{tool} is required here"
        );
        eprintln!("skipped: no {tool}");
        return;
    }
    // A free port: the tool binds what it is told, and says nothing of port 0.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut command = Command::new(tool);
    command
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(Exporter::binary())
        .args(["--web.systemd-socket", "--series", "10"])
        .args(["--cardinality-interval-ms", "0"]);
    // The tool starts the program at the first connection: make one once it listens.
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tool starts");
    let began = Instant::now();
    let first = loop {
        match TcpStream::connect(addr) {
            Ok(stream) => break stream,
            Err(_) if began.elapsed() < PATIENCE => std::thread::yield_now(),
            Err(err) => panic!("{tool} never listened on {addr}: {err}"),
        }
    };
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let exporter = Exporter { child, addr };
    drop(first);
    assert_eq!(line.trim(), format!("listening on http://{addr}"));
    assert_eq!(exporter.get("/metrics", &[]).status, 200);
    assert_eq!(exporter.get("/healthz", &[]).text(), "ok\n");
}

/// `--web.config.file`: exporter-toolkit's file guards every path; a bad one stops the
/// start with the key named. The hash is Debian's `htpasswd`'s (skipped without it, unless
/// LOOPGUARD_REQUIRE_TOOLS is set).
#[test]
#[cfg(feature = "web-config")]
fn the_web_config_file_guards_every_path() {
    let Some(htpasswd) = tool("htpasswd") else {
        return;
    };
    let out = Command::new(htpasswd)
        .args(["-nbBC", "10", "prometheus", "s3cret"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let (_, hash) = line.trim().split_once(':').unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("loopguard-example-web-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("web.yml");
    let config = format!(
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n\
         basic_auth_users:\n  prometheus: {hash}\n"
    );
    std::fs::write(&path, config).unwrap();
    let exporter = Exporter::start(&["--web.config.file", path.to_str().unwrap()]);
    for path in ["/metrics", "/healthz", "/"] {
        let refused = exporter.get(path, &[]);
        assert_eq!(refused.status, 401, "{path}");
        assert_eq!(refused.header("www-authenticate"), Some("Basic"));
        assert_eq!(refused.header("x-content-type-options"), Some("nosniff"));
    }
    // "prometheus:s3cret" in base64.
    let right = [("Authorization", "Basic cHJvbWV0aGV1czpzM2NyZXQ=")];
    let scraped = exporter.get("/metrics", &right);
    assert_eq!(scraped.status, 200);
    assert!(
        scraped.text().contains("loopguard_pool_capacity"),
        "a real scrape"
    );
    drop(exporter);

    std::fs::write(&path, "http_server_config:\n  http2: true\n").unwrap();
    let out = Command::new(Exporter::binary())
        .args(["--listen", "127.0.0.1:0", "--web.config.file"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("http_server_config.http2"), "{stderr}");
}

/// `name` on the `PATH`; missing, `None` with a line on stderr, unless
/// `LOOPGUARD_REQUIRE_TOOLS` is set: then a missing tool fails the test.
#[cfg(feature = "web-config")]
fn tool(name: &str) -> Option<std::path::PathBuf> {
    let paths = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("LOOPGUARD_REQUIRE_TOOLS").is_none(),
            "`{name}` is not installed (Debian: see .ci/run's tool list)"
        );
        eprintln!("SKIPPED: `{name}` is not installed");
    }
    found
}

/// `--web.config.file` with `tls_server_config`: the example says `listening on https://`
/// and serves a real TLS client. Nothing here can hang: the line is awaited with a
/// timeout, every socket read has one, and the process is killed on drop.
#[test]
#[cfg(feature = "tls")]
fn the_web_config_file_turns_tls_on() {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};

    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("loopguard-example-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let path = dir.join("web.yml");
    let config = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    std::fs::write(&path, config).unwrap();

    let mut child = Command::new(Exporter::binary())
        .args(["--worker-class", "normal", "--listen", "127.0.0.1:0"])
        .args(["--cardinality-interval-ms", "0", "--web.config.file"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the exporter starts");
    let stdout = child.stdout.take().unwrap();
    let _child = Killed(child);
    let (said, line) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = said.send(line);
    });
    let line = line
        .recv_timeout(PATIENCE)
        .expect("a `listening on` line in time");
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening on https://")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .parse()
        .unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect_timeout(&addr, PATIENCE).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    tcp.set_write_timeout(Some(PATIENCE)).unwrap();
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(client), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw).expect("an answer to its end");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("loopguard_pool_capacity"), "a real scrape");

    // Plain HTTP to the same port: Go's answer.
    let mut plain = TcpStream::connect_timeout(&addr, PATIENCE).unwrap();
    plain.set_read_timeout(Some(PATIENCE)).unwrap();
    plain
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert_eq!(
        answer,
        b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    );
}
