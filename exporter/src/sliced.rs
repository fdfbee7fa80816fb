//! A response body that gives the loop back between slices.
//!
//! A scrape of 100 000 series is about 2 MB gzipped. Handed to hyper whole, it is copied
//! into hyper's write buffer and sent with one `send` of it all: over loopback that held the
//! loop 0.6 to 2 ms (`strace -T`), and every connection ready meanwhile, a refusal or a
//! `/healthz`, waited that long. [`Sliced`] hands hyper [`SLICE`] bytes at a time (split
//! without a copy on this side) and one slice per poll of its connection's task: asked for
//! more in the same poll (hyper asks again as soon as a flush succeeds), it returns
//! `Pending` with the task woken, so the executor runs whatever else is ready first.
//!
//! Which poll is which is told by the connection's own [`Turn`] counter, which [`Turns`]
//! advances at each poll of the connection's future and which every body of that connection
//! holds: no thread-local, no state shared between connections.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, SizeHint};

/// The most bytes sent per poll of a connection's task: a `send` of this much over
/// loopback takes about a tenth of a millisecond.
pub(crate) const SLICE: usize = 256 * 1024;

/// A connection's poll counter.
pub(crate) type Turn = Rc<Cell<u64>>;

/// A connection's future whose every poll is a turn of its own, counted in its [`Turn`].
pub(crate) struct Turns<F> {
    pub(crate) future: F,
    pub(crate) turn: Turn,
}

impl<F: Future + Unpin> Future for Turns<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.turn.set(self.turn.get().wrapping_add(1));
        Pin::new(&mut self.future).poll(cx)
    }
}

/// A body sent [`SLICE`] bytes per turn of its connection's task.
#[derive(Debug)]
pub(crate) struct Sliced {
    rest: Bytes,
    turn: Turn,
    /// The turn in which the last slice went out.
    sent_in: Option<u64>,
}

impl Sliced {
    /// A body of `bytes`, sliced by the turns of `turn`.
    pub(crate) fn new(bytes: Bytes, turn: &Turn) -> Sliced {
        Sliced {
            rest: bytes,
            turn: turn.clone(),
            sent_in: None,
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
        let turn = self.turn.get();
        if self.sent_in == Some(turn) {
            // A slice went out in this poll already: everything else ready on the loop
            // runs before the next one.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = self.rest.len().min(SLICE);
        let slice = self.rest.split_to(n);
        self.sent_in = Some(turn);
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

    /// Polls `body` to its end, `asks` times per turn: the slices, and how often it
    /// returned `Pending` (each time with its waker woken).
    fn drain(mut body: Sliced, turn: &Turn, asks: usize) -> (Vec<Bytes>, usize) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut slices, mut pending) = (Vec::new(), 0);
        'turns: loop {
            turn.set(turn.get() + 1);
            for _ in 0..asks {
                match Pin::new(&mut body).poll_frame(&mut cx) {
                    Poll::Ready(Some(Ok(frame))) => slices.push(frame.into_data().unwrap()),
                    Poll::Ready(None) => break 'turns,
                    Poll::Pending => {
                        pending += 1;
                        assert_eq!(count.0.load(Ordering::SeqCst), pending, "woken");
                    }
                }
            }
        }
        assert!(body.is_end_stream());
        (slices, pending)
    }

    #[test]
    fn one_slice_per_turn_every_byte_in_order() {
        let turn = Turn::default();
        let bytes: Bytes = (0..SLICE * 2 + 10).map(|i| i as u8).collect();
        let body = Sliced::new(bytes.clone(), &turn);
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        let (slices, pending) = drain(body, &turn, 1);
        let lens: Vec<usize> = slices.iter().map(Bytes::len).collect();
        assert_eq!((lens, pending), (vec![SLICE, SLICE, 10], 0));
        assert_eq!(slices.concat(), bytes.to_vec(), "every byte, in order");
    }

    #[test]
    fn asked_again_in_the_same_turn_it_yields_woken() {
        let turn = Turn::default();
        let bytes: Bytes = (0..SLICE * 3).map(|i| (i % 7) as u8).collect();
        let (slices, pending) = drain(Sliced::new(bytes.clone(), &turn), &turn, 3);
        assert_eq!(slices.len(), 3, "one slice per turn however often asked");
        // Turns 1 and 2 yield twice each after their slice; turn 3's second ask ends it.
        assert_eq!(pending, 2 + 2);
        assert_eq!(slices.concat(), bytes.to_vec());
    }

    #[test]
    fn bodies_of_two_connections_do_not_share_turns() {
        let (a, b) = (Turn::default(), Turn::default());
        let mut first = Sliced::new(Bytes::from(vec![1; SLICE * 2]), &a);
        let mut second = Sliced::new(Bytes::from(vec![2; SLICE * 2]), &b);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        a.set(1);
        b.set(1);
        assert!(Pin::new(&mut first).poll_frame(&mut cx).is_ready());
        // The other connection's first slice of its own turn goes out.
        assert!(Pin::new(&mut second).poll_frame(&mut cx).is_ready());
        assert!(Pin::new(&mut first).poll_frame(&mut cx).is_pending());
        a.set(2);
        assert!(Pin::new(&mut first).poll_frame(&mut cx).is_ready());
    }

    #[test]
    fn a_small_body_goes_out_at_once() {
        let turn = Turn::default();
        let (slices, pending) = drain(Sliced::new(Bytes::from_static(b"ok\n"), &turn), &turn, 2);
        assert_eq!((slices, pending), (vec![Bytes::from_static(b"ok\n")], 0));
        assert_eq!(
            Sliced::new(Bytes::new(), &turn).size_hint().exact(),
            Some(0)
        );
    }
}
