//! Shared scaffolding: the executors every behaviour runs on, a blocking HTTP/1.1 client
//! and a latch for renders held on purpose.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use loopguard_exporter::Exporter;

/// Runs the same `async fn` body on smol, async-std, a `LocalExecutor`,
/// `futures_lite::future::block_on` and a tokio current-thread runtime.
#[macro_export]
macro_rules! on_every_executor {
    ($(#[$attr:meta])* async fn $name:ident() $body:block) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body() $body

            #[test]
            fn smol() {
                smol::block_on(body())
            }

            #[test]
            fn async_std() {
                async_std::task::block_on(body())
            }

            #[test]
            fn local_executor() {
                let ex = async_executor::LocalExecutor::new();
                futures_lite::future::block_on(ex.run(body()))
            }

            #[test]
            fn block_on() {
                futures_lite::future::block_on(body())
            }

            #[test]
            fn tokio_current_thread() {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
                    .block_on(body())
            }
        }
    };
}

/// An answer, read to the end of a `Connection: close` exchange.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        let found = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET path` with `headers`, blocking, on a connection of its own.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("an answer");
    parse(&raw)
}

/// Sends `raw` bytes as they are and reads the answer to the connection's end.
pub fn send(addr: SocketAddr, raw: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(raw).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).expect("an answer");
    parse(&answer)
}

/// An HTTP/1.1 answer read to its end: status, headers and body.
pub fn parse(raw: &[u8]) -> Answer {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

/// Serves `exporter` on a fresh listener (or on `listeners` more) while `client` runs on a
/// thread of its own, then shuts the exporter down and waits for the drain.
pub async fn serving<T: Send + 'static>(
    exporter: &Exporter,
    client: impl FnOnce(SocketAddr) -> T + Send + 'static,
) -> T {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = exporter.serve(listener);
    let client = async {
        let out = blocking::unblock(move || client(addr)).await;
        exporter.shutdown();
        out
    };
    let (served, out) = futures_lite::future::zip(serve, client).await;
    served.expect("served");
    out
}

/// A gate renders wait at: closed until `open`, counting who arrived.
#[derive(Clone, Default)]
pub struct Latch(Arc<(Mutex<(bool, usize)>, Condvar)>);

impl Latch {
    /// Blocks until the latch is open (called by a render).
    pub fn wait(&self) {
        let (lock, cvar) = &*self.0;
        let mut state = lock.lock().unwrap();
        state.1 += 1;
        cvar.notify_all();
        while !state.0 {
            state = cvar.wait(state).unwrap();
        }
    }

    /// Blocks until `n` renders have arrived at the latch.
    pub fn arrived(&self, n: usize) {
        let (lock, cvar) = &*self.0;
        let began = std::time::Instant::now();
        let mut state = lock.lock().unwrap();
        while state.1 < n {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "{n} renders never arrived"
            );
            state = cvar
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap()
                .0;
        }
    }

    pub fn open(&self) {
        let (lock, cvar) = &*self.0;
        lock.lock().unwrap().0 = true;
        cvar.notify_all();
    }
}

/// `name` on the `PATH`, to check an answer with a real tool. Missing, the check is skipped
/// with a line on stderr, unless `LOOPGUARD_REQUIRE_TOOLS` is set (CI sets it and installs
/// the tools): then a missing tool fails the test.
pub fn tool(name: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("LOOPGUARD_REQUIRE_TOOLS").is_none(),
            "`{name}` is not installed (Debian: see .ci/run's tool list)"
        );
        eprintln!("SKIPPED: the check by `{name}` (not installed)");
    }
    found
}

/// Runs `program` with `args`, `input` on its stdin: its exit status and stdout, stderr.
pub fn pipe(program: &std::path::Path, args: &[&str], input: &[u8]) -> (bool, Vec<u8>, String) {
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tool starts");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("the tool ends");
    writer.join().unwrap().expect("the tool read its input");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), out.stdout, stderr)
}

/// What the source wrote: an exposition less the handler's own series, which the exporter
/// adds after it (before an OpenMetrics `# EOF`).
pub fn source_part(text: &str) -> String {
    let start = text
        .find("# HELP promhttp_metric_handler_requests")
        .unwrap_or_else(|| panic!("no handler series in {text:?}"));
    let eof = if text.ends_with("# EOF\n") {
        "# EOF\n"
    } else {
        ""
    };
    format!("{}{eof}", &text[..start])
}

/// A source that writes `up 1`.
pub fn up() -> impl loopguard_exporter::Source {
    loopguard_exporter::render_fn(loopguard_exporter::PROMETHEUS_TEXT, |b| {
        b.extend_from_slice(b"up 1\n");
        Ok(())
    })
}

/// An exporter of one worker serving [`up`] behind the web config file at `path`.
#[cfg(feature = "web-config")]
pub fn web_exporter(path: &std::path::Path) -> Exporter {
    Exporter::builder()
        .source(up())
        .workers(1)
        .web_config_file(path)
        .build()
        .expect("the exporter builds")
}
