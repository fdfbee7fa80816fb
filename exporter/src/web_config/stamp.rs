//! What tells a changed file without reading it: one `stat`.

use std::fs::Metadata;
use std::time::SystemTime;

/// A file's modification time, length, inode and change time.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stamp(Option<SystemTime>, pub(crate) u64, u64, i64, i64);

impl Stamp {
    pub(crate) fn of(meta: &Metadata) -> Stamp {
        #[cfg(unix)]
        let (ino, ctime, ctime_ns) = {
            use std::os::unix::fs::MetadataExt as _;
            (meta.ino(), meta.ctime(), meta.ctime_nsec())
        };
        #[cfg(not(unix))]
        let (ino, ctime, ctime_ns) = (0, 0, 0);
        Stamp(meta.modified().ok(), meta.len(), ino, ctime, ctime_ns)
    }

    /// The file at `path` now; `None` when it cannot be `stat`ed.
    #[cfg(feature = "tls")]
    pub(crate) fn at(path: &std::path::Path) -> Option<Stamp> {
        std::fs::metadata(path).ok().map(|m| Stamp::of(&m))
    }
}
