//! What counts as a failure of offloaded work: a panic always, an `Err` when asked.

use std::fmt;

/// Work panicked. Carries the panic message.
///
/// Returned to whoever awaits the work ([`Job`](crate::pool::Job),
/// [`Shielded`](crate::shield::Shielded)); reported to the orphan handler when nobody does.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::pool::Pool::builder().build()?;
/// let job = pool.try_run(|| -> u32 { panic!("bad row") }).unwrap();
/// let err = job.await.unwrap_err();
/// assert_eq!(err.message(), "bad row");
/// assert_eq!(err.to_string(), "job panicked: bad row");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked {
    message: String,
}

impl Panicked {
    pub(crate) fn new(message: String) -> Panicked {
        Panicked { message }
    }

    /// The panic message, or `"non-string panic payload"` when the payload was not a string.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// let job = pool.try_run(|| -> () { std::panic::panic_any(7_u8) }).unwrap();
    /// assert_eq!(job.await.unwrap_err().message(), "non-string panic payload");
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job panicked: {}", self.message)
    }
}

impl std::error::Error for Panicked {}

impl From<Panicked> for std::io::Error {
    fn from(err: Panicked) -> std::io::Error {
        std::io::Error::other(err)
    }
}

/// Marks work whose `Err` output is a failure: reported to the orphan handler, exactly
/// once, if nobody awaits it, and counted as `outcome="error"`.
///
/// Work of any output type runs without it (a `String`, `bytes::Bytes`, an
/// `http::Response`, a struct of your own), and a panic is always a failure. An `Ok` or a
/// plain value nobody awaits is simply dropped. Wrap a closure (for a
/// [`Pool`](crate::pool::Pool)) or a future (for a [`Shield`](crate::shield::Shield)) whose
/// output is `Result<T, E>` with `E: Debug` in `Fallible` when an `Err` must not vanish with
/// a caller that left:
///
/// ```
/// use loopguard::Fallible;
/// use loopguard::orphan::{OrphanHandler, ReportKind};
/// use loopguard::pool::Pool;
/// use std::sync::mpsc;
///
/// let (tx, rx) = mpsc::channel();
/// let tx = std::sync::Mutex::new(tx);
/// let pool = Pool::builder()
///     .on_orphan(OrphanHandler::new(move |r| drop(tx.lock().unwrap().send(r.kind()))))
///     .build()?;
///
/// // The caller leaves at once; the job's `Err` is reported instead of lost.
/// drop(pool.try_run(Fallible(|| std::fs::read("/no/such/file"))));
/// assert_eq!(rx.recv().unwrap(), ReportKind::Failed);
///
/// // Without `Fallible`, a `Result` is an ordinary value: only a panic is reported.
/// let job = pool.try_run(|| std::fs::read("/no/such/file")).unwrap();
/// # drop(job);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Awaiting the work gives the `Result` itself, as without the wrapper; under
/// [`Pool::try_run_within`](crate::pool::Pool::try_run_within) it resolves flat, the `Err`
/// in [`WithinError::Failed`](crate::pool::WithinError::Failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fallible<W>(pub W);

/// Which outputs of a kind of work are failures: `None` for "not a failure", the error to
/// report otherwise. Chosen where the work is submitted and carried with it.
pub(crate) type Classifier<T> = fn(&T) -> Option<&dyn fmt::Debug>;

/// No output is a failure (only a panic is).
pub(crate) fn never<T>(_: &T) -> Option<&dyn fmt::Debug> {
    None
}

/// An `Err` is a failure, described by its `Debug` form.
pub(crate) fn when_err<T, E: fmt::Debug>(output: &Result<T, E>) -> Option<&dyn fmt::Debug> {
    match output {
        Ok(_) => None,
        Err(error) => Some(error),
    }
}
