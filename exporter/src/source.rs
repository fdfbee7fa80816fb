//! What the exporter serves: a registry that renders its exposition into a buffer.

use std::fmt;
use std::io;

/// The content type of the Prometheus text format, version 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type of the OpenMetrics text format, version 1.0.0.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A registry the exporter can serve.
///
/// [`render`](Source::render) runs on one of the exporter's worker threads, never on the
/// loop: it may take as long as a walk of the whole registry takes. The buffer it is given
/// is empty, its capacity kept from the worker's last rendering, so a steady registry
/// renders without growing it.
///
/// Implemented for `metrics_exporter_prometheus::PrometheusHandle` (feature
/// `metrics-exporter-prometheus`, on by default), for
/// `Arc<prometheus_client::registry::Registry>` (feature `prometheus-client`), and by
/// [`render_fn`] for anything else.
///
/// # Examples
///
/// ```
/// use std::io;
/// use loopguard_exporter::{PROMETHEUS_TEXT, Source};
///
/// struct Up;
///
/// impl Source for Up {
///     fn content_type(&self) -> &'static str {
///         PROMETHEUS_TEXT
///     }
///     fn render(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
///         buffer.extend_from_slice(b"up 1\n");
///         Ok(())
///     }
/// }
///
/// let exporter = loopguard_exporter::Exporter::builder().source(Up).build()?;
/// # Ok::<(), io::Error>(())
/// ```
pub trait Source: Send + Sync + 'static {
    /// The `Content-Type` of what [`render`](Source::render) writes, such as
    /// [`PROMETHEUS_TEXT`].
    fn content_type(&self) -> &'static str;

    /// Appends the whole exposition to `buffer`. Blocking; runs on a worker thread. An
    /// error (or a panic) is answered `500` and reported once.
    fn render(&self, buffer: &mut Vec<u8>) -> io::Result<()>;

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
/// is given, in the format `content_type` names.
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
    fn content_type(&self) -> &'static str {
        self.content_type
    }

    fn render(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
        (self.render)(buffer)
    }
}

/// loopguard's own series (the exporter's pool) go through the `metrics` facade into the
/// installed recorder, so they are in this exposition as soon as the recorder is installed.
#[cfg(feature = "metrics-exporter-prometheus")]
impl Source for metrics_exporter_prometheus::PrometheusHandle {
    fn content_type(&self) -> &'static str {
        PROMETHEUS_TEXT
    }

    fn render(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
        self.render_to_write(buffer)
    }

    fn upkeep(&self) {
        self.run_upkeep();
    }
}

/// OpenMetrics text. loopguard's own series appear once the registry holds a
/// `loopguard::telemetry::Collector` (loopguard's feature `prometheus-client`).
#[cfg(feature = "prometheus-client")]
impl Source for std::sync::Arc<prometheus_client::registry::Registry> {
    fn content_type(&self) -> &'static str {
        OPENMETRICS_TEXT
    }

    fn render(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
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
