//! Exhaustive interleavings of a refresh flight, under loom: the collection completes
//! (`run_blocking`, on a worker) or is given up (its [`Flight`] dropped without running)
//! while a caller joins it, and a caller restarts a collection once the last one ended.
//!
//! The state, its lock, the signal, the flight token and its completion are the real ones;
//! a caller's step (hit, join or start, decided under the state lock) and its wait for the
//! flight to end are `Refresh::fetch`'s, written out here without the deadline and the
//! pool.
//!
//! What every model checks: a joiner is woken when the flight ends, and then finds its
//! outcome (completed) or no outcome, and starts the next collection itself (given up);
//! one collection is in flight at a time, and a finished flight never clears the mark of
//! a newer one.

use super::*;
use crate::loom_util::block_on;
use crate::refresh::builder;
use loom::thread;

type Core = CacheCore<u32, u32>;

fn core() -> Arc<Core> {
    Arc::new(CacheCore {
        state: Mutex::new(CacheState::new()),
        event: Signal::new(),
        counters: builder::register("model"),
    })
}

/// A caller's step under the state lock, as in `Refresh::fetch` (a TTL long enough that
/// a finished collection is fresh; `force` skips the cache, as `refresh_now` does).
#[derive(Debug, PartialEq)]
enum Step {
    Hit(u32),
    Join(u64),
    Start(u64),
}

fn step(core: &Core, force: bool) -> Step {
    let mut state = lock(&core.state);
    let ttl = Duration::from_secs(3600);
    let cached = if force {
        None
    } else {
        state.cached_at(Instant::now(), ttl, ttl)
    };
    match cached {
        Some(Ok((value, _))) => Step::Hit(*value),
        Some(Err(_)) => panic!("the model's collections do not fail"),
        None => match state.in_flight {
            Some(generation) => Step::Join(generation),
            None => {
                let generation = state.next_gen;
                state.next_gen += 1;
                state.in_flight = Some(generation);
                Step::Start(generation)
            }
        },
    }
}

/// Waits for flight `generation` to end, as `Refresh::fetch` does, and returns the outcome
/// it left, if any.
fn join(core: &Core, generation: u64) -> Option<u32> {
    let ended = || lock(&core.state).in_flight != Some(generation);
    block_on(core.event.wait(ended));
    match lock(&core.state).outcome_since(generation) {
        Some(Ok((value, _))) => Some(*value),
        Some(Err(_)) => panic!("the model's collections do not fail"),
        None => None,
    }
}

fn flight(core: &Arc<Core>, generation: u64) -> Flight<u32, u32> {
    Flight {
        core: core.clone(),
        generation,
    }
}

/// A collection completes on a worker while a second caller arrives: the caller hits the
/// stored value, or joins the flight, is woken when it completes and gets its value.
///
/// Seeded bug this catches (checked by hand, then restored): `Flight::complete` storing
/// the outcome without notifying the signal: loom reports a deadlock (the joiner parked,
/// never woken).
#[test]
fn a_joiner_racing_the_completion_gets_the_value() {
    loom::model(|| {
        let core = core();
        assert_eq!(step(&core, false), Step::Start(1));
        let token = flight(&core, 1);
        let worker = thread::spawn(move || run_blocking(token, &|| Ok(5)));
        let got = match step(&core, false) {
            Step::Hit(value) => value,
            Step::Join(1) => join(&core, 1).expect("a completed flight left its value"),
            other => panic!("a second collection while one was in flight: {other:?}"),
        };
        worker.join().unwrap();
        assert_eq!(got, 5);
        assert_eq!(lock(&core.state).in_flight, None);
    });
}

/// The collection is given up (its token dropped without running: the pool refused it,
/// the starter left before admission) while a second caller arrives: the caller joins and
/// is woken with no outcome, or finds nothing in flight; either way it starts the next
/// collection itself, and that one completes.
///
/// Seeded bug this catches (checked by hand, then restored): `Flight`'s `Drop` clearing the
/// mark without notifying the signal: loom reports a deadlock (the joiner parked, never
/// woken).
#[test]
fn a_joiner_racing_a_give_up_restarts_the_collection() {
    loom::model(|| {
        let core = core();
        assert_eq!(step(&core, false), Step::Start(1));
        let token = flight(&core, 1);
        let dropper = thread::spawn(move || drop(token));
        let restarted = loop {
            match step(&core, false) {
                Step::Start(generation) => break generation,
                Step::Join(1) => {
                    assert_eq!(join(&core, 1), None, "a given-up flight left an outcome");
                }
                other => panic!("unexpected step after a give-up: {other:?}"),
            }
        };
        dropper.join().unwrap();
        assert_eq!(restarted, 2);
        assert_eq!(lock(&core.state).in_flight, Some(2));
        run_blocking(flight(&core, 2), &|| Ok(6));
        assert_eq!(step(&core, false), Step::Hit(6));
    });
}

/// A forced refresh waits for the flight in progress to end, then restarts at once while
/// the finished flight's token is still being let go on the worker: the finished flight
/// never clears the newer one's mark, so one collection is in flight at a time.
///
/// Seeded bug this catches (checked by hand, then restored): `Flight`'s `Drop` clearing
/// `in_flight` whatever generation it holds: the model fails with "a finished flight
/// cleared a newer one's mark".
#[test]
fn a_restart_racing_the_finished_flights_drop_keeps_its_mark() {
    loom::model(|| {
        let core = core();
        assert_eq!(step(&core, false), Step::Start(1));
        let token = flight(&core, 1);
        let worker = thread::spawn(move || run_blocking(token, &|| Ok(5)));
        let generation = loop {
            match step(&core, true) {
                Step::Start(generation) => break generation,
                Step::Join(1) => assert_eq!(join(&core, 1), Some(5)),
                other => panic!("unexpected step: {other:?}"),
            }
        };
        let mine = flight(&core, generation);
        worker.join().unwrap();
        assert_eq!(
            lock(&core.state).in_flight,
            Some(2),
            "a finished flight cleared a newer one's mark"
        );
        run_blocking(mine, &|| Ok(6));
        assert_eq!(step(&core, false), Step::Hit(6));
    });
}
