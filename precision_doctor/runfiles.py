"""The run directory as the code that writes there sees it: a `RunDir`, made once where a run (or a command that
updates a run directory) starts and passed down to whatever writes files there, which calls `written(path)`
before each write. Code given None (a test, a bench script, a temporary build folder, zoo fetch) records nothing.

The manifest itself (its file, `--force`, `NotOurs`) is `manifest.py`; only this module and what makes run
directories (results/rundir, batch) import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from precision_doctor import manifest


@dataclass(frozen=True)
class RunDir:
    """The run directory `root`; `written(path)` records a file about to be written there in its manifest."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    def written(self, path: Path) -> None:
        """Record `path` (in `root` or a subfolder of it, such as knobs/) in the manifest before it is written (a
        kill between the two leaves a listed file that does not exist, never an unlisted one of ours).
        `manifest.NotOurs` when `path` exists and the manifest does not list it. Nothing where `root` has no
        manifest (not a run directory: a user's folder). ValueError for a path outside `root`."""
        path = Path(path)
        folder = Path(os.path.relpath(os.path.realpath(path.parent), os.path.realpath(self.root)))
        if folder.parts[:1] == ("..",) or len(folder.parts) > 1:
            raise ValueError(f"{path} is not in the run directory {self.root}")
        manifest.record(self.root, self.root / folder / path.name)

    def ours(self, path: Path) -> bool:
        """Whether the manifest lists `path` (a file of an earlier run of ours, which this run may remove)."""
        return manifest.ours(path)
