//! A response body that gives the loop back between slices.
//!
//! A scrape of 100 000 series is about 2 MB gzipped. Handed to hyper whole, it is copied
//! into hyper's write buffer and sent with one `send` of it all: over loopback that held the
//! loop 0.6 to 2 ms (`strace -T`), and every connection ready meanwhile, a refusal or a
//! `/healthz`, waited that long. [`Sliced`] hands hyper [`SLICE`] bytes at a time (no copy:
//! `Bytes::split_to`) and, after each slice but the last, returns `Pending` once with its
//! task woken, so the executor runs whatever else is ready before the next slice goes out.
//! A body of one slice or less is sent as `Full` would send it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, SizeHint};

/// The most bytes sent before the loop is given back: a `send` of this much over loopback
/// takes about a tenth of a millisecond.
pub const SLICE: usize = 256 * 1024;

/// A body sent [`SLICE`] bytes at a time, yielding to the loop in between.
#[derive(Debug, Default)]
pub struct Sliced {
    rest: Bytes,
    /// Whether the next poll sends a slice (rather than yielding first).
    ready: bool,
}

impl Sliced {
    /// A body of `bytes`.
    pub fn new(bytes: Bytes) -> Sliced {
        Sliced {
            rest: bytes,
            ready: true,
        }
    }
}

impl Body for Sliced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.rest.is_empty() {
            return Poll::Ready(None);
        }
        if !self.ready {
            // Everything else ready on the loop runs before the next slice.
            self.ready = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = self.rest.len().min(SLICE);
        let slice = self.rest.split_to(n);
        self.ready = false;
        Poll::Ready(Some(Ok(Frame::data(slice))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls `body` to its end: the slices it sent, and how often it yielded (returned
    /// `Pending` with its waker woken).
    fn drain(mut body: Sliced) -> (Vec<Bytes>, usize) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut slices, mut pending) = (Vec::new(), 0);
        loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    slices.push(frame.into_data().expect("a data frame"))
                }
                Poll::Ready(None) => break,
                Poll::Pending => {
                    pending += 1;
                    assert_eq!(
                        count.0.load(Ordering::SeqCst),
                        pending,
                        "woken when pending"
                    );
                }
            }
        }
        assert!(body.is_end_stream());
        (slices, pending)
    }

    #[test]
    fn a_large_body_goes_out_in_slices_with_a_yield_between_each() {
        let bytes: Bytes = (0..SLICE * 2 + 10).map(|i| i as u8).collect();
        let body = Sliced::new(bytes.clone());
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        let (slices, pending) = drain(body);
        let lens: Vec<usize> = slices.iter().map(Bytes::len).collect();
        assert_eq!(lens, [SLICE, SLICE, 10]);
        assert_eq!(
            pending, 2,
            "one yield between slices, none before the first"
        );
        assert_eq!(slices.concat(), bytes.to_vec(), "every byte, in order");
    }

    #[test]
    fn a_small_body_goes_out_at_once() {
        let (slices, pending) = drain(Sliced::new(Bytes::from_static(b"ok\n")));
        assert_eq!((slices, pending), (vec![Bytes::from_static(b"ok\n")], 0));
        let (slices, pending) = drain(Sliced::new(Bytes::new()));
        assert!(slices.is_empty() && pending == 0);
        assert_eq!(Sliced::new(Bytes::new()).size_hint().exact(), Some(0));
    }
}
