//! The default orphan handler is seen by default: with no `log` backend installed, each
//! report goes to stderr (rate-limited, the held-back ones counted, one hint on routing);
//! with a logger, it is logged and stderr stays quiet; a stderr whose reader is gone loses
//! no count and kills no worker.
//!
//! A logger is process-wide and stderr is the process's, so each case runs in a child
//! process: this test binary run again on its one ignored test, `child`, with the case in
//! `LOOPGUARD_ORPHAN_CHILD`. The parent reads the child's stdout and stderr.

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::shield::Shield;

const CASE: &str = "LOOPGUARD_ORPHAN_CHILD";
const LIMIT: Duration = Duration::from_secs(60);
/// What the parent looks for: the start of a report line on stderr.
const REPORT: &str = "loopguard: orphaned work on ";
const HINT: &str = "loopguard: orphan reports go to stderr because no `log` logger is installed";

// ---- the child side ----------------------------------------------------------------

/// The entry point of a child process; the parent runs it with `--ignored --exact`.
#[test]
#[ignore = "run by the other tests of this file, in a child process"]
fn child() {
    common::quiet_expected_panics();
    // The harness has written `test child ... ` without a newline: start result lines clean.
    println!();
    match std::env::var(CASE).as_deref() {
        Ok("no_logger") => no_logger(),
        Ok("logger") => with_logger(),
        Ok("broken_stderr") => broken_stderr(),
        other => panic!("unknown child case {other:?}"),
    }
}

fn pool() -> Pool {
    Pool::builder()
        .name("walks")
        .workers(1)
        .no_stuck_reports()
        .build()
        .expect("a pool")
}

/// Orphans a job that has already finished: the report is made on this thread, in `drop`.
fn orphan_finished<T: Send + 'static>(pool: &Pool, job: impl FnOnce() -> T + Send + 'static) {
    let job = pool.try_run(job).expect("a free slot");
    block_on(pool.wait_idle());
    assert!(job.is_finished());
    drop(job);
}

fn orphan_fallible(pool: &Pool, message: &'static str) {
    let job = pool
        .try_run(Fallible(move || -> Result<(), &str> { Err(message) }))
        .expect("a free slot");
    block_on(pool.wait_idle());
    drop(job);
}

/// Orphans a failing shielded future, run to its end on this thread.
fn orphan_shielded(shield: &Shield, message: String) {
    let (runner, handle) = shield.wrap(Fallible(async move { Err::<(), _>(message) }));
    drop(handle);
    block_on(runner);
}

fn no_logger() {
    assert_eq!(log::max_level(), log::LevelFilter::Off, "no logger here");
    let pool = pool();
    orphan_fallible(&pool, "database password rejected");
    orphan_finished(&pool, || -> u8 { panic!("expected walk exploded") });
    let shield = Shield::new("flush").unwrap();
    orphan_shielded(&shield, "upload refused".to_string());
    // A channel whose receiver is gone falls back to the default handler.
    let (handler, receiver) = OrphanHandler::channel(4);
    drop(receiver);
    let late = Shield::with_handler("late", handler).unwrap();
    orphan_shielded(&late, "nobody drains".to_string());
    // Eleven more at once: fifteen in all, well within one refill of the limit.
    for i in 1..=11 {
        orphan_shielded(&shield, format!("burst {i}"));
    }
    // The limit earns a line a second; waiting for its clock, not ordering anything.
    std::thread::sleep(Duration::from_millis(1500));
    orphan_shielded(&shield, "after the wait".to_string());
    println!(
        "counted {} {} {}",
        pool.orphaned_failures(),
        shield.orphaned_failures(),
        late.orphaned_failures()
    );
}

/// Keeps every record it is given.
struct Keep(Mutex<Vec<String>>);

impl log::Log for Keep {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let line = format!("{} {} {}", record.level(), record.target(), record.args());
        self.0.lock().unwrap().push(line);
    }

    fn flush(&self) {}
}

static KEEP: Keep = Keep(Mutex::new(Vec::new()));

fn with_logger() {
    log::set_logger(&KEEP).expect("the only logger");
    log::set_max_level(log::LevelFilter::Info);
    let pool = pool();
    orphan_fallible(&pool, "database password rejected");
    orphan_shielded(&Shield::new("flush").unwrap(), "upload refused".to_string());
    for line in KEEP.0.lock().unwrap().iter() {
        println!("record {line}");
    }
}

fn broken_stderr() {
    // The parent closes its end of our stderr before it says go.
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    assert_eq!(go.trim(), "go");
    let pool = pool();
    let shield = Shield::new("flush").unwrap();
    for i in 0..20 {
        orphan_fallible(&pool, "write fails");
        orphan_shielded(&shield, format!("write fails {i}"));
    }
    orphan_finished(&pool, || -> u8 { panic!("expected walk exploded") });
    // The worker is alive and the slot free: an awaited job runs.
    let answer = block_on(pool.run(|| 42)).expect("a live worker");
    println!(
        "ok {} {} {answer}",
        pool.orphaned_failures(),
        shield.orphaned_failures()
    );
}

// ---- the parent side ---------------------------------------------------------------

fn spawn(case: &str, stdin: Stdio) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE, case)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test binary runs again")
}

/// Collects what `child` writes and waits for it to exit, killing it after [`LIMIT`]: a
/// hang fails the test instead of hanging it.
fn finish(mut child: Child) -> Output {
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("the child did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn with_no_logger_reports_go_to_stderr_rate_limited_with_one_hint() {
    let out = finish(spawn("no_logger", Stdio::null()));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("counted 2 13 1"), "{stdout}");

    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("loopguard: "))
        .collect();
    let reports: Vec<&str> = ours
        .iter()
        .copied()
        .filter(|l| l.starts_with(REPORT))
        .collect();
    // The first report, then the hint, once in the whole run.
    assert!(
        ours[0].starts_with("loopguard: orphaned work on `walks` failed after ")
            && ours[0].ends_with(": \"database password rejected\""),
        "{stderr}"
    );
    assert!(ours[1].starts_with(HINT), "{stderr}");
    assert!(ours[1].contains("PoolBuilder::on_orphan"), "{stderr}");
    assert_eq!(ours.iter().filter(|l| l.starts_with(HINT)).count(), 1);
    assert!(
        reports[1].starts_with("loopguard: orphaned work on `walks` panicked after ")
            && reports[1].ends_with(": expected walk exploded"),
        "{stderr}"
    );
    assert!(reports[2].contains("`flush` failed") && reports[2].ends_with("\"upload refused\""));
    assert!(reports[3].contains("`late` failed") && reports[3].ends_with("\"nobody drains\""));

    // Fifteen reports at once: the burst of ten got through, the rest were held back, and
    // the next line written after the wait counts them.
    let last = *reports.last().unwrap();
    assert!(last.ends_with("\"after the wait\""), "{stderr}");
    let before = reports.len() - 1;
    assert!((10..15).contains(&before), "{before} lines of 15: {stderr}");
    let held = ours[ours.len() - 2];
    let expected = format!(
        "loopguard: {} more orphan report(s) were not written to stderr",
        15 - before
    );
    assert!(held.starts_with(&expected), "{held:?} in {stderr}");
}

#[test]
fn with_a_logger_reports_are_logged_and_stderr_stays_quiet() {
    let out = finish(spawn("logger", Stdio::null()));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let records: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("record "))
        .collect();
    assert_eq!(records.len(), 2, "{stdout}");
    assert!(
        records[0].starts_with("record ERROR loopguard orphaned work on `walks` failed after ")
            && records[0].ends_with("\"database password rejected\""),
        "{stdout}"
    );
    assert!(
        records[1].starts_with("record ERROR loopguard orphaned work on `flush` failed"),
        "{stdout}"
    );
    assert!(!stderr.contains("orphaned work"), "{stderr}");
    assert!(!stderr.contains(HINT), "{stderr}");
}

#[test]
fn a_broken_stderr_loses_no_count_and_kills_no_worker() {
    let mut child = spawn("broken_stderr", Stdio::piped());
    // Close our end of the child's stderr, then let it go: its writes fail with EPIPE.
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let out = finish(child);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    let ok = stdout
        .lines()
        .find(|l| l.starts_with("ok "))
        .unwrap_or_else(|| panic!("no result line: {stdout}"));
    assert_eq!(ok, "ok 21 20 42");
}
