"""Console sessions: a signed, expiring cookie naming the user, and CSRF checks.

The cookie value is `base64url(json payload) . base64url(HMAC-SHA256)`; the payload holds the
access key, the expiry, a random CSRF token and a short fingerprint of the user's secret key
(so changing a user's key in the config ends that user's sessions). The MAC key is derived
from the cluster secret, so every gateway worker (and every gateway of the cluster) accepts
the sessions of the others and a restart keeps them. Nothing in the cookie is secret: it
carries no key material, only proof that the gateway issued it. The stdlib's hmac does this
in a few lines; itsdangerous (starlette's SessionMiddleware) would be a new dependency for the
same thing.

CSRF: the cookie is SameSite=Strict and HttpOnly, and every state-changing request (login,
logout) must also come with an Origin (or, failing that, Referer) of this very host; logout
must in addition send the session's CSRF token in `X-CSRF-Token` (double submit: a page of
another origin can neither read the token nor set the header on a cross-site form).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

COOKIE = "zonegate_console"
COOKIE_PATH = "/console"
SESSION_SECONDS = 12 * 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Only the one spelling `_b64` gives: a decoder ignores the spare bits of the last
    character (and skips characters outside the alphabet), so several cookie strings would
    otherwise carry the same bytes and MAC."""
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not canonical base64url")
    return data


def key_fingerprint(secret_key: str) -> str:
    return hashlib.sha256(b"zonegate-console-key\0" + secret_key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Session:
    access_key: str
    expires: float
    csrf: str
    fingerprint: str


class SessionSigner:
    def __init__(self, cluster_secret: str, lifetime: float = SESSION_SECONDS) -> None:
        self._key = hmac.new(cluster_secret.encode(), b"zonegate-console-session-v1",
                             hashlib.sha256).digest()
        self.lifetime = lifetime

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def issue(self, access_key: str, secret_key: str) -> tuple[str, Session]:
        s = Session(access_key, float(int(time.time() + self.lifetime)), secrets.token_urlsafe(24),
                    key_fingerprint(secret_key))
        payload = json.dumps({"ak": s.access_key, "exp": int(s.expires), "csrf": s.csrf,
                              "fp": s.fingerprint}, separators=(",", ":")).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}", s

    def verify(self, value: str | None, users: dict[str, Any]) -> Session | None:
        """The session a cookie value proves, or None (bad MAC, expired, user or key gone)."""
        if not value or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        try:
            payload, given = _unb64(body), _unb64(mac)
        except (ValueError, TypeError):
            return None
        if not hmac.compare_digest(self._mac(payload), given):
            return None
        try:
            d = json.loads(payload)
            s = Session(str(d["ak"]), float(d["exp"]), str(d["csrf"]), str(d["fp"]))
        except (ValueError, KeyError, TypeError):
            return None
        user = users.get(s.access_key)
        if s.expires < time.time() or user is None:
            return None
        if not hmac.compare_digest(s.fingerprint, key_fingerprint(user.secret_key)):
            return None
        return s


def cookie_header(value: str, *, secure: bool, max_age: int) -> str:
    parts = [f"{COOKIE}={value}", f"Path={COOKIE_PATH}", f"Max-Age={max_age}", "HttpOnly",
             "SameSite=Strict"]
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def same_origin(headers: Any) -> bool:
    """Whether the request's Origin (else Referer) names this host. Browsers send Origin on
    every POST; a request with neither is refused (a console request always comes from a
    browser page of the console). The scheme may differ from the one the gateway sees: a
    TLS-terminating proxy in front turns https into http."""
    host = (headers.get("host") or "").lower()
    if not host:
        return False
    origin = headers.get("origin")
    if origin is None:
        referer = headers.get("referer")
        if not referer:
            return False
        origin = referer
    if origin == "null":
        return False
    u = urlsplit(origin)
    return u.scheme in ("http", "https") and (u.netloc or "").lower() == host
