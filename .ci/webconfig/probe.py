"""One request of the matrix, sent with Python's ssl and http.client, and its outcome.

An outcome has a class (`200`, `401`, `400`, ..., `refused`: the TLS handshake or the
connection was refused, `closed`: a plain connection closed without an answer, `timeout`,
`bad server certificate`: this client refused the server's, so no cell expects it)
and a key that two peers must share: the status, the headers that matter here
(`WWW-Authenticate`, and the file's own `http_server_config.headers` when it has them)
and, for a 400, the body (Go answers plain HTTP sent to a TLS port with a one-line body).
A refusal's reason (the TLS alert) is shown, not compared: Go and rustls name their alerts
differently.

Not compared: `X-Content-Type-Options: nosniff` on an error answer from a file that does
not configure it. Go's `http.Error` (which writes exporter-toolkit's 401) sets it on every
error; node_exporter 1.5 sends it, the example does not. Issue 30 asks for the outcome
(the status, `WWW-Authenticate: Basic`) that node_exporter gives, not Go's extra header.
"""

import base64
import dataclasses
import http.client
import socket
import ssl

import fixtures

TIMEOUT = 10


def basic(credentials: bytes, scheme="Basic", pad=True):
    encoded = base64.b64encode(credentials).decode()
    return f"{scheme} {encoded if pad else encoded.rstrip('=')}"


RIGHT = basic(f"{fixtures.USER}:{fixtures.PASSWORD}".encode())

# The Authorization headers of the matrix: (row name, header or None).
AUTH_ROWS = [
    ("no credentials", None),
    ("wrong password", basic(f"{fixtures.USER}:{fixtures.WRONG_PASSWORD}".encode())),
    ("unknown user", basic(f"{fixtures.UNKNOWN_USER}:{fixtures.PASSWORD}".encode())),
    ("not Basic (Bearer)", "Bearer " + base64.b64encode(b"a-token").decode()),
    ("Basic, not base64", "Basic %%not*base64%%"),
    ("Basic, base64 unpadded", basic(f"{fixtures.USER}:{fixtures.PASSWORD}".encode(), pad=False)),
    ("Basic, not UTF-8", basic(f"{fixtures.USER}:".encode() + b"\xff\xfe")),
    ("Basic, no colon", basic(fixtures.USER.encode())),
    ("right user", RIGHT),
    ("right user, scheme `basic`", basic(f"{fixtures.USER}:{fixtures.PASSWORD}".encode(), "basic")),
]


@dataclasses.dataclass(frozen=True)
class Request:
    """tls: False sends plain HTTP (to whatever port); version: "1.2", "1.3" or None (the
    client's range, 1.2 to 1.3); client: "a", "b" or None (the client certificate)."""
    tls: bool
    authorization: str | None = None
    version: str | None = None
    client: str | None = None


@dataclasses.dataclass(frozen=True)
class Outcome:
    cls: str
    key: str
    detail: str = ""


VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}


def context(request, pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the chain and the address
    ctx.load_verify_locations(pki["ca-a.crt"])
    ctx.minimum_version = VERSIONS.get(request.version, ssl.TLSVersion.TLSv1_2)
    ctx.maximum_version = VERSIONS.get(request.version, ssl.TLSVersion.TLSv1_3)
    if request.client:
        ctx.load_cert_chain(pki[f"client-{request.client}.crt"], pki[f"client-{request.client}.key"])
    return ctx


def send(addr, request, pki, file_headers=()):
    """GET /metrics on `addr` ("127.0.0.1:PORT") as `request` says: its Outcome.
    `file_headers`: the names of the headers the peer's file adds to every answer."""
    host, port = addr.rsplit(":", 1)
    if request.tls:
        conn = http.client.HTTPSConnection(host, int(port), context=context(request, pki),
                                           timeout=TIMEOUT)
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=TIMEOUT)
    headers = {} if request.authorization is None else {"Authorization": request.authorization}
    try:
        conn.request("GET", "/metrics", headers=headers)
        answer = conn.getresponse()
        body = answer.read()
    except ssl.SSLCertVerificationError as err:
        # The client refused the server's certificate: the fixtures are wrong, not the peer.
        return Outcome("bad server certificate", "bad server certificate", err.verify_message)
    except ssl.SSLError as err:
        return Outcome("refused", "refused", f"{type(err).__name__}: {err.reason or err}")
    except (ConnectionError, http.client.RemoteDisconnected) as err:
        # After a TLS 1.3 handshake the client learns of a refused certificate only when it
        # reads: an alert (an SSLError above) or, from some servers, a bare close.
        cls = "refused" if request.tls else "closed"
        return Outcome(cls, cls, f"{type(err).__name__}: {err}")
    except (socket.timeout, TimeoutError):
        return Outcome("timeout", "timeout")
    finally:
        conn.close()
    compared = ("WWW-Authenticate", *file_headers)
    shown = [f"{name}: {answer.headers[name]}" for name in compared if name in answer.headers]
    key = " | ".join([str(answer.status), *shown])
    if answer.status == 400:
        key += f" | body {body[:200]!r}"
    return Outcome(str(answer.status), key)
