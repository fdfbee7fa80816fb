//! Ignored timeout headers and refused retries through a real Prometheus recorder and a
//! real logger, both installed globally in this test binary of its own: the series exist
//! from the first use with a zero, count each event, and an ignored header is logged once
//! per header name with its value cut short.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use loopguard::header::{request_deadline, scrape_deadline};
use loopguard::retry::RetryBudget;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Keeps every record of target `loopguard`.
struct Keep(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Keep {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.target() == "loopguard"
    }

    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            let line = record.args().to_string();
            self.0.lock().unwrap().push((record.level(), line));
        }
    }

    fn flush(&self) {}
}

static LOGGER: Keep = Keep(Mutex::new(Vec::new()));

fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        log::set_logger(&LOGGER).expect("the only logger of this binary");
        log::set_max_level(log::LevelFilter::Trace);
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .expect("the only recorder of this binary");
        loopguard::telemetry::describe_metrics();
        handle
    })
}

/// The value of the series `series` in `text`, `None` if it is not there.
fn value(text: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|v| v.trim().parse().expect("a number"))
}

fn ignored(text: &str, header: &str) -> Option<f64> {
    value(
        text,
        &format!(r#"loopguard_ignored_budget_headers_total{{header="{header}"}}"#),
    )
}

const SCRAPE: &str = "x-prometheus-scrape-timeout-seconds";
const ENVOY: &str = "x-envoy-expected-rq-timeout-ms";
const GRPC: &str = "grpc-timeout";

#[test]
fn ignored_headers_are_counted_and_said_once_per_header() {
    let handle = recorder();
    let (default, offset) = (Duration::from_secs(30), Duration::from_millis(500));
    // Valid headers only: the three series are there, at zero.
    let _ = request_deadline([(GRPC, "1S"), (ENVOY, "0")], default, offset);
    let text = handle.render();
    for header in [SCRAPE, ENVOY, GRPC] {
        assert_eq!(ignored(&text, header), Some(0.0), "{header}:\n{text}");
    }
    assert!(
        text.contains("# HELP loopguard_ignored_budget_headers_total"),
        "{text}"
    );

    // The newcomer's garbage, and a long value.
    let long = format!("{}{}", "9".repeat(90), "xyz-tail");
    let headers = [
        (GRPC, "abc"),
        (GRPC, "-5"),
        ("Grpc-Timeout", "1e400, 10S"), // one bad element of two
        (ENVOY, "99999999999999999999"),
        (SCRAPE, long.as_str()),
    ];
    let deadline = request_deadline(headers, default, offset);
    assert!(
        deadline.remaining().unwrap() <= Duration::from_millis(9_500),
        "10S counts"
    );
    let _ = scrape_deadline(["-5"], default, offset);
    let text = handle.render();
    assert_eq!(ignored(&text, GRPC), Some(3.0), "{text}");
    assert_eq!(ignored(&text, ENVOY), Some(1.0), "{text}");
    assert_eq!(ignored(&text, SCRAPE), Some(2.0), "{text}");
    // A header of another name is never a series.
    let _ = request_deadline([("x-timeout", "abc")], default, offset);
    assert!(!handle.render().contains("x-timeout"));

    // One warning per header name: the first ignored value of each, cut to 32 bytes.
    let logged = LOGGER.0.lock().unwrap().clone();
    let about = |name: &str| -> Vec<String> {
        logged
            .iter()
            .filter(|(_, line)| line.contains(&format!("ignored a {name} header")))
            .map(|(level, line)| {
                assert_eq!(*level, log::Level::Warn);
                line.clone()
            })
            .collect()
    };
    let grpc = about(GRPC);
    assert_eq!(grpc.len(), 1, "{logged:?}");
    assert!(grpc[0].contains("\"abc\""), "{}", grpc[0]);
    assert!(grpc[0].contains("loopguard_ignored_budget_headers_total"));
    let envoy = about(ENVOY);
    assert_eq!(envoy.len(), 1, "{logged:?}");
    let scrape = about(SCRAPE);
    assert_eq!(scrape.len(), 1, "{logged:?}");
    assert!(
        scrape[0].contains(&format!("\"{}\"", "9".repeat(32))),
        "{}",
        scrape[0]
    );
    assert!(scrape[0].contains("cut from 98 bytes"), "{}", scrape[0]);
    assert!(!scrape[0].contains("xyz-tail"), "{}", scrape[0]);
    assert_eq!(logged.len(), 3, "{logged:?}");
}

#[test]
fn a_budget_counts_its_refusals_under_its_name() {
    let handle = recorder();
    let budget = RetryBudget::new(Duration::from_secs(1), 1, 0.0)
        .unwrap()
        .named("catalog")
        .unwrap();
    let series = r#"loopguard_retry_budget_refused_total{budget="catalog"}"#;
    assert_eq!(value(&handle.render(), series), Some(0.0), "from naming on");
    assert!(budget.withdraw());
    assert!(!budget.withdraw());
    assert!(!budget.clone().withdraw());
    assert_eq!(value(&handle.render(), series), Some(2.0));
    assert_eq!(budget.refused(), 2);
    // An unnamed budget counts under "default", from its first use.
    let unnamed = RetryBudget::new(Duration::from_secs(1), 0, 0.0).unwrap();
    let default = r#"loopguard_retry_budget_refused_total{budget="default"}"#;
    unnamed.deposit();
    assert_eq!(value(&handle.render(), default), Some(0.0));
    assert!(!unnamed.withdraw());
    assert_eq!(value(&handle.render(), default), Some(1.0));
    assert!(
        handle
            .render()
            .contains("# HELP loopguard_retry_budget_refused_total")
    );
}
