//! Where the exporter listens: the addresses of the command line, or the sockets systemd
//! passed (socket activation), each served by one `serve` future of the one exporter.

use std::io;
use std::net::TcpListener;
use std::pin::Pin;

use futures_lite::future;

use loopguard_exporter::Exporter;

use crate::cli::Config;

/// Binds every listener the flags name, and serves them all on `exporter` (one pool); says
/// `listening on http://ADDR` (`https://` with `tls_server_config`) for each, in order,
/// once its backlog is raised.
pub fn serve(
    exporter: &Exporter,
    config: &Config,
) -> io::Result<impl Future<Output = io::Result<()>>> {
    let listeners = if config.systemd_socket {
        activated()?
    } else {
        let bind = |addr| {
            TcpListener::bind(addr).map_err(|e| io::Error::new(e.kind(), format!("{addr}: {e}")))
        };
        config
            .listen
            .iter()
            .map(bind)
            .collect::<io::Result<Vec<_>>>()?
    };
    // Every listener's serve at once; the first error (a listener that cannot serve) ends
    // them all instead of waiting behind the others.
    let mut all: Pin<Box<dyn Future<Output = io::Result<()>>>> = Box::pin(async { Ok(()) });
    for listener in listeners {
        let addr = listener.local_addr()?;
        let serve = exporter.serve(listener); // the listen backlog is raised here
        let scheme = if exporter.serves_tls() {
            "https"
        } else {
            "http"
        };
        println!("listening on {scheme}://{addr}");
        all = Box::pin(async move { future::try_zip(all, serve).await.map(|_| ()) });
    }
    Ok(all)
}

/// The TCP listeners systemd passed (`LISTEN_PID`, `LISTEN_FDS`), in order.
fn activated() -> io::Result<Vec<TcpListener>> {
    let mut passed = listenfd::ListenFd::from_env();
    if passed.len() == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "--web.systemd-socket: systemd passed no socket (LISTEN_FDS)",
        ));
    }
    (0..passed.len())
        .map(|i| {
            passed.take_tcp_listener(i)?.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("passed socket {i} is not a TCP listener"),
                )
            })
        })
        .collect()
}
