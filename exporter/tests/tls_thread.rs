//! Where a TLS handshake's crypto runs (feature `tls`, Linux): on the exporter's
//! `tls-handshake` thread at the render workers' default nice value, not on the loop. A
//! test binary of its own, so that the only handshake thread in the process is this
//! exporter's.

#![cfg(all(feature = "tls", target_os = "linux"))]

mod common;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::serving;
use loopguard_exporter::Exporter;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

const PATIENCE: Duration = Duration::from_secs(10);

/// A CA, a server certificate from it for 127.0.0.1 and a web config file serving it; the
/// client config that trusts the CA.
fn tls_files() -> (std::path::PathBuf, Arc<ClientConfig>) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("loopguard-tls-thread-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
    leaf.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let path = dir.join("web.yml");
    let text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    std::fs::write(&path, text).unwrap();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (path, Arc::new(client))
}

/// A full handshake and nothing else.
fn handshake_only(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<()> {
    let mut tcp = TcpStream::connect_timeout(&addr, PATIENCE)?;
    tcp.set_read_timeout(Some(PATIENCE))?;
    tcp.set_write_timeout(Some(PATIENCE))?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let mut conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)?;
    }
    Ok(())
}

/// A thread's CPU time (user and system, in clock ticks) and nice value, from its `stat`.
fn cpu_and_nice(stat: &str) -> (u64, i64) {
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (ticks, fields[16].parse().unwrap())
}

/// Every handshake thread of this process (this test's exporter's only): CPU and nice.
fn handshake_threads() -> Vec<(u64, i64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "tls-handshake" {
            if let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) {
                out.push(cpu_and_nice(&stat));
            }
        }
    }
    out
}

/// The handshakes' crypto runs on a thread of its own, at the render workers' default nice
/// value (10), not on the loop: over 150 full handshakes the handshake threads use more
/// CPU than the loop does (measured in a debug build: 16 to 18 ticks against 6 to 8, where
/// the loop accepts, checks the files, hands each connection over and back and serves
/// its close; 0 against 20 with the handshake on the loop). CPU time, which a busy
/// machine does not change.
#[test]
fn handshakes_run_off_the_loop_on_a_thread_at_the_workers_nice() {
    let (web_config, client) = tls_files();
    let exporter = Exporter::builder()
        .source(common::up())
        .web_config_file(web_config)
        .build()
        .unwrap();
    let loop_stat = || std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let before = cpu_and_nice(&loop_stat()).0;
    let threads = futures_lite::future::block_on(serving(&exporter, move |addr| {
        for i in 0..150 {
            handshake_only(addr, client.clone()).unwrap_or_else(|e| panic!("handshake {i}: {e}"));
        }
        handshake_threads() // while the exporter, and its thread, still run
    }));
    let on_the_loop = cpu_and_nice(&loop_stat()).0 - before;
    assert_eq!(threads.len(), 1, "one tls-handshake thread");
    for (_, nice) in &threads {
        assert_eq!(
            *nice, 10,
            "the handshake thread at the workers' default nice"
        );
    }
    let off_the_loop: u64 = threads.iter().map(|(ticks, _)| ticks).sum();
    assert!(
        off_the_loop > on_the_loop,
        "handshake threads {off_the_loop} ticks against the loop's {on_the_loop}"
    );
}
