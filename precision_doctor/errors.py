"""Errors a user can fix: the CLI prints them as one line and exits 2."""

from __future__ import annotations

import re
from collections.abc import Callable

_PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[a-z_]+)*)\}")


class UserError(Exception):
    """Bad input or usage; the message is shown to the user as is."""


class SpecError(UserError):
    """A setting (`RunSpec` path such as "search.margin", or a run option such as "out_dir") is bad.

    The message names settings as `{path}` placeholders, so that each front end shows its own names:
    `str()` shows the paths ("search.margin must lie in [0, 1)"), the CLI its flags
    (`render(flag_of)`: "--margin must lie in [0, 1)"), the batch its recipe keys."""

    def __init__(self, setting: str, message: str):
        self.setting = setting
        self.template = message
        super().__init__(self.render())

    def render(self, name: Callable[[str], str] = str) -> str:
        """The message with every `{path}` replaced by `name(path)`."""
        return _PLACEHOLDER.sub(lambda m: name(m.group(1)), self.template)


def one_line(exc: BaseException, name: Callable[[str], str] = str) -> str:
    """An exception as one line of at most 300 characters: a UserError's message (settings named by
    `name`), anything else as "Type: message"."""
    text = (exc.render(name) if isinstance(exc, SpecError) else str(exc)).strip().splitlines()
    msg = text[0] if text else ""
    return msg[:300] if isinstance(exc, UserError) else f"{type(exc).__name__}: {msg}"[:300]
