//! [`Admission`]: the service, and [`ResponseFuture`], its future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response};
use tower_service::Service;

use super::body::AdmissionBody;
use super::config::AdmissionConfig;
use super::gated::Limited;
use super::mode::{AdmitOutcome, Mode};
use super::refuse::refusal;
use super::slot::Slot;
use crate::deadline::{Deadline, DeadlineRun, DeadlineTimer, poll_timer};
use crate::pool::estimate::Line;

/// A service behind an [`AdmissionLayer`](super::AdmissionLayer): each request is
/// admitted through the layer's gate before the inner service sees it.
///
/// The inner service is called only for an admitted request, with its [`Slot`] (and its
/// [`Deadline`], if the layer gives one) in the extensions. Readiness is the inner
/// service's (a server waits for it before it calls, so before this layer sees the request
/// or its deadline); admission is decided in `call`, so a refusal never waits.
///
/// A request that waits in line ([`wait_within_deadline`]) takes a clone of the inner
/// service and, once admitted, waits for that clone's readiness within the same deadline
/// (past it: `503`, and its slot goes on). The readiness the request was called with
/// stays with the service it was called on (for its next request, or given back when it is
/// dropped, as tower's `oneshot` and hyper's tower adapter do after each call), so a waiter
/// holds no reservation of the inner service (a `ConcurrencyLimit` permit, a `Buffer`
/// slot) that would keep requests for other keys, or ones a slot is free for, from getting
/// past `poll_ready`.
///
/// [`wait_within_deadline`]: super::AdmissionLayer::wait_within_deadline
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use loopguard::tower::AdmissionLayer;
/// use tower_layer::Layer;
/// use tower_service::Service;
///
/// #[derive(Clone)]
/// struct Hello;
/// impl Service<Request<()>> for Hello {
///     type Response = Response<&'static str>;
///     type Error = Infallible;
///     type Future = std::future::Ready<Result<Response<&'static str>, Infallible>>;
///     fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Infallible>> {
///         std::task::Poll::Ready(Ok(()))
///     }
///     fn call(&mut self, _: Request<()>) -> Self::Future {
///         std::future::ready(Ok(Response::new("hello")))
///     }
/// }
///
/// # futures_lite::future::block_on(async {
/// let layer = AdmissionLayer::new("hello", 1)?;
/// let mut service = layer.layer(Hello);
/// let first = service.call(Request::new(())).await.unwrap();
/// assert_eq!(layer.in_use(), 1, "held until the body is written");
/// let second = service.call(Request::new(())).await.unwrap();
/// assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(second.headers()["retry-after"], "1");
/// drop(first);
/// assert_eq!(layer.in_use(), 0);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Admission<S, M = Limited> {
    inner: S,
    mode: M,
    config: AdmissionConfig,
}

impl<S, M> Admission<S, M> {
    pub(crate) fn new(inner: S, mode: M, config: AdmissionConfig) -> Admission<S, M> {
        Admission {
            inner,
            mode,
            config,
        }
    }

    /// The inner service.
    ///
    /// # Examples
    ///
    /// ```
    /// use tower_layer::Layer;
    ///
    /// let service = loopguard::tower::AdmissionLayer::new("api", 1)?.layer(7_u8);
    /// assert_eq!(*service.get_ref(), 7);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, M: fmt::Debug> fmt::Debug for Admission<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("mode", &self.mode)
            .field("wait", &self.config.wait)
            .finish_non_exhaustive()
    }
}

/// Puts the slot and the deadline in the request's extensions.
fn admitted<B>(mut request: Request<B>, slot: &Slot, deadline: Option<Deadline>) -> Request<B> {
    let extensions = request.extensions_mut();
    extensions.insert(slot.clone());
    if let Some(deadline) = deadline {
        extensions.insert(deadline);
    }
    request
}

impl<S, M, ReqB, ResB> Service<Request<ReqB>> for Admission<S, M>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    M: Mode,
{
    type Response = Response<AdmissionBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB, M>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        // Waiting mode fixes the deadline at arrival, before admission: a request whose
        // budget is already spent is refused whether or not a slot is free (the same answer
        // either way), and nothing is admitted for it.
        let arrival = if self.config.wait {
            let deadline = self.config.deadline(&request);
            if deadline.is_some_and(Deadline::is_expired) {
                // Spent before admission: counted as an expiry (a limit's refusal).
                self.mode.expire();
                return ResponseFuture {
                    state: ResponseState::Refused {
                        retry_after: self.mode.retry_after(),
                    },
                };
            }
            Some(deadline)
        } else {
            None
        };
        let state = match self.mode.try_admit(request) {
            AdmitOutcome::Now(permit, request) => {
                // If anything below panics, `slot` unwinds with it and the slot is freed.
                let slot = self.mode.slot(permit);
                let deadline = arrival.unwrap_or_else(|| self.config.deadline(&request));
                let request = admitted(request, &slot, deadline);
                let future = {
                    let _held = slot.scope();
                    self.inner.call(request)
                };
                ResponseState::Running {
                    future,
                    slot: Some(slot),
                }
            }
            // Waiting: the deadline was fixed at arrival, before the wait spends it.
            AdmitOutcome::Later(ticket, request) if self.config.wait => {
                let deadline = arrival.flatten();
                match deadline.and_then(|deadline| self.hopeless(deadline)) {
                    Some(retry_after) => self.refuse_with(retry_after),
                    None => ResponseState::Waiting {
                        // A clone goes with the request; the ready service stays behind.
                        line: Box::new(WaitingRequest {
                            wait: (deadline.unwrap_or(Deadline::never()))
                                .run(self.mode.wait(ticket)),
                            permit: None,
                            timer: None,
                            service: Some(self.inner.clone()),
                            request: Some(request),
                            deadline,
                            mode: self.mode.clone(),
                        }),
                    },
                }
            }
            // Fail fast: no clock read, no header parsed, nothing queued.
            AdmitOutcome::Later(..) => self.refuse(),
        };
        ResponseFuture { state }
    }
}

impl<S, M: Mode> Admission<S, M> {
    fn refuse<ReqB>(&self) -> ResponseState<S, ReqB, M>
    where
        S: Service<Request<ReqB>>,
    {
        self.refuse_with(self.mode.retry_after())
    }

    fn refuse_with<ReqB>(&self, retry_after: Duration) -> ResponseState<S, ReqB, M>
    where
        S: Service<Request<ReqB>>,
    {
        self.mode.reject();
        ResponseState::Refused { retry_after }
    }

    /// With [`refuse_early`](super::AdmissionLayer::refuse_early): the estimated wait of a
    /// request that, joining the line now, would not be served before `deadline`.
    fn hopeless(&self, deadline: Deadline) -> Option<Duration> {
        if !self.config.refuse_early {
            return None;
        }
        let (ahead, capacity, hold) = self.mode.line()?;
        let line = Line {
            ahead,
            capacity,
            hold,
        };
        let left = deadline
            .instant()?
            .saturating_duration_since(Instant::now());
        line.cannot_finish_within(left).then(|| line.wait())
    }
}

/// A request waiting in line, then for its service's readiness (boxed: the other states
/// stay small).
struct WaitingRequest<S, ReqB, M: Mode> {
    wait: DeadlineRun<M::Wait>,
    /// The slot, once granted, while the service gets ready.
    permit: Option<M::Permit>,
    /// The deadline's timer while the service gets ready.
    timer: Option<DeadlineTimer>,
    /// A clone of the inner service, not yet polled ready.
    service: Option<S>,
    request: Option<Request<ReqB>>,
    deadline: Option<Deadline>,
    mode: M,
}

impl<S: Service<Request<ReqB>>, ReqB, M: Mode> WaitingRequest<S, ReqB, M> {
    /// Refuses the request (no slot in time, or the gate closed), counted as an expiry (a
    /// limit's refusal). A permit granted to it goes back discarded: a refused request's
    /// hold is no sample of the `Retry-After` basis.
    fn refused(&mut self) -> ResponseState<S, ReqB, M> {
        // Counted before the slot goes back: a task the release wakes (the next waiter,
        // one waiting for idleness) reads the refusal already counted.
        self.mode.expire();
        if let Some(permit) = self.permit.take() {
            M::discard(permit);
        }
        ResponseState::Refused {
            retry_after: self.mode.retry_after(),
        }
    }
}

pin_project_lite::pin_project! {
    #[project = ResponseStateProj]
    enum ResponseState<S, ReqB, M>
    where
        S: Service<Request<ReqB>>,
        M: Mode,
    {
        Waiting {
            line: Box<WaitingRequest<S, ReqB, M>>,
        },
        Running {
            #[pin]
            future: S::Future,
            slot: Option<Slot>,
        },
        Refused {
            retry_after: Duration,
        },
        Done,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Admission::call`]: the inner service's response with its body
    /// holding the slot, or a `503` with `Retry-After`.
    ///
    /// # Cancel safety
    ///
    /// Dropping it while it waits in line leaves the line (a slot granted at that moment
    /// passes on); dropping it while the inner service runs drops the inner future and,
    /// with it, the slot, unless the handler kept a [`Slot`] clone in its work.
    ///
    /// # Panics
    ///
    /// Polling it again after it completed panics.
    ///
    /// # Examples
    ///
    /// See [`Admission`].
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<S, ReqB, M = Limited>
    where
        S: Service<Request<ReqB>>,
        M: Mode,
    {
        #[pin]
        state: ResponseState<S, ReqB, M>,
    }
}

impl<S, ReqB, M, ResB> Future for ResponseFuture<S, ReqB, M>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    M: Mode,
{
    type Output = Result<Response<AdmissionBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                ResponseStateProj::Waiting { line } => {
                    if line.permit.is_none() {
                        // A poll that starts past the deadline drops the wait (a slot
                        // granted meanwhile passes on): `Run`'s rule.
                        match std::task::ready!(Pin::new(&mut line.wait).poll(cx)) {
                            Ok(Some(permit)) => line.permit = Some(permit),
                            Ok(None) | Err(_) => {
                                let refused = line.refused();
                                state.set(refused);
                                continue;
                            }
                        }
                    }
                    // Admitted: this request's own service must get ready, in time. Its
                    // `poll_ready` is user code; if it panics, the permit stays in place
                    // and goes back when this future is dropped.
                    let Some(service) = line.service.as_mut() else {
                        panic!("`ResponseFuture` polled after a panic in `call`");
                    };
                    match service.poll_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(err)) => {
                            state.set(ResponseState::Done);
                            return Poll::Ready(Err(err));
                        }
                        Poll::Pending => {
                            let at = line.deadline.and_then(|deadline| deadline.instant());
                            if at.is_some_and(|at| poll_timer(&mut line.timer, at, cx)) {
                                let refused = line.refused();
                                state.set(refused);
                                continue;
                            }
                            return Poll::Pending;
                        }
                    }
                    // Admitted and ready, but past the deadline (the grant or the readiness
                    // came late): too late to serve. The slot passes on.
                    if line.deadline.is_some_and(Deadline::is_expired) {
                        let refused = line.refused();
                        state.set(refused);
                        continue;
                    }
                    let (Some(permit), Some(mut service), Some(request)) =
                        (line.permit.take(), line.service.take(), line.request.take())
                    else {
                        unreachable!("taken once, just before `Running`");
                    };
                    let slot = line.mode.slot(permit);
                    let request = admitted(request, &slot, line.deadline);
                    let future = {
                        let _held = slot.scope();
                        service.call(request)
                    };
                    state.set(ResponseState::Running {
                        future,
                        slot: Some(slot),
                    });
                }
                ResponseStateProj::Running { future, slot } => {
                    // While the handler runs, the thread says which pool's slot it holds.
                    let held = slot.as_ref().and_then(Slot::scope);
                    let result = std::task::ready!(future.poll(cx));
                    drop(held);
                    let slot = slot.take();
                    state.set(ResponseState::Done);
                    // An error frees the slot here; a response hands it to its body.
                    return Poll::Ready(result.map(|response| {
                        let (parts, body) = response.into_parts();
                        let body = match slot {
                            Some(slot) => AdmissionBody::holding(body, slot),
                            None => AdmissionBody::empty(),
                        };
                        Response::from_parts(parts, body)
                    }));
                }
                ResponseStateProj::Refused { retry_after } => {
                    let retry_after = *retry_after;
                    state.set(ResponseState::Done);
                    return Poll::Ready(Ok(refusal(retry_after)));
                }
                ResponseStateProj::Done => panic!("`ResponseFuture` polled after completion"),
            }
        }
    }
}

impl<S, ReqB, M> fmt::Debug for ResponseFuture<S, ReqB, M>
where
    S: Service<Request<ReqB>>,
    M: Mode,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            ResponseState::Waiting { .. } => "waiting",
            ResponseState::Running { .. } => "running",
            ResponseState::Refused { .. } => "refused",
            ResponseState::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
