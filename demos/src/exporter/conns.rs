//! Connections that cannot lock scrapers out.
//!
//! A server that stops accepting at a connection cap leaves newcomers in the kernel's listen
//! backlog (128 entries with `std::net::TcpListener::bind`) behind a flood of idle
//! connections: the scraper then waits for its turn to be accepted. Instead:
//!
//! - the listen backlog is the system's maximum ([`bind`]), so a burst of connections
//!   waits in the kernel, not refused, until the loop accepts it;
//! - the loop accepts every connection at once; when `max_connections` are open, or
//!   accepting fails for want of file descriptors, the connection idle the longest (no
//!   request in progress) is closed to make room. A connection with a request in
//!   progress is never closed for a newcomer; if every connection is busy, the newcomer
//!   is closed instead;
//! - a connection that has sent nothing yet costs no HTTP buffers (hyper allocates about
//!   16 KiB per connection): it is only handed to hyper once it is readable, and closed if
//!   that takes longer than the head timeout. A client has that long to start a request
//!   head and as long again to finish it, idle keep-alive included.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;

use event_listener::Event;
use futures_lite::future;
use smol::Async;

/// Binds `addr` with the largest listen backlog the system allows.
///
/// std listens with a backlog of 128; listening again on the bound socket raises it, and
/// the kernel caps the value at its own maximum (`net.core.somaxconn` on Linux).
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let listener = TcpListener::bind(addr)?;
    rustix::net::listen(&listener, i32::MAX)?;
    Ok(listener)
}

/// Whether an accept error means the process (or system) is out of file descriptors.
pub fn out_of_descriptors(err: &io::Error) -> bool {
    rustix::io::Errno::from_io_error(err)
        .is_some_and(|e| e == rustix::io::Errno::MFILE || e == rustix::io::Errno::NFILE)
}

/// The open connections of one loop, and which are idle in what order.
#[derive(Debug, Default)]
pub struct Tracker {
    open: Cell<usize>,
    next: Cell<u64>,
    idle: RefCell<BTreeMap<u64, Rc<Conn>>>,
    shed: Cell<u64>,
}

/// One connection's place in the [`Tracker`].
#[derive(Debug, Default)]
pub struct Conn {
    key: Cell<Option<u64>>,
    closing: Cell<bool>,
    close: Event,
}

impl Tracker {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.get()
    }

    /// Connections closed so far to make room.
    pub fn shed(&self) -> u64 {
        self.shed.get()
    }

    /// A new connection, idle (it has sent nothing yet).
    pub fn add(self: &Rc<Self>) -> Rc<Conn> {
        self.open.set(self.open.get() + 1);
        let conn = Rc::new(Conn::default());
        self.set_idle(&conn);
        conn
    }

    /// The connection is gone.
    pub fn remove(&self, conn: &Conn) {
        self.set_busy(conn);
        self.open.set(self.open.get() - 1);
    }

    /// The connection has no request in progress; it joins the idle ones as the newest.
    pub fn set_idle(&self, conn: &Rc<Conn>) {
        self.set_busy(conn);
        let key = self.next.get();
        self.next.set(key + 1);
        conn.key.set(Some(key));
        self.idle.borrow_mut().insert(key, conn.clone());
    }

    /// The connection has a request in progress: it cannot be shed.
    pub fn set_busy(&self, conn: &Conn) {
        if let Some(key) = conn.key.take() {
            self.idle.borrow_mut().remove(&key);
        }
    }

    /// Closes the connection idle the longest; false if none is idle.
    pub fn shed_oldest_idle(&self) -> bool {
        let Some((_, conn)) = self.idle.borrow_mut().pop_first() else {
            return false;
        };
        conn.key.set(None);
        conn.closing.set(true);
        conn.close.notify(usize::MAX);
        self.shed.set(self.shed.get() + 1);
        true
    }
}

impl Conn {
    /// Resolves once the tracker sheds this connection.
    pub async fn closed(&self) {
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
pub async fn first_byte(stream: &Async<TcpStream>, idle: std::time::Duration) -> bool {
    future::or(async { stream.readable().await.is_ok() }, async {
        smol::Timer::after(idle).await;
        false
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_idle_connection_is_shed_and_busy_ones_never() {
        let tracker = Rc::new(Tracker::default());
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
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let connected: Vec<_> = (0..n - 10)
            .map(|i| {
                TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2))
                    .unwrap_or_else(|e| panic!("connection {i} of {n} not queued: {e}"))
            })
            .collect();
        assert_eq!(connected.len(), n - 10);
    }
}
