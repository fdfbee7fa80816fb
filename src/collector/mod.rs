//! A `prometheus_client` collector over loopguard's own numbers (feature
//! `prometheus-client`), re-exported as `loopguard::telemetry::Collector`.
//!
//! The families are written once per kind of source: [`pools`] (a pool's, or a tower
//! layer's own limit), [`keyed`], [`refresh`]; [`encode`] writes one family whatever its
//! source.

use std::fmt::{self, Display};
use std::hash::Hash;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;

use crate::keyed::KeyedGate;
use crate::lag::LoopLag;
use crate::pool::Pool;
use crate::refresh::Refresh;

mod encode;
mod keyed;
mod lag;
#[cfg(feature = "tower")]
mod layer;
mod pools;
mod refresh;

use keyed::ReadKeyed;
use pools::Admits;
use refresh::ReadRefresh;

/// Publishes loopguard's series to a [`prometheus_client`] registry: the same families,
/// names, labels, types and help as the `metrics` facade (see [`crate::telemetry`]).
///
/// Give it what you built: pools ([`pool`](Collector::pool)), keyed gates
/// ([`keyed`](Collector::keyed)), refresh caches ([`refresh`](Collector::refresh)), loop
/// lags ([`lag`](Collector::lag)) and (feature `tower`) admission layers (`layer`); then
/// register it once
/// with
/// [`Registry::register_collector`](prometheus_client::registry::Registry::register_collector).
/// Every encode of the registry reads them. Each source is read once however often it is
/// given (a layer on a pool's slots and that pool, for instance). Names must differ within
/// a kind, as with the `metrics` facade: two pools both named `render` would give the
/// registry the same series twice. Shields, operations, retry budgets and header parsing
/// are not collected: a shield's `loopguard_orphaned_failures_total`, the
/// `loopguard_operation*` series, `loopguard_retry_budget_refused_total` and
/// `loopguard_ignored_budget_headers_total` go through the `metrics` facade only.
///
/// # Honest numbers
///
/// The gauges that are read rather than pushed (`loopguard_pool_in_use`,
/// `loopguard_pool_waiting`, `loopguard_pool_oldest_job_seconds`,
/// `loopguard_pool_demand_avg`, `loopguard_keyed_demand_avg`) are the values the last
/// `publish_metrics` read ([`Pool::publish_metrics`], [`KeyedGate::publish_metrics`], a
/// layer's `publish_metrics`), exactly as with the `metrics` facade: call it on the loop
/// before the scrape asks for its slot, and an encode that runs inside a job of the same
/// pool does not count itself (an idle pool reads `loopguard_pool_in_use 0`). Before the
/// first `publish_metrics` they read 0. A keyed gate's `loopguard_keyed_demand_avg` series
/// are the keys and values its last [`KeyedGate::publish_metrics`] set, the 0 it sets for
/// a key removed since the call before included; none before the first call. The keys were
/// displayed by that call (a key's `Display` runs there, contained), so an encode runs no
/// code of the key's and takes none of the gate's locks. Counters and histograms are read
/// when the registry is encoded. Histogram buckets are
/// [`DURATION_BUCKETS`](crate::telemetry::DURATION_BUCKETS).
///
/// # Examples
///
/// ```
/// use prometheus_client::registry::Registry;
///
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::pool::Pool::builder().name("render").workers(1).build()?;
/// let targets = loopguard::keyed::KeyedGate::<String>::new("targets")?;
/// let mut registry = Registry::default();
/// registry.register_collector(Box::new(
///     loopguard::telemetry::Collector::new().pool(&pool).keyed(&targets),
/// ));
/// let registry = std::sync::Arc::new(registry);
///
/// // A scrape: publish on the loop, then encode on the pool.
/// let _busy = targets.try_acquire("node-1".to_string()).unwrap();
/// pool.publish_metrics();
/// targets.publish_metrics();
/// let shared = registry.clone();
/// let text = pool
///     .run(move || {
///         let mut out = String::new();
///         prometheus_client::encoding::text::encode(&mut out, &shared).unwrap();
///         out
///     })
///     .await
///     .unwrap();
/// assert!(text.contains("loopguard_pool_in_use{pool=\"render\"} 0.0\n"));
/// assert!(text.contains("loopguard_keyed_demand_avg{gate=\"targets\",key=\"node-1\"}"));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Default)]
pub struct Collector {
    sources: Sources,
}

/// What a collector reads, each source once. Public only to appear in the sealed
/// `Collectable` trait; not nameable outside the crate.
#[allow(unreachable_pub, missing_debug_implementations)]
#[derive(Clone, Default)]
pub struct Sources {
    admits: Vec<Admits>,
    keyed: Vec<Arc<dyn ReadKeyed>>,
    refreshes: Vec<Arc<dyn ReadRefresh>>,
    lags: Vec<LoopLag>,
}

impl Sources {
    fn add_admits(&mut self, source: Admits) {
        if !self.admits.iter().any(|known| known.same(&source)) {
            self.admits.push(source);
        }
    }

    fn add_keyed<K>(&mut self, gate: &KeyedGate<K>)
    where
        K: Hash + Eq + Clone + Display + Send + Sync + 'static,
    {
        let gate: Arc<dyn ReadKeyed> = Arc::new(gate.clone());
        if !self
            .keyed
            .iter()
            .any(|known| known.identity() == gate.identity())
        {
            self.keyed.push(gate);
        }
    }

    fn add_lag(&mut self, lag: &LoopLag) {
        if !self.lags.iter().any(|known| known.same(lag)) {
            self.lags.push(lag.clone());
        }
    }

    fn add_refresh(&mut self, cache: Arc<dyn ReadRefresh>) {
        if !self.refreshes.iter().any(|known| known.same(&*cache)) {
            self.refreshes.push(cache);
        }
    }
}

impl Collector {
    /// A collector of nothing yet; add what it reads with [`pool`](Collector::pool),
    /// [`keyed`](Collector::keyed), [`refresh`](Collector::refresh), [`lag`](Collector::lag)
    /// and `layer` (feature `tower`).
    ///
    /// # Examples
    ///
    /// ```
    /// let collector = loopguard::telemetry::Collector::new();
    /// # drop(collector);
    /// ```
    pub fn new() -> Collector {
        Collector::default()
    }

    /// Adds `pool`'s series (label `pool` = its name). The collector holds a handle to the
    /// pool.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// let collector = loopguard::telemetry::Collector::new().pool(&pool);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pool(mut self, pool: &Pool) -> Collector {
        self.sources.add_admits(Admits::Pool(pool.clone()));
        self
    }

    /// Adds the series of the keyed gate `gate` (label `gate` = its name):
    /// `loopguard_keyed_demand_avg` per key (label `key` = the key's `Display`), as
    /// [`KeyedGate::publish_metrics`] last set it, and `loopguard_keyed_rejected_total`.
    ///
    /// # Examples
    ///
    /// ```
    /// let gate = loopguard::keyed::KeyedGate::<u32>::new("tenants")?;
    /// let collector = loopguard::telemetry::Collector::new().keyed(&gate);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn keyed<K>(mut self, gate: &KeyedGate<K>) -> Collector
    where
        K: Hash + Eq + Clone + Display + Send + Sync + 'static,
    {
        self.sources.add_keyed(gate);
        self
    }

    /// Adds the series of the refresh cache `cache` (label `cache` = its name): its runs by
    /// outcome, hits, joins and expired waits, all counters, read when the registry is
    /// encoded.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// let cache = loopguard::refresh::Refresh::builder("registry")
    ///     .on_pool(&pool, || Ok::<_, String>("up 1\n".to_string()))?;
    /// let collector = loopguard::telemetry::Collector::new().pool(&pool).refresh(&cache);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn refresh<T: 'static, E: 'static>(mut self, cache: &Refresh<T, E>) -> Collector
    where
        Refresh<T, E>: Send + Sync,
    {
        self.sources.add_refresh(Arc::new(cache.clone()));
        self
    }

    /// Adds the series of the loop lag `lag` (label `loop` = its name): the histogram
    /// `loopguard_loop_lag_seconds` of every sample its probes took, and
    /// `loopguard_loop_slow_polls_total` per task instrumented so far (label `task`), both
    /// read when the registry is encoded.
    ///
    /// # Examples
    ///
    /// ```
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// let collector = loopguard::telemetry::Collector::new().lag(&lag);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn lag(mut self, lag: &LoopLag) -> Collector {
        self.sources.add_lag(lag);
        self
    }

    /// (feature `tower`) Adds the series of a tower admission layer, by its mode: a layer
    /// of its own ([`AdmissionLayer::new`](crate::tower::AdmissionLayer::new)) has a pool's
    /// admission series under its name (`loopguard_pool_capacity`, `_in_use`, `_waiting`,
    /// `_demand_avg`, `_rejected_total`, `_wait_seconds`, label `pool`); a layer on a
    /// pool's slots ([`for_pool`](crate::tower::AdmissionLayer::for_pool)) adds that pool
    /// (once, if it was given already); a keyed layer
    /// ([`keyed`](crate::tower::AdmissionLayer::keyed)) adds its gate, as
    /// [`keyed`](Collector::keyed).
    ///
    /// # Examples
    ///
    /// ```
    /// let api = loopguard::tower::AdmissionLayer::new("api", 4)?;
    /// let collector = loopguard::telemetry::Collector::new().layer(&api);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg(feature = "tower")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
    pub fn layer<M>(mut self, layer: &crate::tower::AdmissionLayer<M>) -> Collector
    where
        M: crate::tower::Mode + layer::sealed::Collectable,
    {
        layer.mode.add_to(&mut self.sources);
        self
    }
}

impl fmt::Debug for Collector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.sources;
        f.debug_struct("Collector")
            .field(
                "pools",
                &s.admits.iter().map(Admits::name).collect::<Vec<_>>(),
            )
            .field(
                "keyed",
                &s.keyed.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .field(
                "refreshes",
                &s.refreshes.iter().map(|r| r.name()).collect::<Vec<_>>(),
            )
            .field(
                "lags",
                &s.lags.iter().map(LoopLag::name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        pools::encode(&mut encoder, &self.sources.admits)?;
        keyed::encode(&mut encoder, &self.sources.keyed)?;
        refresh::encode(&mut encoder, &self.sources.refreshes)?;
        lag::encode(&mut encoder, &self.sources.lags)
    }
}
