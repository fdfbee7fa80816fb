//! The catalog client against a real local HTTP/1.1 server (hyper on smol, port 0),
//! scripted per scenario. The server counts requests per path with atomics and reports
//! them on a channel; the client reports attempts on another. Sleeps appear only as the
//! scripted server delays and backoffs under test.
//!
//! Each scenario runs with the client on smol and on async-std; the server always runs on
//! its own thread with its own smol executor.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_io::Timer;
use client::{CatalogError, Client, Config, Event, Spawn};
use futures_lite::{StreamExt, future, stream};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, Uri};
use loopguard_demos::catalog::{cli, client};
use smol::channel::{Receiver, Sender, unbounded};
use smol_hyper::rt::{FuturesIo, SmolTimer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Generous upper tolerance for times on a shared machine.
const SLACK: Duration = Duration::from_millis(300);

#[track_caller]
fn assert_near(took: Duration, expected: Duration) {
    assert!(
        took >= expected,
        "took {took:?}, expected at least {expected:?}"
    );
    assert!(
        took < expected + SLACK,
        "took {took:?}, expected under {:?}",
        expected + SLACK
    );
}

/// Awaits `fut`, failing the test instead of hanging if it takes over 5 s.
async fn bounded<T>(fut: impl Future<Output = T>) -> T {
    future::or(fut, async {
        Timer::after(Duration::from_secs(5)).await;
        panic!("still waiting after 5 s");
    })
    .await
}

/// One scripted reply: wait, send headers with `status`, then each chunk after its delay.
#[derive(Clone)]
struct Reply {
    head_delay: Duration,
    status: u16,
    chunks: Vec<(Duration, &'static [u8])>,
}

fn reply(head_delay: u64, status: u16) -> Reply {
    Reply {
        head_delay: ms(head_delay),
        status,
        chunks: vec![(Duration::ZERO, b"catalog data")],
    }
}

/// Decides the reply to the `n`-th request (from 1) for a path.
type Script = Arc<dyn Fn(&str, usize) -> Reply + Send + Sync>;

struct Server {
    addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, Arc<AtomicUsize>>>>,
    received: Receiver<(String, usize)>,
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(script: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> Server {
        let script: Script = Arc::new(script);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Mutex::new(HashMap::<String, Arc<AtomicUsize>>::new()));
        let (received_tx, received) = unbounded();
        let (stop, stopped) = unbounded::<()>();
        let shared = counts.clone();
        let thread = std::thread::spawn(move || {
            let ex = smol::Executor::new();
            let listener = smol::net::TcpListener::try_from(listener).unwrap();
            let accept = async {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let (script, counts, tx) =
                        (script.clone(), shared.clone(), received_tx.clone());
                    let service = service_fn(move |req: Request<Incoming>| {
                        let path = req.uri().path().to_string();
                        let counter = counts
                            .lock()
                            .unwrap()
                            .entry(path.clone())
                            .or_default()
                            .clone();
                        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        let reply = script(&path, n);
                        let tx = tx.clone();
                        async move {
                            let _ = tx.send((path, n)).await;
                            Timer::after(reply.head_delay).await;
                            let chunks =
                                stream::iter(reply.chunks).then(|(delay, bytes)| async move {
                                    Timer::after(delay).await;
                                    Ok::<_, Infallible>(Frame::data(Bytes::from_static(bytes)))
                                });
                            let body: BoxBody<Bytes, Infallible> =
                                BodyExt::boxed(StreamBody::new(chunks));
                            Ok::<_, Infallible>(
                                Response::builder().status(reply.status).body(body).unwrap(),
                            )
                        }
                    });
                    ex.spawn(async move {
                        let _ = http1::Builder::new()
                            .timer(SmolTimer::new())
                            .serve_connection(FuturesIo::new(stream), service)
                            .await;
                    })
                    .detach();
                }
            };
            // Stops by itself when the `Server` is dropped.
            smol::block_on(ex.run(future::or(accept, async {
                let _ = stopped.recv().await;
            })));
        });
        Server {
            addr,
            counts,
            received,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    /// Requests received so far for `path`.
    fn count(&self, path: &str) -> usize {
        self.counts
            .lock()
            .unwrap()
            .get(path)
            .map_or(0, |c| c.load(Ordering::SeqCst))
    }

    /// Waits for the next request the server receives.
    async fn next_request(&self) -> (String, usize) {
        self.received.recv().await.expect("the server is running")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.try_send(());
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

fn seed_config() -> Config {
    Config {
        budget: ms(1000),
        attempt_timeout: Some(ms(400)),
        attempts: 3,
        backoff: vec![ms(100), ms(200)],
        concurrency: 20,
        pool_size: 20,
    }
}

fn client(server: &Server, config: &Config, spawn: &Spawn) -> (Client, Receiver<Event>) {
    let (tx, rx) = unbounded();
    let client = Client::with_events(&server.url("/"), config, spawn.clone(), Some(tx)).unwrap();
    (client, rx)
}

fn events(rx: &Receiver<Event>) -> Vec<Event> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// Defines `$name::smol` and `$name::async_std`, each running `$body(spawn)`.
macro_rules! on_smol_and_async_std {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn smol() {
                let spawn: Spawn = Arc::new(|f| smol::spawn(f).detach());
                smol::block_on($body(spawn))
            }

            #[test]
            fn async_std() {
                let spawn: Spawn = Arc::new(|f| {
                    async_std::task::spawn(f);
                });
                async_std::task::block_on($body(spawn))
            }
        }
    };
}

fn boxed<'a>(f: impl Future<Output = ()> + 'a) -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>> {
    Box::pin(f)
}

on_smol_and_async_std!(
    busy_semaphore_ends_at_the_deadline_without_a_request,
    |spawn: Spawn| boxed(async move {
        let server = Server::start(|_, _| reply(20, 200));
        let config = Config {
            concurrency: 1,
            ..seed_config()
        };
        let (client, attempts) = client(&server, &config, &spawn);
        // Another task holds the only slot past the budget.
        let held = client.semaphore().acquire_arc().await;

        let start = Instant::now();
        let result = bounded(client.get("/product/42")).await;
        assert_near(start.elapsed(), ms(1000));
        assert!(
            matches!(result, Err(CatalogError::Deadline { attempts: 0 })),
            "{result:?}"
        );
        assert_eq!(server.count("/product/42"), 0, "the server saw no request");
        assert_eq!(events(&attempts), []);

        // The slot was not leaked by the expired waiter: once freed, the next call goes through.
        drop(held);
        let ok = client.get("/product/42").await.unwrap();
        assert_eq!((&ok.body[..], ok.attempts), (&b"catalog data"[..], 1));
        assert_eq!(server.count("/product/42"), 1);
    })
);

on_smol_and_async_std!(
    slow_headers_end_inside_the_second_backoff,
    |spawn: Spawn| boxed(async move {
        let server = Server::start(|_, _| reply(800, 200));
        let (client, attempts) = client(&server, &seed_config(), &spawn);

        let start = Instant::now();
        let result = bounded(client.get("/slow")).await;
        let took = start.elapsed();
        // 400 + 100 + 400 = 900 ms of attempts and the first pause, then the second pause
        // (200 ms) is cut at 1000 ms: no third attempt.
        assert_near(took, ms(1000));
        assert!(
            matches!(result, Err(CatalogError::Deadline { attempts: 2 })),
            "{result:?}"
        );
        assert_eq!(server.count("/slow"), 2, "exactly two requests");
        assert_eq!(
            events(&attempts),
            [Event::AttemptStarted(1), Event::AttemptStarted(2),],
            "both attempts were cut by their own timeout, none ended"
        );
    })
);

on_smol_and_async_std!(transient_503_then_success, |spawn: Spawn| boxed(
    async move {
        let server = Server::start(|_, n| reply(50, if n == 1 { 503 } else { 200 }));
        let (client, attempts) = client(&server, &seed_config(), &spawn);

        let start = Instant::now();
        let done = client.get("/flaky").await.unwrap();
        assert_near(start.elapsed(), ms(50 + 100 + 50));
        assert_eq!(done.attempts, 2);
        assert_eq!(server.count("/flaky"), 2);
        assert_eq!(
            events(&attempts),
            [
                Event::AttemptStarted(1),
                Event::AttemptEnded(1, Some(503)),
                Event::AttemptStarted(2),
                Event::AttemptEnded(2, Some(200)),
            ]
        );
    }
));

on_smol_and_async_std!(persistent_503_exhausts_the_attempts, |spawn: Spawn| boxed(
    async move {
        let server = Server::start(|_, _| reply(50, 503));
        let (client, _) = client(&server, &seed_config(), &spawn);

        let start = Instant::now();
        let result = bounded(client.get("/down")).await;
        assert_near(start.elapsed(), ms(50 + 100 + 50 + 200 + 50));
        match result {
            Err(CatalogError::Failed { attempts: 3, last }) => assert_eq!(last, "http status 503"),
            other => panic!("expected exhausted retries, got {other:?}"),
        }
        assert_eq!(server.count("/down"), 3);
    }
));

on_smol_and_async_std!(other_statuses_are_not_retried, |spawn: Spawn| boxed(
    async move {
        let server = Server::start(|_, _| reply(0, 404));
        let (client, _) = client(&server, &seed_config(), &spawn);
        let result = client.get("/missing").await;
        assert!(
            matches!(result, Err(CatalogError::Failed { attempts: 1, .. })),
            "{result:?}"
        );
        assert_eq!(server.count("/missing"), 1);
    }
));

on_smol_and_async_std!(connection_pool_held_by_another_request, |spawn: Spawn| {
    boxed(async move {
        // `/hold` sends its headers at once and the rest of its body after 1500 ms.
        let server = Server::start(|path, _| match path {
            "/hold" => Reply {
                head_delay: Duration::ZERO,
                status: 200,
                chunks: vec![(Duration::ZERO, b"part"), (ms(1500), b" rest")],
            },
            _ => reply(0, 200),
        });
        let config = Config {
            attempt_timeout: None,
            pool_size: 1,
            ..seed_config()
        };
        let (client, _) = client(&server, &config, &spawn);

        let holder = smol::spawn(client.get_within("/hold", ms(5000)));
        assert_eq!(server.next_request().await, ("/hold".to_string(), 1));

        let start = Instant::now();
        let result = bounded(client.get("/product/42")).await;
        assert_near(start.elapsed(), ms(1000));
        // The attempt started and waited for the connection; the server never saw it.
        assert!(
            matches!(result, Err(CatalogError::Deadline { attempts: 1 })),
            "{result:?}"
        );
        assert_eq!(server.count("/product/42"), 0);

        // The holder finishes, and its connection serves the next call.
        assert_eq!(&holder.await.unwrap().body[..], b"part rest");
        assert!(client.get("/product/42").await.is_ok());
        assert_eq!(server.count("/product/42"), 1);
    })
});

on_smol_and_async_std!(
    a_body_trickling_past_the_budget_is_a_deadline,
    |spawn: Spawn| boxed(async move {
        // Headers at once, then 10 chunks 150 ms apart: the body would end at 1500 ms.
        let server = Server::start(|_, _| Reply {
            head_delay: Duration::ZERO,
            status: 200,
            chunks: vec![(ms(150), b"x"); 10],
        });
        // As in the seed: the attempt limit allows longer than the budget.
        let config = Config {
            attempt_timeout: Some(ms(2000)),
            ..seed_config()
        };
        let (client, _) = client(&server, &config, &spawn);

        let start = Instant::now();
        let result = bounded(client.get("/trickle")).await;
        assert_near(start.elapsed(), ms(1000));
        assert!(
            matches!(result, Err(CatalogError::Deadline { attempts: 1 })),
            "{result:?}"
        );
        assert_eq!(server.count("/trickle"), 1);
    })
);

on_smol_and_async_std!(cancelled_during_a_request, |spawn: Spawn| boxed(
    async move {
        let server = Server::start(|_, _| reply(2000, 200));
        let (client, attempts) = client(&server, &seed_config(), &spawn);
        let operation = client.get("/slow");
        let mut cancelled_at = None;
        let raced = future::or(async { Some(operation.await) }, async {
            // Cancel as soon as the server has the request.
            assert_eq!(server.next_request().await, ("/slow".to_string(), 1));
            cancelled_at = Some(Instant::now());
            None
        })
        .await;
        // `operation` was dropped with the `or` future.
        let back = Instant::now();
        let cancelled_at = cancelled_at.expect("cancelled while the server held the request");
        assert!(
            raced.is_none(),
            "the operation cannot finish before its 400 ms attempt limit"
        );
        assert!(
            back - cancelled_at < ms(50),
            "control back in {:?}",
            back - cancelled_at
        );
        assert_eq!(events(&attempts), [Event::AttemptStarted(1)]);

        // No further attempt: past the attempt timeout and the first pause nothing arrives.
        Timer::after(ms(400 + 100 + 100)).await;
        assert_eq!(server.count("/slow"), 1);
    }
));

on_smol_and_async_std!(cancelled_during_a_backoff, |spawn: Spawn| boxed(
    async move {
        let server = Server::start(|_, _| reply(0, 503));
        let config = Config {
            backoff: vec![ms(300), ms(300)],
            ..seed_config()
        };
        let (client, attempts) = client(&server, &config, &spawn);

        let operation = client.get("/down");
        let start = Instant::now();
        let mut cancelled_at = None;
        let raced = future::or(async { Some(operation.await) }, async {
            // The first attempt ended with 503: the retry is now in its 300 ms pause.
            loop {
                if let Event::AttemptEnded(1, Some(503)) = attempts.recv().await.unwrap() {
                    break;
                }
            }
            cancelled_at = Some(Instant::now());
            None
        })
        .await;
        let back = Instant::now();
        let cancelled_at = cancelled_at.expect("cancelled in the pause");
        assert!(raced.is_none());
        assert!(
            back - cancelled_at < ms(50),
            "control back in {:?}",
            back - cancelled_at
        );
        assert!(
            start.elapsed() < ms(300),
            "cancelled inside the first pause"
        );
        assert_eq!(server.count("/down"), 1);

        // The pause would have ended at ~300 ms: no second attempt comes.
        Timer::after(ms(300 + 200)).await;
        assert_eq!(server.count("/down"), 1);
        assert_eq!(events(&attempts), []);
    }
));

/// The command line, end to end: the exact flags, one JSON line per operation, exit code.
#[test]
fn command_line_runs_every_operation_at_once() {
    let server = Server::start(|path, _| match path {
        "/ok" => reply(100, 200),
        _ => reply(0, 503),
    });
    let executor = Arc::new(smol::Executor::new());
    let spawn = cli::spawner(executor.clone());
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let cli::Parsed::Run(args) = cli::parse(&args).unwrap() else {
            panic!("not a run")
        };
        let mut lines = Vec::new();
        let code = smol::block_on(executor.run(cli::run(&args, spawn.clone(), |l| {
            lines.push(l.to_string())
        })));
        (code, lines)
    };

    let ok = server.url("/ok").to_string();
    let start = Instant::now();
    let (code, lines) = run(&["--requests", "4", "--concurrency", "4", &ok]);
    // All four at once: together they take about one reply, not four.
    assert_near(start.elapsed(), ms(100));
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 4);
    for line in &lines {
        assert!(
            line.starts_with(r#"{"outcome":"success","elapsed_ms":"#),
            "{line}"
        );
        assert!(line.contains(r#""attempts":1,"#), "{line}");
    }
    assert_eq!(server.count("/ok"), 4);

    let down = server.url("/down").to_string();
    let (code, lines) = run(&[
        "--budget-ms",
        "1000",
        "--attempt-timeout-ms",
        "400",
        "--attempts",
        "2",
        "--backoff-ms",
        "10",
        "--concurrency",
        "1",
        "--requests",
        "1",
        &down,
    ]);
    assert_eq!(code, 1);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with(r#"{"outcome":"error","#),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains(r#""attempts":2,"#), "{}", lines[0]);
}

#[test]
fn command_line_errors() {
    let parse = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        cli::parse(&args)
    };
    let err = |args: &[&str]| parse(args).unwrap_err();
    assert_eq!(err(&[]), "missing URL");
    assert!(err(&["--attempts", "x", "http://a/"]).contains("--attempts"));
    assert!(err(&["--attempts", "0", "http://a/"]).contains("at least 1"));
    assert!(err(&["--budget-ms"]).contains("missing value"));
    assert!(err(&["--backoff-ms", "100,,200", "http://a/"]).contains("--backoff-ms"));
    assert!(err(&["--verbose", "http://a/"]).contains("unknown option"));
    assert!(err(&["https://a/"]).contains("only http://"));
    assert!(err(&["http://a/", "http://b/"]).contains("only one URL"));
    assert!(err(&["--concurrency", "-1", "http://a/"]).contains("whole number"));
    assert!(matches!(parse(&["--help"]), Ok(cli::Parsed::Help)));

    let cli::Parsed::Run(args) = parse(&[
        "--budget-ms=250",
        "--attempt-timeout-ms",
        "0",
        "--backoff-ms",
        "5,10,20",
        "--concurrency",
        "3",
        "--requests",
        "7",
        "http://127.0.0.1:9/p?q=1",
    ])
    .unwrap() else {
        panic!("not a run")
    };
    assert_eq!(args.config.budget, ms(250));
    assert_eq!(args.config.attempt_timeout, None);
    assert_eq!(args.config.backoff, [ms(5), ms(10), ms(20)]);
    assert_eq!(
        (
            args.config.concurrency,
            args.config.pool_size,
            args.requests
        ),
        (3, 3, 7)
    );
    assert_eq!(args.url.path_and_query().unwrap().as_str(), "/p?q=1");
}
