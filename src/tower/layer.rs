//! [`AdmissionLayer`]: the configuration, shared by every service it wraps.

use std::fmt;
use std::hash::Hash;
use std::io;
use std::time::{Duration, Instant};

use http::request::Parts;

use super::config::AdmissionConfig;
use super::gated::Limited;
use super::mode::sealed::Gauged;
use super::mode::{Keyed, Mode};
use super::service::Admission;
use crate::demand::Demand;
use crate::gate::MAX_CAPACITY;
use crate::gate::limit::{Basis, Limit};
use crate::keyed::KeyedGate;
use crate::pool::Pool;

/// A tower [`Layer`](tower_layer::Layer) that admits each request through a loopguard gate,
/// holding the slot until the response body has been written.
///
/// - **Fail fast** (the default): no free slot, and the answer is a `503 Service
///   Unavailable` with `Retry-After` at once; nothing queues, the inner service is not
///   called.
/// - **Wait** ([`wait_within_deadline`](AdmissionLayer::wait_within_deadline)): wait in FIFO
///   order within the request's deadline, then the 503.
/// - **Deadlines** ([`deadline_from_headers`](AdmissionLayer::deadline_from_headers)): a
///   [`Deadline`](crate::deadline::Deadline) from the request's timeout headers, in its extensions for the handler.
///
/// An admitted request's [`Slot`](super::Slot) is in its extensions too: the slot is held by
/// the response body and by every clone of it.
///
/// Clones share the gate: build one layer per limit and clone it into every connection.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::tower::AdmissionLayer;
///
/// // Two requests at a time; others wait in line within their deadline: the earliest of
/// // Prometheus', Envoy's and gRPC's timeout headers less 500 ms, at most 10 s.
/// let layer = AdmissionLayer::new("api", 2)?
///     .wait_within_deadline()
///     .deadline_from_headers(Duration::from_secs(10), Duration::from_millis(500));
/// assert_eq!((layer.capacity(), layer.in_use()), (2, 0));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct AdmissionLayer<M = Limited> {
    pub(crate) mode: M,
    pub(crate) config: AdmissionConfig,
}

impl AdmissionLayer<Limited> {
    /// A layer admitting `capacity` requests at a time through a limit of its own named
    /// `name` (its metrics' `pool` label), failing fast.
    ///
    /// Its series are a pool's admission series under that name: give it a name no pool
    /// uses. To make a pool the one limit from the request to the worker thread, use
    /// [`for_pool`](AdmissionLayer::for_pool) instead.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a capacity of 0 or above 65 536, or a name that
    /// is empty or has a NUL byte.
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 8)?;
    /// assert_eq!(layer.capacity(), 8);
    /// let err = loopguard::tower::AdmissionLayer::new("api", 0).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(name: &str, capacity: usize) -> io::Result<AdmissionLayer<Limited>> {
        let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(invalid(format!(
                "an admission layer's capacity must be between 1 and {MAX_CAPACITY}, not {capacity}"
            )));
        }
        crate::name::check("an admission layer", name)?;
        // A request's permit is all the layer knows of: its hold is the `Retry-After` basis.
        let limit = Limit::new(name.into(), capacity, Demand::default(), Basis::Holds);
        Ok(AdmissionLayer::with_mode(Limited::own(limit)))
    }

    /// Publishes the layer's gauges (in use, waiting, demand) and the refusals counted so
    /// far: call it before rendering a scrape, as [`Pool::publish_metrics`].
    ///
    /// # Examples
    ///
    /// ```
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 2)?;
    /// layer.publish_metrics();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn publish_metrics(&self) {
        match &self.mode.pool {
            Some(pool) => pool.publish_metrics(),
            None => self.mode.limit.publish(Instant::now()),
        }
    }

    /// A layer admitting requests on `pool`'s own slots: the pool is the one limit from the
    /// request to the worker thread.
    ///
    /// A request holds one of the pool's slots until its response body has ended (and
    /// until any job it runs on it is done), so [`Pool::in_use`] and [`Pool::try_run`] see
    /// it; a request the layer refuses counts as a refusal of the pool
    /// (`loopguard_pool_rejected_total`); and the handler runs its blocking work on that
    /// very slot with [`Slot::try_run`](super::Slot::try_run), with no second admission
    /// that could refuse it. The `Retry-After` hint is the pool's mean job time
    /// ([`PoolStats::mean_job_time`](crate::pool::PoolStats::mean_job_time)): the time a
    /// request holds its slot beyond its job (the handler, the response body) is not in it.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::pool::Pool;
    /// use loopguard::tower::AdmissionLayer;
    ///
    /// let pool = Pool::builder().name("registry-serve").workers(2).build()?;
    /// let layer = AdmissionLayer::for_pool(&pool);
    /// assert_eq!((layer.capacity(), layer.in_use()), (2, pool.in_use()));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn for_pool(pool: &Pool) -> AdmissionLayer<Limited> {
        pool.mark_layered();
        AdmissionLayer::with_mode(Limited::on_pool(pool))
    }
}

impl<M: Mode + Gauged> AdmissionLayer<M> {
    /// The number of slots.
    ///
    /// # Examples
    ///
    /// See [`AdmissionLayer`].
    pub fn capacity(&self) -> usize {
        self.mode.capacity()
    }

    /// Slots held now: requests whose response is still being produced or written, the
    /// work they hold a [`Slot`](super::Slot) in, and (for a pool's layer) the pool's jobs.
    ///
    /// # Examples
    ///
    /// See [`AdmissionLayer`].
    pub fn in_use(&self) -> usize {
        self.mode.in_use()
    }

    /// Requests (and, for a pool's layer, `run` callers) waiting in line for a slot.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(loopguard::tower::AdmissionLayer::new("api", 1)?.waiting(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn waiting(&self) -> usize {
        self.mode.waiting()
    }

    /// Resolves once no slot is held. Cancel safe: it only observes.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 1)?;
    /// layer.wait_idle().await;
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn wait_idle(&self) {
        self.mode.wait_idle().await
    }
}

impl<K, F> AdmissionLayer<Keyed<K, F>>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    F: Fn(&Parts) -> K + Clone + Send + Sync + 'static,
{
    /// A layer admitting requests per key through `gate`: `key` names each request's key
    /// (a path, a tenant header, a scrape target), and a busy key refuses (or queues)
    /// without touching the others. The gate's capacities apply; fails fast by default.
    ///
    /// `key` is your code: if it panics, the request holds nothing yet.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::keyed::KeyedGate;
    /// use loopguard::tower::AdmissionLayer;
    ///
    /// let tenants = KeyedGate::builder("tenants").capacity(2).build()?;
    /// let layer = AdmissionLayer::keyed(tenants, |parts: &http::request::Parts| {
    ///     let tenant = parts.headers.get("x-tenant").map(|v| v.as_bytes().to_vec());
    ///     tenant.unwrap_or_default()
    /// });
    /// assert_eq!(layer.gate().name(), "tenants");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn keyed(gate: KeyedGate<K>, key: F) -> AdmissionLayer<Keyed<K, F>> {
        AdmissionLayer::with_mode(Keyed::new(gate, key))
    }

    /// The keyed gate (its per-key `in_use`, `waiting`, demand).
    ///
    /// # Examples
    ///
    /// See [`keyed`](AdmissionLayer::keyed).
    pub fn gate(&self) -> &KeyedGate<K> {
        self.mode.gate()
    }
}

impl<M: Mode> AdmissionLayer<M> {
    fn with_mode(mode: M) -> AdmissionLayer<M> {
        AdmissionLayer {
            mode,
            config: AdmissionConfig {
                wait: false,
                refuse_early: false,
                deadline: None,
            },
        }
    }

    /// Wait in FIFO order for a slot instead of refusing at once, within the request's
    /// deadline (see [`deadline_from_headers`](AdmissionLayer::deadline_from_headers); a
    /// [`Deadline`](crate::deadline::Deadline) an outer layer put in the request's extensions counts too; with
    /// neither, the wait has no end). A request whose deadline passes in line gets the
    /// 503; a slot granted to it at that moment passes on to the next in line.
    ///
    /// A request whose deadline has already passed when it arrives (a `grpc-timeout: 0S`,
    /// a budget an outer layer spent) gets the same 503 with `Retry-After`, counted as a
    /// refusal, **whether or not a slot is free**: the deadline is fixed at arrival, before
    /// admission, so nothing is admitted or run for a caller that has given up, and the
    /// answer does not depend on the load. (In fail-fast mode a free slot admits it and
    /// the handler gets the spent [`Deadline`](crate::deadline::Deadline): no clock is read
    /// before admission there.)
    ///
    /// The order is that of the waiting futures' first poll (a server polls each at once,
    /// so in practice the order of arrival), and [`waiting`](AdmissionLayer::waiting)
    /// counts requests from that poll on. Once admitted, the request waits for its own
    /// clone of the inner service to be ready, within the same deadline, holding its slot:
    /// a waiter reserves nothing of the inner service while it is in line.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 4)?
    ///     .wait_within_deadline()
    ///     .deadline_from_headers(Duration::from_secs(5), Duration::ZERO);
    /// # let _ = layer;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn wait_within_deadline(mut self) -> Self {
        self.config.wait = true;
        self
    }

    /// Opt-in, with [`wait_within_deadline`](AdmissionLayer::wait_within_deadline):
    /// admission that knows its budget. A request that finds no free slot and, at the
    /// gate's measured pace, would not be served before its deadline is refused at once
    /// (`503`, `Retry-After` the estimated wait for a slot) instead of waiting its budget
    /// out to get the same 503 at its deadline; it can retry elsewhere now.
    ///
    /// The estimate is [`Run::refuse_early`](crate::pool::Run::refuse_early)'s, with the
    /// layer's numbers: `k` requests already in line, `c` slots, `h` the mean time a slot is
    /// held (a request's hold; under [`for_pool`](AdmissionLayer::for_pool), the pool's
    /// mean of its jobs and its requests), so the request is expected to be done
    /// `(k + 1) · h / c + h` from now. Its precision and when it refuses wrongly are
    /// described there. A request with no deadline, a layer that has not yet seen a slot
    /// come back, and keyed mode (no estimate per key) are never refused by it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 4)?
    ///     .wait_within_deadline()
    ///     .refuse_early()
    ///     .deadline_from_headers(Duration::from_secs(5), Duration::ZERO);
    /// # let _ = layer;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn refuse_early(mut self) -> Self {
        self.config.refuse_early = true;
        self
    }

    /// Gives each request a [`Deadline`](crate::deadline::Deadline) from its timeout headers, computed when it
    /// arrives, before any wait: [`header::request_deadline`](crate::header::request_deadline) with `default` (the server's
    /// own budget) and `offset` (kept for encoding and sending the answer), cut by a
    /// `Deadline` already in its extensions. The deadline replaces that one in the
    /// request's extensions, for the handler to spend (`pool.run_within(deadline, ..)`).
    ///
    /// A timeout the caller sent is a ceiling: the deadline is never later than any of
    /// them, whatever the offset. An offset that would use a timeout up takes half of it
    /// instead (a `400 ms` timeout with a `500 ms` offset leaves 200 ms); the server's
    /// `default` applies only to requests that sent no timeout, or a longer one (see the
    /// [`header`](crate::header) module).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 2)?
    ///     .deadline_from_headers(Duration::from_secs(30), Duration::from_millis(500));
    /// # let _ = layer;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn deadline_from_headers(mut self, default: Duration, offset: Duration) -> Self {
        self.config.deadline = Some((default, offset));
        self
    }

    /// Requests refused so far (at once, or when their deadline passed first): the gate's
    /// own count, so every layer on the same limit or keyed gate reads the same. On a
    /// pool's slots, the pool's refusals; on a keyed gate, its
    /// [`rejected`](crate::keyed::KeyedGate::rejected) plus its
    /// [`expired`](crate::keyed::KeyedGate::expired).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(loopguard::tower::AdmissionLayer::new("api", 1)?.rejected(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn rejected(&self) -> u64 {
        self.mode.rejected()
    }

    /// The `Retry-After` a refusal carries now (at least 1 ms, 1 s before any sample), sent
    /// rounded up to whole seconds: on a limit of the layer's own, the average time admitted
    /// requests held their slot; on a pool's ([`for_pool`](AdmissionLayer::for_pool)), the
    /// pool's mean job time; on a keyed gate, the gate's: the average time a permit of it
    /// was held (any key, whoever held it).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let layer = loopguard::tower::AdmissionLayer::new("api", 1)?;
    /// assert_eq!(layer.retry_after(), Duration::from_secs(1));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn retry_after(&self) -> Duration {
        self.mode.retry_after()
    }
}

impl<S, M: Mode> tower_layer::Layer<S> for AdmissionLayer<M> {
    type Service = Admission<S, M>;

    fn layer(&self, inner: S) -> Admission<S, M> {
        Admission::new(inner, self.mode.clone(), self.config)
    }
}

impl<M: fmt::Debug> fmt::Debug for AdmissionLayer<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionLayer")
            .field("mode", &self.mode)
            .field("wait", &self.config.wait)
            .field("deadline", &self.config.deadline)
            .finish()
    }
}
