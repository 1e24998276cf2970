"""Ctrl-C that is not lost.

CPython drops a KeyboardInterrupt raised while it runs a weakref callback or a `__del__` (it prints
"Exception ignored in ..." and goes on), and that is where SIGINT often lands right after a long ONNX
Runtime call: a user's Ctrl-C during capture then did nothing. The handler installed here also
records the request, and `check()` at safe points (each oracle evaluation, each capture run) raises
it again. Whoever handles the interrupt calls `clear()`.
"""

from __future__ import annotations

import signal
import sys
import threading

_pending = False


def _handler(signum, frame) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def _unraisable(info, _default=sys.unraisablehook) -> None:
    """CPython's "Exception ignored in ..." note, without the swallowed Ctrl-C (check() raises it again)."""
    if not (isinstance(info.exc_value, KeyboardInterrupt) and _pending):
        _default(info)


def install() -> None:
    """Use our SIGINT handler where Python's default one is in place (an ignored SIGINT stays ignored)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _handler)
        sys.unraisablehook = _unraisable


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived and was swallowed on its way."""
    if _pending:
        raise KeyboardInterrupt


def clear() -> None:
    """The interrupt has been handled."""
    global _pending
    _pending = False
