//! `tls_server_config` (feature `tls`) over real sockets with a real rustls client, on
//! every executor: TLS 1.2 and 1.3, min and max versions, each `client_auth_type`,
//! `client_allowed_sans`, Go's answer to plain HTTP, a handshake that never finishes (cut
//! at the header timeout, counted against the connection cap), certificate renewal and a
//! bad renewal, and every key refused at start naming the key.

#![cfg(feature = "tls")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{Answer, serving, up, web_exporter};
use loopguard_exporter::Exporter;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ProtocolVersion, RootCertStore};

/// Go's net/http answer to plain HTTP on a TLS port.
const GO_400: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

const PATIENCE: Duration = Duration::from_secs(10);

/// A certificate and its key, as PEM, and where they are written.
struct Pair {
    cert: String,
    key: String,
    key_file: PathBuf,
}

/// The test PKI: two CAs; a server certificate from A (IP 127.0.0.1, DNS localhost), a
/// second one from A for renewals; client certificates from A (one with the SANs the tests
/// allow, one without) and from B.
struct Pki {
    dir: PathBuf,
    ca_a: String,
    ca_a_file: PathBuf,
    ca_b_file: PathBuf,
    server: Pair,
    renewed: Pair,
    client_a: Pair,
    client_a_other: Pair,
    client_b: Pair,
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("loopguard-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
        };
        let (a, b) = (ca("test CA A"), ca("test CA B"));
        let leaf =
            |issuer: &CertifiedIssuer<'_, KeyPair>, name: &str, sans: Vec<SanType>, server| {
                let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
                params.subject_alt_names = sans;
                params
                    .distinguished_name
                    .push(rcgen::DnType::CommonName, name);
                params.extended_key_usages = vec![if server {
                    ExtendedKeyUsagePurpose::ServerAuth
                } else {
                    ExtendedKeyUsagePurpose::ClientAuth
                }];
                let key = KeyPair::generate().unwrap();
                let cert = params.signed_by(&key, issuer).unwrap();
                let (cert_file, key_file) = (
                    dir.join(format!("{name}.crt")),
                    dir.join(format!("{name}.key")),
                );
                std::fs::write(&cert_file, cert.pem()).unwrap();
                std::fs::write(&key_file, key.serialize_pem()).unwrap();
                Pair {
                    cert: cert.pem(),
                    key: key.serialize_pem(),
                    key_file,
                }
            };
        let dns = |name: &str| SanType::DnsName(name.try_into().unwrap());
        let server_sans = || vec![SanType::IpAddress([127, 0, 0, 1].into()), dns("localhost")];
        let (ca_a_file, ca_b_file) = (dir.join("ca-a.crt"), dir.join("ca-b.crt"));
        std::fs::write(&ca_a_file, a.pem()).unwrap();
        std::fs::write(&ca_b_file, b.pem()).unwrap();
        Pki {
            ca_a: a.pem(),
            server: leaf(&a, "server", server_sans(), true),
            renewed: leaf(&a, "renewed", server_sans(), true),
            client_a: leaf(
                &a,
                "client-a",
                vec![
                    dns("scraper.test"),
                    SanType::Rfc822Name("ops@example.test".try_into().unwrap()),
                    SanType::URI("spiffe://example.test/scraper".try_into().unwrap()),
                    SanType::IpAddress("2001:db8::7".parse().unwrap()),
                ],
                false,
            ),
            client_a_other: leaf(&a, "client-a-other", vec![dns("other.test")], false),
            client_b: leaf(&b, "client-b", vec![dns("scraper.test")], false),
            ca_a_file,
            ca_b_file,
            dir,
        }
    })
}

/// A fresh directory holding `web.yml` with `text`, and copies of the server's pair
/// (`server.crt`, `server.key`) that a test may replace.
fn config(text: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let dir = pki().dir.join(format!("case-{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("server.crt"), &pki().server.cert).unwrap();
    std::fs::write(dir.join("server.key"), &pki().server.key).unwrap();
    let path = dir.join("web.yml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `tls_server_config` with the server's pair (relative paths: from the file's directory)
/// and `more` lines under it.
fn tls(more: &str) -> String {
    format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{more}")
}

/// A client trusting CA A, speaking `versions`, presenting `cert` if given.
fn client(
    versions: &[&'static rustls::SupportedProtocolVersion],
    cert: Option<&Pair>,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki().ca_a.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match cert {
        None => builder.with_no_client_auth(),
        Some(pair) => {
            let chain = vec![CertificateDer::from_pem_slice(pair.cert.as_bytes()).unwrap()];
            let key = PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    })
}

const BOTH: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];
const TLS12: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS12];
const TLS13: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// What a TLS `GET /metrics` got: the answer, the version and the server's certificate;
/// or the error (a refused handshake, a close).
struct Got {
    answer: Answer,
    version: ProtocolVersion,
    server_cert: Vec<u8>,
}

fn tls_get(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<Got> {
    let tcp = TcpStream::connect_timeout(&addr, PATIENCE)?;
    tcp.set_read_timeout(Some(PATIENCE))?;
    tcp.set_write_timeout(Some(PATIENCE))?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let conn = rustls::ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // The exporter closes without close_notify only if something broke: an answer read
        // whole is kept either way.
        Err(e) if e.kind() == ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e),
    }
    if raw.is_empty() {
        return Err(std::io::Error::new(
            ErrorKind::UnexpectedEof,
            "closed without an answer",
        ));
    }
    Ok(Got {
        answer: common::parse(&raw),
        version: tls.conn.protocol_version().unwrap(),
        server_cert: tls.conn.peer_certificates().unwrap()[0].to_vec(),
    })
}

/// A scrape that must succeed: its answer is 200 `up 1`.
fn scraped(addr: SocketAddr, config: Arc<ClientConfig>, case: &str) -> Got {
    let got = tls_get(addr, config).unwrap_or_else(|e| panic!("{case}: refused: {e}"));
    assert_eq!(got.answer.status, 200, "{case}");
    assert!(got.answer.text().starts_with("up 1\n"), "{case}");
    got
}

fn refused(addr: SocketAddr, config: Arc<ClientConfig>, case: &str) {
    if let Ok(got) = tls_get(addr, config) {
        panic!("{case}: served {}", got.answer.status);
    }
}

on_every_executor! {
    /// A scrape over TLS 1.2 and over TLS 1.3; with both offered, 1.3.
    async fn a_scrape_over_tls_1_2_and_1_3() {
        let exporter = web_exporter(&config(&tls("")));
        assert!(exporter.serves_tls());
        serving(&exporter, |addr| {
            assert_eq!(scraped(addr, client(TLS12, None), "1.2").version, ProtocolVersion::TLSv1_2);
            assert_eq!(scraped(addr, client(TLS13, None), "1.3").version, ProtocolVersion::TLSv1_3);
            assert_eq!(scraped(addr, client(BOTH, None), "both").version, ProtocolVersion::TLSv1_3);
        })
        .await;
    }
}

on_every_executor! {
    /// Plain HTTP to the TLS port gets Go's answer byte for byte; bytes that are neither
    /// HTTP nor a TLS record are closed without one.
    async fn plain_http_gets_go_s_400_and_garbage_a_close() {
        let exporter = web_exporter(&config(&tls("")));
        serving(&exporter, |addr| {
            for request in [
                &b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n"[..],
                b"HEAD / HTTP/1.0\r\n\r\n",
                b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                b"PUT /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                b"OPTIONS * HTTP/1.1\r\n\r\n",
            ] {
                assert_eq!(raw_exchange(addr, request), GO_400);
            }
            // Not among Go's five prefixes, not a TLS record: closed without an answer.
            for other in [
                &b"\x00\x01\x02\x03\x04\x05 hello\r\n\r\n"[..],
                b"DELETE /x HTTP/1.1\r\n\r\n",
                b"get / HTTP/1.1\r\n\r\n",
                // A handshake record of version 0x1000 or above.
                b"\x16\x10\x00\x00\x05hello",
            ] {
                assert_eq!(raw_exchange(addr, other), b"", "{:?}", String::from_utf8_lossy(other));
            }
        })
        .await;
    }
}

/// Sends `bytes` and reads to the connection's end (a reset counts as the end).
fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut tcp = TcpStream::connect_timeout(&addr, PATIENCE).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    tcp.write_all(bytes).unwrap();
    let mut got = Vec::new();
    match tcp.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading the answer: {e}"),
    }
    got
}

/// min_version TLS13 refuses a TLS 1.2 client; max_version TLS12 a TLS 1.3 one.
#[test]
fn min_and_max_version_refuse_the_versions_outside() {
    smol::block_on(async {
        let min13 = web_exporter(&config(&tls("  min_version: TLS13\n")));
        serving(&min13, |addr| {
            refused(addr, client(TLS12, None), "1.2 below min_version TLS13");
            scraped(addr, client(TLS13, None), "1.3");
        })
        .await;
        let max12 = web_exporter(&config(&tls("  max_version: TLS12\n")));
        serving(&max12, |addr| {
            refused(addr, client(TLS13, None), "1.3 above max_version TLS12");
            assert_eq!(
                scraped(addr, client(BOTH, None), "both").version,
                ProtocolVersion::TLSv1_2
            );
        })
        .await;
    });
}

on_every_executor! {
    /// Each client_auth_type against no certificate, one from CA B and one from CA A (the
    /// client_ca_file), over TLS 1.2 and 1.3: served or refused as Go's crypto/tls does.
    async fn each_client_auth_type_as_go_s() {
        // (type, no certificate, CA B's, CA A's): true when served.
        let cases = [
            ("NoClientCert", true, true, true),
            ("RequestClientCert", true, true, true),
            ("RequireAnyClientCert", false, true, true),
            ("VerifyClientCertIfGiven", true, false, true),
            ("RequireAndVerifyClientCert", false, false, true),
        ];
        for (auth, none, other_ca, right) in cases {
            let ca = if auth == "NoClientCert" {
                String::new()
            } else {
                format!("  client_ca_file: {}\n", pki().ca_a_file.display())
            };
            let text = tls(&format!("  client_auth_type: {auth}\n{ca}"));
            let exporter = web_exporter(&config(&text));
            serving(&exporter, move |addr| {
                for versions in [TLS12, TLS13] {
                    for (cert, served, which) in [
                        (None, none, "no certificate"),
                        (Some(&pki().client_b), other_ca, "CA B's"),
                        (Some(&pki().client_a), right, "CA A's"),
                    ] {
                        let case = format!("{auth}, {which}, {:?}", versions[0].version);
                        match tls_get(addr, client(versions, cert)) {
                            Ok(got) => {
                                assert!(served, "{case}: served");
                                assert_eq!(got.answer.status, 200, "{case}");
                            }
                            Err(e) => assert!(!served, "{case}: refused: {e}"),
                        }
                    }
                }
            })
            .await;
        }
    }
}

/// A client that presents `cert`'s certificate but signs with `key`'s key: it claims a
/// certificate whose key it does not hold.
#[derive(Debug)]
struct Impostor(Arc<rustls::sign::CertifiedKey>);

impl rustls::client::ResolvesClientCert for Impostor {
    fn resolve(
        &self,
        _: &[&[u8]],
        _: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

fn impostor(versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = vec![CertificateDer::from_pem_slice(pki().client_a.cert.as_bytes()).unwrap()];
    let other_key = PrivateKeyDer::from_pem_slice(pki().client_b.key.as_bytes()).unwrap();
    let signer = provider.key_provider.load_private_key(other_key).unwrap();
    let claimed = rustls::sign::CertifiedKey::new(chain, signer);
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki().ca_a.as_bytes()).unwrap())
        .unwrap();
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_client_cert_resolver(Arc::new(Impostor(Arc::new(claimed))));
    Arc::new(config)
}

/// `RequestClientCert` and `RequireAnyClientCert` take any certificate, as Go does, but
/// only from a client that proves it holds the certificate's key (its CertificateVerify
/// is checked): an impostor signing with another key is refused over TLS 1.2 and 1.3.
#[test]
fn any_certificate_still_needs_its_key() {
    futures_lite::future::block_on(async {
        for auth in [
            "RequestClientCert",
            "RequireAnyClientCert",
            "RequireAndVerifyClientCert",
        ] {
            let ca = format!("  client_ca_file: {}\n", pki().ca_a_file.display());
            let exporter =
                web_exporter(&config(&tls(&format!("  client_auth_type: {auth}\n{ca}"))));
            serving(&exporter, move |addr| {
                for versions in [TLS12, TLS13] {
                    let case = format!("{auth}, {:?}", versions[0].version);
                    scraped(addr, client(versions, Some(&pki().client_a)), &case);
                    refused(addr, impostor(versions), &format!("{case}, impostor"));
                }
            })
            .await;
        }
    });
}

/// client_allowed_sans: a certificate carrying one of them (DNS, email, URI or IP, as Go
/// writes each) is served, one without is refused at the handshake.
#[test]
fn client_allowed_sans_refuse_a_certificate_without_one() {
    smol::block_on(async {
        for allowed in [
            "scraper.test",
            "ops@example.test",
            "spiffe://example.test/scraper",
            "2001:db8::7",
        ] {
            let text = tls(&format!(
                "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n  \
                 client_allowed_sans: [\"nothing.test\", \"{allowed}\"]\n",
                pki().ca_a_file.display()
            ));
            let exporter = web_exporter(&config(&text));
            serving(&exporter, move |addr| {
                for versions in [TLS12, TLS13] {
                    scraped(addr, client(versions, Some(&pki().client_a)), allowed);
                    refused(
                        addr,
                        client(versions, Some(&pki().client_a_other)),
                        "other SAN",
                    );
                }
            })
            .await;
        }
        // RequireAnyClientCert: the SAN decides, whatever the CA.
        let text = tls(
            "  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [scraper.test]\n",
        );
        let exporter = web_exporter(&config(&text));
        serving(&exporter, |addr| {
            scraped(
                addr,
                client(BOTH, Some(&pki().client_b)),
                "B's, with the SAN",
            );
            refused(
                addr,
                client(BOTH, Some(&pki().client_a_other)),
                "A's, without",
            );
            refused(addr, client(BOTH, None), "no certificate");
        })
        .await;
    });
}

on_every_executor! {
    /// A handshake that never finishes (a ClientHello cut short) is closed at the header
    /// timeout; meanwhile it counts against the cap and is shed for a real scrape.
    async fn an_unfinished_handshake_is_cut_at_the_header_timeout_and_shed() {
        let timeout = Duration::from_millis(1500);
        let exporter = Exporter::builder()
            .source(up())
            .workers(1)
            .header_read_timeout(timeout)
            .max_connections(1)
            .web_config_file(config(&tls("")))
            .build()
            .unwrap();
        let handle = exporter.clone();
        serving(&exporter, move |addr| {
            // A TLS record header and part of a ClientHello, then nothing.
            let partial = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
            let mut stalled = TcpStream::connect_timeout(&addr, PATIENCE).unwrap();
            stalled.set_read_timeout(Some(PATIENCE)).unwrap();
            stalled.write_all(partial).unwrap();
            let began = Instant::now();
            let mut sink = Vec::new();
            let _ = stalled.read_to_end(&mut sink); // closed (or reset) by the exporter
            let took = began.elapsed();
            assert!(took >= timeout - Duration::from_millis(50), "closed after {took:?}");
            assert!(took < timeout * 5 + Duration::from_secs(2), "closed after {took:?}");

            // The cap is one: a stalled handshake is shed for the scrape.
            let mut stalled = TcpStream::connect_timeout(&addr, PATIENCE).unwrap();
            stalled.write_all(partial).unwrap();
            let began = Instant::now();
            // Counted, and in its handshake: the exporter has read what it sent.
            while handle.connections() < 1 || !read_by_the_server(addr, &stalled) {
                assert!(began.elapsed() < PATIENCE, "the stalled connection never counted");
                std::thread::sleep(Duration::from_millis(2));
            }
            let shed = handle.shed_connections();
            let began = Instant::now();
            scraped(addr, client(BOTH, None), "past a stalled handshake");
            assert_eq!(handle.shed_connections(), shed + 1);
            // Closed when shed, not at its timeout.
            stalled.set_read_timeout(Some(PATIENCE)).unwrap();
            let _ = stalled.read_to_end(&mut sink);
            let took = began.elapsed();
            assert!(took < timeout / 2, "the shed handshake closed after {took:?}");
        })
        .await;
    }
}

/// Whether the server's end of `client`'s connection to `server` has nothing left unread
/// (Linux's `/proc/net/tcp`: its receive queue is empty); `true` where that cannot be read.
fn read_by_the_server(server: SocketAddr, client: &TcpStream) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return true;
    };
    let port = |field: &str| u16::from_str_radix(field.rsplit(':').next()?, 16).ok();
    let client_port = client.local_addr().unwrap().port();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(queues)) =
            (fields.get(1), fields.get(2), fields.get(4))
        else {
            return false;
        };
        port(local) == Some(server.port())
            && port(remote) == Some(client_port)
            && queues.rsplit(':').next() == Some("00000000")
    })
}

/// A logger keeping the warnings, installed once for this binary.
struct Kept(Mutex<Vec<String>>);

static KEPT: Kept = Kept(Mutex::new(Vec::new()));

impl log::Log for Kept {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.level() == log::Level::Warn {
            self.0.lock().unwrap().push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// Writes `text` to `path` in one step (a rename), as certificate tools do.
fn replace(path: &Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// A renewed certificate and key are used for the next handshake, without a restart (a
/// handshake between the renewal's two renames gets the old pair); a bad renewal keeps the
/// last good pair and says why in the log, once.
#[test]
fn a_renewed_certificate_is_taken_and_a_bad_one_kept_out() {
    let _ = log::set_logger(&KEPT);
    log::set_max_level(log::LevelFilter::Warn);
    smol::block_on(async {
        let path = config(&tls(""));
        let dir = path.parent().unwrap().to_path_buf();
        let exporter = web_exporter(&path);
        serving(&exporter, move |addr| {
            let der = |pem: &str| {
                CertificateDer::from_pem_slice(pem.as_bytes())
                    .unwrap()
                    .to_vec()
            };
            let first = scraped(addr, client(BOTH, None), "first");
            assert_eq!(first.server_cert, der(&pki().server.cert));
            // A renewal is two renames: a handshake between them (the new key, the old
            // certificate) is served with the old pair, whole.
            replace(&dir.join("server.key"), &pki().renewed.key);
            let between = scraped(addr, client(BOTH, None), "between the renames");
            assert_eq!(
                between.server_cert,
                der(&pki().server.cert),
                "the old pair, between the renames"
            );
            replace(&dir.join("server.crt"), &pki().renewed.cert);
            let renewed = scraped(addr, client(BOTH, None), "renewed");
            assert_eq!(renewed.server_cert, der(&pki().renewed.cert));

            let key_file = dir.join("server.key");
            let key_file = key_file.display().to_string();
            let before = warnings(&key_file).len();
            replace(&dir.join("server.key"), "not a key\n");
            for _ in 0..3 {
                let kept = scraped(addr, client(BOTH, None), "bad key");
                assert_eq!(
                    kept.server_cert,
                    der(&pki().renewed.cert),
                    "the last good pair"
                );
            }
            let warned = warnings(&key_file).split_off(before);
            assert_eq!(warned.len(), 1, "once per change: {warned:?}");
            assert!(
                warned[0].contains("tls_server_config.key_file"),
                "{warned:?}"
            );
            assert!(warned[0].contains("keeping the last good"), "{warned:?}");

            // A key that is not the certificate's: kept out too.
            replace(&dir.join("server.key"), &pki().server.key);
            let kept = scraped(addr, client(BOTH, None), "mismatched key");
            assert_eq!(kept.server_cert, der(&pki().renewed.cert));
        })
        .await;
    });
}

/// A new web config file that would turn TLS off (or on) is not taken: the address was
/// announced as https:// (or http://); the last good file stays, and the log says why.
#[test]
fn a_new_file_cannot_turn_tls_off_or_on() {
    let _ = log::set_logger(&KEPT);
    log::set_max_level(log::LevelFilter::Warn);
    let plain = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n";
    smol::block_on(async {
        let path = config(&tls(""));
        let on = web_exporter(&path);
        let shown = path.display().to_string();
        serving(&on, move |addr| {
            replace(&path, plain);
            let kept = scraped(addr, client(BOTH, None), "after a file without TLS");
            assert_eq!(
                kept.answer.header("X-Frame-Options"),
                None,
                "the old file kept"
            );
            assert!(
                warnings(&shown).iter().any(|w| w.contains("turns TLS off")),
                "{:?}",
                warnings(&shown)
            );
        })
        .await;
        let path = config(plain);
        let off = web_exporter(&path);
        assert!(!off.serves_tls());
        let shown = path.display().to_string();
        serving(&off, move |addr| {
            replace(&path, &tls(""));
            let kept = common::get(addr, "/metrics", &[]);
            assert_eq!(kept.status, 200);
            assert_eq!(kept.header("X-Frame-Options"), Some("deny"));
            assert!(
                warnings(&shown).iter().any(|w| w.contains("turns TLS on")),
                "{:?}",
                warnings(&shown)
            );
        })
        .await;
        assert!(!off.serves_tls());
    });
}

/// The warnings naming `what`.
fn warnings(what: &str) -> Vec<String> {
    let kept = KEPT.0.lock().unwrap();
    kept.iter().filter(|w| w.contains(what)).cloned().collect()
}

/// Every key rustls cannot honour, and every incoherent setting, is an error at start
/// naming the key.
#[test]
fn every_refused_key_is_an_error_at_start_naming_it() {
    let ca = format!("  client_ca_file: {}\n", pki().ca_a_file.display());
    let cases: Vec<(String, &str)> = vec![
        (
            tls("  min_version: TLS11\n"),
            "tls_server_config.min_version",
        ),
        (
            tls("  min_version: TLS10\n"),
            "tls_server_config.min_version",
        ),
        (
            tls("  max_version: TLS11\n"),
            "tls_server_config.max_version",
        ),
        (
            tls("  min_version: TLS13\n  max_version: TLS12\n"),
            "tls_server_config.min_version",
        ),
        (
            tls("  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA]\n"),
            "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
        ),
        (
            tls("  cipher_suites: [TLS_RSA_WITH_AES_128_GCM_SHA256]\n"),
            "tls_server_config.cipher_suites",
        ),
        (
            tls("  cipher_suites: [NOT_A_SUITE]\n"),
            "tls_server_config.cipher_suites",
        ),
        (
            tls("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n  max_version: TLS12\n"),
            "tls_server_config.cipher_suites",
        ),
        (
            tls("  curve_preferences: [CurveP521]\n"),
            "tls_server_config.curve_preferences",
        ),
        (
            tls("  curve_preferences: [Curve25519]\n"),
            "tls_server_config.curve_preferences",
        ),
        (
            tls("  client_auth_type: RequireAndVerifyClientCert\n"),
            "tls_server_config.client_auth_type",
        ),
        (
            tls("  client_auth_type: VerifyClientCertIfGiven\n"),
            "tls_server_config.client_auth_type",
        ),
        (
            tls("  client_auth_type: Sometimes\n"),
            "tls_server_config.client_auth_type",
        ),
        (tls(&ca), "tls_server_config.client_ca_file"),
        (
            tls(&format!(
                "  client_auth_type: VerifyClientCertIfGiven\n{ca}  client_allowed_sans: [a]\n"
            )),
            "tls_server_config.client_allowed_sans",
        ),
        (
            tls("  client_allowed_sans: [a]\n"),
            "tls_server_config.client_allowed_sans",
        ),
        (
            tls("  session_tickets: true\n"),
            "tls_server_config.session_tickets",
        ),
        (
            format!("tls_server_config:\n{ca}"),
            "tls_server_config.client_ca_file",
        ),
        (
            "tls_server_config:\n  min_version: TLS13\n".into(),
            "tls_server_config.min_version",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n".into(),
            "tls_server_config.cert_file",
        ),
        (
            "tls_server_config:\n  key_file: server.key\n".into(),
            "tls_server_config.key_file",
        ),
        (
            "tls_server_config:\n  cert_file: missing.crt\n  key_file: server.key\n".into(),
            "tls_server_config.cert_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n".into(),
            "tls_server_config.cert_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n".into(),
            "tls_server_config.key_file",
        ),
        (
            tls(&format!(
                "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n",
                pki().server.key_file.display()
            )),
            "tls_server_config.client_ca_file",
        ),
        (
            format!("{}http_server_config:\n  http2: true\n", tls("")),
            "http_server_config.http2",
        ),
    ];
    for (text, key) in cases {
        let built = Exporter::builder()
            .source(up())
            .web_config_file(config(&text))
            .build();
        let err = built.err().unwrap_or_else(|| panic!("accepted:\n{text}"));
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{text}: {err}");
        assert!(
            err.to_string().contains(key),
            "{text}: `{err}` does not name {key}"
        );
    }
    // A key that is not the certificate's.
    let text = format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: {}\n",
        pki().renewed.key_file.display()
    );
    let err = Exporter::builder()
        .source(up())
        .web_config_file(config(&text))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("key_file"), "{err}");
    // Inline `cert` and `key`, the tuning keys rustls has, and ca_b unused: all taken.
    let text = format!(
        "tls_server_config:\n  cert: |\n{}  key: |\n{}  min_version: TLS12\n  max_version: TLS13\n  \
         cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n  \
         curve_preferences: [X25519, CurveP256, CurveP384]\n  prefer_server_cipher_suites: false\n",
        indent(&pki().server.cert),
        indent(&pki().server.key)
    );
    let built = Exporter::builder()
        .source(up())
        .web_config_file(config(&text))
        .build();
    assert!(built.expect("inline pair and tuning taken").serves_tls());
    let _ = &pki().ca_b_file;
}

fn indent(pem: &str) -> String {
    pem.lines().map(|l| format!("    {l}\n")).collect()
}
