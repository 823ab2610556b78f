"""A local OIDC issuer for tests: an RSA key it generated, its JWKS served over HTTP on a free port, and tokens
it signs with any claims a test wants (expired, for another audience, from another issuer...)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


class LocalIssuer:
    def __init__(self, audience: str = "opsgraph") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "test-key-1"
        self.audience = audience
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks.json":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.issuer = self.url  # an issuer is a URL; this one is also where its keys are
        self.jwks_url = f"{self.url}/jwks.json"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def token(self, *, lifetime_s: float = 300, key: Any = None, **claims: Any) -> str:
        now = int(time.time())
        payload = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": "user-1",
            "iat": now,
            "exp": now + int(lifetime_s),
            **claims,
        }
        return jwt.encode(payload, key or self.key, algorithm="RS256", headers={"kid": self.kid})

    def env(self) -> dict[str, str]:
        """The settings that point opsgraph at this issuer."""
        return {
            "OPSGRAPH_OIDC_ISSUER": self.issuer,
            "OPSGRAPH_OIDC_AUDIENCE": self.audience,
            "OPSGRAPH_OIDC_JWKS_URL": self.jwks_url,
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
