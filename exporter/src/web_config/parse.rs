//! exporter-toolkit's web config file, parsed and checked: every error names its key.

use std::time::Duration;

use hyper::header::{HeaderName, HeaderValue};
use serde_norway::{Mapping, Value};

/// The highest bcrypt cost a `basic_auth_users` hash may have: cost 12 is about 0.3 s of
/// CPU per verification (four times cost 10's), each step above doubles it.
pub const BCRYPT_MAX_COST: u32 = 12;

/// What an unknown user's password is verified against, one hash per cost from 4 to
/// [`BCRYPT_MAX_COST`] (`htpasswd -nbBC COST` of random passwords, thrown away): the cost
/// of the file's dearest user, so an unknown user takes as long as a known one with a
/// wrong password. exporter-toolkit verifies against one cost-10 hash, which tells a
/// cost-12 user's name from an unknown one by the time taken.
const UNKNOWN_USER_HASHES: [&str; 9] = [
    "$2y$04$lz1HwDpjbijBZP5ByURhk.FrN0KPS.XxkL2S5TQMZP8u1GyTbYrFW",
    "$2y$05$Zebk0750WfbMQk.f8uCkUuvPybPL0RatQ75fRteFS4LIclbx6Wybu",
    "$2y$06$3mNppZ5IME6SaX1M50T2vuc4EZ/iPtE2cqaGZNzHUJn54PJLLPor.",
    "$2y$07$/CNPQEJQBiWSL.k0D.QHyOvt3xhBNCIRAHsythXlUH4nk42Dj1PSy",
    "$2y$08$XcTPTG5KR3/vV96tXfliBepcx0CqL3EV1EV21y0BHFBLgSftYNvri",
    "$2y$09$zACNdr3sPrLl/htZ3c.MQ.v4ljpoXbW71cZ9pfTmgXiYO6KE2rG06",
    "$2y$10$DM2MhAVcIKAkZ867iwbMwufFYPl0LkgGktjri1c6hqGRVKOq0C6Rm",
    "$2y$11$JUu1TY/Lw2v9fRgOrYyg.eIisiVO/lAncqKm0Lcg.ppBiEPoxjJCW",
    "$2y$12$muhJO0cUlPla850dh3JeLO8gOWAtSwL1RNWFsUKzvHwr07wawZFx2",
];

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
    /// The hash an unknown user is verified against: of the dearest user's cost.
    pub(crate) unknown_user_hash: &'static str,
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
            "basic_auth_users" => {
                let (users, dearest) = users(value)?;
                config.users = users;
                config.unknown_user_hash = unknown_user_hash(dearest);
            }
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

/// The users and their hashes, and the highest cost among them (10 when there are none).
fn users(value: &Value) -> Result<(Vec<(String, String)>, u32), String> {
    let (mut out, mut dearest) = (Vec::new(), None);
    let Some(map) = mapping(value, "basic_auth_users")? else {
        return Ok((out, 10));
    };
    for (key, hash) in map {
        let user = string_key(key, "basic_auth_users.")?;
        let at = format!("basic_auth_users.{user}");
        let hash = hash
            .as_str()
            .ok_or_else(|| format!("{at}: expected a bcrypt hash"))?;
        let cost = check_hash(hash).map_err(|e| format!("{at}: {e}"))?;
        dearest = dearest.max(Some(cost));
        out.push((user.to_string(), hash.to_string()));
    }
    Ok((out, dearest.unwrap_or(10)))
}

/// The hash of [`UNKNOWN_USER_HASHES`] of `cost` (clamped to 4 to [`BCRYPT_MAX_COST`]).
fn unknown_user_hash(cost: u32) -> &'static str {
    let index = cost.clamp(4, BCRYPT_MAX_COST) - 4;
    UNKNOWN_USER_HASHES[index as usize]
}

/// A `$2y$`, `$2b$` or `$2a$` bcrypt hash of a cost up to [`BCRYPT_MAX_COST`]: its cost.
fn check_hash(hash: &str) -> Result<u32, String> {
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
    Ok(cost)
}

fn rate_limit(value: &Value) -> Result<Option<(Duration, u32)>, String> {
    let Some(map) = mapping(value, "rate_limit")? else {
        return Ok(None);
    };
    let (mut interval, mut burst) = (Duration::ZERO, 0);
    for (key, value) in map {
        match string_key(key, "rate_limit.")? {
            "interval" => interval = rate_interval(value)?,
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

/// `rate_limit.interval` as exporter-toolkit's YAML decoder (go.yaml.in/yaml/v2) reads a
/// `time.Duration`: a string in Go's form, or a whole number of nanoseconds (`0` unquoted
/// is off, as quoted).
fn rate_interval(value: &Value) -> Result<Duration, String> {
    const AT: &str = "rate_limit.interval";
    match value {
        Value::String(text) => go_duration(text).ok_or_else(|| {
            format!("{AT}: {text:?} is not a duration (Go's form: 1.5s, 1m30s, 500ms; no sign)")
        }),
        Value::Number(n) => n.as_u64().map(Duration::from_nanos).ok_or_else(|| {
            format!("{AT}: {n} is not a whole number of nanoseconds (or write a unit: 1s)")
        }),
        Value::Null => Ok(Duration::ZERO),
        _ => Err(format!("{AT}: expected a duration such as 1s")),
    }
}

/// A duration as Go's `time.ParseDuration` reads it, which is what exporter-toolkit's YAML
/// decoder calls for `rate_limit.interval`: `0`, or decimal numbers each with a unit (`ns`,
/// `us` or `µs`, `ms`, `s`, `m`, `h`), summed: `1.5s`, `1m30s`, `500ms`, `1h0.5m`, with
/// an optional `+`. A negative value (Go would take it as no limit at all) or one past `u64`
/// nanoseconds is `None`.
fn go_duration(text: &str) -> Option<Duration> {
    let text = text.strip_prefix('+').unwrap_or(text);
    if text == "0" {
        return Some(Duration::ZERO);
    }
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("\u{b5}s", 1_000),  // µ, MICRO SIGN
        ("\u{3bc}s", 1_000), // μ, GREEK SMALL LETTER MU
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let (mut rest, mut nanos) = (text, 0u128);
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (whole, fraction) = match rest[..number_len].split_once('.') {
            Some((w, f)) => (w, f),
            None => (&rest[..number_len], ""),
        };
        if whole.is_empty() && fraction.is_empty() {
            return None; // no digits (a sign, a unit alone, or a lone `.`)
        }
        if !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None; // a second `.`
        }
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = UNITS.iter().find(|(u, _)| *u == &rest[..unit_len])?.1;
        rest = &rest[unit_len..];
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        nanos = nanos.checked_add(whole.checked_mul(scale)?)?;
        // The fraction's digits past nanosecond precision change nothing, as in Go.
        let (mut part, mut unit) = (0u128, scale);
        for digit in fraction.bytes().take(20) {
            unit /= 10;
            part += u128::from(digit - b'0') * unit;
        }
        nanos = nanos.checked_add(part)?;
    }
    u64::try_from(nanos).ok().map(Duration::from_nanos)
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
    fn an_unknown_user_is_verified_at_the_dearest_user_s_cost() {
        for (i, hash) in UNKNOWN_USER_HASHES.iter().enumerate() {
            assert_eq!(check_hash(hash), Ok(i as u32 + 4), "{hash}");
        }
        let cost_of = |hash: &str| hash.parse::<bcrypt::HashParts>().unwrap().get_cost();
        let cheap = "$2y$04$lz1HwDpjbijBZP5ByURhk.FrN0KPS.XxkL2S5TQMZP8u1GyTbYrFW";
        let dear = "$2y$12$muhJO0cUlPla850dh3JeLO8gOWAtSwL1RNWFsUKzvHwr07wawZFx2";
        let file = format!("basic_auth_users:\n  a: {cheap}\n  b: {dear}\n  c: {cheap}\n");
        assert_eq!(
            cost_of(parse(&file, ".".as_ref()).unwrap().unknown_user_hash),
            12
        );
        let file = format!("basic_auth_users:\n  a: {cheap}\n");
        assert_eq!(
            cost_of(parse(&file, ".".as_ref()).unwrap().unknown_user_hash),
            4
        );
    }

    #[test]
    fn durations_read_as_go_reads_them() {
        let ms = Duration::from_millis;
        assert_eq!(go_duration("0"), Some(ms(0)));
        assert_eq!(go_duration("250ms"), Some(ms(250)));
        assert_eq!(go_duration("1.5s"), Some(ms(1_500)));
        assert_eq!(go_duration("1m30s"), Some(ms(90_000)));
        assert_eq!(go_duration("1h30m"), Some(ms(5_400_000)));
        assert_eq!(go_duration(".5s"), Some(ms(500)));
        assert_eq!(go_duration("1.s"), Some(ms(1_000)));
        assert_eq!(
            go_duration("1s1m"),
            Some(ms(61_000)),
            "Go sums in any order"
        );
        assert_eq!(go_duration("2us"), Some(Duration::from_micros(2)));
        assert_eq!(go_duration("2\u{b5}s"), Some(Duration::from_micros(2)));
        assert_eq!(go_duration("2\u{3bc}s"), Some(Duration::from_micros(2)));
        assert_eq!(go_duration("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(go_duration("+1s"), Some(ms(1_000)));
        assert_eq!(
            go_duration("1.0000000001s"),
            Some(ms(1_000)),
            "past ns: dropped"
        );
        for bad in [
            "", "1", "s", "1x", "1d", "-1s", "+", "-0", ".s", "1..5s", "1.5.5s", "ms1",
        ] {
            assert_eq!(go_duration(bad), None, "{bad:?}");
        }
        assert_eq!(go_duration("5124096h"), None, "past u64 nanoseconds");
    }

    #[test]
    fn a_rate_interval_may_be_a_number_of_nanoseconds() {
        let read = |yaml: &str| parse(yaml, ".".as_ref()).map(|c| c.rate_limit);
        let off = read("rate_limit:\n  interval: 0\n  burst: 1\n");
        assert_eq!(off, Ok(None), "0 unquoted is off, as in exporter-toolkit");
        let ns = read("rate_limit:\n  interval: 1500000000\n  burst: 2\n");
        assert_eq!(ns, Ok(Some((Duration::from_millis(1_500), 2))));
        let go = read("rate_limit:\n  interval: 1m30s\n  burst: 2\n");
        assert_eq!(go, Ok(Some((Duration::from_secs(90), 2))));
        for bad in ["-1", "1.5", "[1]"] {
            let err = read(&format!("rate_limit:\n  interval: {bad}\n  burst: 1\n"));
            assert!(
                err.as_ref()
                    .is_err_and(|e| e.starts_with("rate_limit.interval")),
                "{bad}: {err:?}"
            );
        }
    }
}
