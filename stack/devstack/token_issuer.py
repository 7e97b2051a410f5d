"""A small OIDC-style token issuer for the broker's OAUTHBEARER listener (client credentials).

It runs as its own supervised process, ``python -m devstack.token_issuer CONFIG.json``, and
serves HTTPS (the stack's CA) on the broker's host: ``/.well-known/openid-configuration``,
``/token`` (grant ``client_credentials``; ``client_secret_basic`` or ``client_secret_post``) and
``/jwks``; and plain HTTP on loopback with ``/jwks`` only, for the broker (Kafka fetches its JWKS
before any client connects, and plain HTTP spares it the private CA). Access tokens are JWTs
signed RS256 with a key made at start (its ``kid`` in the header), with ``iss``, ``sub`` (the
client id), ``aud=kafka``, ``scope``, ``iat`` and ``exp``: what the broker's validator (jose4j)
checks. Clients are registered by :meth:`TokenIssuer.register_client` in a 0600 file the process
reads on each token request (secrets kept as SHA-256 digests), so tests add clients at run time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from devstack.process import Service, free_port

AUDIENCE = "kafka"
DEFAULT_SCOPE = "kafka"
DEFAULT_LIFETIME = 3600  # seconds


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def issuer_url_of(host: str, port: int) -> str:
    """The issuer's URL (its ``iss`` claim) when it serves HTTPS on host:port."""
    return f"https://{host}:{port}"


def jwks_url_of(jwks_port: int) -> str:
    """The loopback JWKS URL (plain HTTP, for the broker) when it serves on ``jwks_port``."""
    return f"http://127.0.0.1:{jwks_port}/jwks"


def _signing_key() -> tuple[Any, dict[str, Any]]:
    """A fresh RSA key and its public JWK (``kid`` = the key's RFC 7638 thumbprint)."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk: dict[str, Any] = dict(RSAAlgorithm.to_jwk(key.public_key(), as_dict=True))
    thumbprint = json.dumps(
        {k: jwk[k] for k in ("e", "kty", "n")}, separators=(",", ":"), sort_keys=True
    )
    kid = base64.urlsafe_b64encode(hashlib.sha256(thumbprint.encode()).digest()).rstrip(b"=")
    jwk.update(kid=kid.decode(), use="sig", alg="RS256")
    return key, jwk


def sign(
    key: Any,
    kid: str,
    *,
    issuer: str,
    subject: str,
    scope: str,
    lifetime: int,
    audience: str = AUDIENCE,
) -> str:
    """An RS256 access token with the claims the broker validates."""
    import jwt

    now = int(time.time())
    claims = {
        "iss": issuer,
        "sub": subject,
        "aud": audience,
        "scope": scope,
        "iat": now,
        "exp": now + lifetime,
        "jti": secrets.token_hex(8),
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


# --- the server process ---------------------------------------------------------------------


class _Issuer:
    """The issuer's state in its process: config, signing key and client registry."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.issuer: str = config["issuer"]
        self.clients_file = Path(config["clients_file"])
        self.default_lifetime = int(config.get("token_lifetime", DEFAULT_LIFETIME))
        self.key, self.jwk = _signing_key()

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "response_types_supported": ["token"],
            "subject_types_supported": ["public"],
        }

    def client(self, client_id: str, secret: str) -> dict[str, Any] | None:
        """The registered client if ``secret`` is its secret (the file is read anew each time:
        the test process adds clients while this one runs)."""
        try:
            clients: dict[str, dict[str, Any]] = json.loads(self.clients_file.read_text())
        except (OSError, ValueError):
            return None
        entry = clients.get(client_id)
        if entry is None or not hmac.compare_digest(entry["secret_sha256"], _digest(secret)):
            return None
        return entry

    def token(self, form: Mapping[str, list[str]], authorization: str | None) -> tuple[int, Any]:
        """The /token answer: (HTTP status, JSON body), per RFC 6749 section 4.4 and 5."""
        client_id = secret = None
        if authorization and authorization.lower().startswith("basic "):
            try:
                pair = base64.b64decode(authorization[6:].strip()).decode()
            except (ValueError, UnicodeDecodeError):
                return 401, {"error": "invalid_client"}
            user, _, password = pair.partition(":")
            # RFC 6749 2.3.1: both form-urlencoded before base64 (a no-op for plain ids).
            client_id, secret = urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password)
        elif "client_id" in form and "client_secret" in form:
            client_id, secret = form["client_id"][0], form["client_secret"][0]
        if client_id is None or secret is None:
            return 401, {"error": "invalid_client"}
        entry = self.client(client_id, secret)
        if entry is None:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type", [""])[0] != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        scope = form.get("scope", [DEFAULT_SCOPE])[0] or DEFAULT_SCOPE
        lifetime = int(entry.get("token_lifetime") or self.default_lifetime)
        access_token = sign(
            self.key,
            self.jwk["kid"],
            issuer=self.issuer,
            subject=client_id,
            scope=scope,
            lifetime=lifetime,
        )
        return 200, {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": lifetime,
            "scope": scope,
        }


def _handler(issuer: _Issuer, *, full: bool) -> type[BaseHTTPRequestHandler]:
    """A request handler: every endpoint (``full``), or ``/jwks`` alone (the broker's side)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "deltaflow-token-issuer"

        def _send(self, status: int, body: Any, extra: Mapping[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for name, value in (extra or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path == "/jwks":
                self._send(200, {"keys": [issuer.jwk]})
            elif full and path == "/.well-known/openid-configuration":
                self._send(200, issuer.discovery())
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if not full or urllib.parse.urlsplit(self.path).path != "/token":
                self._send(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(length).decode(errors="replace"))
            status, body = issuer.token(form, self.headers.get("Authorization"))
            extra = {"WWW-Authenticate": 'Basic realm="deltaflow"'} if status == 401 else None
            self._send(status, body, extra)

    return Handler


class _TLSServer(ThreadingHTTPServer):
    """HTTPS with the handshake in the request's own thread (a stalled client blocks no other)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, context: ssl.SSLContext) -> None:
        super().__init__(address, handler)
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(10)
        super().finish_request(self.context.wrap_socket(request, server_side=True), client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        print(f"request from {client_address} failed: {sys.exc_info()[1]!r}", file=sys.stderr)


def serve(config: Mapping[str, Any]) -> None:
    """Serve until killed (the supervisor sends SIGTERM)."""
    issuer = _Issuer(config)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(config["cert"], config["key"])
    https = _TLSServer((config["host"], config["port"]), _handler(issuer, full=True), context)
    jwks = ThreadingHTTPServer(("127.0.0.1", config["jwks_port"]), _handler(issuer, full=False))
    jwks.daemon_threads = True
    threading.Thread(target=jwks.serve_forever, daemon=True).start()
    print(f"token issuer {issuer.issuer} serving; JWKS for the broker on {jwks.server_address}")
    https.serve_forever()


# --- the test side ----------------------------------------------------------------------------


@dataclass
class TokenIssuer:
    """A running issuer, as tests see it."""

    issuer: str  # the ``iss`` claim and base URL, https://<host>:<port>
    ca_file: Path  # trusts the HTTPS endpoints
    local_jwks_url: str  # http://127.0.0.1:<port>/jwks, what the broker fetches
    clients_file: Path
    service: Service
    audience: str = AUDIENCE
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def token_url(self) -> str:
        """The token endpoint (client credentials)."""
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        """The HTTPS JWKS endpoint (the discovery document's ``jwks_uri``)."""
        return f"{self.issuer}/jwks"

    def register_client(self, client_id: str, *, token_lifetime: int | None = None) -> str:
        """Register (or re-register) a client; return its new secret. ``token_lifetime``
        (seconds) overrides the issuer's default for this client's tokens."""
        secret = secrets.token_urlsafe(24)
        with self._lock:
            try:
                clients = json.loads(self.clients_file.read_text())
            except FileNotFoundError:
                clients = {}
            clients[client_id] = {
                "secret_sha256": _digest(secret),
                "token_lifetime": token_lifetime,
            }
            _write_private(self.clients_file, json.dumps(clients, indent=1))
        return secret

    def fetch_token(self, client_id: str, secret: str, scope: str | None = None) -> str:
        """An access token from the token endpoint (client_secret_basic), as a client gets it."""
        form = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
        basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
        request = urllib.request.Request(
            self.token_url,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Authorization": f"Basic {basic}"},
        )
        with _open(request, self.ca_file) as resp:
            token: str = json.load(resp)["access_token"]
        return token

    def foreign_token(
        self, subject: str, *, scope: str = DEFAULT_SCOPE, lifetime: int = 300
    ) -> str:
        """A token like the issuer's (same ``iss``, ``aud`` and ``kid``) but signed by another
        key: what a forger would present. The broker must refuse it."""
        key, _ = _signing_key()
        with _open(self.local_jwks_url) as resp:
            kid = json.load(resp)["keys"][0]["kid"]
        return sign(
            key, kid, issuer=self.issuer, subject=subject, scope=scope, lifetime=lifetime,
            audience=self.audience,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the issuer process."""
        self.service.stop()


def _open(request: str | urllib.request.Request, ca_file: Path | None = None) -> Any:
    """urlopen without any proxy from the environment: every endpoint here is on this machine."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if ca_file is not None:
        context = ssl.create_default_context(cafile=str(ca_file))
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers).open(request, timeout=10)


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a 0600 file holding ``text`` (a reader never sees half)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _ready(issuer: TokenIssuer) -> bool:
    with _open(issuer.local_jwks_url) as resp:
        if resp.status != 200:
            return False
    with _open(f"{issuer.issuer}/.well-known/openid-configuration", issuer.ca_file) as resp:
        return bool(json.load(resp)["issuer"] == issuer.issuer)


def start_issuer(
    work_dir: Path,
    host: str,
    *,
    ca_file: Path,
    cert: Path,
    key: Path,
    token_lifetime: int = DEFAULT_LIFETIME,
    ports: tuple[int, int] | None = None,
) -> TokenIssuer:
    """Start the issuer process (HTTPS on ``host``, JWKS over HTTP on loopback; ``ports``: those
    two ports, else free ones). Returns at once: call :func:`wait_issuer` before a client (or the
    broker) needs it."""
    work_dir.mkdir(parents=True, exist_ok=True)
    work_dir.chmod(0o700)
    port, jwks_port = ports or (free_port(), free_port())
    issuer_url = issuer_url_of(host, port)
    clients_file = work_dir / "clients.json"
    _write_private(clients_file, "{}")
    config = {
        "issuer": issuer_url,
        "host": host,
        "port": port,
        "jwks_port": jwks_port,
        "cert": str(cert),
        "key": str(key),
        "clients_file": str(clients_file),
        "token_lifetime": token_lifetime,
    }
    config_file = work_dir / "issuer.json"
    _write_private(config_file, json.dumps(config, indent=1))
    paths = [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    service = Service(
        "token-issuer",
        [sys.executable, "-m", "devstack.token_issuer", str(config_file)],
        work_dir / "token-issuer.log",
        env=env,
    )
    service.start()
    return TokenIssuer(
        issuer=issuer_url,
        ca_file=ca_file,
        local_jwks_url=jwks_url_of(jwks_port),
        clients_file=clients_file,
        service=service,
    )


def wait_issuer(issuer: TokenIssuer, timeout: float = 30.0) -> None:
    """Wait until both endpoints answer; stop the process and raise if they do not."""
    try:
        issuer.service.wait_ready(lambda: _ready(issuer), timeout, "serving its JWKS")
    except BaseException:
        issuer.stop()
        raise


def main(argv: list[str]) -> int:
    """``python -m devstack.token_issuer CONFIG.json``."""
    if len(argv) != 1:
        print("usage: python -m devstack.token_issuer CONFIG.json", file=sys.stderr)
        return 2
    serve(json.loads(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
