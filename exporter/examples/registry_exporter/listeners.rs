//! Where the exporter listens: the addresses of the command line, or the sockets systemd
//! passed (socket activation), each served by one `serve` future of the one exporter.

use std::io;
use std::net::TcpListener;

use loopguard_exporter::Exporter;

use crate::cli::Config;

/// Binds every listener the flags name, and serves them all on `exporter` (one pool); says
/// `listening on http://ADDR` for each, in order, once its backlog is raised.
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
    let mut serving = Vec::new();
    for listener in listeners {
        let addr = listener.local_addr()?;
        serving.push(exporter.serve(listener)); // the listen backlog is raised here
        println!("listening on http://{addr}");
    }
    let ex = smol::LocalExecutor::new();
    Ok(async move {
        let tasks: Vec<_> = serving.into_iter().map(|serve| ex.spawn(serve)).collect();
        ex.run(async {
            for task in tasks {
                task.await?;
            }
            Ok(())
        })
        .await
    })
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
