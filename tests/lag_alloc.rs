//! What the loop's own measurement costs in heap allocations, counted by a global allocator
//! in this test binary of its own: none in the probe's polls once it runs (its window of
//! samples was allocated when the `LoopLag` was built), none in the polls of an
//! instrumented future (slow or not, with no logger listening), and none in `instrument`
//! for a task already known. What async-io's reactor allocates when it
//! fires the timer is async-io's and is printed, not asserted.
//!
//! The crate forbids `unsafe`; a test binary is a crate of its own, and a counting allocator
//! needs the one `unsafe impl` below, which only forwards to `System`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_io::Timer;
use futures_lite::future;
use loopguard::lag::LoopLag;

struct Counting;

static COUNT_ALL: AtomicBool = AtomicBool::new(false);
static ALL: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // `const` initialisers without destructors: using them never allocates.
    static THREAD: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    if COUNT_ALL.load(Ordering::Relaxed) {
        ALL.fetch_add(1, Ordering::Relaxed);
    }
    let _ = THREAD.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract holds exactly as it does for `System`; counting touches no memory
// the allocator hands out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tests take turns: the process-wide count must not see the other test's work.
static SERIAL: Mutex<()> = Mutex::new(());

fn on_this_thread() -> u64 {
    THREAD.with(Cell::get)
}

/// `inner`, counting the allocations made on the polling thread inside its polls once
/// `counting` is set.
struct InPolls<'a, F> {
    inner: F,
    counting: &'a Cell<bool>,
    allocations: &'a Cell<u64>,
    polls: &'a Cell<u64>,
}

impl<F: Future + Unpin> Future for InPolls<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let before = on_this_thread();
        let output = Pin::new(&mut self.inner).poll(cx);
        if self.counting.get() {
            self.allocations
                .set(self.allocations.get() + on_this_thread() - before);
            self.polls.set(self.polls.get() + 1);
        }
        output
    }
}

#[test]
fn the_probe_allocates_nothing_per_tick() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TICKS: u64 = 300;
    let lag = LoopLag::builder("alloc-probe")
        .resolution(Duration::from_millis(1))
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    let (counting, allocations, polls) = (Cell::new(false), Cell::new(0), Cell::new(0));
    let probe = InPolls {
        inner: lag.probe(),
        counting: &counting,
        allocations: &allocations,
        polls: &polls,
    };
    let ex = async_executor::LocalExecutor::new();
    let (process_wide, ticks) = future::block_on(ex.run(async {
        let task = ex.spawn(probe);
        // Warm-up: the reactor, its thread and the executor's queues are set up lazily.
        while lag.stats().samples < 20 {
            Timer::after(Duration::from_millis(1)).await;
        }
        let start = lag.stats().samples;
        counting.set(true);
        ALL.store(0, Ordering::SeqCst);
        COUNT_ALL.store(true, Ordering::SeqCst);
        // One timer of the test's own for the whole count.
        Timer::after(Duration::from_millis(TICKS)).await;
        COUNT_ALL.store(false, Ordering::SeqCst);
        counting.set(false);
        drop(task);
        (ALL.load(Ordering::SeqCst), lag.stats().samples - start)
    }));
    eprintln!(
        "probe: {} allocations in {} polls ({ticks} ticks); process-wide (async-io's reactor and \
         the executor included) {:.2} per tick",
        allocations.get(),
        polls.get(),
        process_wide as f64 / ticks as f64
    );
    assert!(ticks >= TICKS / 4, "{ticks} ticks in {TICKS} ms at 1 ms");
    assert!(polls.get() >= ticks, "{} polls", polls.get());
    assert_eq!(allocations.get(), 0, "the probe's polls allocated");
}

/// A future whose polls alternate between holding the thread for 2 ms and not.
struct Alternating(u32);

impl Future for Alternating {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 % 2 == 1 {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.0 -= 1;
        if self.0 == 0 {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn instrumented_polls_allocate_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lag = LoopLag::builder("alloc-timed")
        .slow_poll_threshold(Duration::from_millis(1))
        .build()
        .unwrap();
    // Warm-up: the task's first use registers it.
    future::block_on(lag.instrument("render", Alternating(2)));

    let before = on_this_thread();
    for _ in 0..100 {
        let timed = lag.instrument("render", Alternating(20));
        future::block_on(timed);
    }
    let allocations = on_this_thread() - before;
    // Half of the 2 000 polls were slow: counted, and (no logger) not formatted.
    assert_eq!(lag.slow_polls("render"), 1 + 100 * 10);
    eprintln!("instrument + 2000 polls: {allocations} allocations");
    assert_eq!(allocations, 0);
}
