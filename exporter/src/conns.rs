//! Connections that cannot lock scrapers out.
//!
//! A server that stops accepting at a connection cap leaves newcomers in the kernel's listen
//! backlog (128 entries with `std::net::TcpListener::bind`) behind a flood of idle
//! connections: the scraper then waits for its turn to be accepted. Instead:
//!
//! - the listen backlog is raised to the system's maximum ([`raise_backlog`]), so a burst
//!   of connections waits in the kernel, not refused, until the loop accepts it;
//! - the loop accepts every connection at once; when the cap is reached, or accepting
//!   fails for want of file descriptors (`EMFILE`, `ENFILE`), the connection idle the
//!   longest (no request in progress) is closed to make room. A connection with a request
//!   in progress is never closed for a newcomer; if every connection is busy, the newcomer
//!   is closed instead;
//! - a connection that has sent nothing yet costs no HTTP buffers: it is handed to hyper
//!   once it is readable, and closed if that takes longer than the head timeout.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use async_io::{Async, Timer};
use event_listener::Event;
use futures_lite::future;

/// Raises `listener`'s listen backlog to the largest the system allows.
///
/// std listens with a backlog of 128; listening again on the bound socket raises it, and
/// the kernel caps the value at its own maximum (`net.core.somaxconn` on Linux).
pub(crate) fn raise_backlog(listener: &TcpListener) -> io::Result<()> {
    rustix::net::listen(listener, i32::MAX)?;
    Ok(())
}

/// Whether an accept error means the process (or system) is out of file descriptors.
pub(crate) fn out_of_descriptors(err: &io::Error) -> bool {
    use rustix::io::Errno;
    Errno::from_io_error(err).is_some_and(|e| e == Errno::MFILE || e == Errno::NFILE)
}

/// The open connections of one listener's loop, and which are idle in what order.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    open: Cell<usize>,
    next: Cell<u64>,
    idle: RefCell<BTreeMap<u64, Rc<Conn>>>,
    shed: Cell<u64>,
    closed: Event,
}

/// One connection's place in the [`Tracker`].
#[derive(Debug, Default)]
pub(crate) struct Conn {
    key: Cell<Option<u64>>,
    closing: Cell<bool>,
    close: Event,
}

impl Tracker {
    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.get()
    }

    /// Connections closed so far to make room.
    pub(crate) fn shed(&self) -> u64 {
        self.shed.get()
    }

    /// A new connection, idle (it has sent nothing yet).
    pub(crate) fn add(&self) -> Rc<Conn> {
        self.open.set(self.open.get() + 1);
        let conn = Rc::new(Conn::default());
        self.set_idle(&conn);
        conn
    }

    /// The connection is gone.
    pub(crate) fn remove(&self, conn: &Conn) {
        self.set_busy(conn);
        self.open.set(self.open.get() - 1);
        self.closed.notify(usize::MAX);
    }

    /// The connection has no request in progress; it joins the idle ones as the newest.
    pub(crate) fn set_idle(&self, conn: &Rc<Conn>) {
        self.set_busy(conn);
        let key = self.next.get();
        self.next.set(key + 1);
        conn.key.set(Some(key));
        self.idle.borrow_mut().insert(key, conn.clone());
    }

    /// The connection has a request in progress: it cannot be shed.
    pub(crate) fn set_busy(&self, conn: &Conn) {
        if let Some(key) = conn.key.take() {
            self.idle.borrow_mut().remove(&key);
        }
    }

    /// Closes the connection idle the longest; false if none is idle.
    pub(crate) fn shed_oldest_idle(&self) -> bool {
        let Some((_, conn)) = self.idle.borrow_mut().pop_first() else {
            return false;
        };
        conn.key.set(None);
        conn.closing.set(true);
        conn.close.notify(usize::MAX);
        self.shed.set(self.shed.get() + 1);
        true
    }

    /// Resolves once no connection is open.
    pub(crate) async fn all_closed(&self) {
        loop {
            if self.open() == 0 {
                return;
            }
            let listener = self.closed.listen();
            if self.open() == 0 {
                return;
            }
            listener.await;
        }
    }
}

impl Conn {
    /// Resolves once the tracker sheds this connection.
    pub(crate) async fn closed(&self) {
        loop {
            if self.closing.get() {
                return;
            }
            let listener = self.close.listen();
            if self.closing.get() {
                return;
            }
            listener.await;
        }
    }
}

/// Waits until `stream` has something to read (or has been closed by its peer), or `idle`
/// has passed: `false` then.
pub(crate) async fn first_byte(stream: &Async<TcpStream>, idle: Duration) -> bool {
    future::or(async { stream.readable().await.is_ok() }, async {
        Timer::after(idle).await;
        false
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_is_shed_and_busy_ones_never() {
        let tracker = Tracker::default();
        let (a, b, c) = (tracker.add(), tracker.add(), tracker.add());
        tracker.set_busy(&a);
        tracker.set_idle(&a); // a is now the newest idle
        tracker.set_busy(&c);
        assert!(tracker.shed_oldest_idle());
        assert!(b.closing.get() && !a.closing.get() && !c.closing.get());
        assert!(tracker.shed_oldest_idle());
        assert!(a.closing.get());
        assert!(!tracker.shed_oldest_idle(), "c is busy");
        assert!(!c.closing.get());
        assert_eq!((tracker.open(), tracker.shed()), (3, 2));
        for conn in [&a, &b, &c] {
            tracker.remove(conn);
        }
        assert_eq!(tracker.open(), 0);
        assert!(tracker.idle.borrow().is_empty());
    }

    #[test]
    fn out_of_descriptors_is_emfile_and_enfile() {
        for errno in [rustix::io::Errno::MFILE, rustix::io::Errno::NFILE] {
            let err = io::Error::from_raw_os_error(errno.raw_os_error());
            assert!(out_of_descriptors(&err), "{err}");
        }
        let other = io::Error::from_raw_os_error(rustix::io::Errno::CONNABORTED.raw_os_error());
        assert!(!out_of_descriptors(&other));
    }

    #[test]
    fn the_backlog_holds_more_than_std_s_128_connections_nobody_accepts() {
        // Linux drops a SYN while the accept queue is full: with std's 128 the 130th
        // handshake never completes. The system's maximum bounds what this can check.
        let max = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok());
        let Some(n) = max.map(|m| m.min(600)).filter(|&n| n > 200) else {
            eprintln!("somaxconn unknown or small: nothing to check");
            return;
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        raise_backlog(&listener).unwrap();
        let addr = listener.local_addr().unwrap();
        let connected: Vec<_> = (0..n - 10)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    .unwrap_or_else(|e| panic!("connection {i} of {n} not queued: {e}"))
            })
            .collect();
        assert_eq!(connected.len(), n - 10);
    }
}
