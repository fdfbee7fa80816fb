//! Optional coalescing: one walk per TTL, kept in every encoding, per format asked for.

use hyper::body::Bytes;
use loopguard::deadline::Deadline;
use loopguard::pool::Pool;
use loopguard::refresh::{Refresh, RefreshStats};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::encoding::{self, Encoding};
use crate::offload;
use crate::source::{Format, Source};
use crate::status::Unserved;

/// One rendering in every encoding the crate offers, as the cache keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Rendered {
    plain: Bytes,
    gzip: Bytes,
    /// With the feature `zstd` only.
    zstd: Option<Bytes>,
}

/// A `Refresh` per format the source writes: every scraper shares one walk per TTL, unless
/// the source writes both text formats and scrapers ask for both (one walk per TTL each).
pub(crate) struct Coalesced {
    prometheus: Refresh<Rendered, String>,
    /// For a source whose OpenMetrics differs from its Prometheus text.
    openmetrics: Option<Refresh<Rendered, String>>,
}

impl Coalesced {
    pub(crate) fn new(
        source: &Arc<dyn Source>,
        pool: &Pool,
        ttl: Duration,
        level: u32,
    ) -> io::Result<Coalesced> {
        let refresh = |name: &str, format: Format| {
            let source = source.clone();
            Refresh::builder(name).ttl(ttl).on_pool(pool, move || {
                let plain = offload::walk(&*source, format, Encoding::Identity, level)
                    .map_err(|e| e.to_string())?;
                let gzip = encoding::gzip(&plain, level).map_err(|e| e.to_string())?;
                let zstd = if cfg!(feature = "zstd") {
                    Some(encoding::zstd(&plain).map_err(|e| e.to_string())?.into())
                } else {
                    None
                };
                Ok(Rendered {
                    plain: plain.into(),
                    gzip: gzip.into(),
                    zstd,
                })
            })
        };
        let both = source.content_type(Format::PrometheusText)
            != source.content_type(Format::OpenMetricsText);
        Ok(Coalesced {
            prometheus: refresh("registry", Format::PrometheusText)?,
            openmetrics: both
                .then(|| refresh("registry-openmetrics", Format::OpenMetricsText))
                .transpose()?,
        })
    }

    /// The body for `format` in `encoding`, from the cache or one shared walk.
    pub(crate) async fn get(
        &self,
        deadline: Deadline,
        format: Format,
        encoding: Encoding,
    ) -> Result<Bytes, Unserved> {
        let cache = match (&self.openmetrics, format) {
            (Some(openmetrics), Format::OpenMetricsText) => openmetrics,
            _ => &self.prometheus,
        };
        let rendered = cache.get(deadline).await.map_err(Unserved::from)?;
        Ok(match encoding {
            Encoding::Gzip => rendered.gzip,
            Encoding::Zstd => match rendered.zstd {
                Some(zstd) => zstd,
                None => return Err(Unserved::Failed("zstd needs the feature `zstd`".into())),
            },
            _ => rendered.plain,
        })
    }

    /// The stats of the cache every source has (its Prometheus text's), for the status
    /// page.
    pub(crate) fn stats(&self) -> RefreshStats {
        self.prometheus.stats()
    }
}
