"""The backend protocol that the oracle talks to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

Feeds = Mapping[str, np.ndarray]


class Runner(Protocol):
    """Runs one prepared configuration."""

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...


class Backend(Protocol):
    """Turns a fallback set into a runner. `name` appears in reports."""

    name: str
    precision: str

    def prepare(self, fallback: frozenset[str]) -> Runner: ...
