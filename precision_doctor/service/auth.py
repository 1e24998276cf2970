"""Who may talk to the daemon, and how much they may send: one ASGI middleware.

- With a token (`--token` or PRECISION_DOCTOR_TOKEN), every request but /healthz and /login needs
  it: `Authorization: Bearer T`, or the `pd_session` cookie that /login sets for browsers (an HMAC of
  the token, not the token); else 401.
- Without a token the daemon listens on loopback only, and refuses Host headers other than
  localhost / 127.0.0.1 / [::1] (a web page cannot reach it through DNS rebinding).
- A request that changes something (any method but GET, HEAD, OPTIONS) is refused (403) when the
  browser says it comes from another site (`Sec-Fetch-Site: cross-site` or `same-site`: another port
  of localhost is the same site) or from another origin (an `Origin` header whose host and port are
  not the Host the request was sent to): a web page cannot submit or cancel jobs, even on a token-less
  daemon, though a multipart POST needs no CORS preflight. Clients that are not browsers send neither
  header and are not affected.
- A browser signed in with the cookie must also send the `X-CSRF-Token` header (`csrf_value`, which
  the pages carry) with such a request; bearer-token clients need not.
- Request bodies above the upload limit get 413: at once from Content-Length, or as soon as a
  streamed body passes the limit. The rest of the body is read and discarded first (up to
  DRAIN_LIMIT bytes), so the client, still sending, reads the 413 instead of a reset connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any
from urllib.parse import urlsplit

from fastapi import HTTPException

COOKIE = "pd_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
TOKEN_ALPHABET = re.compile(r"[A-Za-z0-9._~+/=-]{8,512}")  # what a header and a cookie carry unquoted
OPEN_PATHS = ("/healthz", "/login")
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")
DRAIN_LIMIT = 64 << 20  # bytes of an over-limit body read (and dropped) before the 413; beyond: close


def token_ok(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def token_problem(token: str) -> str | None:
    """Why `token` cannot be the daemon's token (None: it can)."""
    if len(token) < 8:
        return "must be at least 8 characters"
    if not TOKEN_ALPHABET.fullmatch(token):
        return "may hold only letters, digits and . _ ~ + / = - (8 to 512 characters)"
    return None


def _derived(token: str, purpose: bytes) -> str:
    return hmac.new(token.encode(), b"precision-doctor " + purpose, hashlib.sha256).hexdigest()


def session_value(token: str) -> str:
    """The value of the sign-in cookie for `token` (the token itself never goes into a cookie)."""
    return _derived(token, b"session v1")


def csrf_value(token: str) -> str:
    """The X-CSRF-Token that a page signed in with the cookie sends with requests that change something."""
    return _derived(token, b"csrf v1")


def bearer(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def cookie(headers: dict[str, str], name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v.strip('"')
    return None


def cross_site(headers: dict[str, str]) -> str | None:
    """Why a request that changes something must be refused as coming from another site (None: it need not)."""
    site = headers.get("sec-fetch-site", "").lower()
    if site in ("cross-site", "same-site"):
        return f"refused: a {site} request (Sec-Fetch-Site) may not change anything on this daemon"
    origin = headers.get("origin")
    if origin is not None and not _same_origin(origin, headers.get("host", "")):
        return f"refused: the request comes from another origin ({origin[:100]}) than this daemon's"
    return None


def _same_origin(origin: str, host: str) -> bool:
    """Whether the browser's `Origin` names the host and port the request was sent to (its Host header)."""
    try:
        parts = urlsplit(origin)
        netloc = parts.netloc.lower()
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not netloc:
        return False  # "null" (a sandboxed frame, a file: page), or something else
    return _without_default_port(netloc, parts.scheme) == _without_default_port(host.lower(), parts.scheme)


def _without_default_port(netloc: str, scheme: str) -> str:
    default = ":443" if scheme == "https" else ":80"
    return netloc[: -len(default)] if netloc.endswith(default) else netloc


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """The middleware (see the module docstring)."""

    def __init__(self, app: Any, token: str | None, max_bytes: int):
        self.app, self.token, self.max_bytes = app, token, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if self.token is None and _host_name(headers.get("host", "")).lower() not in _LOOPBACK_HOSTS:
            return await _reply(send, 421, "this daemon answers only to localhost names (start it with --token to "
                                "serve other addresses)")
        changes = method not in SAFE_METHODS
        if changes and (why := cross_site(headers)):
            return await _reply(send, 403, why)
        if self.token is not None and path not in OPEN_PATHS:
            given = bearer(headers)
            by_cookie = given is None
            if not (token_ok(given, self.token) if given is not None
                    else token_ok(cookie(headers, COOKIE), session_value(self.token))):
                if method == "GET" and (path == "/" or path.startswith("/ui")):
                    return await _redirect(send, "/login")
                return await _reply(send, 401, "missing or wrong token (send 'Authorization: Bearer TOKEN')",
                                    [(b"www-authenticate", b"Bearer")])
            if changes and by_cookie and not token_ok(headers.get(CSRF_HEADER), csrf_value(self.token)):
                return await _reply(send, 403, "refused: a request of a signed-in page must carry its X-CSRF-Token "
                                    "(reload the page)")
        length = headers.get("content-length")
        if length and length.isdigit() and int(length) > self.max_bytes:
            await _drain(receive, 0)
            return await _reply(send, 413, f"the request is {int(length)} bytes; the limit is {self.max_bytes} "
                                "(--max-upload-mb)", close=True)
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    if message.get("more_body", False):
                        await _drain(receive, seen)
                    raise HTTPException(413, f"the request body passed the limit of {self.max_bytes} bytes (--max-upload-mb)")
            return message

        await self.app(scope, counted, send)


async def _drain(receive: Any, seen: int) -> None:
    """Read and drop the rest of a request body, up to DRAIN_LIMIT bytes in all."""
    while seen <= DRAIN_LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _reply(send: Any, status: int, detail: str, extra: list | None = None, close: bool = False) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Any, location: str) -> None:
    await send({"type": "http.response.start", "status": 303,
                "headers": [(b"location", location.encode()), (b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})
