//! The handler's own series, named as promhttp names them, added to every exposition.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::source::{Format, OPENMETRICS_TEXT, Source};

const REQUESTS: &str = "promhttp_metric_handler_requests";
const REQUESTS_HELP: &str = "Total number of scrapes by HTTP status code.";
const IN_FLIGHT: &str = "promhttp_metric_handler_requests_in_flight";
const IN_FLIGHT_HELP: &str = "Current number of scrapes being served.";

/// `/metrics` requests answered, by status code, and those being served now.
#[derive(Debug)]
pub(crate) struct HandlerSeries {
    in_flight: AtomicU64,
    codes: Mutex<BTreeMap<u16, u64>>,
}

impl Default for HandlerSeries {
    /// The likeliest codes at zero, as promhttp starts them (and 504, a spent budget here).
    fn default() -> HandlerSeries {
        let codes = [200, 500, 503, 504].map(|code| (code, 0)).into();
        HandlerSeries {
            in_flight: AtomicU64::new(0),
            codes: Mutex::new(codes),
        }
    }
}

/// A `/metrics` request being served: counted in flight until it is dropped, and under its
/// status code once [`answered`](InFlight::answered).
#[derive(Debug)]
pub(crate) struct InFlight<'a>(&'a HandlerSeries);

impl HandlerSeries {
    /// A scrape starts: in flight from now on, so that its own rendering counts it.
    pub(crate) fn begin(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self)
    }

    /// Appends the series to `buffer`, which holds what the source wrote as `content_type`:
    /// before OpenMetrics' closing `# EOF`, at the end of the Prometheus text. Any other
    /// content type is left as it is.
    pub(crate) fn render(&self, content_type: &str, buffer: &mut Vec<u8>) {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        let openmetrics = media.eq_ignore_ascii_case(OPENMETRICS_TEXT.split(';').next().unwrap());
        if !openmetrics && !media.eq_ignore_ascii_case("text/plain") {
            return;
        }
        let eof = openmetrics && strip_eof(buffer);
        if buffer.last().is_some_and(|&b| b != b'\n') {
            buffer.push(b'\n');
        }
        // OpenMetrics names a counter's family without `_total`; the text format names it
        // as its sample.
        let family = if openmetrics {
            REQUESTS.to_string()
        } else {
            format!("{REQUESTS}_total")
        };
        let mut text = format!("# HELP {family} {REQUESTS_HELP}\n# TYPE {family} counter\n");
        let codes = self.codes.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (code, count) in codes {
            let _ = writeln!(text, "{REQUESTS}_total{{code=\"{code}\"}} {count}");
        }
        let in_flight = self.in_flight.load(Ordering::SeqCst);
        let _ = write!(
            text,
            "# HELP {IN_FLIGHT} {IN_FLIGHT_HELP}\n# TYPE {IN_FLIGHT} gauge\n{IN_FLIGHT} {in_flight}\n"
        );
        buffer.extend_from_slice(text.as_bytes());
        if eof {
            buffer.extend_from_slice(b"# EOF\n");
        }
    }
}

impl InFlight<'_> {
    /// The scrape was answered `status`: counted once, as promhttp counts it, after it was
    /// served.
    pub(crate) fn answered(self, status: u16) {
        let mut codes = self.0.codes.lock().unwrap_or_else(|e| e.into_inner());
        *codes.entry(status).or_default() += 1;
    }
}

impl Drop for InFlight<'_> {
    /// Answered or abandoned (its client left), it is no longer in flight.
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Removes a last line `# EOF` (with or without its newline); whether there was one.
fn strip_eof(buffer: &mut Vec<u8>) -> bool {
    let body = buffer.strip_suffix(b"\n").unwrap_or(buffer);
    let Some(rest) = body.strip_suffix(b"# EOF") else {
        return false;
    };
    if !(rest.is_empty() || rest.ends_with(b"\n")) {
        return false;
    }
    buffer.truncate(rest.len());
    true
}

/// A source with the handler's series added to its exposition.
pub(crate) struct Instrumented {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) series: Arc<HandlerSeries>,
}

impl Source for Instrumented {
    fn content_type(&self, asked: Format) -> &'static str {
        self.source.content_type(asked)
    }

    fn render(&self, asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
        self.source.render(asked, buffer)?;
        self.series.render(self.source.content_type(asked), buffer);
        Ok(())
    }

    fn upkeep(&self) {
        self.source.upkeep();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::PROMETHEUS_TEXT;

    fn rendered(series: &HandlerSeries, content_type: &str, source: &[u8]) -> String {
        let mut buffer = source.to_vec();
        series.render(content_type, &mut buffer);
        String::from_utf8(buffer).unwrap()
    }

    #[test]
    fn counts_move_by_one_per_answer_and_in_flight_while_served() {
        let series = HandlerSeries::default();
        let first = series.begin();
        let second = series.begin();
        let text = rendered(&series, PROMETHEUS_TEXT, b"up 1\n");
        assert!(
            text.contains("\npromhttp_metric_handler_requests_in_flight 2\n"),
            "{text}"
        );
        assert!(text.contains("promhttp_metric_handler_requests_total{code=\"200\"} 0\n"));
        first.answered(200);
        second.answered(504);
        drop(series.begin()); // abandoned: counted nowhere
        let text = rendered(&series, PROMETHEUS_TEXT, b"up 1\n");
        assert!(text.starts_with("up 1\n# HELP promhttp_metric_handler_requests_total "));
        for line in [
            "# TYPE promhttp_metric_handler_requests_total counter",
            "promhttp_metric_handler_requests_total{code=\"200\"} 1",
            "promhttp_metric_handler_requests_total{code=\"500\"} 0",
            "promhttp_metric_handler_requests_total{code=\"503\"} 0",
            "promhttp_metric_handler_requests_total{code=\"504\"} 1",
            "# TYPE promhttp_metric_handler_requests_in_flight gauge",
            "promhttp_metric_handler_requests_in_flight 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in {text}");
        }
    }

    #[test]
    fn openmetrics_gets_them_before_its_eof_and_other_types_not_at_all() {
        let series = HandlerSeries::default();
        for source in [
            &b"# TYPE up gauge\nup 1\n# EOF\n"[..],
            b"up 1\n# EOF",
            b"# EOF\n",
        ] {
            let text = rendered(&series, OPENMETRICS_TEXT, source);
            assert!(text.ends_with("\npromhttp_metric_handler_requests_in_flight 0\n# EOF\n"));
            assert_eq!(text.matches("# EOF").count(), 1, "{text}");
            assert!(text.contains("# TYPE promhttp_metric_handler_requests counter\n"));
        }
        // No newline at the source's end: one is added before the series.
        assert!(rendered(&series, PROMETHEUS_TEXT, b"up 1").starts_with("up 1\n# HELP"));
        let protobuf = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily";
        assert_eq!(rendered(&series, protobuf, b"\x01\x02"), "\x01\x02");
        // `# EOF` inside a line is not the end.
        let text = rendered(&series, OPENMETRICS_TEXT, b"x{a=\"# EOF\"} 1\n");
        assert!(text.starts_with("x{a=\"# EOF\"} 1\n# HELP"), "{text}");
    }
}
