//! The response body that holds the request's slot until it has been written.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

use super::slot::Slot;

pin_project_lite::pin_project! {
    /// The body of a response from an [`Admission`](super::Admission) service: the inner
    /// service's body, holding the request's [`Slot`] until the body has ended (its last
    /// frame, or an error) or is dropped, so the slot covers writing the response, not only
    /// the handler. A refused request's body is empty.
    ///
    /// The slot is released when the last holder goes: this body and any [`Slot`] clone
    /// the handler kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use http_body::Body;
    /// use loopguard::tower::AdmissionBody;
    ///
    /// let refused: AdmissionBody<String> = AdmissionBody::empty();
    /// assert!(refused.is_end_stream());
    /// assert_eq!(refused.size_hint().exact(), Some(0));
    /// ```
    pub struct AdmissionBody<B> {
        #[pin]
        inner: Option<B>,
        slot: Option<Slot>,
    }
}

impl<B> AdmissionBody<B> {
    /// An empty body, holding nothing: the body of a refusal.
    ///
    /// # Examples
    ///
    /// See [`AdmissionBody`].
    pub fn empty() -> AdmissionBody<B> {
        AdmissionBody {
            inner: None,
            slot: None,
        }
    }

    pub(crate) fn holding(inner: B, slot: Slot) -> AdmissionBody<B> {
        AdmissionBody {
            inner: Some(inner),
            slot: Some(slot),
        }
    }

    /// Whether this body still holds its request's slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let refused = loopguard::tower::AdmissionBody::<String>::empty();
    /// assert!(!refused.holds_slot());
    /// ```
    pub fn holds_slot(&self) -> bool {
        self.slot.is_some()
    }
}

impl<B: Body> Body for AdmissionBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(None);
        };
        // A panic in the inner body unwinds through here; the slot stays held until the
        // owner drops this body (a smol task is dropped when its future panics).
        let frame = std::task::ready!(inner.poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) {
            // The body ended, by its last frame or an error: the response is written.
            this.slot.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}

impl<B> fmt::Debug for AdmissionBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmissionBody")
            .field("empty", &self.inner.is_none())
            .field("holds_slot", &self.slot.is_some())
            .finish()
    }
}
