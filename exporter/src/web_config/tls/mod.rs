//! `tls_server_config` (feature `tls`): the rustls config a handshake uses, built from the
//! file's settings and rebuilt when the certificate, key or CA files change. A renewed
//! pair that does not load keeps the last good config and says why in the log.

mod client;
pub(crate) mod parse;
mod sans;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{RootCertStore, ServerConfig};

use super::stamp::Stamp;
use parse::{Pem, TlsSettings};

/// The largest certificate, key or CA file read (on the loop, when it changes).
const MAX_PEM_BYTES: u64 = 1 << 20;

/// The file's TLS settings and the rustls config built from them.
#[derive(Debug)]
pub(crate) struct Served {
    settings: TlsSettings,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The certificate, key and CA files as last looked at, good or bad.
    seen: Vec<Option<Stamp>>,
    config: Arc<ServerConfig>,
}

impl Served {
    /// Reads the certificate, key and CA and builds the config; an error names the key
    /// (`tls_server_config.cert_file`, …) and the file.
    pub(crate) fn new(settings: TlsSettings) -> Result<Served, String> {
        let seen = stamps(&settings);
        let config = Arc::new(build(&settings)?);
        let state = Mutex::new(State { seen, config });
        Ok(Served { settings, state })
    }

    /// The config for the next handshake: the files `stat`ed, rebuilt when one changed. A
    /// change that does not load keeps the last good config, logged once per change.
    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        let now = stamps(&self.settings);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now == state.seen {
            return state.config.clone();
        }
        state.seen = now;
        let problem = match build(&self.settings) {
            Ok(config) => {
                state.config = Arc::new(config);
                None
            }
            Err(problem) => Some(problem),
        };
        let config = state.config.clone();
        drop(state);
        // The logger is the application's: called with no lock held.
        match problem {
            None => log::info!("web config: tls_server_config: certificate and key reloaded"),
            Some(problem) => {
                log::warn!("web config: {problem}; keeping the last good certificate and key")
            }
        }
        config
    }
}

/// The stamps of the files the settings name, in a fixed order (`None`: inline or absent).
fn stamps(settings: &TlsSettings) -> Vec<Option<Stamp>> {
    [
        Some(&settings.cert),
        Some(&settings.key),
        settings.client_ca.as_ref(),
    ]
    .into_iter()
    .map(|pem| match pem {
        Some(Pem::File(path)) => Stamp::at(path),
        _ => None,
    })
    .collect()
}

/// A PEM text: the file's bytes, or the inline text.
fn read(pem: &Pem, at: &str) -> Result<(Vec<u8>, String), String> {
    match pem {
        Pem::Inline(text) => Ok((text.clone().into_bytes(), format!("{at} (inline)"))),
        Pem::File(path) => {
            let at = format!("{at}_file {}", path.display());
            read_file(path)
                .map(|bytes| (bytes, at.clone()))
                .map_err(|e| format!("{at}: {e}"))
        }
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read it: {e}"))?;
    if meta.len() > MAX_PEM_BYTES {
        return Err(format!(
            "{} bytes is more than the {MAX_PEM_BYTES} a PEM file may have",
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))
}

/// The rustls config the settings ask for.
fn build(s: &TlsSettings) -> Result<ServerConfig, String> {
    const AT: &str = "tls_server_config";
    let (pem, at) = read(&s.cert, &format!("{AT}.cert"))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{at}: not PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{at}: no CERTIFICATE in it"));
    }
    let (pem, key_at) = read(&s.key, &format!("{AT}.key"))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("{key_at}: no PRIVATE KEY in it (PKCS#8, PKCS#1 or SEC1)")
        }
        e => format!("{key_at}: not PEM: {e}"),
    })?;
    let roots = match &s.client_ca {
        None => None,
        Some(ca) => {
            let (pem, ca_at) = read(ca, &format!("{AT}.client_ca"))?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("{ca_at}: not PEM: {e}"))?;
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("{ca_at}: no CA CERTIFICATE in it that parses"));
            }
            Some(roots)
        }
    };
    let mut provider = rustls::crypto::ring::default_provider();
    // TLS 1.3's suites always (Go's too), TLS 1.2's as `cipher_suites` says.
    provider
        .cipher_suites
        .retain(|suite| suite.tls13().is_some());
    provider.cipher_suites.extend(s.suites.iter().copied());
    provider.kx_groups = s.groups.clone();
    let provider: Arc<CryptoProvider> = Arc::new(provider);
    let verifier = client::verifier(s.client_auth, roots, s.allowed_sans.clone(), &provider)?;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&s.versions)
        .map_err(|e| format!("{AT}: {e}"))?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("{at} and {key_at}: {e}"))?;
    config.ignore_client_order = s.prefer_server;
    // HTTP/1.1 only (`http_server_config.http2: true` is refused).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
