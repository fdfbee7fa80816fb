//! Connection floods against the exporter, over loopback: idle connections by the
//! thousand, a cap that sheds the oldest idle connection, and heads trickled a byte at a
//! time. Scrapes and `/healthz` keep being answered through all of them.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use loopguard_demos::client;
use loopguard_demos::exporter::registry::{Registry, WalkKind};
use loopguard_demos::exporter::{Config, Exporter};
use loopguard_demos::testing::{Latch, PATIENCE, raise_fd_limit, run, until};
use smol::io::AsyncWriteExt as _;

fn start(config: Config, registry: Registry) -> Exporter {
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        cardinality_interval: Duration::ZERO,
        ..config
    };
    Exporter::spawn(config, registry.into()).expect("the exporter starts")
}

fn registry() -> Registry {
    Registry::new(100, Duration::ZERO).expect("the recorder installs")
}

/// Whether the server closed `stream` (end of stream or reset) within 5 s.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut byte = [0_u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => {
            e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut
        }
    }
}

#[test]
fn scrapes_are_answered_while_thousands_of_idle_connections_are_open() {
    // Each connection takes a descriptor on both ends, in this one process.
    let limit = raise_fd_limit(4096 + 512);
    let n = 2000.min((limit.saturating_sub(256) / 2) as usize);
    assert!(
        n >= 500,
        "open-file limit {limit} leaves room for only {n} connections"
    );
    let exporter = start(
        Config {
            header_read_timeout: Duration::from_secs(60),
            // The normal class: an idle-class walk could starve behind the test run's own busy
            // threads (worker_priority.rs checks the exporter's default).
            worker_sched_idle: false,
            ..Config::default()
        },
        registry(),
    );
    let addr = exporter.addr();
    let began = Instant::now();
    let idle: Vec<TcpStream> = (0..n)
        .map(|i| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connection {i} of {n}: {e}"))
        })
        .collect();
    run(async {
        let shared = exporter.shared();
        until("every idle connection accepted", || {
            shared.connections() == n
        })
        .await;
        let accepted = began.elapsed();
        for path in ["/healthz", "/metrics", "/healthz"] {
            let response = client::get(addr, path, &[]).await.unwrap();
            assert_eq!(response.status, 200, "{path}");
            assert!(
                response.elapsed < Duration::from_secs(2),
                "{path} took {:?} behind {n} idle connections",
                response.elapsed
            );
        }
        assert_eq!(
            shared.shed_connections(),
            0,
            "under the cap nothing is shed"
        );
        eprintln!("{n} idle connections accepted in {accepted:?}");
    });
    drop(idle);
    exporter.stop().unwrap();
}

#[test]
fn over_the_cap_the_oldest_idle_connection_is_shed_and_a_busy_one_never() {
    let latch = Latch::new();
    let held = {
        let latch = latch.clone();
        registry().with_hook(move |kind| {
            if kind == WalkKind::Scrape {
                latch.wait();
            }
        })
    };
    let cap = 32;
    let exporter = start(
        Config {
            max_connections: cap,
            // Only shedding closes connections here.
            header_read_timeout: Duration::from_secs(60),
            // The normal class: an idle-class walk could starve behind the test run's own busy
            // threads (worker_priority.rs checks the exporter's default).
            worker_sched_idle: false,
            ..Config::default()
        },
        held,
    );
    let (addr, shared) = (exporter.addr(), exporter.shared());
    // The oldest connection has a scrape in progress: busy.
    let mut busy = TcpStream::connect(addr).unwrap();
    busy.write_all(&client::get_request("/metrics", &[]))
        .unwrap();
    run(until("the scrape is walking", || {
        shared.registry().active() == 1
    }));
    // Then cap - 1 idle ones, accepted in this order.
    let mut idle = Vec::new();
    for i in 1..cap {
        idle.push(TcpStream::connect(addr).unwrap());
        run(until("accepted in order", || shared.connections() == i + 1));
    }
    // Two newcomers: the two oldest idle connections make room, the busy one stays.
    let newcomers: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    run(until("two shed", || shared.shed_connections() == 2));
    assert!(
        closed_by_server(&mut idle[0]),
        "the oldest idle one is closed"
    );
    assert!(closed_by_server(&mut idle[1]), "then the next oldest");
    assert_eq!(shared.connections(), cap, "never more than the cap");
    run(async {
        // A newcomer is served.
        let response = client::exchange(
            smol::Async::new(newcomers.into_iter().next().unwrap())
                .unwrap()
                .into(),
            &client::get_request("/healthz", &[]),
        )
        .await
        .unwrap();
        assert_eq!(response.status, 200);
    });
    latch.open();
    let mut answer = Vec::new();
    busy.set_read_timeout(Some(PATIENCE)).unwrap();
    busy.read_to_end(&mut answer).unwrap();
    let answer = client::parse(&answer).unwrap();
    assert_eq!(answer.status, 200, "the busy connection was never shed");
    drop(idle);
    exporter.stop().unwrap();
}

#[test]
fn heads_trickled_a_byte_at_a_time_are_cut_off_and_healthz_answers_meanwhile() {
    let timeout = Duration::from_millis(300);
    let exporter = start(
        Config {
            header_read_timeout: timeout,
            // The normal class: an idle-class walk could starve behind the test run's own busy
            // threads (worker_priority.rs checks the exporter's default).
            worker_sched_idle: false,
            ..Config::default()
        },
        registry(),
    );
    let addr = exporter.addr();
    run(async {
        // A head too long to finish in time at one byte per 10 ms.
        let mut head = client::get_request("/healthz", &[("X-Pad", &"p".repeat(400))]);
        head.truncate(head.len() - 4);
        let (tx, cut) = smol::channel::unbounded();
        for _ in 0..200 {
            let (tx, head) = (tx.clone(), head.clone());
            smol::spawn(async move {
                let began = Instant::now();
                let mut stream = smol::net::TcpStream::connect(addr).await.unwrap();
                for byte in head.chunks(1) {
                    if stream.write_all(byte).await.is_err() {
                        break;
                    }
                    smol::Timer::after(Duration::from_millis(10)).await;
                }
                let _ = tx.send(began.elapsed()).await;
            })
            .detach();
        }
        until("the tricklers are in", || {
            exporter.shared().connections() >= 200
        })
        .await;
        for path in ["/healthz", "/metrics", "/healthz"] {
            let response = client::get(addr, path, &[]).await.unwrap();
            assert_eq!(response.status, 200, "{path}");
            assert!(
                response.elapsed < Duration::from_secs(2),
                "{path}: {:?}",
                response.elapsed
            );
        }
        for _ in 0..200 {
            let took = cut.recv().await.unwrap();
            // Cut well before the 4 s the whole head would take: the head timeout runs
            // from the first byte (the connection's start counts for as long again).
            assert!(took < Duration::from_secs(3), "a trickler lasted {took:?}");
        }
    });
    exporter.stop().unwrap();
}
