//! Heap allocations on the hot paths, counted by a global allocator in this test binary of
//! its own: none on a refused `try_run` (counted on the calling thread only), and at most
//! two per admitted and awaited job (counted on every thread, the workers included). The
//! tower layer: two per refused request (the `HeaderMap` tables of the 503's one header,
//! which any `http::Response` with a header allocates), four per admitted one.
//!
//! The crate forbids `unsafe`; a test binary is a crate of its own, and a counting allocator
//! needs the one `unsafe impl` below, which only forwards to `System`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, mpsc};

use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::pool::{Pool, TryRunError};

/// Counts every allocation (and reallocation) made anywhere while `COUNT_ALL` is set, and
/// those made by the current thread in `THREAD` whatever the flag.
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
    // `try_with`: a thread being torn down may still free or allocate.
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

/// Counts the allocations made on every thread while `f` runs.
fn everywhere<R>(f: impl FnOnce() -> R) -> (R, u64) {
    ALL.store(0, Ordering::SeqCst);
    COUNT_ALL.store(true, Ordering::SeqCst);
    let out = f();
    COUNT_ALL.store(false, Ordering::SeqCst);
    (out, ALL.load(Ordering::SeqCst))
}

#[test]
fn a_refused_try_run_allocates_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A default pool: metrics handles, orphan handler, stuck-job monitor all on.
    let pool = Pool::builder()
        .name("alloc-reject")
        .workers(1)
        .build()
        .unwrap();
    let (release, held) = mpsc::channel::<()>();
    let job = pool
        .try_run(move || {
            let _ = held.recv();
        })
        .expect("an idle pool admits");
    // The job carries an owned buffer: a refusal must hand it back, not copy or box it.
    let mut payload = Some(vec![7u8; 64]);

    // Warm-up: first use of anything lazily initialised on this thread.
    let warm = payload.clone().unwrap();
    assert!(pool.try_run(move || warm.len()).is_err());

    let before = on_this_thread();
    for _ in 0..1_000 {
        let buf = payload.take().unwrap();
        let ptr = buf.as_ptr();
        let refused = match pool.try_run(move || buf) {
            Err(TryRunError::Saturated(busy)) => {
                assert!(!busy.retry_after().is_zero());
                busy.into_inner()
            }
            Ok(_) => panic!("a saturated pool admitted a job"),
            Err(err) => panic!("unexpected: {err}"),
        };
        // Calling the returned closure gives the very buffer back, unmoved on the heap.
        let buf = refused();
        assert_eq!(buf.as_ptr(), ptr);
        payload = Some(buf);
    }
    let allocations = on_this_thread() - before;
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1000 refused try_run calls"
    );
    eprintln!("refused try_run: {allocations} allocations in 1000 calls");

    drop(release);
    block_on(job).unwrap();
}

#[test]
fn an_admitted_job_allocates_at_most_twice() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let pool = Pool::builder()
        .name("alloc-admit")
        .workers(2)
        .build()
        .unwrap();
    const N: u64 = 10_000;

    block_on(async {
        // Warm-up: executor parker and waker, thread-locals on the workers, queue capacity.
        for _ in 0..1_000 {
            pool.run(|| 1u64).await.unwrap();
            let _ = pool.run(Fallible(|| Err::<u64, u64>(1))).await.unwrap();
        }
    });
    // Start the count below from a quiet pool.
    block_on(pool.wait_idle());

    let (sum, run_allocs) = everywhere(|| {
        block_on(async {
            let mut sum = 0;
            for _ in 0..N {
                sum += pool.run(|| 1u64).await.unwrap();
            }
            sum
        })
    });
    assert_eq!(sum, N);

    // `try_run` on a free slot (the slot of the previous job is given back by its worker
    // after it delivered, so wait for that), with half of the outputs failures returned
    // to the caller.
    let (errors, try_allocs) = everywhere(|| {
        block_on(async {
            let mut errors = 0;
            for i in 0..N {
                let job = loop {
                    match pool.try_run(Fallible(move || if i % 2 == 0 { Ok(i) } else { Err(i) })) {
                        Ok(job) => break job,
                        Err(busy) if busy.is_saturated() => std::thread::yield_now(),
                        Err(err) => panic!("unexpected: {err}"),
                    }
                };
                errors += u64::from(job.await.unwrap().is_err());
            }
            errors
        })
    });
    assert_eq!(errors, N / 2);

    let per_run = run_allocs as f64 / N as f64;
    let per_try = try_allocs as f64 / N as f64;
    eprintln!("admitted jobs: run {per_run:.3}, try_run {per_try:.3} allocations per job");
    assert!(per_run <= 2.0, "run: {per_run} allocations per job");
    assert!(per_try <= 2.0, "try_run: {per_try} allocations per job");
}

#[test]
fn load_signals_allocate_nothing_on_their_hot_paths() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let demand = loopguard::demand::Demand::default();
    let gate: loopguard::keyed::KeyedGate<&'static str> =
        loopguard::keyed::KeyedGate::new("alloc-keyed").unwrap();
    let held = gate.try_acquire("repo").expect("an idle key admits");
    // Warm-up: first use of anything lazily initialised on this thread.
    demand.add(1);
    demand.add(-1);
    assert!(gate.try_acquire("repo").is_err());

    let before = on_this_thread();
    for _ in 0..1_000 {
        demand.add(1);
        let _ = demand.average();
        demand.add(-1);
        let busy = gate.try_acquire("repo").expect_err("the key is held");
        assert_eq!(*busy.key(), "repo");
    }
    let allocations = on_this_thread() - before;
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for 1000 demand changes and keyed rejections"
    );
    drop(held);
}

/// A no-op HTTP service: the bare service the layer is measured against.
#[cfg(feature = "tower")]
#[derive(Clone)]
struct Noop;

#[cfg(feature = "tower")]
impl tower_service::Service<http::Request<()>> for Noop {
    type Response = http::Response<http_body_util::Empty<hyper::body::Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        std::future::ready(Ok(http::Response::new(http_body_util::Empty::new())))
    }
}

/// Calls `service` once and returns the response (the future is ready at once).
#[cfg(feature = "tower")]
fn call_once<S>(service: &mut S) -> S::Response
where
    S: tower_service::Service<http::Request<()>>,
    S::Error: std::fmt::Debug,
{
    use std::future::Future as _;
    let mut future = std::pin::pin!(service.call(http::Request::new(())));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(response) => response.unwrap(),
        std::task::Poll::Pending => panic!("a no-op service is ready at once"),
    }
}

#[cfg(feature = "tower")]
#[test]
fn the_tower_layer_allocates_two_tables_per_refusal() {
    use tower_layer::Layer as _;

    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let layer = loopguard::tower::AdmissionLayer::new("test", 1).unwrap();
    let mut service = layer.layer(Noop);
    let mut bare = Noop;

    // The bare service, for reference.
    drop(call_once(&mut bare));
    let before = on_this_thread();
    for _ in 0..1_000 {
        drop(call_once(&mut bare));
    }
    let bare_allocs = on_this_thread() - before;

    // Admitted: the grant shared by the body and the `Slot` extension, and the extension map.
    drop(call_once(&mut service));
    let before = on_this_thread();
    for _ in 0..1_000 {
        drop(call_once(&mut service));
    }
    let admitted = (on_this_thread() - before) as f64 / 1000.0;

    // Refused: the slot is held by a response whose body is not written.
    let held = call_once(&mut service);
    drop(call_once(&mut service));
    let before = on_this_thread();
    for _ in 0..1_000 {
        let refused = call_once(&mut service);
        assert_eq!(refused.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[http::header::RETRY_AFTER], "1");
    }
    let refused = (on_this_thread() - before) as f64 / 1000.0;
    drop(held);
    assert_eq!(layer.in_use(), 0);
    eprintln!(
        "tower layer: bare {:.3}, admitted {admitted:.3}, refused {refused:.3} allocations per request",
        bare_allocs as f64 / 1000.0
    );
    assert_eq!(bare_allocs, 0, "the bare service allocates {bare_allocs}");
    // The header map's two tables: what any `http::Response` with one header costs.
    assert!(refused <= 2.0, "{refused} allocations per refusal");
    assert!(admitted <= 4.0, "{admitted} allocations per admission");
}
