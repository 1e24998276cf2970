"""Headless Chromium for the browser tests: the binary, a fixture that skips without it, one run, and the
page's console problems."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
]
TIMEOUT_S = 45


@pytest.fixture(scope="module")
def chromium() -> str:
    if not CHROMIUM:
        pytest.skip("no chromium binary (install the `chromium` package)")
    return CHROMIUM


def run_chromium(binary: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish in {TIMEOUT_S} s: {' '.join(cmd)}")


def console_problems(stderr: str, page: Path) -> list[str]:
    """Console lines from our page (Chromium logs them as `INFO:CONSOLE...` with --enable-logging=stderr)."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln and (page.name in ln or "Uncaught" in ln)]
