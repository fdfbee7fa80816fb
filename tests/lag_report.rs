//! What a slow poll leaves in the log (a global logger of this binary of its own): one
//! `warn` line naming the loop, the task and the duration, rate-limited per task, with the
//! slow polls it left out in the next line; every slow poll counted whatever the logger
//! does. A logger or a recorder that panics is contained: the instrumented future still
//! returns its output, the probe keeps sampling, nothing is lost from the counts.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_io::Timer;
use common::{bounded, quiet_expected_panics};
use futures_lite::future;
use loopguard::lag::LoopLag;

const LIMIT: Duration = Duration::from_secs(30);

/// Keeps every `loopguard` record; panics on those whose message contains `boom-logger`.
struct Capture {
    lines: Mutex<Vec<(log::Level, String)>>,
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.target() != "loopguard" {
            return;
        }
        let line = record.args().to_string();
        let boom = line.contains("boom-logger");
        self.lines.lock().unwrap().push((record.level(), line));
        if boom {
            panic!("expected logger boom");
        }
    }

    fn flush(&self) {}
}

static LOGGER: Capture = Capture {
    lines: Mutex::new(Vec::new()),
};

fn install() {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    quiet_expected_panics();
}

/// The lines logged about the loop `name`.
fn lines_of(name: &str) -> Vec<(log::Level, String)> {
    let prefix = format!("{name}: ");
    let lines = LOGGER.lines.lock().unwrap();
    lines
        .iter()
        .filter(|(_, line)| line.starts_with(&prefix))
        .cloned()
        .collect()
}

fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A future whose polls hold the thread for `holds[i]` ms each; ready after the last.
struct Holds(Vec<u64>, usize);

impl Future for Holds {
    type Output = &'static str;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
        std::thread::sleep(Duration::from_millis(self.0[self.1]));
        self.1 += 1;
        if self.1 == self.0.len() {
            Poll::Ready("done")
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// The milliseconds in "held the loop for N ms".
fn held_ms(line: &str) -> f64 {
    let rest = line.split("held the loop for ").nth(1).expect(line);
    rest.split(" ms").next().unwrap().parse().expect(line)
}

#[test]
fn a_slow_poll_is_logged_with_its_task_and_duration_once_per_interval() {
    install();
    let name = unique("logged");
    let lag = LoopLag::new(&name).unwrap(); // one line per task per 10 s
    let out = future::block_on(lag.instrument("status-page", Holds(vec![87, 0, 60, 70], 0)));
    assert_eq!(out, "done");
    let quick = future::block_on(lag.instrument("quick", Holds(vec![0, 5], 0)));
    assert_eq!(quick, "done");
    assert_eq!(lag.slow_polls("status-page"), 3, "every slow poll counted");

    let lines = lines_of(&name);
    assert_eq!(lines.len(), 1, "rate-limited to one line: {lines:?}");
    let (level, line) = &lines[0];
    assert_eq!(*level, log::Level::Warn);
    assert!(
        line.starts_with(&format!("{name}: `status-page` held the loop for ")),
        "{line}"
    );
    let ms = held_ms(line);
    assert!((87.0..1000.0).contains(&ms), "{line}");
}

#[test]
fn the_next_line_says_how_many_slow_polls_it_left_out() {
    install();
    let name = unique("interval");
    let interval = Duration::from_millis(300);
    let lag = LoopLag::builder(&name)
        .report_interval(interval)
        .build()
        .unwrap();
    future::block_on(lag.instrument("render", Holds(vec![60, 90], 0)));
    // Logged at the end of the first poll, so before this.
    let first = Instant::now();
    assert_eq!(lines_of(&name).len(), 1);
    // Once the interval has passed, the next slow poll is logged with the one left out.
    future::block_on(async {
        while first.elapsed() < interval {
            Timer::after(Duration::from_millis(10)).await;
        }
    });
    future::block_on(lag.instrument("render", Holds(vec![55], 0)));
    let lines = lines_of(&name);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let line = &lines[1].1;
    assert!(
        line.contains("(1 more slow polls since the last report, the longest "),
        "{line}"
    );
    let longest: f64 = line
        .split("the longest ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|ms| ms.parse().ok())
        .expect(line);
    assert!(longest >= 90.0, "{line}");
    assert_eq!(lag.slow_polls("render"), 3);
}

#[test]
fn a_zero_interval_logs_every_slow_poll_and_each_task_apart() {
    install();
    let name = unique("every");
    let lag = LoopLag::builder(&name)
        .report_interval(Duration::ZERO)
        .build()
        .unwrap();
    future::block_on(future::zip(
        lag.instrument("a", Holds(vec![60, 60], 0)),
        lag.instrument("b", Holds(vec![60], 0)),
    ));
    let lines = lines_of(&name);
    let of = |task: &str| {
        let needle = format!("`{task}` held");
        lines.iter().filter(|(_, l)| l.contains(&needle)).count()
    };
    assert_eq!((of("a"), of("b")), (2, 1), "{lines:?}");
}

#[test]
fn a_panicking_logger_loses_nothing_but_its_line() {
    install();
    let name = unique("boom-logger");
    let lag = LoopLag::builder(&name)
        .report_interval(Duration::ZERO)
        .build()
        .unwrap();
    let before = loopguard::telemetry::contained_panics();
    let out = future::block_on(lag.instrument("render", Holds(vec![60, 60, 0], 0)));
    assert_eq!(out, "done", "the output comes through the panicking logger");
    assert_eq!(lag.slow_polls("render"), 2);
    assert_eq!(lines_of(&name).len(), 2, "the logger was called for each");
    assert!(loopguard::telemetry::contained_panics() >= before + 2);
}

/// A recorder whose histograms and counters panic on every update.
struct PanickingRecorder;

struct Boom;

impl metrics::HistogramFn for Boom {
    fn record(&self, _: f64) {
        panic!("expected recorder boom")
    }
}

impl metrics::CounterFn for Boom {
    fn increment(&self, _: u64) {
        panic!("expected recorder boom")
    }
    fn absolute(&self, _: u64) {
        panic!("expected recorder boom")
    }
}

impl metrics::Recorder for PanickingRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(Arc::new(Boom))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::from_arc(Arc::new(Boom))
    }
}

#[test]
fn a_panicking_recorder_stops_neither_the_probe_nor_the_counts() {
    install();
    let recorder = PanickingRecorder;
    let name = unique("boom-recorder");
    // Built under the recorder: the handles it hands out panic on every update.
    let (lag, timed) = metrics::with_local_recorder(&recorder, || {
        let lag = LoopLag::new(&name).unwrap();
        let timed = lag.instrument("render", Holds(vec![60, 0], 0));
        (lag, timed)
    });
    let before = loopguard::telemetry::contained_panics();
    future::block_on(bounded(LIMIT, async {
        let probe = async {
            lag.probe().await;
            unreachable!()
        };
        future::or(
            async {
                while lag.stats().samples < 5 {
                    Timer::after(Duration::from_millis(1)).await;
                }
            },
            probe,
        )
        .await;
        assert_eq!(timed.await, "done");
    }));
    assert!(lag.stats().samples >= 5, "the probe went on");
    assert_eq!(lag.slow_polls("render"), 1);
    assert!(loopguard::telemetry::contained_panics() >= before + 6);
}
