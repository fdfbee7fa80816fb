//! `tls_server_config`, parsed and checked: every key of exporter-toolkit's, each error
//! naming its key. What rustls cannot honour is refused here, never ignored.

use std::path::{Path, PathBuf};

use rustls::crypto::SupportedKxGroup;
use rustls::crypto::ring::{cipher_suite as suite, kx_group};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};
use serde_norway::Value;

/// Where a PEM text comes from: a file (`cert_file`, …) or the file itself (`cert`, …).
#[derive(Clone, PartialEq)]
pub(crate) enum Pem {
    File(PathBuf),
    Inline(String),
}

impl std::fmt::Debug for Pem {
    /// A file's path; never an inline text (it may be a private key: exporter-toolkit's
    /// `<secret>`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::File(path) => f.debug_tuple("File").field(path).finish(),
            Pem::Inline(_) => f.write_str("Inline(<secret>)"),
        }
    }
}

/// `client_auth_type`, as Go's `tls.ClientAuthType`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ClientAuth {
    /// `NoClientCert` (or empty): no certificate asked for.
    None,
    /// `RequestClientCert`: asked for, not required, not verified against a CA.
    Request,
    /// `RequireAnyClientCert` (or `RequireClientCert`): required, not verified against a CA.
    RequireAny,
    /// `VerifyClientCertIfGiven`: verified against `client_ca_file` when sent.
    VerifyIfGiven,
    /// `RequireAndVerifyClientCert`: required and verified against `client_ca_file`.
    RequireAndVerify,
}

/// What `tls_server_config` says, checked. The certificate, key and CA texts are read when
/// the rustls config is built (and again when their files change).
#[derive(Clone, Debug)]
pub(crate) struct TlsSettings {
    pub(crate) cert: Pem,
    pub(crate) key: Pem,
    pub(crate) client_ca: Option<Pem>,
    pub(crate) client_auth: ClientAuth,
    /// `client_allowed_sans`: the client certificate must carry one of them.
    pub(crate) allowed_sans: Option<Vec<String>>,
    pub(crate) versions: Vec<&'static SupportedProtocolVersion>,
    pub(crate) suites: Vec<SupportedCipherSuite>,
    pub(crate) groups: Vec<&'static dyn SupportedKxGroup>,
    /// `prefer_server_cipher_suites` (default true): rustls' `ignore_client_order`.
    pub(crate) prefer_server: bool,
}

const AT: &str = "tls_server_config";

/// Go's TLS 1.2 suite names that rustls (with ring) has.
const TLS12_SUITES: [(&str, SupportedCipherSuite); 6] = [
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// Go's TLS 1.3 suite names: Go does not let them be configured (every TLS 1.3 suite is
/// always on), so exporter-toolkit accepts them with no effect; so does the exporter.
const TLS13_NAMES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Go's other suite names (CBC, RSA key exchange, 3DES, RC4): rustls has none of them.
const GO_ONLY_SUITES: [&str; 16] = [
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// Parses `tls_server_config`; relative paths are taken from `dir`, the web config file's
/// own directory, as exporter-toolkit does. `None` when the mapping sets nothing (Go's
/// `IsEnabled` is false then: plain HTTP).
pub(crate) fn parse(value: &Value, dir: &Path) -> Result<Option<TlsSettings>, String> {
    let map = match value {
        Value::Null => return Ok(None),
        Value::Mapping(m) => m,
        _ => return Err(format!("{AT}: expected a mapping")),
    };
    let (mut cert, mut key, mut ca) = (None, None, None);
    let (mut cert_file, mut key_file, mut ca_file) = (None, None, None);
    let mut auth = None;
    let mut sans = None;
    let (mut min, mut max) = (None, None);
    let (mut suites, mut groups) = (None, None);
    let mut prefer_server = true;
    let mut tuned = None; // the first key that means nothing without a certificate
    for (k, v) in map {
        let k = k
            .as_str()
            .ok_or_else(|| format!("{AT}.{k:?}: expected a string key"))?;
        let at = format!("{AT}.{k}");
        match k {
            "cert" => cert = text(v, &at)?,
            "key" => key = text(v, &at)?,
            "client_ca" => ca = text(v, &at)?,
            "cert_file" => cert_file = text(v, &at)?.map(|p| dir.join(p)),
            "key_file" => key_file = text(v, &at)?.map(|p| dir.join(p)),
            "client_ca_file" => ca_file = text(v, &at)?.map(|p| dir.join(p)),
            "client_auth_type" => auth = text(v, &at)?,
            // Null is unset (Go decodes it to a nil list: no check), `[]` refuses everyone.
            "client_allowed_sans" if v.is_null() => sans = None,
            "client_allowed_sans" => sans = Some(strings(v, &at)?),
            "min_version" => min = Some(version(v, &at)?),
            "max_version" => max = Some(version(v, &at)?),
            // An empty list is Go's default, as exporter-toolkit leaves it.
            "cipher_suites" => suites = Some(cipher_suites(v, &at)?).filter(|_| !empty(v)),
            "curve_preferences" => groups = Some(curves(v, &at)?).filter(|g| !g.is_empty()),
            "prefer_server_cipher_suites" => {
                prefer_server = v.as_bool().ok_or(format!("{at}: expected true or false"))?;
            }
            other => return Err(format!("{AT}.{other}: unknown key")),
        }
        if !empty(v) && !["cert", "key", "cert_file", "key_file"].contains(&k) {
            tuned.get_or_insert(at);
        }
    }
    let enabled = cert.is_some()
        || cert_file.is_some()
        || key.is_some()
        || key_file.is_some()
        || ca.is_some()
        || ca_file.is_some()
        || auth.is_some();
    if !enabled {
        // Go would serve plain HTTP and ignore these: refused instead, never ignored.
        return match tuned {
            None => Ok(None),
            Some(at) => Err(format!(
                "{at}: set without a certificate (cert_file and key_file): it would be ignored"
            )),
        };
    }
    let cert_key = if cert_file.is_some() {
        "cert_file"
    } else {
        "cert"
    };
    let cert = match (cert_file, cert) {
        (Some(path), _) => Pem::File(path),
        (None, Some(text)) => Pem::Inline(text),
        (None, None) => {
            let at = tuned.unwrap_or_else(|| format!("{AT}.key_file"));
            return Err(format!(
                "{at}: set without cert_file (or cert): TLS needs both"
            ));
        }
    };
    let key = match (key_file, key) {
        (Some(path), _) => Pem::File(path),
        (None, Some(text)) => Pem::Inline(text),
        (None, None) => return Err(format!("{AT}.{cert_key}: set without key_file (or key)")),
    };
    let client_ca = match (ca_file, ca) {
        (Some(path), _) => Some(Pem::File(path)),
        (None, Some(text)) => Some(Pem::Inline(text)),
        (None, None) => None,
    };
    let client_auth = client_auth(auth.as_deref(), client_ca.is_some())?;
    if let Some(sans) = &sans {
        if !matches!(
            client_auth,
            ClientAuth::RequireAny | ClientAuth::RequireAndVerify
        ) {
            return Err(format!(
                "{AT}.client_allowed_sans: needs client_auth_type RequireAnyClientCert or \
                 RequireAndVerifyClientCert (as exporter-toolkit): with {:?} a client may \
                 send no certificate to match against {sans:?}",
                auth.as_deref().unwrap_or("NoClientCert")
            ));
        }
    }
    let (min, max) = (min.unwrap_or(12), max.unwrap_or(13));
    if min > max {
        return Err(format!(
            "{AT}.min_version: TLS1{} is above max_version TLS1{}: no version is left",
            min - 10,
            max - 10
        ));
    }
    let suites = suites.unwrap_or_else(|| TLS12_SUITES.iter().map(|(_, s)| *s).collect());
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    if min <= 12 && !suites.is_empty() {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    if versions.is_empty() {
        return Err(format!(
            "{AT}.cipher_suites: none is a TLS 1.2 suite and max_version is TLS12: \
             no handshake could succeed"
        ));
    }
    let groups = groups.unwrap_or_else(|| rustls::crypto::ring::ALL_KX_GROUPS.to_vec());
    Ok(Some(TlsSettings {
        cert,
        key,
        client_ca,
        client_auth,
        allowed_sans: sans,
        versions,
        suites,
        groups,
        prefer_server,
    }))
}

/// Null, an empty string or an empty list: Go's zero value, the key unset.
fn empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Sequence(s) => s.is_empty(),
        _ => false,
    }
}

/// A string value; `None` when empty or null (Go's zero value: unset).
fn text(value: &Value, at: &str) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(format!("{at}: expected a string")),
    }
}

/// A list of strings (null: empty).
fn strings(value: &Value, at: &str) -> Result<Vec<String>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Sequence(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{at}: expected a list of strings"))
            })
            .collect(),
        _ => Err(format!("{at}: expected a list of strings")),
    }
}

fn client_auth(name: Option<&str>, has_ca: bool) -> Result<ClientAuth, String> {
    let at = format!("{AT}.client_auth_type");
    let auth = match name.unwrap_or("NoClientCert") {
        "NoClientCert" => ClientAuth::None,
        "RequestClientCert" => ClientAuth::Request,
        "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAny,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
        other => {
            return Err(format!(
                "{at}: {other:?} is not one of NoClientCert, RequestClientCert, \
                 RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
            ));
        }
    };
    if auth == ClientAuth::None && has_ca {
        return Err(format!(
            "{AT}.client_ca_file: set with client_auth_type NoClientCert: no client \
             certificate is asked for (set client_auth_type, or drop the CA)"
        ));
    }
    if matches!(
        auth,
        ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify
    ) && !has_ca
    {
        return Err(format!(
            "{at}: {} needs client_ca_file (or client_ca): Go would verify client \
             certificates against the system's roots, the exporter does not guess",
            name.unwrap_or_default()
        ));
    }
    Ok(auth)
}

/// `TLS12` or `TLS13` as 12 or 13; `TLS10`, `TLS11` refused (rustls has neither).
fn version(value: &Value, at: &str) -> Result<u8, String> {
    match value.as_str() {
        Some("TLS12") => Ok(12),
        Some("TLS13") => Ok(13),
        Some(old @ ("TLS10" | "TLS11")) => Err(format!(
            "{at}: {old} is not supported: rustls speaks TLS 1.2 and 1.3 only (use TLS12)"
        )),
        Some(other) => Err(format!(
            "{at}: unknown TLS version {other:?} (TLS12 or TLS13)"
        )),
        None => Err(format!("{at}: expected TLS12 or TLS13")),
    }
}

/// Go's suite names: the TLS 1.2 suites to offer (in the file's order). A list of TLS 1.3
/// names only leaves none, and so turns TLS 1.2 off (in Go no TLS 1.2 suite is agreed).
fn cipher_suites(value: &Value, at: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    let mut out = Vec::new();
    for name in strings(value, at)? {
        if let Some((_, s)) = TLS12_SUITES.iter().find(|(n, _)| *n == name) {
            out.push(*s);
        } else if TLS13_NAMES.contains(&name.as_str()) {
            // Always on for TLS 1.3, in Go and in rustls.
        } else if GO_ONLY_SUITES.contains(&name.as_str()) {
            return Err(format!(
                "{at}: {name} is not supported: rustls has no CBC, RSA key exchange, 3DES \
                 or RC4 suite (ECDHE with AES-GCM or ChaCha20-Poly1305 only)"
            ));
        } else {
            return Err(format!("{at}: unknown cipher suite {name:?}"));
        }
    }
    Ok(out)
}

/// Go's curve names as ring's key exchange groups, in the file's order.
fn curves(value: &Value, at: &str) -> Result<Vec<&'static dyn SupportedKxGroup>, String> {
    let mut out: Vec<&'static dyn SupportedKxGroup> = Vec::new();
    for name in strings(value, at)? {
        out.push(match name.as_str() {
            "X25519" => kx_group::X25519,
            "CurveP256" => kx_group::SECP256R1,
            "CurveP384" => kx_group::SECP384R1,
            "CurveP521" => {
                return Err(format!(
                    "{at}: CurveP521 is not supported: rustls with ring has X25519, \
                     CurveP256 and CurveP384"
                ));
            }
            other => return Err(format!("{at}: unknown curve {other:?}")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<Option<TlsSettings>, String> {
        let value: Value = serde_norway::from_str(yaml).unwrap();
        parse(&value, Path::new("/etc/exporter"))
    }

    #[test]
    fn debug_shows_an_inline_key_as_secret() {
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----";
        let yaml = format!(
            "cert_file: server.crt\nkey: |\n  {}\n",
            key.replace('\n', "\n  ")
        );
        let shown = format!("{:?}", settings(&yaml).unwrap().unwrap());
        assert!(
            shown.contains("<secret>") && !shown.contains("PRIVATE KEY"),
            "{shown}"
        );
        assert!(shown.contains("/etc/exporter/server.crt"), "{shown}");
    }

    #[test]
    fn null_allowed_sans_is_unset_and_an_empty_list_is_not() {
        let base = "cert_file: a.crt\nkey_file: a.key\nclient_auth_type: RequireAnyClientCert\n";
        let unset = settings(&format!("{base}client_allowed_sans:\n"))
            .unwrap()
            .unwrap();
        assert_eq!(unset.allowed_sans, None, "null: no check, as Go's nil list");
        let empty = settings(&format!("{base}client_allowed_sans: []\n"))
            .unwrap()
            .unwrap();
        assert_eq!(
            empty.allowed_sans,
            Some(vec![]),
            "[]: no certificate matches"
        );
    }
}
