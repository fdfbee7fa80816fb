//! exporter-toolkit's web config file (feature `web-config`), over real sockets on every
//! executor: basic auth with bcrypt hashes made by Debian's `htpasswd`, every file that
//! Debian's promtool knows checked by `promtool check web-config`, headers, the rate limit,
//! the verifier's cache and saturation, reloads, and the start-up errors.

#![cfg(feature = "web-config")]

mod common;

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Answer, Latch, get, serving, tool, up, web_exporter};
use loopguard_exporter::{BCRYPT_MAX_COST, Exporter};

/// `htpasswd -nbBC 10 user password`'s hash, or `None` (the test is skipped) without it.
fn htpasswd(user: &str, password: &str) -> Option<String> {
    let htpasswd = tool("htpasswd")?;
    let (ok, out, err) = common::pipe(&htpasswd, &["-nbBC", "10", user, password], b"");
    assert!(ok, "htpasswd failed: {err}");
    let line = String::from_utf8(out).unwrap();
    let (name, hash) = line.trim().split_once(':').expect("user:hash");
    assert_eq!(name, user);
    assert!(hash.starts_with("$2y$10$"), "{hash}");
    Some(hash.to_string())
}

/// A fresh file holding `text`, in a directory of its own.
fn file(text: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("loopguard-web-config-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("web.yml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Replaces the file at `path` with `text` in one step (a rename), as an operator should.
fn replace(path: &Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Debian's `promtool check web-config` on `path`: whether it accepts it (`None` when
/// promtool is not installed; LOOPGUARD_REQUIRE_TOOLS makes that a failure).
fn promtool_accepts(path: &Path) -> Option<bool> {
    let promtool = tool("promtool")?;
    let out = std::process::Command::new(promtool)
        .args(["check", "web-config"])
        .arg(path)
        .output()
        .expect("promtool runs");
    Some(out.status.success())
}

fn checked(text: &str) -> PathBuf {
    let path = file(text);
    assert_ne!(
        promtool_accepts(&path),
        Some(false),
        "promtool refuses {text}"
    );
    path
}

fn basic(user: &str, password: &str) -> String {
    basic_bytes(format!("{user}:{password}").as_bytes())
}

fn basic_bytes(credentials: &[u8]) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    format!("Basic {encoded}")
}

fn with(addr: std::net::SocketAddr, path: &str, authorization: &str) -> Answer {
    get(addr, path, &[("Authorization", authorization)])
}

fn assert_unauthorized(answer: &Answer, case: &str) {
    assert_eq!(answer.status, 401, "{case}: {answer:?}");
    assert_eq!(answer.header("WWW-Authenticate"), Some("Basic"), "{case}");
    let nosniff = answer.header("X-Content-Type-Options");
    assert_eq!(nosniff, Some("nosniff"), "{case}: as Go's http.Error");
}

fn verifications(exporter: &Exporter) -> u64 {
    let stats = exporter.web_auth_pool().expect("a verifier").stats();
    stats.jobs_ok + stats.jobs_error + stats.jobs_panicked
}

on_every_executor! {
    async fn only_the_right_credentials_are_let_in() {
        let Some(hash) = htpasswd("alice", "secret") else { return };
        let path = checked(&format!("basic_auth_users:\n  alice: {hash}\n"));
        let exporter = web_exporter(&path);
        serving(&exporter, |addr| {
            assert_unauthorized(&get(addr, "/metrics", &[]), "no credentials");
            assert_unauthorized(&with(addr, "/metrics", &basic("alice", "wrong")), "wrong password");
            assert_unauthorized(&with(addr, "/metrics", &basic("bob", "secret")), "unknown user");
            assert_unauthorized(&with(addr, "/metrics", "Bearer c2VjcmV0"), "not Basic");
            // The right credentials under another scheme of Basic's length.
            let token = basic("alice", "secret").replace("Basic", "Token");
            assert_unauthorized(&with(addr, "/metrics", &token), "not Basic, right credentials");
            assert_unauthorized(&with(addr, "/metrics", "Basic !!not-base64!!"), "not base64");
            let not_utf8 = basic_bytes(b"alice:\xff\xfe");
            assert_unauthorized(&with(addr, "/metrics", &not_utf8), "not UTF-8");
            assert_unauthorized(&with(addr, "/metrics", &basic_bytes(b"alice")), "no colon");
            // exporter-toolkit protects every path.
            assert_unauthorized(&get(addr, "/healthz", &[]), "/healthz");
            assert_unauthorized(&get(addr, "/", &[]), "the status page");
            let right = basic("alice", "secret");
            let metrics = with(addr, "/metrics", &right);
            assert_eq!(metrics.status, 200, "{metrics:?}");
            assert!(metrics.text().starts_with("up 1\n"), "{}", metrics.text());
            assert_eq!(with(addr, "/healthz", &right).status, 200);
            assert_eq!(with(addr, "/healthz", &right.replace("Basic", "basic")).status, 200);
        })
        .await;
    }
}

on_every_executor! {
    async fn a_right_password_costs_one_bcrypt() {
        let Some(hash) = htpasswd("alice", "secret") else { return };
        let exporter = web_exporter(&checked(&format!("basic_auth_users:\n  alice: {hash}\n")));
        let counted = exporter.clone();
        serving(&exporter, move |addr| {
            let right = basic("alice", "secret");
            assert_eq!(with(addr, "/metrics", &right).status, 200);
            assert_eq!(verifications(&counted), 1, "the first right request is verified");
            assert_eq!(with(addr, "/metrics", &right).status, 200);
            assert_eq!(with(addr, "/healthz", &right).status, 200);
            assert_eq!(verifications(&counted), 1, "then it is cached");
            // A wrong password is not the cached credential: verified again.
            assert_eq!(with(addr, "/metrics", &basic("alice", "secreT")).status, 401);
            assert_eq!(verifications(&counted), 2);
        })
        .await;
    }
}

on_every_executor! {
    async fn a_busy_verifier_answers_503_with_retry_after() {
        let Some(hash) = htpasswd("alice", "secret") else { return };
        let exporter = web_exporter(&checked(&format!("basic_auth_users:\n  alice: {hash}\n")));
        let latch = Latch::default();
        let held = latch.clone();
        let pool = exporter.web_auth_pool().expect("a verifier");
        let job = pool.try_run(move || held.wait()).expect("an idle verifier");
        let (refused, renders) = (exporter.clone(), exporter.pool().clone());
        let answered = serving(&exporter, move |addr| {
            latch.arrived(1);
            let busy = with(addr, "/metrics", &basic("alice", "secret"));
            let rejected = refused.web_auth_pool().unwrap().stats().rejected;
            latch.open();
            (busy, rejected, renders.stats().jobs_ok)
        })
        .await;
        job.await.expect("the held job ends");
        let (busy, rejected, renders) = answered;
        assert_eq!(busy.status, 503, "{busy:?}");
        let secs: u64 = busy.header("Retry-After").expect("Retry-After").parse().unwrap();
        assert!(secs >= 1, "{secs}");
        assert_eq!(rejected, 1, "refused at once, not queued");
        assert_eq!(renders, 0, "a request not let in renders nothing");
    }
}

on_every_executor! {
    async fn the_headers_go_on_every_answer() {
        let Some(hash) = htpasswd("alice", "secret") else { return };
        let path = checked(&format!(
            "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n    \
             X-Content-Type-Options: nosniff\n    Content-Security-Policy: default-src 'none'\n    \
             Strict-Transport-Security: max-age=31536000\nbasic_auth_users:\n  alice: {hash}\n"
        ));
        let exporter = web_exporter(&path);
        serving(&exporter, |addr| {
            let right = basic("alice", "secret");
            for (case, answer) in [
                ("401", get(addr, "/metrics", &[])),
                ("200", with(addr, "/metrics", &right)),
                ("/healthz", with(addr, "/healthz", &right)),
                ("404", with(addr, "/nowhere", &right)),
            ] {
                assert_eq!(answer.header("X-Frame-Options"), Some("deny"), "{case}");
                assert_eq!(answer.header("X-Content-Type-Options"), Some("nosniff"), "{case}");
                let csp = answer.header("Content-Security-Policy");
                assert_eq!(csp, Some("default-src 'none'"), "{case}");
                let hsts = answer.header("Strict-Transport-Security");
                assert_eq!(hsts, Some("max-age=31536000"), "{case}");
            }
        })
        .await;
    }
}

on_every_executor! {
    async fn past_the_rate_limit_429() {
        // Debian's promtool (exporter-toolkit 0.8) does not know `rate_limit`.
        let path = file("rate_limit:\n  interval: 1h\n  burst: 2\n");
        let exporter = web_exporter(&path);
        serving(&exporter, |addr| {
            assert_eq!(get(addr, "/metrics", &[]).status, 200);
            assert_eq!(get(addr, "/healthz", &[]).status, 200);
            let past = get(addr, "/metrics", &[]);
            assert_eq!(past.status, 429, "{past:?}");
            assert_eq!(get(addr, "/healthz", &[]).status, 429);
        })
        .await;
    }
}

on_every_executor! {
    async fn a_new_user_applies_and_a_bad_file_keeps_the_last_good_one() {
        logger();
        let (Some(alice), Some(bob)) = (htpasswd("alice", "a-pass"), htpasswd("bob", "b-pass"))
        else {
            return;
        };
        let one = format!("basic_auth_users:\n  alice: {alice}\n");
        let path = checked(&one);
        let two = format!("{one}  bob: {bob}\n");
        assert_ne!(promtool_accepts(&file(&two)), Some(false));
        let exporter = web_exporter(&path);
        let marker = path.display().to_string();
        serving(&exporter, move |addr| {
            let (a, b) = (basic("alice", "a-pass"), basic("bob", "b-pass"));
            assert_eq!(with(addr, "/metrics", &a).status, 200);
            assert_unauthorized(&with(addr, "/metrics", &b), "bob before");
            replace(&path, &two);
            assert_eq!(with(addr, "/metrics", &b).status, 200, "bob, no restart");
            replace(&path, "basic_auth_users:\n  alice: not-a-hash\n");
            assert_eq!(with(addr, "/metrics", &b).status, 200, "the last good file");
            assert_eq!(with(addr, "/metrics", &a).status, 200, "the last good file");
            assert_unauthorized(&get(addr, "/metrics", &[]), "still protected");
            let warned = warnings(&marker);
            assert_eq!(warned.len(), 1, "one warning per bad change: {warned:?}");
            assert!(warned[0].contains("basic_auth_users.alice"), "{warned:?}");
            replace(&path, &one);
            assert_unauthorized(&with(addr, "/metrics", &b), "bob removed");
            // Written in place, the file is empty for a moment: that never turns auth off.
            std::fs::write(&path, "").unwrap();
            assert_unauthorized(&get(addr, "/metrics", &[]), "an empty file is not taken");
            assert_eq!(with(addr, "/metrics", &a).status, 200, "alice still in");
            let warned = warnings(&marker);
            assert_eq!(warned.len(), 2, "{warned:?}");
            assert!(warned[1].contains("no basic_auth_users"), "{warned:?}");
        })
        .await;
    }
}

/// A bad file at start: `build` fails with `InvalidInput` naming the key.
#[test]
fn a_bad_file_at_start_names_the_key() {
    let Some(hash) = htpasswd("alice", "secret") else {
        return;
    };
    let build = |text: &str| {
        let path = file(text);
        let built = Exporter::builder()
            .source(up())
            .web_config_file(&path)
            .build();
        let err = built.err().unwrap_or_else(|| panic!("accepted:\n{text}"));
        (path, err)
    };
    let expensive = hash.replacen("$10$", &format!("${}$", BCRYPT_MAX_COST + 1), 1);
    // What each file is to Debian's promtool: `tls_server_config` needs real certificates
    // (missing here: refused with or without the feature `tls`), the other keys it judges.
    for (text, key, promtool) in [
        (
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n",
            "tls_server_config",
            None,
        ),
        (
            "http_server_config:\n  http2: true\n",
            "http_server_config.http2",
            Some(true),
        ),
        (
            "basic_auth_user:\n  alice: x\n",
            "basic_auth_user",
            Some(false),
        ),
        (
            "http_server_config:\n  header:\n    X-Frame-Options: deny\n",
            "http_server_config.header",
            Some(false),
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "http_server_config.headers.X-Frame-Options",
            Some(false),
        ),
        (
            "http_server_config:\n  headers:\n    Server: loopguard\n",
            "http_server_config.headers.Server",
            Some(false),
        ),
        (
            &format!("basic_auth_users:\n  alice: {expensive}\n"),
            "basic_auth_users.alice",
            Some(true),
        ),
        (
            "rate_limit:\n  interval: 1s\n  burst: 0\n",
            "rate_limit.burst",
            None,
        ),
        (
            "rate_limit:\n  interval: soon\n  burst: 1\n",
            "rate_limit.interval",
            None,
        ),
    ] {
        let (path, err) = build(text);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{text}: {err}");
        assert!(err.to_string().contains(key), "{text}: {err} names {key}");
        if let Some(accepts) = promtool {
            let judged = promtool_accepts(&path);
            assert!(
                judged.is_none() || judged == Some(accepts),
                "promtool on {text}"
            );
        }
    }
    let (_, missing) = (
        PathBuf::new(),
        Exporter::builder()
            .source(up())
            .web_config_file("/nonexistent/web.yml")
            .build()
            .expect_err("no such file"),
    );
    assert_eq!(missing.kind(), ErrorKind::NotFound);
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

fn logger() {
    let _ = log::set_logger(&KEPT);
    log::set_max_level(log::LevelFilter::Warn);
}

/// The warnings about the file at `path`.
fn warnings(path: &str) -> Vec<String> {
    let kept = KEPT.0.lock().unwrap();
    kept.iter().filter(|w| w.contains(path)).cloned().collect()
}
