//! Basic auth: the `Authorization` header, the user found in constant time, bcrypt on a
//! pool of its own, verified credentials cached as keyed digests.

use std::io;
use std::sync::Mutex;

use base64::Engine as _;
use loopguard::pool::{Pool, TryRunError};
use sha2::{Digest as _, Sha256};
use subtle::{ConditionallySelectable as _, ConstantTimeEq as _};

/// The name of the verifier's pool: its thread is `web-auth-0`, its series carry
/// `pool="web-auth"`.
pub(crate) const AUTH_POOL_NAME: &str = "web-auth";

/// Verified credentials kept at most (the oldest goes first).
const CACHED: usize = 64;

/// Why a request was not let in.
#[derive(Debug, PartialEq)]
pub(crate) enum Refused {
    /// No, or wrong, credentials: `401`.
    Unauthorized,
    /// The verifier is busy: `503` with `Retry-After` (whole seconds).
    Busy(u64),
    /// Past `rate_limit`: `429`.
    TooMany,
}

/// bcrypt verification on a pool of its own, and the cache of what it verified.
pub(crate) struct Verifier {
    pool: Pool,
    /// A per-process random key: a cached digest says nothing without it.
    key: [u8; 32],
    cache: Mutex<Vec<[u8; 32]>>,
}

impl std::fmt::Debug for Verifier {
    /// The pool and how many credentials are cached: never the key nor the digests.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self.cache.lock().map_or(0, |c| c.len());
        f.debug_struct("Verifier")
            .field("pool", &self.pool)
            .field("cached", &cached)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier whose one worker runs at `nice`: a flood of wrong passwords costs the
    /// loop no more than a walk does. Not in the idle class: there a busy machine would
    /// leave every login refused.
    pub(crate) fn new(nice: u8) -> io::Result<Verifier> {
        let mut key = [0; 32];
        getrandom::fill(&mut key).map_err(io::Error::other)?;
        let pool = Pool::builder()
            .name(AUTH_POOL_NAME)
            .workers(1)
            .worker_nice(nice)
            .build()?;
        Ok(Verifier {
            pool,
            key,
            cache: Mutex::new(Vec::with_capacity(CACHED)),
        })
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Lets a request in, or says why not. `users` empty: everyone is let in. An unknown
    /// user's password is verified against `unknown_user_hash`, so that it takes as long.
    pub(crate) async fn check(
        &self,
        users: &[(String, String)],
        unknown_user_hash: &str,
        authorization: Option<&[u8]>,
    ) -> Result<(), Refused> {
        if users.is_empty() {
            return Ok(());
        }
        let (user, password) = authorization
            .and_then(basic_credentials)
            .ok_or(Refused::Unauthorized)?;
        // Every user is compared, each in constant time: the time says nothing about which
        // matched, or whether one did.
        let mut index = u32::MAX;
        for (i, (known, _)) in users.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            index.conditional_assign(&i, known.as_bytes().ct_eq(user.as_bytes()));
        }
        let found = users.get(index as usize).map(|(_, hash)| hash.as_str());
        let hash = found.unwrap_or(unknown_user_hash).to_string();
        let digest = self.digest(&user, &hash, &password);
        if found.is_some() && self.cached(&digest) {
            return Ok(());
        }
        let job = match self
            .pool
            .try_run(move || bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false))
        {
            Ok(job) => job,
            Err(TryRunError::Saturated(s)) => return Err(Refused::Busy(s.retry_after_secs())),
            Err(_) => return Err(Refused::Busy(1)), // closed: shutting down
        };
        match job.await {
            Ok(true) if found.is_some() => {
                self.remember(digest);
                Ok(())
            }
            _ => Err(Refused::Unauthorized),
        }
    }

    /// sha256 of the key, then user, hash and password, each with its length first.
    fn digest(&self, user: &str, hash: &str, password: &str) -> [u8; 32] {
        let mut sha = Sha256::new();
        sha.update(self.key);
        for part in [user, hash, password] {
            sha.update((part.len() as u64).to_le_bytes());
            sha.update(part.as_bytes());
        }
        sha.finalize().into()
    }

    /// Whether `digest` is cached: every entry compared, each in constant time.
    fn cached(&self, digest: &[u8; 32]) -> bool {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let mut hit = subtle::Choice::from(0);
        for entry in cache.iter() {
            hit |= entry.ct_eq(digest);
        }
        hit.into()
    }

    fn remember(&self, digest: [u8; 32]) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED {
            cache.remove(0);
        }
        cache.push(digest);
    }
}

/// The user and password of a Basic `Authorization`; `None` when it is not Basic, not
/// base64, not UTF-8 or has no `:`.
fn basic_credentials(header: &[u8]) -> Option<(String, String)> {
    let scheme = header.get(..6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&header[6..])
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}
