//! The file, checked again when it changes: a new file that parses replaces the last one,
//! a bad one keeps it and says why in the log.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::limit::Limiter;
use super::parse::{self, WebConfig};
use super::stamp::Stamp;

/// A parsed file, its rate limiter and its TLS config.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) config: WebConfig,
    pub(crate) limiter: Option<Arc<Limiter>>,
    /// `tls_server_config`, its certificate and key loaded; `None`: plain HTTP.
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<Arc<super::tls::Served>>,
}

/// The TLS config a file asks for, built (its certificate and key read).
#[cfg(feature = "tls")]
type Tls = Option<Arc<super::tls::Served>>;
#[cfg(not(feature = "tls"))]
type Tls = ();

/// Parses `text` (the file at `path`) and loads the TLS files it names.
fn parse(text: &str, path: &std::path::Path) -> Result<(WebConfig, Tls), String> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut config = parse::parse(text, dir)?;
    #[cfg(feature = "tls")]
    let tls = config
        .tls
        .take()
        .map(|settings| super::tls::Served::new(settings).map(Arc::new))
        .transpose()?;
    #[cfg(not(feature = "tls"))]
    let tls = ();
    Ok((config, tls))
}

#[derive(Debug)]
struct State {
    /// The file as last looked at, good or bad: a bad one is reported once.
    seen: Option<Stamp>,
    loaded: Arc<Loaded>,
}

/// The largest web config file read (it is read on the loop): exporter-toolkit's files are
/// a few hundred bytes.
const MAX_FILE_BYTES: u64 = 1 << 20;

fn too_large(len: u64) -> String {
    format!("{len} bytes is more than the {MAX_FILE_BYTES} a web config file may have")
}

/// The web config file and the last good version of it.
#[derive(Debug)]
pub(crate) struct Watched {
    path: PathBuf,
    state: Mutex<State>,
}

impl Watched {
    /// Reads the file; [`InvalidInput`](io::ErrorKind::InvalidInput) naming the key when it
    /// does not parse, the read's error when it cannot be read.
    pub(crate) fn load(path: PathBuf) -> io::Result<Watched> {
        let meta = std::fs::metadata(&path).map_err(|e| at(&path, e))?;
        if meta.len() > MAX_FILE_BYTES {
            let message = format!("web config {}: {}", path.display(), too_large(meta.len()));
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| at(&path, e))?;
        let (config, tls) = parse(&text, &path).map_err(|e| {
            let message = format!("web config {}: {e}", path.display());
            io::Error::new(io::ErrorKind::InvalidInput, message)
        })?;
        let loaded = Arc::new(Loaded {
            limiter: limiter(&config, None),
            config,
            #[cfg(feature = "tls")]
            tls,
        });
        #[cfg(not(feature = "tls"))]
        let () = tls;
        let state = Mutex::new(State {
            seen: Some(Stamp::of(&meta)),
            loaded,
        });
        Ok(Watched { path, state })
    }

    /// The file as it is now: one `stat` per call; read and parsed again when it changed.
    /// A bad new file keeps the last good one, and is logged once.
    pub(crate) fn current(&self) -> Arc<Loaded> {
        let stamp = std::fs::metadata(&self.path).map(|m| Stamp::of(&m));
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = stamp.as_ref().ok().cloned();
        if now == state.seen {
            return state.loaded.clone();
        }
        state.seen = now;
        let reread = match stamp {
            Err(err) => Err(format!("cannot read it: {err}")),
            Ok(stamp) if stamp.1 > MAX_FILE_BYTES => Err(too_large(stamp.1)),
            Ok(_) => std::fs::read_to_string(&self.path)
                .map_err(|e| format!("cannot read it: {e}"))
                .and_then(|text| parse(&text, &self.path)),
        };
        let problem = match reread {
            // A file written in place is empty, or cut short, for a moment: one that would
            // turn basic auth off is not taken (turning it off takes a restart).
            Ok((config, _)) if config.users.is_empty() && !state.loaded.config.users.is_empty() => {
                Some(
                    "it has no basic_auth_users where the last good one has some (an empty \
                     or cut-short file is not taken: replace the file by a rename; turning \
                     basic auth off takes a restart)"
                        .to_string(),
                )
            }
            // The listener was announced as http:// or https://: that takes a restart.
            #[cfg(feature = "tls")]
            Ok((_, tls)) if tls.is_some() != state.loaded.tls.is_some() => Some(format!(
                "it turns TLS {} (tls_server_config); that takes a restart",
                if tls.is_some() { "on" } else { "off" }
            )),
            #[cfg_attr(not(feature = "tls"), allow(clippy::let_unit_value, unused_variables))]
            Ok((config, tls)) => {
                let limiter = limiter(&config, state.loaded.limiter.as_ref());
                state.loaded = Arc::new(Loaded {
                    config,
                    limiter,
                    #[cfg(feature = "tls")]
                    tls,
                });
                None
            }
            Err(problem) => Some(problem),
        };
        let loaded = state.loaded.clone();
        drop(state);
        // The logger is the application's: called with no lock held.
        match problem {
            Some(problem) => log::warn!(
                "web config {}: {problem}; keeping the last good one",
                self.path.display()
            ),
            None => log::info!("web config {}: reloaded", self.path.display()),
        }
        loaded
    }
}

/// The limiter `config` asks for: the old one kept when its settings did not change.
fn limiter(config: &WebConfig, old: Option<&Arc<Limiter>>) -> Option<Arc<Limiter>> {
    let (interval, burst) = config.rate_limit?;
    match old {
        Some(old) if old.settings() == (interval, burst) => Some(old.clone()),
        _ => Some(Arc::new(Limiter::new(interval, burst))),
    }
}

fn at(path: &std::path::Path, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("web config {}: {err}", path.display()))
}
