"""Who may talk to the daemon, and how much they may send: one ASGI middleware.

- With a token (`--token` or PRECISION_DOCTOR_TOKEN), every request but /healthz and /login needs
  it: `Authorization: Bearer T`, or the `pd_token` cookie that /login sets for browsers; else 401.
- Without a token the daemon listens on loopback only, and refuses Host headers other than
  localhost / 127.0.0.1 / [::1] (a web page cannot reach it through DNS rebinding).
- Request bodies above the upload limit get 413: at once from Content-Length, or as soon as a
  streamed body passes the limit. The rest of the body is read and discarded first (up to
  DRAIN_LIMIT bytes), so the client, still sending, reads the 413 instead of a reset connection.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from fastapi import HTTPException

COOKIE = "pd_token"
OPEN_PATHS = ("/healthz", "/login")
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")
DRAIN_LIMIT = 64 << 20  # bytes of an over-limit body read (and dropped) before the 413; beyond: close


def token_ok(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def request_token(headers: dict[str, str]) -> str | None:
    """The bearer token of a request, or its cookie."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    for part in headers.get("cookie", "").split(";"):
        k, _, v = part.strip().partition("=")
        if k == COOKIE:
            return v
    return None


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
        path = scope.get("path", "")
        if self.token is None:
            if _host_name(headers.get("host", "")).lower() not in _LOOPBACK_HOSTS:
                return await _reply(send, 421, "this daemon answers only to localhost names (start it with --token to "
                                    "serve other addresses)")
        elif path not in OPEN_PATHS and not token_ok(request_token(headers), self.token):
            if scope.get("method") == "GET" and (path == "/" or path.startswith("/ui")):
                return await _redirect(send, "/login")
            return await _reply(send, 401, "missing or wrong token (send 'Authorization: Bearer TOKEN')",
                                [(b"www-authenticate", b"Bearer")])
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
