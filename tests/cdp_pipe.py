"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages ending in NUL on fds 3 and 4), for pages that change while they are open: evaluate script
in the page over real time, take screenshots, collect console errors and uncaught exceptions."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from chromium_helpers import FLAGS


class Browser:
    """One headless Chromium with one page."""

    def __init__(self, binary: str, profile: Path, width: int = 1280, height: int = 800):
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()

        def wire() -> None:  # in the child: its fd 3 reads our commands, fd 4 carries its answers
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)
            for fd in (3, 4):  # dup2 onto itself (a process with few files open) keeps close-on-exec
                os.set_inheritable(fd, True)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"], preexec_fn=wire, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._next, self._answers, self.events = 0, {}, []
        self._cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                os.close(self._r)
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self._cv:
                    if "id" in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self._cv.notify_all()

    def call(self, method: str, session: bool = False, timeout: float = 30.0, **params: Any) -> dict:
        with self._cv:
            self._next += 1
            mid = self._next
        msg: dict[str, Any] = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cv:
            while mid not in self._answers:
                if not self._cv.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"no answer to {method} in {timeout} s")
            answer = self._answers.pop(mid)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def goto(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        return res.get("result", {}).get("value")

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", session=True, format="png")["data"]))
        return path

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads the page reported."""
        out = []
        with self._cv:
            events = list(self.events)
        for e in events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:500])
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:500])
            elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(json.dumps(p["entry"])[:500])
        return out

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        os.close(self._w)
