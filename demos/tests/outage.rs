//! The outage scenario of `examples/retry_budget.rs`, small: callers retrying into a real
//! loopback server that answers 503 for a while. Without a budget the dependency receives
//! every retry; with `RetryBudget::new(10 s, 1, 0.1)` it receives at most what the budget
//! can pay for (a tenth of the first attempts and the reserve's ten), and every caller is
//! served again soon after the recovery. The exact figures are BENCHMARKS.md's.

use std::time::Duration;

use loopguard::retry::Backoff;
use loopguard_demos::outage::{BudgetSettings, Scenario, run_all};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn a_budget_keeps_an_outage_from_being_multiplied() {
    let scenario = Scenario {
        callers: 50,
        attempts: 3,
        healthy: Duration::ZERO,
        outage: ms(1_500),
        recovery: ms(1_000),
        call_budget: ms(2_000),
        think: Duration::ZERO,
        backoff: Backoff::fixed([ms(2), ms(4)]).with_jitter(),
    };
    let budget = BudgetSettings {
        ttl: Duration::from_secs(10),
        min_per_sec: 1,
        retry_ratio: 0.1,
    };
    let reports = run_all(&scenario, &[None, Some(budget)]);
    let (without, with) = (&reports[0], &reports[1]);

    // Without: every failed call is retried to its limit.
    let outage = without.outage();
    assert!(outage.first() >= 100, "{outage:?}");
    assert!(outage.ratio() > 2.5, "without a budget: {outage:?}");
    assert_eq!(without.refused, 0);

    // With: retries are what the deposits and the reserve pay for, and no more.
    let outage = with.outage();
    assert!(outage.first() >= 100, "{outage:?}");
    let retries = outage.total() - outage.first();
    assert!(
        retries as f64 <= 0.1 * outage.first() as f64 + 10.0 + 1.0,
        "with a budget: {outage:?}"
    );
    assert!(outage.ratio() <= 1.2, "with a budget: {outage:?}");
    assert!(with.refused > 0);
    assert_eq!(with.calls[1].budget_exhausted, with.refused);

    // Both: every caller served again within 2 s of the recovery.
    for report in &reports {
        let back = report
            .all_served_again()
            .expect("every caller served again");
        assert!(back < Duration::from_secs(2), "{back:?}");
        assert_eq!(report.calls[2].succeeded, report.calls[2].total());
    }
}
