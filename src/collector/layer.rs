//! (feature `tower`) What a tower [`AdmissionLayer`](crate::tower::AdmissionLayer) adds to
//! a collector, by mode: a limit of its own, a pool's slots, or a keyed gate.

use std::fmt::Display;
use std::hash::Hash;
use std::sync::Arc;

use http::request::Parts;

use super::Sources;
use super::pools::Admits;
use crate::tower::{Keyed, Limited};

/// The sealed side of [`Collector::layer`](super::Collector::layer): the layer modes whose
/// series a collector reads. Not nameable outside the crate.
#[allow(unreachable_pub)]
pub mod sealed {
    /// A tower layer's mode whose series a `Collector` can read: every mode, a keyed
    /// one when its key is `Display` (the `key` label).
    pub trait Collectable {
        /// Adds what the mode admits through to `sources`.
        fn add_to(&self, sources: &mut super::Sources);
    }
}

impl sealed::Collectable for Limited {
    fn add_to(&self, sources: &mut Sources) {
        sources.add_admits(match &self.pool {
            // A pool's limit: the pool's series, its stats and its jobs.
            Some(pool) => Admits::Pool(pool.clone()),
            None => Admits::Limit(Arc::clone(&self.limit)),
        });
    }
}

impl<K, F> sealed::Collectable for Keyed<K, F>
where
    K: Hash + Eq + Clone + Display + Send + Sync + 'static,
    F: Fn(&Parts) -> K + Clone + Send + Sync + 'static,
{
    fn add_to(&self, sources: &mut Sources) {
        sources.add_keyed(self.gate());
    }
}
