//! exporter-toolkit's web config file, parsed and checked: every error names its key.

use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use serde_norway::{Mapping, Value};

/// The highest bcrypt cost a `basic_auth_users` hash may have: cost 12 is about 0.3 s of
/// CPU per verification (four times cost 10's), each step above doubles it.
pub const BCRYPT_MAX_COST: u32 = 12;

/// exporter-toolkit's allow-list: the header, and the values it may take (`None`: any).
const HEADERS: [(&str, Option<&[&str]>); 5] = [
    ("Content-Security-Policy", None),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-XSS-Protection", None),
    ("Strict-Transport-Security", None),
];

/// What a web config file says, checked.
#[derive(Default)]
pub(crate) struct WebConfig {
    /// `basic_auth_users`: user and bcrypt hash, in the file's order.
    pub(crate) users: Vec<(String, String)>,
    /// `http_server_config.headers`, added to every answer.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// `rate_limit`: one request per `interval`, bursts of `burst`; `None` when off.
    pub(crate) rate_limit: Option<(Duration, u32)>,
    /// `tls_server_config`; `None`: plain HTTP.
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<super::tls::parse::TlsSettings>,
}

impl std::fmt::Debug for WebConfig {
    /// The users' names, not their hashes (exporter-toolkit's `<secret>`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("WebConfig")
            .field("users", &users)
            .field("headers", &self.headers)
            .field("rate_limit", &self.rate_limit)
            .finish_non_exhaustive()
    }
}

/// Parses `text`; an error names the key at fault (`http_server_config.http2`, …). `dir`
/// is the file's directory, where relative paths in `tls_server_config` start.
pub(crate) fn parse(text: &str, dir: &std::path::Path) -> Result<WebConfig, String> {
    let root: Value = serde_norway::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let mut config = WebConfig::default();
    let Some(root) = mapping(&root, "the file")? else {
        return Ok(config); // an empty file: no auth, no headers, no limit
    };
    for (key, value) in root {
        match string_key(key, "")? {
            #[cfg(feature = "tls")]
            "tls_server_config" => config.tls = super::tls::parse::parse(value, dir)?,
            #[cfg(not(feature = "tls"))]
            "tls_server_config" => {
                let _ = dir;
                return Err(
                    "tls_server_config: TLS needs loopguard-exporter's feature `tls`; \
                            turn it on, terminate TLS in front of the exporter or drop the key"
                        .into(),
                );
            }
            "http_server_config" => http_server_config(value, &mut config)?,
            "basic_auth_users" => config.users = users(value)?,
            "rate_limit" => config.rate_limit = rate_limit(value)?,
            other => return Err(format!("{other}: unknown key")),
        }
    }
    Ok(config)
}

/// `value` as a mapping; `None` for an empty (null) value.
fn mapping<'a>(value: &'a Value, key: &str) -> Result<Option<&'a Mapping>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Mapping(m) => Ok(Some(m)),
        _ => Err(format!("{key}: expected a mapping")),
    }
}

fn string_key<'a>(key: &'a Value, parent: &str) -> Result<&'a str, String> {
    key.as_str()
        .ok_or_else(|| format!("{parent}{key:?}: expected a string key"))
}

fn http_server_config(value: &Value, config: &mut WebConfig) -> Result<(), String> {
    let Some(map) = mapping(value, "http_server_config")? else {
        return Ok(());
    };
    for (key, value) in map {
        match string_key(key, "http_server_config.")? {
            "http2" => match value {
                Value::Bool(false) => {}
                Value::Bool(true) => {
                    return Err("http_server_config.http2: true is not supported: \
                                the exporter speaks HTTP/1.1 (set it to false)"
                        .into());
                }
                _ => return Err("http_server_config.http2: expected true or false".into()),
            },
            "headers" => config.headers = headers(value)?,
            other => return Err(format!("http_server_config.{other}: unknown key")),
        }
    }
    Ok(())
}

fn headers(value: &Value) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut out = Vec::new();
    let Some(map) = mapping(value, "http_server_config.headers")? else {
        return Ok(out);
    };
    for (key, value) in map {
        let name = string_key(key, "http_server_config.headers.")?;
        let at = format!("http_server_config.headers.{name}");
        let Some((_, allowed)) = HEADERS.iter().find(|(n, _)| *n == name) else {
            return Err(format!("{at}: this header cannot be configured"));
        };
        let text = match value {
            Value::Null => continue, // unset if blank
            Value::String(s) if s.is_empty() => continue,
            Value::String(s) => s.as_str(),
            _ => return Err(format!("{at}: expected a string")),
        };
        if let Some(allowed) = allowed {
            if !allowed.contains(&text) {
                return Err(format!("{at}: expected one of {allowed:?}, not {text:?}"));
            }
        }
        let value = HeaderValue::from_str(text).map_err(|e| format!("{at}: {e}"))?;
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("{at}: {e}"))?;
        out.push((name, value));
    }
    Ok(out)
}

fn users(value: &Value) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let Some(map) = mapping(value, "basic_auth_users")? else {
        return Ok(out);
    };
    for (key, hash) in map {
        let user = string_key(key, "basic_auth_users.")?;
        let at = format!("basic_auth_users.{user}");
        let hash = hash
            .as_str()
            .ok_or_else(|| format!("{at}: expected a bcrypt hash"))?;
        check_hash(hash).map_err(|e| format!("{at}: {e}"))?;
        out.push((user.to_string(), hash.to_string()));
    }
    Ok(out)
}

/// A `$2y$`, `$2b$` or `$2a$` bcrypt hash of a cost up to [`BCRYPT_MAX_COST`].
fn check_hash(hash: &str) -> Result<(), String> {
    if !["$2y$", "$2b$", "$2a$"].iter().any(|p| hash.starts_with(p)) {
        return Err("not a bcrypt hash ($2y$, $2b$ or $2a$)".into());
    }
    // bcrypt's own message quotes the hash: a fixed one, so no hash reaches a log.
    let parts: bcrypt::HashParts = hash
        .parse()
        .map_err(|_| "not a valid bcrypt hash".to_string())?;
    let cost = parts.get_cost();
    if !(4..=BCRYPT_MAX_COST).contains(&cost) {
        return Err(format!(
            "bcrypt cost {cost} is outside 4 to {BCRYPT_MAX_COST} (each step doubles \
             the CPU a verification takes)"
        ));
    }
    Ok(())
}

fn rate_limit(value: &Value) -> Result<Option<(Duration, u32)>, String> {
    let Some(map) = mapping(value, "rate_limit")? else {
        return Ok(None);
    };
    let (mut interval, mut burst) = (Duration::ZERO, 0);
    for (key, value) in map {
        match string_key(key, "rate_limit.")? {
            "interval" => {
                interval = value
                    .as_str()
                    .ok_or("rate_limit.interval: expected a duration such as 1s")
                    .and_then(|s| duration(s).ok_or("rate_limit.interval: not a duration"))?;
            }
            "burst" => {
                burst = value
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or("rate_limit.burst: expected a whole number")?;
            }
            other => return Err(format!("rate_limit.{other}: unknown key")),
        }
    }
    if interval.is_zero() {
        return Ok(None); // exporter-toolkit: an interval of 0 turns the limiter off
    }
    if burst == 0 {
        return Err("rate_limit.burst: must be at least 1 (0 would refuse every request)".into());
    }
    Ok(Some((interval, burst)))
}

/// A Prometheus duration: `0`, or units from `y` down to `ms` in order (`1h30m`, `250ms`).
fn duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let (mut rest, mut millis, mut next_unit) = (text, 0u64, 0);
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let found = UNITS[next_unit..].iter().position(|(u, _)| *u == unit)?;
        millis = millis.checked_add(number.checked_mul(UNITS[next_unit + found].1)?)?;
        next_unit += found + 1;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_hash() {
        let hash = "$2y$10$3lRI10WVWUgWA.W4EAZ8R.C7u4fN7fTI1MwuzdgsmsiKUDfSEfX7K";
        let config = parse(
            &format!("basic_auth_users:\n  alice: {hash}\n"),
            ".".as_ref(),
        )
        .unwrap();
        let shown = format!("{config:?}");
        assert!(
            shown.contains("alice") && !shown.contains("$2y$"),
            "{shown}"
        );
    }

    #[test]
    fn durations() {
        let ms = Duration::from_millis;
        assert_eq!(duration("0"), Some(ms(0)));
        assert_eq!(duration("250ms"), Some(ms(250)));
        assert_eq!(duration("1h30m"), Some(ms(5_400_000)));
        assert_eq!(duration("1m1h"), None, "units out of order");
        assert_eq!(duration("1"), None, "no unit");
        assert_eq!(duration("s"), None, "no number");
        assert_eq!(duration("1x"), None);
    }
}
