//! A minimal HTTP/1.1 client over `smol::net::TcpStream`, for the storm and the tests.
//!
//! One request per connection (`Connection: close`), the response read to end of stream.
//! It is enough to talk to the exporter over real loopback sockets and nothing more.

use std::io::{self, Read as _};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use smol::io::{AsyncReadExt, AsyncWriteExt};
use smol::net::TcpStream;

/// A parsed response.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lowercased) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body as received.
    pub body: Vec<u8>,
    /// From the first byte sent to the last byte received.
    pub elapsed: Duration,
    /// From the first byte sent to the moment the kernel received the last data of the
    /// answer, where it says ([`exchange_stamped`]): what a client reading each answer as
    /// it came would see (less its own wake-up), whatever this one was busy with.
    pub arrived: Option<Duration>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as text after undoing its `Content-Encoding` (gzip or none).
    pub fn decoded(&self) -> io::Result<String> {
        let mut text = String::new();
        match self.header("content-encoding") {
            None => text = String::from_utf8(self.body.clone()).map_err(io::Error::other)?,
            Some(gzip) if gzip.eq_ignore_ascii_case("gzip") => {
                flate2::read::GzDecoder::new(&self.body[..]).read_to_string(&mut text)?;
            }
            Some(other) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown content-encoding {other:?}"),
                ));
            }
        }
        Ok(text)
    }
}

/// The bytes of a `GET path` request with extra headers.
pub fn get_request(path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    request_bytes("GET", path, headers)
}

/// The bytes of a bodiless request.
pub fn request_bytes(method: &str, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: loopguard\r\nConnection: close\r\n");
    for (name, value) in headers {
        raw.push_str(name);
        raw.push_str(": ");
        raw.push_str(value);
        raw.push_str("\r\n");
    }
    raw.push_str("\r\n");
    raw.into_bytes()
}

/// `GET path` on a fresh connection.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> io::Result<Response> {
    send(addr, &get_request(path, headers)).await
}

/// Sends raw request bytes on a fresh connection and reads the response to end of stream.
pub async fn send(addr: SocketAddr, raw: &[u8]) -> io::Result<Response> {
    let stream = TcpStream::connect(addr).await?;
    exchange(stream, raw).await
}

/// Sends raw request bytes on a connected stream and reads the response to end of stream.
pub async fn exchange(mut stream: TcpStream, raw: &[u8]) -> io::Result<Response> {
    let began = Instant::now();
    stream.write_all(raw).await?;
    stream.flush().await?;
    // `read_to_end` grows an empty buffer from 32 bytes, a read per doubling: room for a
    // whole refusal makes it one read and the end of stream, so the client's own reads
    // weigh less in the latencies it times.
    let mut bytes = Vec::with_capacity(4096);
    stream.read_to_end(&mut bytes).await?;
    let mut response = parse(&bytes)?;
    response.elapsed = began.elapsed();
    Ok(response)
}

/// Keeps the kernel's receive timestamps on while it lives (Linux; elsewhere nothing).
///
/// Linux turns timestamping on for the whole system when the first socket asks for it, but
/// only a moment later (from a work queue), and off again once the last one closes: an
/// answer that arrives in between carries no stamp. This socket asks first, waits until a
/// datagram it sends itself comes back stamped (at most about a second), and keeps the
/// option on for as long as it is held.
#[cfg(target_os = "linux")]
pub fn keep_timestamps() -> io::Result<std::net::UdpSocket> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
    let socket = std::net::UdpSocket::bind(("127.0.0.1", 0))?;
    setsockopt(&socket, sockopt::ReceiveTimestampns, &true)?;
    socket.connect(socket.local_addr()?)?;
    socket.set_read_timeout(Some(Duration::from_secs(1)))?;
    for _ in 0..1000 {
        socket.send(b"stamp?")?;
        let mut buf = [0_u8; 16];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
        let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::empty())?;
        if msg
            .cmsgs()?
            .any(|c| matches!(c, ControlMessageOwned::ScmTimestampns(_)))
        {
            return Ok(socket);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err(io::Error::other("the kernel never stamped a datagram"))
}

/// Receive timestamps are read on Linux only: elsewhere nothing to keep.
#[cfg(not(target_os = "linux"))]
pub fn keep_timestamps() -> io::Result<()> {
    Ok(())
}

/// [`exchange`], with [`Response::arrived`]: on Linux the socket asks the kernel to
/// timestamp what it receives (`SO_TIMESTAMPNS`), and each read takes the time of the last
/// data it read.
///
/// A client on the same machine as the server, reading 64 answers one after the other,
/// reads the first long after it arrived; the kernel's timestamp is when it arrived (what
/// a client that read each answer as it came would see, less its own wake-up). Hold a
/// [`keep_timestamps`] socket meanwhile. An answer without a stamp (any answer, off Linux)
/// has `arrived` `None`.
#[cfg(target_os = "linux")]
pub async fn exchange_stamped(stream: TcpStream, raw: &[u8]) -> io::Result<Response> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
    let stream = std::sync::Arc::<smol::Async<std::net::TcpStream>>::from(stream);
    setsockopt(stream.get_ref(), sockopt::ReceiveTimestampns, &true)?;
    let sent = std::time::SystemTime::now();
    let began = Instant::now();
    (&*stream).write_all(raw).await?;
    let mut bytes = Vec::with_capacity(4096);
    let mut arrived = None;
    // Room for a refusal; a read that fills it grows it for the (large) rest.
    let mut chunk = vec![0_u8; 4096];
    loop {
        let (n, stamp) = stream
            .read_with(|socket| {
                let mut iov = [std::io::IoSliceMut::new(&mut chunk)];
                let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec);
                let fd = std::os::fd::AsRawFd::as_raw_fd(socket);
                let msg = recvmsg::<()>(fd, &mut iov, Some(&mut space), MsgFlags::empty())?;
                let stamp = msg.cmsgs()?.find_map(|c| match c {
                    ControlMessageOwned::ScmTimestampns(t) => Some(Duration::from(t)),
                    _ => None,
                });
                Ok((msg.bytes, stamp))
            })
            .await?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&chunk[..n]);
        arrived = stamp.or(arrived);
        if n == chunk.len() && chunk.len() < 256 * 1024 {
            chunk.resize(chunk.len() * 4, 0);
        }
    }
    let mut response = parse(&bytes)?;
    response.elapsed = began.elapsed();
    // The stamp is the system clock's; so is `sent`. An answer cannot arrive after it was
    // read: the bound keeps a step of the system clock from saying otherwise.
    let sent = sent
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    response.arrived = arrived.map(|at| at.saturating_sub(sent).min(response.elapsed));
    Ok(response)
}

/// [`exchange`]: receive timestamps are read on Linux only.
#[cfg(not(target_os = "linux"))]
pub async fn exchange_stamped(stream: TcpStream, raw: &[u8]) -> io::Result<Response> {
    exchange(stream, raw).await
}

/// Parses one `Content-Length`-framed (or close-delimited) HTTP/1.1 response.
pub fn parse(bytes: &[u8]) -> io::Result<Response> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of response head"))?;
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| bad("response head not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or_else(|| bad("no status line"))?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = bytes[end + 4..].to_vec();
    if let Some((_, len)) = headers.iter().find(|(n, _)| n == "content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad content-length"))?;
        if body.len() < len {
            return Err(bad("response body cut short"));
        }
        body.truncate(len);
    }
    Ok(Response {
        status,
        headers,
        body,
        elapsed: Duration::ZERO,
        arrived: None,
    })
}
