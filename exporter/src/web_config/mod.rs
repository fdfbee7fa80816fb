//! exporter-toolkit's web config file (feature `web-config`): basic auth, extra headers,
//! a rate limit, and TLS with the feature `tls`; checked again whenever the file changes.

mod limit;
mod parse;
mod stamp;
#[cfg(feature = "tls")]
mod tls;
mod verify;
mod watch;

use std::io;
use std::path::PathBuf;

use hyper::HeaderMap;
use hyper::header::AUTHORIZATION;
use loopguard::pool::Pool;

pub use parse::BCRYPT_MAX_COST;
pub(crate) use verify::Refused;

/// The web config of an exporter: its file, watched, the bcrypt verifier, and the thread
/// TLS handshakes run on when the file has `tls_server_config`.
#[derive(Debug)]
pub(crate) struct Web {
    file: watch::Watched,
    verifier: verify::Verifier,
    #[cfg(feature = "tls")]
    handshaker: Option<crate::tls_thread::Handshaker>,
}

impl Web {
    /// Reads and checks the file; an error names the key at fault. The verifier's worker
    /// and the handshake thread run at `nice`, the render workers' value, below the loop.
    pub(crate) fn load(path: PathBuf, nice: u8) -> io::Result<Web> {
        let file = watch::Watched::load(path)?;
        #[cfg(feature = "tls")]
        let handshaker = match file.current().tls {
            Some(_) => Some(crate::tls_thread::Handshaker::start(nice)?),
            None => None,
        };
        Ok(Web {
            file,
            verifier: verify::Verifier::new(nice)?,
            #[cfg(feature = "tls")]
            handshaker,
        })
    }

    /// Whether the file has `tls_server_config`: fixed at start (a new file that would
    /// turn TLS on or off is not taken).
    #[cfg(feature = "tls")]
    pub(crate) fn serves_tls(&self) -> bool {
        self.file.current().tls.is_some()
    }

    /// The rustls config for the next handshake and the thread it runs on, when the file
    /// has `tls_server_config`: the file and the certificate's files checked for changes
    /// first.
    #[cfg(feature = "tls")]
    pub(crate) fn tls(
        &self,
    ) -> Option<(
        std::sync::Arc<rustls::ServerConfig>,
        &crate::tls_thread::Handshaker,
    )> {
        let config = self.file.current().tls.as_ref().map(|tls| tls.config())?;
        Some((config, self.handshaker.as_ref()?))
    }

    /// The pool bcrypt runs on.
    pub(crate) fn pool(&self) -> &Pool {
        self.verifier.pool()
    }

    /// Checks a request against the file as it is now: the headers to add to its answer,
    /// and whether it may be served. The limit is checked before the credentials, so a
    /// flood past it costs no bcrypt.
    pub(crate) async fn admit(&self, request: &HeaderMap) -> (HeaderMap, Result<(), Refused>) {
        let loaded = self.file.current();
        let mut headers = HeaderMap::new();
        for (name, value) in &loaded.config.headers {
            headers.insert(name.clone(), value.clone());
        }
        if let Some(limiter) = &loaded.limiter {
            if !limiter.allow() {
                return (headers, Err(Refused::TooMany));
            }
        }
        let authorization = request.get(AUTHORIZATION).map(|v| v.as_bytes());
        let admitted = self
            .verifier
            .check(
                &loaded.config.users,
                loaded.config.unknown_user_hash,
                authorization,
            )
            .await;
        (headers, admitted)
    }
}
