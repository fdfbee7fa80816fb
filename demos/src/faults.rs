//! Fault injection for the soak: code loopguard does not own, made to panic at random.
//!
//! Each piece does its real job first and panics afterwards, with the probability it was
//! given, so that every panic lands exactly where loopguard calls into it:
//!
//! - [`PanickingRecorder`]: a `metrics` recorder whose counter, gauge and histogram
//!   updates panic;
//! - [`TracingLogger`]: a `log` logger that hands each record to a callback (the soak
//!   traces orphan reports with it), then panics;
//! - [`maybe_panic`]: for an orphan handler, a waker or an output's `Drop` of your own
//!   (the soak's hostile wakers, which panic in `wake`, `clone` and `drop`, need a raw
//!   waker vtable, so they live in the example, outside this `forbid(unsafe_code)` crate);
//! - [`wake_own`] and [`as_own`]: the task's own calls, exempt from faults ([`is_own`]).
//!
//! The panics carry [`FAULT`] in their message, so a panic hook can keep them quiet.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;

use metrics::{CounterFn, GaugeFn, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};

/// The start of every injected panic's message.
pub const FAULT: &str = "soak fault";

/// How many faults were injected, all kinds together.
pub static INJECTED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set while the soak wakes its own task: its own code calling its own waker is not a
    /// call loopguard makes, so no fault is injected there.
    static OWN_WAKE: Cell<bool> = const { Cell::new(false) };
}

/// Wakes `waker` as the task's own code, without an injected fault.
pub fn wake_own(waker: &Waker) {
    as_own(|| waker.wake_by_ref());
}

/// Runs `f` as the task's own code (cloning or dropping its own waker, say): a hostile
/// waker injects no fault meanwhile, on this thread.
pub fn as_own<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the flag however `f` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            OWN_WAKE.with(|own| own.set(self.0));
        }
    }
    let _restore = Restore(OWN_WAKE.with(|own| own.replace(true)));
    f()
}

/// Whether the calling thread is in [`as_own`] (or [`wake_own`]).
pub fn is_own() -> bool {
    OWN_WAKE.with(Cell::get)
}

/// Panics with probability `p` (0 to 1).
pub fn maybe_panic(p: f64, what: &str) {
    if p > 0.0 && fastrand::f64() < p {
        INJECTED.fetch_add(1, Ordering::Relaxed);
        panic!("{FAULT}: {what}");
    }
}

/// A recorder whose every update panics with a probability.
#[derive(Debug)]
pub struct PanickingRecorder {
    p: f64,
}

impl PanickingRecorder {
    /// Updates panic with probability `p`.
    pub fn new(p: f64) -> PanickingRecorder {
        PanickingRecorder { p }
    }
}

#[derive(Debug)]
struct Handle(f64);

impl CounterFn for Handle {
    fn increment(&self, _: u64) {
        maybe_panic(self.0, "counter")
    }
    fn absolute(&self, _: u64) {
        maybe_panic(self.0, "counter")
    }
}

impl GaugeFn for Handle {
    fn increment(&self, _: f64) {
        maybe_panic(self.0, "gauge")
    }
    fn decrement(&self, _: f64) {
        maybe_panic(self.0, "gauge")
    }
    fn set(&self, _: f64) {
        maybe_panic(self.0, "gauge")
    }
}

impl HistogramFn for Handle {
    fn record(&self, _: f64) {
        maybe_panic(self.0, "histogram")
    }
}

impl metrics::Recorder for PanickingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(Arc::new(Handle(self.p)))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(Arc::new(Handle(self.p)))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::from_arc(Arc::new(Handle(self.p)))
    }
}

/// A logger that gives every record's text to a callback, then panics with a probability.
pub struct TracingLogger {
    p: f64,
    trace: Box<dyn Fn(&str) + Send + Sync>,
}

impl std::fmt::Debug for TracingLogger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingLogger").field("p", &self.p).finish()
    }
}

impl TracingLogger {
    /// Installs it as the global logger (once per process).
    pub fn install(p: f64, trace: impl Fn(&str) + Send + Sync + 'static) -> Result<(), String> {
        let logger = Box::leak(Box::new(TracingLogger {
            p,
            trace: Box::new(trace),
        }));
        log::set_logger(logger).map_err(|e| e.to_string())?;
        log::set_max_level(log::LevelFilter::Warn);
        Ok(())
    }
}

impl log::Log for TracingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        (self.trace)(&record.args().to_string());
        maybe_panic(self.p, "logger");
    }

    fn flush(&self) {}
}
