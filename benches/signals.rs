//! Plain timing loops (no harness) for the hot paths of the load signals:
//! `Demand` enter/leave, `Demand::average`, and a rejected
//! `KeyedGate::try_acquire`. Run with `cargo bench --bench signals`; pass an
//! iteration count as the first argument (default 1,000,000).

use std::hint::black_box;
use std::time::{Duration, Instant};

use loopguard::demand::Demand;
use loopguard::keyed::KeyedGate;

fn time(label: &str, iterations: u32, mut f: impl FnMut()) {
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let per_op = start.elapsed() / iterations.max(1);
    println!("{label:<32} {per_op:>10?}/op");
}

fn main() {
    let iterations = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(1_000_000u32);

    let demand = Demand::new(Duration::from_secs(5)).expect("valid window");
    time("demand add(+1) + add(-1)", iterations, || {
        demand.add(black_box(1));
        demand.add(black_box(-1));
    });
    time("demand enter + drop guard", iterations, || {
        drop(black_box(demand.enter()));
    });
    time("demand average", iterations, || {
        black_box(demand.average());
    });

    let gate = KeyedGate::new("bench").unwrap();
    let _held = gate.try_acquire(7u64).expect("idle key");
    time("keyed try_acquire (rejected)", iterations, || {
        let _ = black_box(gate.try_acquire(black_box(7u64)));
    });
    time("keyed try_acquire + release", iterations, || {
        drop(black_box(gate.try_acquire(black_box(8u64))));
    });
}
