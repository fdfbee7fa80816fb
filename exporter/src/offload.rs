//! Where the render runs, and the render itself.

use std::cell::RefCell;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use hyper::body::Bytes;
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::pool::Pool;

use crate::encoding::{self, Encoding};
use crate::source::{Format, Source};
use crate::status::Unserved;

/// Where a scrape's render runs: the one thing the storm's baselines change.
///
/// Everything else (connections, negotiation, slicing, the status mapping, the budget) is
/// the same whichever is chosen, so a measurement of [`Unbounded`](Offload::Unbounded) or
/// [`OnLoop`](Offload::OnLoop) against [`Pool`](Offload::Pool) measures the offload alone.
/// Serve with `Pool`; the other two exist to be measured against it.
///
/// # Examples
///
/// ```
/// use loopguard_exporter::{Exporter, Offload, PROMETHEUS_TEXT, render_fn};
///
/// let baseline = Exporter::builder()
///     .source(render_fn(PROMETHEUS_TEXT, |b| Ok(b.extend_from_slice(b"up 1\n"))))
///     .offload(Offload::Unbounded)
///     .build()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Offload {
    /// On the exporter's loopguard pool through `Pool::try_run_within`: no free slot is a
    /// `503` with `Retry-After` at once, a spent budget a `504` while the walk keeps its
    /// slot.
    #[default]
    Pool,
    /// `blocking::unblock` for every render: no admission control, an unbounded queue (the
    /// baseline of an exporter that spawns a blocking task per scrape).
    Unbounded,
    /// On the loop's own thread: nothing offloaded (the baseline of an exporter that
    /// renders in its handler).
    OnLoop,
}

thread_local! {
    /// The buffer this thread renders into, kept between walks (see [`walk`]).
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// One scrape's walk, exactly as a worker runs it: `source` rendered in the `format` asked
/// for into the buffer this thread keeps, then, for [`Encoding::Gzip`] or
/// [`Encoding::Zstd`], compressed from it on this thread (gzip at `gzip_level`, zstd at
/// [`ZSTD_LEVEL`](crate::ZSTD_LEVEL)). A compressed walk reuses the buffer (cleared, its
/// capacity the largest rendering so far); a plain walk hands it over as the body and
/// leaves a new one reserved at its size.
/// The price is one rendering's memory kept per worker thread.
///
/// Public so that a benchmark measures the code the exporter runs (the `walk_cost` demo
/// does); an exporter calls it for you.
///
/// # Examples
///
/// ```
/// use loopguard_exporter::{Encoding, Format, GZIP_LEVEL, PROMETHEUS_TEXT, render_fn, walk};
///
/// let source = render_fn(PROMETHEUS_TEXT, |b| Ok(b.extend_from_slice(b"up 1\n")));
/// let plain = walk(&source, Format::PrometheusText, Encoding::Identity, GZIP_LEVEL)?;
/// assert_eq!(plain, b"up 1\n");
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
///
/// The source's own; [`Unsupported`](io::ErrorKind::Unsupported) for zstd when the crate
/// was built without its feature `zstd`.
pub fn walk(
    source: &dyn Source,
    format: Format,
    encoding: Encoding,
    gzip_level: u32,
) -> io::Result<Vec<u8>> {
    BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        source.render(format, buffer)?;
        match encoding {
            Encoding::Gzip => encoding::gzip(buffer, gzip_level),
            Encoding::Zstd => encoding::zstd(buffer),
            Encoding::Identity => {
                let next = Vec::with_capacity(buffer.len());
                Ok(std::mem::replace(buffer, next))
            }
        }
    })
}

/// Renders as `offload` says, within `deadline`.
pub(crate) async fn render(
    offload: Offload,
    pool: &Pool,
    deadline: Deadline,
    source: Arc<dyn Source>,
    format: Format,
    encoding: Encoding,
    level: u32,
) -> Result<Bytes, Unserved> {
    let job = move || walk(&*source, format, encoding, level).map(Bytes::from);
    match offload {
        // `Fallible`: if the scrape leaves, an `Err` of its walk still reaches the orphan
        // handler, once.
        Offload::Pool => pool
            .try_run_within(deadline, Fallible(job))
            .await
            .map_err(Unserved::from),
        Offload::Unbounded => match deadline
            .run(blocking::unblock(move || contained(job)))
            .await
        {
            Ok(rendered) => rendered,
            Err(_) => Err(Unserved::BudgetSpent),
        },
        Offload::OnLoop if deadline.is_expired() => Err(Unserved::BudgetSpent),
        Offload::OnLoop => contained(job),
    }
}

/// `job`'s output, its panic a failure like any other.
fn contained(job: impl FnOnce() -> io::Result<Bytes>) -> Result<Bytes, Unserved> {
    match catch_unwind(AssertUnwindSafe(job)) {
        Ok(rendered) => rendered.map_err(|err| Unserved::Failed(err.to_string())),
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            Err(Unserved::Failed(format!("panicked: {message}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{PROMETHEUS_TEXT, render_fn};
    use std::sync::Mutex;

    #[test]
    fn the_buffer_is_kept_per_thread_at_the_last_size() {
        let capacities = Arc::new(Mutex::new(Vec::new()));
        let seen = capacities.clone();
        let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
            seen.lock().unwrap().push((buffer.len(), buffer.capacity()));
            buffer.extend_from_slice(&[b'x'; 100_000]);
            Ok(())
        });
        std::thread::spawn(move || {
            let text = Format::PrometheusText;
            let gzip = walk(&source, text, Encoding::Gzip, 1).unwrap();
            assert!(gzip.len() < 100_000, "compressed on this thread");
            let plain = walk(&source, text, Encoding::Identity, 1).unwrap();
            assert_eq!(plain.len(), 100_000);
            walk(&source, text, Encoding::Identity, 1).unwrap();
        })
        .join()
        .unwrap();
        let capacities = capacities.lock().unwrap();
        assert_eq!(capacities[0], (0, 0), "a new thread starts empty");
        // Reused after gzip; reserved at the last size after a body was handed over.
        assert!(
            capacities[1].0 == 0 && capacities[1].1 >= 100_000,
            "{capacities:?}"
        );
        assert!(
            capacities[2].0 == 0 && capacities[2].1 >= 100_000,
            "{capacities:?}"
        );
    }

    #[test]
    fn a_panic_off_the_pool_is_a_failure() {
        let unserved = contained(|| panic!("boom")).unwrap_err();
        assert_eq!(unserved, Unserved::Failed("panicked: boom".into()));
    }
}
