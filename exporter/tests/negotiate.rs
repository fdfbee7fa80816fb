//! Negotiation as promhttp does it, served for real on every executor: gzip, zstd (decoded
//! by the `zstd` tool) and identity by q-value, `Vary`, the format a scraper's `Accept`
//! asks for and the content type each source really writes (checked by promtool and by
//! the Python prometheus_client's OpenMetrics parser), nothing after `# EOF`.

mod common;

use std::io::{self, Read as _};

use common::{get, pipe, serving, source_part, tool};
use loopguard_exporter::{Exporter, Format, OPENMETRICS_TEXT, PROMETHEUS_TEXT, Source, render_fn};

/// A rendering of `n` bytes of repetitive text lines (Prometheus text).
fn lines_of(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"abcdefgh\n"[i % 9]).collect()
}

/// An answer's body after undoing its `Content-Encoding` (zstd by the `zstd` tool).
fn decoded(answer: &common::Answer) -> Option<Vec<u8>> {
    match answer.header("content-encoding") {
        None => Some(answer.body.clone()),
        Some("gzip") => {
            let mut plain = Vec::new();
            let mut decoder = flate2::read::GzDecoder::new(&answer.body[..]);
            decoder.read_to_end(&mut plain).unwrap();
            Some(plain)
        }
        Some("zstd") => {
            // A zstd frame (the tool decodes gzip too: the magic number tells them apart).
            assert_eq!(answer.body[..4], [0x28, 0xb5, 0x2f, 0xfd], "a zstd frame");
            let zstd = tool("zstd")?;
            let (ok, plain, stderr) = pipe(&zstd, &["-d", "-c", "-q"], &answer.body);
            assert!(ok, "zstd -d: {stderr}");
            Some(plain)
        }
        Some(other) => panic!("an encoding not offered: {other}"),
    }
}

on_every_executor! {
    async fn each_coding_is_chosen_by_q_value_and_decodes_to_the_rendering() {
        let rendering = lines_of(399_996); // whole lines
        let expected = rendering.clone();
        let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
            buffer.extend_from_slice(&rendering);
            Ok(())
        });
        let exporter = Exporter::builder().source(source).build().unwrap();
        let zstd = if cfg!(feature = "zstd") { Some("zstd") } else { None };
        // (Accept-Encoding, the Content-Encoding of the answer)
        let cases = [
            ("zstd", zstd),
            ("gzip;q=0.5, zstd", zstd.or(Some("gzip"))),
            ("zstd, gzip", Some("gzip")),
            ("gzip, zstd", Some("gzip")),
            ("zstd;q=0, gzip", Some("gzip")),
            ("zstd;q=0, gzip;q=0", None),
            ("gzip;q=0, *", zstd),
            ("identity, zstd;q=0.9", None),
            ("br", None),
        ];
        let answers = serving(&exporter, move |addr| {
            cases.map(|(accept, _)| get(addr, "/metrics", &[("Accept-Encoding", accept)]))
        })
        .await;
        for ((accept, coding), answer) in cases.iter().zip(answers) {
            assert_eq!(answer.status, 200, "{accept}");
            assert_eq!(answer.header("content-encoding"), *coding, "{accept}");
            assert_eq!(answer.header("vary"), Some("accept-encoding, accept"), "{accept}");
            if coding.is_some() {
                assert!(answer.body.len() * 10 < expected.len(), "{accept}: compressed");
            }
            let Some(plain) = decoded(&answer) else { continue };
            let plain = source_part(&String::from_utf8(plain).unwrap());
            assert!(plain.as_bytes() == expected, "{accept}: every byte, decoded");
        }
    }
}

/// Writes both text formats: OpenMetrics when asked for it.
struct BothFormats;

impl Source for BothFormats {
    fn content_type(&self, asked: Format) -> &'static str {
        match asked {
            Format::OpenMetricsText => OPENMETRICS_TEXT,
            _ => PROMETHEUS_TEXT,
        }
    }

    fn render(&self, asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
        buffer.extend_from_slice(b"# HELP up Whether it is up.\n# TYPE up gauge\nup 1\n");
        if self.content_type(asked) == OPENMETRICS_TEXT {
            buffer.extend_from_slice(b"# EOF\n");
        }
        Ok(())
    }
}

/// What Prometheus 2.42 sends.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `text` is OpenMetrics: `# EOF` once, last; the Python prometheus_client's parser reads
/// it (when installed) and finds `families`.
fn check_openmetrics(text: &str, families: &[&str]) {
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    assert_eq!(text.matches("# EOF").count(), 1, "{text}");
    let Some(python) = python_with_prometheus_client() else {
        return;
    };
    let script = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\nfor f in parse(sys.stdin.read()):\n    print(f.name, f.type, len(f.samples))";
    let (ok, out, stderr) = pipe(&python, &["-c", script], text.as_bytes());
    assert!(ok, "the OpenMetrics parser refused it: {stderr}\n{text}");
    let out = String::from_utf8(out).unwrap();
    for family in families {
        assert!(
            out.lines().any(|l| l.split(' ').next() == Some(family)),
            "{family}: {out}"
        );
    }
}

/// Debian's python3 with its python3-prometheus-client, if both are installed.
fn python_with_prometheus_client() -> Option<std::path::PathBuf> {
    let python = std::path::PathBuf::from("/usr/bin/python3");
    let found = python.is_file()
        && std::process::Command::new(&python)
            .args(["-c", "import prometheus_client.openmetrics.parser"])
            .output()
            .is_ok_and(|out| out.status.success());
    if !found {
        assert!(
            std::env::var_os("LOOPGUARD_REQUIRE_TOOLS").is_none(),
            "/usr/bin/python3 with prometheus_client is not installed (Debian: python3-prometheus-client)"
        );
        eprintln!("SKIPPED: the OpenMetrics parser (python3-prometheus-client not installed)");
        return None;
    }
    Some(python)
}

/// `text` passes `promtool check metrics` (when installed): parsed and linted as the
/// Prometheus text format.
fn check_prometheus_text(text: &str) {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    let (ok, out, stderr) = pipe(&promtool, &["check", "metrics"], text.as_bytes());
    let out = String::from_utf8_lossy(&out);
    assert!(ok, "promtool check metrics: {out}{stderr}\n{text}");
}

on_every_executor! {
    async fn accept_chooses_the_format_and_content_type_is_what_the_source_wrote() {
        let exporter = Exporter::builder().source(BothFormats).build().unwrap();
        let accepts = [Some(PROMETHEUS_ACCEPT), None, Some("text/plain;version=0.0.4")];
        let answers = serving(&exporter, move |addr| {
            accepts.map(|accept| {
                let headers: Vec<_> = accept.map(|a| ("Accept", a)).into_iter().collect();
                get(addr, "/metrics", &headers)
            })
        })
        .await;
        let [openmetrics, plain, text] = answers;
        assert_eq!(openmetrics.header("content-type"), Some(OPENMETRICS_TEXT));
        let families = ["up", "promhttp_metric_handler_requests", "promhttp_metric_handler_requests_in_flight"];
        check_openmetrics(&openmetrics.text(), &families);
        for answer in [plain, text] {
            assert_eq!(answer.header("content-type"), Some(PROMETHEUS_TEXT));
            assert!(!answer.text().contains("# EOF"), "{}", answer.text());
            check_prometheus_text(&answer.text());
        }
    }
}

#[cfg(feature = "metrics-exporter-prometheus")]
on_every_executor! {
    async fn a_recorder_writes_prometheus_text_whatever_is_asked() {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        let exporter = Exporter::builder().source(handle).build().unwrap();
        let answer = serving(&exporter, |addr| {
            get(addr, "/metrics", &[("Accept", PROMETHEUS_ACCEPT)])
        })
        .await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("content-type"), Some(PROMETHEUS_TEXT));
        let text = answer.text();
        assert!(text.contains("\npromhttp_metric_handler_requests_in_flight 1\n"), "{text}");
        assert!(text.contains("promhttp_metric_handler_requests_total{code=\"200\"} 0\n"));
        check_prometheus_text(&text);
    }
}

#[cfg(feature = "prometheus-client")]
on_every_executor! {
    async fn a_prometheus_client_registry_answers_openmetrics_with_the_series_before_eof() {
        use prometheus_client::metrics::counter::Counter;
        let mut registry = prometheus_client::registry::Registry::default();
        let counter = Counter::<u64>::default();
        counter.inc_by(7);
        registry.register("jobs", "Jobs done", counter);
        let exporter = Exporter::builder()
            .source(std::sync::Arc::new(registry))
            .build()
            .unwrap();
        let answers = serving(&exporter, |addr| {
            [Some(PROMETHEUS_ACCEPT), None].map(|accept| {
                let headers: Vec<_> = accept.map(|a| ("Accept", a)).into_iter().collect();
                get(addr, "/metrics", &headers)
            })
        })
        .await;
        for answer in answers {
            assert_eq!(answer.status, 200);
            // The one format its encoder writes, asked for or not.
            assert_eq!(answer.header("content-type"), Some(OPENMETRICS_TEXT));
            let text = answer.text();
            assert!(text.contains("\njobs_total 7\n"), "{text}");
            let families = ["jobs", "promhttp_metric_handler_requests", "promhttp_metric_handler_requests_in_flight"];
            check_openmetrics(&text, &families);
        }
    }
}
