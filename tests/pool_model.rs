//! Property test: random mixes of success, `Err`, panic, cancel before start, cancel
//! mid-run and waits. Afterwards no slot is held, concurrency never exceeded capacity, and
//! every failure of a job that ran was seen exactly once (returned or reported).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{Latch, poll_once};
use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Ok,
    Err,
    Panic,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    TryAwait,
    TryDrop,
    RunAwait,
    RunDropBeforePoll,
    RunDropAfterPoll,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: Kind,
    mode: Mode,
    hold: bool,
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![Just(Kind::Ok), Just(Kind::Err), Just(Kind::Panic)];
    let mode = prop_oneof![
        Just(Mode::TryAwait),
        Just(Mode::TryDrop),
        Just(Mode::RunAwait),
        Just(Mode::RunDropBeforePoll),
        Just(Mode::RunDropAfterPoll),
    ];
    (kind, mode, any::<bool>()).prop_map(|(kind, mode, hold)| Op { kind, mode, hold })
}

#[derive(Default)]
struct Ledger {
    ran: BTreeSet<usize>,
    failing: BTreeSet<usize>,
    returned: BTreeMap<usize, usize>,
    reported: BTreeMap<usize, usize>,
}

enum Handle {
    Job(loopguard::pool::Job<Result<(), usize>>),
    Run(
        Box<
            dyn std::future::Future<Output = Result<Result<(), usize>, loopguard::pool::RunError>>
                + Unpin,
        >,
    ),
}

fn run_mix(workers: usize, batches: Vec<Vec<Op>>) {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let sink = ledger.clone();
    let pool = Pool::builder()
        .name("model")
        .workers(workers)
        .no_stuck_reports()
        .on_orphan(OrphanHandler::new(move |report| {
            let id: usize = report.message().parse().expect("an id");
            *sink.lock().unwrap().reported.entry(id).or_default() += 1;
        }))
        .build()
        .unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut id = 0;

    for batch in batches {
        let latch = Latch::new();
        let mut handles = Vec::new();
        for op in batch {
            id += 1;
            let me = id;
            if !matches!(op.kind, Kind::Ok) {
                ledger.lock().unwrap().failing.insert(me);
            }
            let (book, running, peak, latch) =
                (ledger.clone(), running.clone(), peak.clone(), latch.clone());
            let job = Fallible(move || -> Result<(), usize> {
                book.lock().unwrap().ran.insert(me);
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                if op.hold {
                    latch.wait();
                }
                running.fetch_sub(1, Ordering::SeqCst);
                match op.kind {
                    Kind::Ok => Ok(()),
                    Kind::Err => Err(me),
                    Kind::Panic => panic!("{me}"),
                }
            });
            match op.mode {
                Mode::TryAwait | Mode::TryDrop => {
                    if let Ok(job) = pool.try_run(job) {
                        if matches!(op.mode, Mode::TryAwait) {
                            handles.push((me, Handle::Job(job)));
                        }
                    }
                }
                Mode::RunAwait => handles.push((me, Handle::Run(Box::new(pool.run(job))))),
                Mode::RunDropBeforePoll => drop(pool.run(job)),
                Mode::RunDropAfterPoll => {
                    let mut run = pool.run(job);
                    if let Some(out) = block_on(poll_once(&mut run)) {
                        record(&ledger, me, out.map_err(|_| ()));
                    }
                }
            }
        }
        latch.open();
        for (me, handle) in handles {
            let out = match handle {
                Handle::Job(job) => block_on(job).map_err(|_| ()),
                Handle::Run(run) => block_on(run).map_err(|_| ()),
            };
            record(&ledger, me, out);
        }
        block_on(pool.wait_idle());
    }

    assert_eq!(pool.in_use(), 0, "leaked slot");
    assert_eq!(pool.waiting(), 0);
    assert!(
        peak.load(Ordering::SeqCst) <= workers,
        "concurrency exceeded capacity"
    );
    let ledger = ledger.lock().unwrap();
    for &failing in &ledger.failing {
        let seen = ledger.returned.get(&failing).copied().unwrap_or(0)
            + ledger.reported.get(&failing).copied().unwrap_or(0);
        let expected = usize::from(ledger.ran.contains(&failing));
        assert_eq!(seen, expected, "failure {failing} seen {seen} times");
    }
    for id in ledger.returned.keys().chain(ledger.reported.keys()) {
        assert!(
            ledger.failing.contains(id),
            "success {id} reported as failure"
        );
    }
    assert_eq!(
        pool.orphaned_failures() as usize,
        ledger.reported.values().sum::<usize>()
    );
}

fn record(ledger: &Mutex<Ledger>, me: usize, out: Result<Result<(), usize>, ()>) {
    let failed = !matches!(out, Ok(Ok(())));
    if failed {
        *ledger.lock().unwrap().returned.entry(me).or_default() += 1;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_mixes_keep_every_contract(
        workers in 1usize..=3,
        batches in prop::collection::vec(prop::collection::vec(op(), 1..8), 1..6),
    ) {
        run_mix(workers, batches);
    }
}
