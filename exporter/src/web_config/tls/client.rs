//! Client certificate verifiers for each `client_auth_type`, and `client_allowed_sans` on
//! top of them: a certificate without an allowed SAN fails the handshake, as
//! exporter-toolkit's `VerifyPeerCertificate` does.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, RootCertStore,
    SignatureScheme,
};

use super::parse::ClientAuth;
use super::sans;

/// The verifier `auth` asks for; `None` for `NoClientCert`. `roots` is `client_ca_file`'s
/// (required by the verifying kinds: parse.rs checks it).
pub(crate) fn verifier(
    auth: ClientAuth,
    roots: Option<RootCertStore>,
    allowed_sans: Option<Vec<String>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, String> {
    let verify = |roots: Option<RootCertStore>, optional: bool| {
        let roots = Arc::new(roots.unwrap_or_else(RootCertStore::empty));
        let builder = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
        let builder = if optional {
            builder.allow_unauthenticated()
        } else {
            builder
        };
        builder
            .build()
            .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))
    };
    let inner: Arc<dyn ClientCertVerifier> = match auth {
        ClientAuth::None => return Ok(None),
        ClientAuth::Request | ClientAuth::RequireAny => Arc::new(AnyCert {
            hints: roots.map(|r| r.subjects()).unwrap_or_default(),
            mandatory: auth == ClientAuth::RequireAny,
            algorithms: provider.signature_verification_algorithms,
        }),
        ClientAuth::VerifyIfGiven => verify(roots, true)?,
        ClientAuth::RequireAndVerify => verify(roots, false)?,
    };
    Ok(Some(match allowed_sans {
        None => inner,
        Some(allowed) => Arc::new(AllowedSans { inner, allowed }),
    }))
}

/// `RequestClientCert`, `RequireAnyClientCert`: any certificate is taken (the client still
/// proves it holds its key: the handshake's signature is checked), none verified.
#[derive(Debug)]
struct AnyCert {
    hints: Vec<DistinguishedName>,
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans` over another verifier: the leaf must carry one of `allowed`.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Vec<String>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let found =
            sans::of(end_entity).ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if found.iter().any(|san| self.allowed.contains(san)) {
            Ok(verified)
        } else {
            log::debug!(
                "client certificate refused: its SANs {found:?} hold none of client_allowed_sans"
            );
            Err(Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
