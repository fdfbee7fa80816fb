//! A response body that gives the loop back between slices.
//!
//! A scrape of 100 000 series is about 2 MB gzipped. Handed to hyper whole, it is copied
//! into hyper's write buffer and sent with one `send` of it all: over loopback that held the
//! loop 0.6 to 2 ms (`strace -T`), and every connection ready meanwhile, a refusal or a
//! `/healthz`, waited that long. [`Sliced`] hands hyper [`SLICE`] bytes at a time (split
//! without a copy on this side; hyper copies each slice into its buffer, as it copied the
//! whole body) and sends one slice per poll of its connection's task: asked for more in the
//! same poll (hyper asks again as soon as a flush succeeds), it returns `Pending` with the
//! task woken, so the executor runs whatever else is ready before the next slice goes out.
//!
//! Which poll is which is told by [`Turns`], wrapped around the connection's future: a body
//! polled outside one never yields (it is then sent as `Full` would send it). A body of one
//! slice or less is sent at once either way.

use std::cell::Cell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, SizeHint};

/// The most bytes sent per poll of a connection's task: a `send` of this much over
/// loopback takes about a tenth of a millisecond.
pub const SLICE: usize = 256 * 1024;

thread_local! {
    /// The poll of a [`Turns`] under way on this thread: a number of its own, or `None`
    /// outside any.
    static TURN: Cell<Option<u64>> = const { Cell::new(None) };
    /// The last number given to a poll.
    static LAST: Cell<u64> = const { Cell::new(0) };
}

/// The current [`Turns`] poll's number, if one is under way on this thread.
pub fn current_turn() -> Option<u64> {
    TURN.get()
}

/// A connection's future whose every poll is a turn of its own (see [`Sliced`]).
#[derive(Debug)]
pub struct Turns<F>(pub F);

impl<F: Future + Unpin> Future for Turns<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        /// Puts back the turn it replaced, however the poll ends.
        struct Restore(Option<u64>);
        impl Drop for Restore {
            fn drop(&mut self) {
                TURN.set(self.0);
            }
        }
        let turn = LAST.get().wrapping_add(1);
        LAST.set(turn);
        let _restore = Restore(TURN.replace(Some(turn)));
        Pin::new(&mut self.0).poll(cx)
    }
}

/// A body sent [`SLICE`] bytes per turn of its connection's task.
#[derive(Debug, Default)]
pub struct Sliced {
    rest: Bytes,
    /// The turn in which the last slice went out.
    sent_in: Option<u64>,
}

impl Sliced {
    /// A body of `bytes`.
    pub fn new(bytes: Bytes) -> Sliced {
        Sliced {
            rest: bytes,
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
        let turn = current_turn();
        if turn.is_some() && self.sent_in == turn {
            // A slice went out in this poll already: everything else ready on the loop
            // runs before the next one.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let n = self.rest.len().min(SLICE);
        let slice = self.rest.split_to(n);
        self.sent_in = turn;
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
    use std::rc::Rc;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use hyper::Response;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use smol_hyper::rt::FuturesIo;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Polls `body` to its end, each poll its own turn or none: the slices, and how often it
    /// returned `Pending` (each time with its waker woken).
    fn drain(mut body: Sliced, in_turns: bool) -> (Vec<Bytes>, usize) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut slices, mut pending) = (Vec::new(), 0);
        loop {
            let polled = if in_turns {
                let mut turn =
                    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx)));
                match Pin::new(&mut Turns(&mut turn)).poll(&mut cx) {
                    Poll::Ready(polled) => polled,
                    Poll::Pending => unreachable!("poll_fn is always ready"),
                }
            } else {
                Pin::new(&mut body).poll_frame(&mut cx)
            };
            match polled {
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
    fn one_slice_per_turn_every_byte_in_order() {
        let bytes: Bytes = (0..SLICE * 2 + 10).map(|i| i as u8).collect();
        let body = Sliced::new(bytes.clone());
        assert_eq!(body.size_hint().exact(), Some(bytes.len() as u64));
        // A turn per poll: a slice each time, never a yield.
        let (slices, pending) = drain(body, true);
        let lens: Vec<usize> = slices.iter().map(Bytes::len).collect();
        assert_eq!((lens, pending), (vec![SLICE, SLICE, 10], 0));
        assert_eq!(slices.concat(), bytes.to_vec(), "every byte, in order");
        // Outside any turn: the same slices, and no yield either.
        let (slices, pending) = drain(Sliced::new(bytes.clone()), false);
        assert_eq!((slices.len(), pending), (3, 0));
        assert_eq!(slices.concat(), bytes.to_vec());
    }

    #[test]
    fn asked_twice_in_one_turn_it_yields_once_woken() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut body = Sliced::new(Bytes::from(vec![7_u8; SLICE + 1]));
        let mut turn = std::future::poll_fn(|cx| {
            let first = Pin::new(&mut body).poll_frame(cx);
            let second = Pin::new(&mut body).poll_frame(cx);
            Poll::Ready((
                first.map(|f| f.map(|f| f.map(|f| f.into_data().ok()))),
                second.is_pending(),
            ))
        });
        let Poll::Ready((first, second_pending)) = Pin::new(&mut Turns(&mut turn)).poll(&mut cx)
        else {
            unreachable!()
        };
        assert!(matches!(first, Poll::Ready(Some(Ok(Some(ref s)))) if s.len() == SLICE));
        assert!(second_pending, "the second ask of the turn yields");
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken to go on");
        assert_eq!(current_turn(), None, "the turn ends with its poll");
    }

    #[test]
    fn a_small_body_goes_out_at_once() {
        let (slices, pending) = drain(Sliced::new(Bytes::from_static(b"ok\n")), true);
        assert_eq!((slices, pending), (vec![Bytes::from_static(b"ok\n")], 0));
        let (slices, pending) = drain(Sliced::new(Bytes::new()), true);
        assert!(slices.is_empty() && pending == 0);
        assert_eq!(Sliced::new(Bytes::new()).size_hint().exact(), Some(0));
    }

    /// A body that notes the turn each of its slices went out in.
    struct Noted(Sliced, Rc<std::cell::RefCell<Vec<Option<u64>>>>);

    impl Body for Noted {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let polled = Pin::new(&mut self.0).poll_frame(cx);
            if let Poll::Ready(Some(_)) = polled {
                self.1.borrow_mut().push(current_turn());
            }
            polled
        }

        fn size_hint(&self) -> SizeHint {
            self.0.size_hint()
        }
    }

    /// Through hyper over a real socket: every slice of a large body goes out in a poll of
    /// its own (hyper asks for more after each flush), and the client gets it all.
    #[test]
    fn through_hyper_every_slice_goes_out_in_a_poll_of_its_own() {
        let body: Bytes = (0..SLICE * 6 + 123).map(|i| (i % 251) as u8).collect();
        let turns = Rc::new(std::cell::RefCell::new(Vec::new()));
        let listener = smol::net::TcpListener::bind(("127.0.0.1", 0));
        let answer = smol::block_on(async {
            let listener = listener.await.expect("a listener");
            let addr = listener.local_addr().expect("an address");
            let server = async {
                let (stream, _) = listener.accept().await.expect("a connection");
                let (body, turns) = (body.clone(), turns.clone());
                let service = service_fn(move |_request| {
                    let noted = Noted(Sliced::new(body.clone()), turns.clone());
                    async move { Ok::<_, Infallible>(Response::new(noted)) }
                });
                let connection =
                    http1::Builder::new().serve_connection(FuturesIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                Turns(connection.as_mut()).await.expect("served");
            };
            let client = crate::client::get(addr, "/", &[]);
            futures_lite::future::zip(server, client).await.1
        })
        .expect("an answer");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, body.to_vec(), "every byte, in order");
        let turns = turns.borrow();
        assert_eq!(turns.len(), 7);
        assert!(turns.iter().all(Option::is_some), "{turns:?}");
        let mut distinct = turns.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), turns.len(), "one slice per poll: {turns:?}");
    }
}
