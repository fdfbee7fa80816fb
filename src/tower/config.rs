//! What an [`AdmissionLayer`](super::AdmissionLayer) does besides admitting, shared by the
//! layer and every service it wraps.

use std::time::Duration;

use http::Request;

use crate::deadline::Deadline;
use crate::header;

/// What the layer does besides admitting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AdmissionConfig {
    /// Wait in line within the request's deadline instead of refusing at once.
    pub(crate) wait: bool,
    /// In waiting mode, refuse at once a request that cannot be served before its
    /// deadline at the gate's measured pace.
    pub(crate) refuse_early: bool,
    /// `(default, offset)` for [`header::request_deadline`], or none.
    pub(crate) deadline: Option<(Duration, Duration)>,
}

impl AdmissionConfig {
    /// The request's deadline: from its headers if configured, cut by a [`Deadline`]
    /// already in its extensions (put there by an outer layer); `None` if neither.
    pub(crate) fn deadline<B>(&self, request: &Request<B>) -> Option<Deadline> {
        let outer = request.extensions().get::<Deadline>().copied();
        let own = self
            .deadline
            .map(|(default, offset)| header::request_deadline(request.headers(), default, offset));
        match (own, outer) {
            (Some(own), Some(outer)) => Some(own.min(outer)),
            (own, outer) => own.or(outer),
        }
    }
}
