"""The matrix's fixtures, made fresh in a temporary directory on every run.

- A test PKI with the openssl CLI (P-256 keys, PKCS#8): two CAs (`ca-a`, `ca-b`); a server
  certificate from CA A for IP:127.0.0.1 and DNS:localhost; a client certificate from each
  CA, A's with the known SAN `DNS:scraper.loopguard.test` (for `client_allowed_sans`, which
  Debian's promtool does not know: the crate's own tests use it, not these files).
- The users' bcrypt hashes from Apache's `htpasswd -nbBC 10` (cost 10, as exporter-toolkit's
  docs make them).
- The web config files, each checked by Debian's `promtool check web-config` before use.
  Only keys exporter-toolkit 0.8 (Debian's node_exporter 1.5 and promtool 2.42) knows are
  written: no `rate_limit`, no `client_allowed_sans`.
"""

import pathlib
import secrets
import subprocess

USER, PASSWORD = "alice", "right-password"
WRONG_PASSWORD = "wrong-password"
UNKNOWN_USER = "mallory"
CLIENT_A_SAN = "scraper.loopguard.test"

# One openssl config for every certificate: each section is one certificate's extensions.
OPENSSL_CNF = f"""
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_a]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:{CLIENT_A_SAN}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_b]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:other.loopguard.test
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

# The headers exporter-toolkit's allow-list permits, with values its rules accept: in the
# files named in WITH_HEADERS.
HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "deny"}
WITH_HEADERS = ("basic+headers", "tls+basic")


def run(cmd, cwd=None):
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"webconfig: `{' '.join(map(str, cmd))}` failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def make_pki(d: pathlib.Path):
    """Writes the PKI into `d`; returns {name: path} for every certificate and key."""
    cnf = d / "openssl.cnf"
    cnf.write_text(OPENSSL_CNF)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca-a", "ca-b"):
        run(["openssl", "req", "-x509", "-config", cnf, "-extensions", "ca", *key,
             "-keyout", d / f"{ca}.key", "-out", d / f"{ca}.crt", "-days", "2",
             "-subj", f"/CN=loopguard webconfig test {ca}"])
    for leaf, ca, section in (("server", "ca-a", "server"), ("client-a", "ca-a", "client_a"),
                              ("client-b", "ca-b", "client_b")):
        run(["openssl", "req", "-new", "-config", cnf, *key, "-keyout", d / f"{leaf}.key",
             "-out", d / f"{leaf}.csr", "-subj", f"/CN=loopguard webconfig test {leaf}"])
        run(["openssl", "x509", "-req", "-in", d / f"{leaf}.csr", "-CA", d / f"{ca}.crt",
             "-CAkey", d / f"{ca}.key", "-set_serial", f"0x{secrets.token_hex(8)}", "-days", "2",
             "-extfile", cnf, "-extensions", section, "-out", d / f"{leaf}.crt"])
    # The server's chain verifies against CA A, not CA B; each client against its own CA.
    run(["openssl", "verify", "-CAfile", d / "ca-a.crt", "-purpose", "sslserver", d / "server.crt"])
    run(["openssl", "verify", "-CAfile", d / "ca-a.crt", "-purpose", "sslclient", d / "client-a.crt"])
    run(["openssl", "verify", "-CAfile", d / "ca-b.crt", "-purpose", "sslclient", d / "client-b.crt"])
    names = ("ca-a", "ca-b", "server", "client-a", "client-b")
    paths = {f"{n}.crt": d / f"{n}.crt" for n in names}
    paths.update({f"{n}.key": d / f"{n}.key" for n in names})
    return paths


def bcrypt_hash(user, password):
    """`htpasswd -nbBC 10 user password`'s hash ($2y$, cost 10)."""
    line = run(["htpasswd", "-nbBC", "10", user, password]).strip()
    name, _, hashed = line.partition(":")
    if name != user or not hashed.startswith("$2y$10$"):
        raise SystemExit(f"webconfig: unexpected htpasswd output {line!r}")
    return hashed


def web_configs(d: pathlib.Path, pki):
    """Writes the web config files; returns {name: path}. Absolute paths to the PKI."""
    users = f'basic_auth_users:\n  {USER}: "{bcrypt_hash(USER, PASSWORD)}"\n'
    headers = "http_server_config:\n  headers:\n" + "".join(
        f"    {name}: {value}\n" for name, value in HEADERS.items())
    tls = (f"tls_server_config:\n  cert_file: {pki['server.crt']}\n"
           f"  key_file: {pki['server.key']}\n")
    texts = {
        "basic": users,
        "basic+headers": headers + users,
        "tls": tls,
        "tls+basic": tls + headers + users,
        "tls13": tls + "  min_version: TLS13\n",
        "mtls": tls + "  client_auth_type: RequireAndVerifyClientCert\n"
                      f"  client_ca_file: {pki['ca-a.crt']}\n",
    }
    paths = {}
    for name, text in texts.items():
        path = d / f"web-{name.replace('+', '-')}.yml"
        path.write_text(text)
        paths[name] = path
    return paths


def promtool_check(paths):
    """`promtool check web-config` on every file: [(path, ok, output)]."""
    results = []
    for path in paths:
        done = subprocess.run(["promtool", "check", "web-config", str(path)],
                              capture_output=True, text=True)
        results.append((path, done.returncode == 0, (done.stdout + done.stderr).strip()))
    return results
