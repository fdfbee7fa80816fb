//! The TLS side of a connection (feature `tls`): plain HTTP sent to the TLS port gets Go's
//! answer, anything else that is not a TLS record is closed, a ClientHello is handshaken.
//! The caller bounds the whole of it with the header timeout.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_io::Timer;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, future};
use futures_rustls::TlsAcceptor;
use futures_rustls::server::TlsStream;
use rustls::ServerConfig;

/// Go's net/http answer to an HTTP request on a TLS port, byte for byte.
pub(crate) const HTTP_TO_HTTPS: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The first five bytes Go's `tlsRecordHeaderLooksLikeHTTP` takes for plain HTTP.
const HTTP_STARTS: [&[u8; 5]; 5] = [b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"];

/// A stream that yields `prefix` (bytes already read) before the rest of `inner`.
#[derive(Debug)]
pub(crate) struct Prefixed<S> {
    prefix: Vec<u8>,
    read: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.read < this.prefix.len() {
            let n = buf.len().min(this.prefix.len() - this.read);
            buf[..n].copy_from_slice(&this.prefix[this.read..this.read + n]);
            this.read += n;
            if this.read == this.prefix.len() {
                this.prefix = Vec::new(); // the buffer is not kept for the connection's life
                this.read = 0;
            }
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// What a TLS connection is, once handshaken.
pub(crate) type Tls<S> = TlsStream<Prefixed<S>>;

/// Reads the first record header, as Go's crypto/tls does, and handshakes; `None` when the
/// connection is closed instead (plain HTTP answered with [`HTTP_TO_HTTPS`], not a TLS
/// record, a refused handshake).
pub(crate) async fn accept<S>(mut stream: S, config: Arc<ServerConfig>) -> Option<Tls<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Go reads what is there (at least the five-byte header): a short request is read
    // whole, so closing after the answer sends no reset over it.
    let mut prefix = vec![0; 1024];
    let mut filled = 0;
    while filled < 5 {
        match stream.read(&mut prefix[filled..]).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => filled += n,
        }
    }
    prefix.truncate(filled);
    let header: &[u8; 5] = prefix[..5].try_into().ok()?;
    if HTTP_STARTS.contains(&header) {
        let _ = stream.write_all(HTTP_TO_HTTPS).await;
        let _ = stream.close().await; // the write side shut: the client reads to the end
        drain(&mut stream).await;
        return None;
    }
    // Go's first-record check: a handshake or alert record of a version below 0x1000.
    let version = u16::from_be_bytes([header[1], header[2]]);
    if !matches!(header[0], 0x16 | 0x15) || version >= 0x1000 {
        return None;
    }
    let prefixed = Prefixed {
        prefix,
        read: 0,
        inner: stream,
    };
    TlsAcceptor::from(config).accept(prefixed).await.ok()
}

/// Reads what the client still sends, for a moment, so that closing resets nothing unread.
async fn drain<S: AsyncRead + Unpin>(stream: &mut S) {
    let reading = async {
        let mut sink = [0; 1024];
        while let Ok(1..) = stream.read(&mut sink).await {}
    };
    future::or(reading, async {
        Timer::after(Duration::from_millis(200)).await;
    })
    .await;
}
