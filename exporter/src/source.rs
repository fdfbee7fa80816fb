//! What the exporter serves: a registry that renders its exposition into a buffer.

use std::fmt;
use std::io;

/// The content type of the Prometheus text format, version 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type of the OpenMetrics text format, version 1.0.0.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format a scraper asks for in its `Accept` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// The Prometheus text format, version 0.0.4 ([`PROMETHEUS_TEXT`]): what every source
    /// writes unless asked for OpenMetrics and able to write it.
    PrometheusText,
    /// The OpenMetrics text format ([`OPENMETRICS_TEXT`]).
    OpenMetricsText,
}

impl Format {
    /// What an `Accept` value asks for, read once: OpenMetrics when
    /// `application/openmetrics-text` is listed (any version) with a quality above zero
    /// and at least that of `text/plain`; the Prometheus text otherwise (no header,
    /// `*/*`, `text/plain`, a protobuf type alone). Prometheus itself sends
    /// `application/openmetrics-text;version=1.0.0,…;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`.
    /// Several header lines are one comma-separated list.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard_exporter::Format;
    ///
    /// let prometheus = b"application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    /// assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetricsText);
    /// assert_eq!(Format::negotiate(Some(b"text/plain")), Format::PrometheusText);
    /// assert_eq!(Format::negotiate(None), Format::PrometheusText);
    /// ```
    pub fn negotiate(accept: Option<&[u8]>) -> Format {
        let Some(value) = accept.and_then(|v| std::str::from_utf8(v).ok()) else {
            return Format::PrometheusText;
        };
        let [openmetrics, text] = crate::encoding::weights(value, |media| {
            if media.eq_ignore_ascii_case("application/openmetrics-text") {
                Some(0)
            } else {
                media.eq_ignore_ascii_case("text/plain").then_some(1)
            }
        });
        match openmetrics {
            Some(q) if q > 0.0 && q >= text.unwrap_or(0.0) => Format::OpenMetricsText,
            _ => Format::PrometheusText,
        }
    }

    /// The `Accept` lines of a request, joined as one list and negotiated.
    pub(crate) fn of_request(headers: &hyper::HeaderMap) -> Format {
        let lines: Vec<&[u8]> = headers
            .get_all(hyper::header::ACCEPT)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        if lines.is_empty() {
            return Format::negotiate(None);
        }
        Format::negotiate(Some(&lines.join(&b", "[..])))
    }
}

/// A registry the exporter can serve.
///
/// [`render`](Source::render) runs on one of the exporter's worker threads, never on the
/// loop: it may take as long as a walk of the whole registry takes. The buffer it is given
/// is empty, its capacity kept from the worker's last rendering, so a steady registry
/// renders without growing it.
///
/// Both methods are told the [`Format`] the scraper asked for; a source writes it if it
/// can, and the Prometheus text (or whatever it writes) otherwise:
/// [`content_type`](Source::content_type) names exactly what
/// [`render`](Source::render) writes, and is the answer's `Content-Type`.
///
/// Implemented for `metrics_exporter_prometheus::PrometheusHandle` (feature
/// `metrics-exporter-prometheus`, on by default: Prometheus text whatever is asked), for
/// `Arc<prometheus_client::registry::Registry>` (feature `prometheus-client`: OpenMetrics
/// text whatever is asked, the one format its encoder writes), and by [`render_fn`] for
/// anything else (one content type).
///
/// The exporter adds its handler's own series (`promhttp_metric_handler_requests_total`,
/// `promhttp_metric_handler_requests_in_flight`) to what a source writes in either text
/// format: at the end of Prometheus text, before the closing `# EOF` of OpenMetrics. Any
/// other content type is served as the source wrote it.
///
/// # Examples
///
/// ```
/// use std::io;
/// use loopguard_exporter::{Format, OPENMETRICS_TEXT, PROMETHEUS_TEXT, Source};
///
/// /// Writes both text formats.
/// struct Up;
///
/// impl Source for Up {
///     fn content_type(&self, asked: Format) -> &'static str {
///         match asked {
///             Format::OpenMetricsText => OPENMETRICS_TEXT,
///             _ => PROMETHEUS_TEXT,
///         }
///     }
///     fn render(&self, asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
///         buffer.extend_from_slice(b"# TYPE up gauge\nup 1\n");
///         if self.content_type(asked) == OPENMETRICS_TEXT {
///             buffer.extend_from_slice(b"# EOF\n");
///         }
///         Ok(())
///     }
/// }
///
/// let exporter = loopguard_exporter::Exporter::builder().source(Up).build()?;
/// # Ok::<(), io::Error>(())
/// ```
pub trait Source: Send + Sync + 'static {
    /// The `Content-Type` of what [`render`](Source::render) writes when the scraper asks
    /// for `asked`, such as [`PROMETHEUS_TEXT`]. Cheap: it is called on the loop.
    fn content_type(&self, asked: Format) -> &'static str;

    /// Appends the whole exposition to `buffer`, in the format
    /// [`content_type`](Source::content_type)`(asked)` names. Blocking; runs on a worker
    /// thread. An error (or a panic) is answered `500` and reported once.
    fn render(&self, asked: Format, buffer: &mut Vec<u8>) -> io::Result<()>;

    /// Periodic maintenance, called on the loop every five seconds while the exporter
    /// serves (`PrometheusHandle::run_upkeep` for the recorder). Does nothing by default.
    fn upkeep(&self) {}
}

/// A [`Source`] made of a content type and a closure: see [`render_fn`].
pub struct RenderFn<F> {
    content_type: &'static str,
    render: F,
}

impl<F> fmt::Debug for RenderFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RenderFn")
            .field("content_type", &self.content_type)
            .finish_non_exhaustive()
    }
}

/// A [`Source`] that renders with `render`, which appends the exposition to the buffer it
/// is given, in the format `content_type` names, whatever format the scraper asks for.
///
/// # Examples
///
/// ```
/// use loopguard_exporter::{PROMETHEUS_TEXT, render_fn};
///
/// let source = render_fn(PROMETHEUS_TEXT, |buffer| {
///     buffer.extend_from_slice(b"jobs_total 12\n");
///     Ok(())
/// });
/// let exporter = loopguard_exporter::Exporter::builder().source(source).build()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn render_fn<F>(content_type: &'static str, render: F) -> RenderFn<F>
where
    F: Fn(&mut Vec<u8>) -> io::Result<()> + Send + Sync + 'static,
{
    RenderFn {
        content_type,
        render,
    }
}

impl<F> Source for RenderFn<F>
where
    F: Fn(&mut Vec<u8>) -> io::Result<()> + Send + Sync + 'static,
{
    fn content_type(&self, _asked: Format) -> &'static str {
        self.content_type
    }

    fn render(&self, _asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
        (self.render)(buffer)
    }
}

/// loopguard's own series (the exporter's pool) go through the `metrics` facade into the
/// installed recorder, so they are in this exposition as soon as the recorder is installed.
/// Prometheus text whatever is asked: the recorder writes no OpenMetrics.
#[cfg(feature = "metrics-exporter-prometheus")]
impl Source for metrics_exporter_prometheus::PrometheusHandle {
    fn content_type(&self, _asked: Format) -> &'static str {
        PROMETHEUS_TEXT
    }

    fn render(&self, _asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
        self.render_to_write(buffer)
    }

    fn upkeep(&self) {
        self.run_upkeep();
    }
}

/// OpenMetrics text whatever is asked (prometheus-client's encoder writes no other text
/// format; Prometheus reads the answer by its `Content-Type`). loopguard's own series appear
/// once the registry holds a `loopguard::telemetry::Collector` (loopguard's feature
/// `prometheus-client`).
#[cfg(feature = "prometheus-client")]
impl Source for std::sync::Arc<prometheus_client::registry::Registry> {
    fn content_type(&self, _asked: Format) -> &'static str {
        OPENMETRICS_TEXT
    }

    fn render(&self, _asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
        /// `fmt::Write` into the byte buffer, without an intermediate `String`.
        struct Bytes<'a>(&'a mut Vec<u8>);
        impl fmt::Write for Bytes<'_> {
            fn write_str(&mut self, s: &str) -> fmt::Result {
                self.0.extend_from_slice(s.as_bytes());
                Ok(())
            }
        }
        prometheus_client::encoding::text::encode(&mut Bytes(buffer), self)
            .map_err(|_| io::Error::other("prometheus-client could not encode the registry"))
    }
}

#[cfg(test)]
mod tests {
    use super::Format::{self, OpenMetricsText, PrometheusText};

    #[test]
    fn accept_asks_for_openmetrics_or_the_prometheus_text() {
        let cases: &[(&[u8], Format)] = &[
            // Prometheus 2.x's own header, and its 3.x one.
            (
                b"application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                OpenMetricsText,
            ),
            (
                b"application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
                OpenMetricsText,
            ),
            (b"Application/OpenMetrics-Text", OpenMetricsText),
            (b"text/plain;q=0.5, application/openmetrics-text;q=0.5", OpenMetricsText),
            (b"text/plain;version=0.0.4", PrometheusText),
            (b"text/plain, application/openmetrics-text;q=0.5", PrometheusText),
            (b"application/openmetrics-text;q=0", PrometheusText),
            (b"application/openmetrics-text;q=banana", PrometheusText),
            (b"*/*", PrometheusText),
            (b"application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited", PrometheusText),
            (b"application/openmetrics-textx", PrometheusText),
            (b"", PrometheusText),
            (b"\xff", PrometheusText),
        ];
        for (value, expected) in cases {
            let got = Format::negotiate(Some(value));
            assert_eq!(got, *expected, "{:?}", String::from_utf8_lossy(value));
        }
        assert_eq!(Format::negotiate(None), PrometheusText);
        let mut headers = hyper::HeaderMap::new();
        headers.append("accept", "text/plain;q=0.5".parse().unwrap());
        headers.append("accept", "application/openmetrics-text".parse().unwrap());
        assert_eq!(Format::of_request(&headers), OpenMetricsText);
    }
}
