//! Property tests for every public function that takes outside input (durations,
//! instants, counts, names, event sequences): no input makes them panic, and the
//! results stay within their documented bounds. Header parsing has its own in
//! `tests/header.rs`.

use std::time::{Duration, Instant};

use futures_lite::future::{block_on, poll_once};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use loopguard::deadline::Deadline;
use loopguard::demand::Demand;
use loopguard::keyed::KeyedGate;
use loopguard::operation::{Operation, Outcome};
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use loopguard::retry::{Backoff, Retry};
use loopguard::shield::Shield;
use proptest::prelude::*;

/// Any duration, with the edges (zero, tiny, `MAX`, just past an `Instant`'s range) likely.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..1_000_000_000).prop_map(Duration::from_nanos),
        (0u64..10_000_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// An instant near now, before or after it, or `None` when that cannot be represented.
fn instant(base: Instant, offset: Duration, later: bool) -> Option<Instant> {
    if later {
        base.checked_add(offset)
    } else {
        base.checked_sub(offset)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn deadline_after_any_budget(budget in duration(), other in duration(), probe in duration(),
                                 later in any::<bool>()) {
        let before = Instant::now();
        let deadline = Deadline::after(budget);
        match deadline.instant() {
            // Never means `now + budget` did not fit.
            None => prop_assert!(before.checked_add(budget).is_none()
                                 || Instant::now().checked_add(budget).is_none()),
            Some(at) => prop_assert!(at >= before),
        }
        if let Some(left) = deadline.remaining() {
            prop_assert!(left <= budget);
        }
        let _ = deadline.check();
        let _ = deadline.is_expired();
        if let Some(now) = instant(before, probe, later) {
            let _ = deadline.is_expired_at(now);
            let _ = deadline.remaining_at(now);
        }

        let second = Deadline::after(other);
        let earlier = deadline.min(second);
        prop_assert_eq!(earlier, second.min(deadline));
        prop_assert!(earlier <= deadline && earlier <= second);
        prop_assert_eq!(deadline.min(Deadline::never()), deadline);
    }

    #[test]
    fn deadline_at_any_instant(offset in duration(), later in any::<bool>(), probe in duration()) {
        let now = Instant::now();
        if let Some(at) = instant(now, offset, later) {
            let deadline = Deadline::at(at);
            prop_assert_eq!(deadline.instant(), Some(at));
            prop_assert_eq!(deadline.is_expired_at(now), at <= now);
            if let Some(left) = deadline.remaining_at(now) {
                prop_assert!(left == at.saturating_duration_since(now));
            }
            if let Some(probe) = now.checked_add(probe) {
                let _ = deadline.remaining_at(probe);
                let _ = deadline.is_expired_at(probe);
            }
        }
    }
}

proptest! {
    // These register an async-io timer when pending: fewer cases, still thousands.
    #![proptest_config(ProptestConfig::with_cases(4_000))]

    #[test]
    fn deadline_sleep_and_run_with_any_durations(budget in duration(), nap in duration()) {
        let deadline = Deadline::after(budget);
        let first = block_on(poll_once(deadline.sleep(nap)));
        if let Some(result) = first {
            // Done at once only when the nap or the budget was (nearly) nothing.
            prop_assert!(nap < Duration::from_secs(1) || budget < Duration::from_secs(1),
                         "{result:?} at once for nap {nap:?} budget {budget:?}");
        }
        let ready = block_on(poll_once(deadline.run(async { 7 })));
        match ready {
            Some(Ok(v)) => prop_assert_eq!(v, 7),
            Some(Err(_)) => prop_assert!(budget < Duration::from_secs(1)),
            None => prop_assert!(false, "a ready future under a deadline was pending"),
        }
    }

    #[test]
    fn backoff_any_parameters(base in duration(), max in duration(), n in any::<u32>(),
                              list in proptest::collection::vec(duration(), 0..8),
                              attempts in any::<u32>(), timeout in duration()) {
        let exp = Backoff::exponential(base, max);
        let pause = exp.pause(n);
        prop_assert!(pause <= max, "pause {pause:?} above max {max:?}");
        let jittered = exp.clone().with_jitter().pause(n);
        prop_assert!(jittered <= pause && jittered >= pause / 2);

        let fixed = Backoff::fixed(list.clone());
        let p = fixed.pause(n);
        if list.is_empty() {
            prop_assert_eq!(p, Duration::ZERO);
        } else {
            prop_assert!(list.contains(&p));
        }
        prop_assert_eq!(Backoff::none().pause(n), Duration::ZERO);

        // Building a retry policy from any numbers is fine but for zero attempts and a zero
        // attempt timeout, which are refused, never clamped; running it needs a deadline.
        match Retry::new().attempts(attempts) {
            Ok(retry) => {
                prop_assert!(attempts >= 1);
                match retry.backoff(exp).attempt_timeout(timeout) {
                    Ok(retry) => {
                        prop_assert!(!timeout.is_zero());
                        let retry = retry.max_retry_after(timeout);
                        let text = format!("{retry:?}");
                        prop_assert!(text.contains(&format!("attempts: {attempts},")), "{}", text);
                        prop_assert!(text.contains(&format!("attempt_timeout: Some({timeout:?})")), "{}", text);
                    }
                    Err(err) => {
                        prop_assert!(timeout.is_zero());
                        prop_assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
                    }
                }
            }
            Err(err) => {
                prop_assert_eq!(attempts, 0);
                prop_assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
            }
        }
        // Zero exactly, whatever the generator draws.
        let zero = Retry::new().attempt_timeout(Duration::ZERO).unwrap_err();
        prop_assert_eq!(zero.kind(), std::io::ErrorKind::InvalidInput);
    }
}

/// One event of a `Demand` history.
#[derive(Debug, Clone)]
enum Event {
    Add { at_ms: i64, delta: isize },
    Read { at_ms: i64 },
    Enter { at_ms: i64 },
}

fn event() -> impl Strategy<Value = Event> {
    // Times jump forwards and backwards (a caller may pass a stale instant).
    let at = -100_000i64..1_000_000;
    let delta = prop_oneof![
        -4isize..5,
        Just(isize::MAX),
        Just(isize::MIN),
        any::<isize>()
    ];
    prop_oneof![
        (at.clone(), delta).prop_map(|(at_ms, delta)| Event::Add { at_ms, delta }),
        at.clone().prop_map(|at_ms| Event::Read { at_ms }),
        at.prop_map(|at_ms| Event::Enter { at_ms }),
    ]
}

fn at_ms(t0: Instant, ms: i64) -> Instant {
    let offset = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        t0 + offset
    } else {
        t0.checked_sub(offset).unwrap_or(t0)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn demand_any_window(window in duration()) {
        match Demand::new(window) {
            Ok(demand) => {
                prop_assert_eq!(demand.window(), window);
                prop_assert!(!window.is_zero());
                prop_assert_eq!(demand.average(), 0.0);
            }
            Err(err) => {
                prop_assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
                prop_assert!(window.is_zero() || window > Duration::from_nanos(u64::MAX));
            }
        }
    }

    #[test]
    fn demand_any_event_sequence(window_ms in 1u64..600_000,
                                 events in proptest::collection::vec(event(), 0..40)) {
        let t0 = Instant::now() + Duration::from_secs(200);
        let demand = Demand::new_at(Duration::from_millis(window_ms), t0).unwrap();
        let mut guards = Vec::new();
        for event in events {
            match event {
                Event::Add { at_ms: at, delta } => demand.add_at(at_ms(t0, at), delta),
                Event::Enter { at_ms: at } => guards.push(demand.enter_at(at_ms(t0, at))),
                Event::Read { at_ms: at } => {
                    let avg = demand.average_at(at_ms(t0, at));
                    prop_assert!(avg.is_finite() && avg >= 0.0, "average {}", avg);
                }
            }
        }
        let _ = demand.level();
        drop(guards);
        let avg = demand.average_at(t0 + Duration::from_secs(10_000));
        prop_assert!(avg.is_finite() && avg >= 0.0);
    }

    #[test]
    fn keyed_gate_any_configuration(capacity in 0usize..4, window in duration(),
                                    override_slots in proptest::option::of(0usize..3),
                                    ops in proptest::collection::vec((0u8..4, any::<bool>()), 0..32)) {
        let mut builder = KeyedGate::<u8>::builder("inputs").capacity(capacity).window(window);
        if let Some(slots) = override_slots {
            builder = builder.capacity_for(0, slots);
        }
        let gate = match builder.build() {
            Ok(gate) => gate,
            Err(_) => {
                prop_assert!(capacity == 0 || override_slots == Some(0)
                             || window.is_zero() || u64::try_from(window.as_nanos()).is_err());
                return Ok(());
            }
        };
        let mut held = Vec::new();
        for (key, release) in ops {
            if release && !held.is_empty() {
                drop(held.swap_remove(0));
            } else if let Ok(permit) = gate.try_acquire(key) {
                held.push(permit);
            }
            let slots = if key == 0 { override_slots.unwrap_or(capacity) } else { capacity };
            prop_assert!(gate.in_use(&key) <= slots);
        }
        let _ = gate.demands();
        drop(held);
        for key in 0..4 {
            prop_assert_eq!(gate.in_use(&key), 0);
        }
    }
}

proptest! {
    // Each valid case starts and stops real threads.
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pool_builder_any_input(name in ".{0,12}", workers in prop_oneof![0usize..3, Just(1025),
                              Just(usize::MAX), any::<usize>()],
                              stuck in proptest::option::of(duration()),
                              window in proptest::option::of(duration()),
                              stack in proptest::option::of(64usize * 1024..1 << 20)) {
        let mut builder = Pool::builder().name(&name).workers(workers);
        if let Some(window) = window {
            builder = builder.demand_window(window);
        }
        builder = match stuck {
            Some(threshold) => builder.stuck_after(threshold),
            None => builder.no_stuck_reports(),
        };
        if let Some(bytes) = stack {
            builder = builder.stack_size(bytes);
        }
        let valid = (1..=loopguard::pool::MAX_WORKERS).contains(&workers)
            && !name.is_empty()
            && !name.contains('\0')
            && stuck != Some(Duration::ZERO)
            && window.is_none_or(|w| Demand::new(w).is_ok());
        match builder.build() {
            Ok(pool) => {
                prop_assert!(valid);
                prop_assert_eq!(pool.capacity(), workers);
                prop_assert_eq!(block_on(pool.run(|| 2 + 2)), Ok(4));
                block_on(pool.shutdown());
            }
            Err(err) => {
                prop_assert!(!valid, "refused a valid configuration: {}", err);
                prop_assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
            }
        }
    }
}

/// One pool for the cases below, so they do not each start threads.
fn shared_pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::builder().name("inputs").workers(2).build().unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    #[test]
    fn operation_and_shield_any_name(name in ".{0,24}", nanos in any::<u64>(), pick in 0u8..4) {
        let valid = !name.is_empty() && !name.contains('\0');
        let (op, shield) = match (Operation::new(name.clone()), Shield::new(&name)) {
            (Ok(op), Ok(shield)) => (op, shield),
            (op, shield) => {
                prop_assert!(!valid, "refused a valid name {:?}", name);
                for err in [op.err(), shield.err()] {
                    prop_assert_eq!(err.map(|e| e.kind()), Some(std::io::ErrorKind::InvalidInput));
                }
                return Ok(());
            }
        };
        prop_assert!(valid, "accepted {:?}", name);
        let outcome = [Outcome::Success, Outcome::Deadline, Outcome::Cancelled, Outcome::Error]
            [usize::from(pick)];
        let _ = op.start().finish(outcome);
        let measured = block_on(op.measure(async move { Ok::<u64, std::io::Error>(nanos) }));
        prop_assert_eq!(measured.ok(), Some(nanos));
        prop_assert_eq!(shield.orphaned_failures(), 0);
    }
}

proptest! {
    // Each case runs jobs on the shared pool.
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn run_within_any_deadline(budget in duration()) {
        let pool = shared_pool();
        match block_on(pool.run_within(Deadline::after(budget), || 5u8)) {
            Ok(v) => prop_assert_eq!(v, 5),
            Err(err) => prop_assert!(budget < Duration::from_secs(1), "{} for {:?}", err, budget),
        }
    }

    #[test]
    fn refresh_any_ttls(name in ".{0,12}", ttl in duration(), failure_ttl in proptest::option::of(duration()),
                        fail in any::<bool>(), budget in duration(), probe in duration(),
                        later in any::<bool>()) {
        let calls = Arc::new(AtomicU64::new(0));
        let counter = calls.clone();
        let mut builder = Refresh::builder(&name).ttl(ttl);
        if let Some(failure_ttl) = failure_ttl {
            builder = builder.failure_ttl(failure_ttl);
        }
        let built: std::io::Result<Refresh<u64, String>> = builder.on_pool(shared_pool(), move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            if fail { Err(format!("collection {n} failed")) } else { Ok(n) }
        });
        let valid = !name.is_empty() && !name.contains('\0');
        let cache = match built {
            Ok(cache) => {
                prop_assert!(valid, "accepted {:?}", name);
                cache
            }
            Err(err) => {
                prop_assert!(!valid, "refused a valid name {:?}: {}", name, err);
                prop_assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
                return Ok(());
            }
        };
        for _ in 0..2 {
            match block_on(cache.get(Deadline::after(budget))) {
                Ok(_) => prop_assert!(!fail),
                Err(err) => prop_assert!(fail || err.is_expired(), "{:?}", err),
            }
        }
        prop_assert!(calls.load(Ordering::SeqCst) <= 2);
        if let Some(now) = instant(Instant::now(), probe, later) {
            let _ = cache.peek_at(now);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Any input: a `LoopLag` exactly as asked, or `InvalidInput`; never a panic or a clamp.
    #[test]
    fn loop_lag_builder_any_input(name in ".{0,8}", resolution in duration(), threshold in duration(),
                         window in duration(), interval in duration()) {
        let built = loopguard::lag::LoopLag::builder(&name)
            .resolution(resolution)
            .slow_poll_threshold(threshold)
            .window(window)
            .report_interval(interval)
            .build();
        let valid = !name.is_empty()
            && !name.contains('\0')
            && !resolution.is_zero()
            && resolution <= Duration::from_secs(3600)
            && !threshold.is_zero()
            && (1..=100_000).contains(&(window.as_nanos() / resolution.as_nanos().max(1)));
        match built {
            Ok(lag) => {
                prop_assert!(valid);
                prop_assert_eq!(lag.name(), name.as_str());
                prop_assert_eq!(lag.resolution(), resolution);
                prop_assert_eq!(lag.slow_poll_threshold(), threshold);
                prop_assert_eq!(lag.window(), window);
                let stats = lag.stats();
                prop_assert_eq!(stats.samples, 0);
            }
            Err(err) => {
                prop_assert!(!valid, "refused a valid configuration: {}", err);
                prop_assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
            }
        }
    }
}
