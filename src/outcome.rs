//! Which job outputs count as failures.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// An output a job may return. Tells the pool whether the output is a failure, so that an
/// orphaned failure can be reported and counted (`outcome="error"`).
///
/// [`Result<T, E>`] is a failure when it is `Err` (reported with the error's `Debug` form).
/// Everything else implemented here is never a failure: `String`, `Vec<T>`, numbers,
/// `()`, `Option<T>`, `Box<T>`, maps and sets, tuples. So offloading `move || registry.render()`
/// needs no annotation. For an output type of your own, say it in one line:
///
/// ```
/// struct Snapshot { series: usize }
/// impl loopguard::JobOutput for Snapshot {}
///
/// let pool = loopguard::Pool::builder().build()?;
/// let job = pool.try_run(|| Snapshot { series: 3 }).unwrap();
/// # drop(job);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// or override [`failure`](JobOutput::failure) if some of its values are failures.
pub trait JobOutput: Send + 'static {
    /// The failure this output represents, if any. The default says "not a failure".
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::JobOutput;
    ///
    /// assert!(Ok::<u8, String>(1).failure().is_none());
    /// assert_eq!(format!("{:?}", Err::<u8, &str>("eof").failure().unwrap()), "\"eof\"");
    /// assert!(String::from("ok").failure().is_none());
    /// ```
    fn failure(&self) -> Option<&dyn Debug> {
        None
    }
}

impl<T: Send + 'static, E: Debug + Send + 'static> JobOutput for Result<T, E> {
    fn failure(&self) -> Option<&dyn Debug> {
        match self {
            Ok(_) => None,
            Err(e) => Some(e),
        }
    }
}

macro_rules! never_failures {
    ($($t:ty),* $(,)?) => {
        $(impl JobOutput for $t {})*
    };
}

never_failures!(
    (),
    bool,
    char,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    f32,
    f64,
    String,
    &'static str,
    Duration,
    Instant,
    SystemTime,
    std::path::PathBuf,
    std::ffi::OsString,
);

impl<T: Send + 'static> JobOutput for Vec<T> {}
impl<T: Send + 'static> JobOutput for VecDeque<T> {}
impl<T: Send + 'static> JobOutput for Option<T> {}
impl<T: ?Sized + Send + 'static> JobOutput for Box<T> {}
impl<T: ?Sized + Send + Sync + 'static> JobOutput for Arc<T> {}
impl<T: ?Sized + ToOwned + Sync + 'static> JobOutput for Cow<'static, T> where T::Owned: Send {}
impl<K: Send + 'static, V: Send + 'static, S: Send + 'static> JobOutput for HashMap<K, V, S> {}
impl<K: Send + 'static, S: Send + 'static> JobOutput for HashSet<K, S> {}
impl<K: Send + 'static, V: Send + 'static> JobOutput for BTreeMap<K, V> {}
impl<K: Send + 'static> JobOutput for BTreeSet<K> {}
impl<T: Send + 'static, const N: usize> JobOutput for [T; N] {}

macro_rules! tuple_outputs {
    ($($name:ident),+) => {
        impl<$($name: Send + 'static),+> JobOutput for ($($name,)+) {}
    };
}

tuple_outputs!(A);
tuple_outputs!(A, B);
tuple_outputs!(A, B, C);
tuple_outputs!(A, B, C, D);
