"""Shared fixtures: planted-defect models on disk, a CLI runner that goes through `main()`, headless Chromium."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from chromium_helpers import chromium  # noqa: F401 (a fixture for the browser tests)

from precision_doctor import planted


@pytest.fixture
def planted_file(tmp_path):
    """Write a planted case and its samples to disk: returns (case, model_path, [npz paths])."""

    def make(name: str, n: int = 4, seed: int = 0):
        case = planted.CASES[name]()
        path = tmp_path / f"{name}.onnx"
        onnx.save(case.model, str(path))
        files = []
        for i, s in enumerate(case.samples(n, seed)):
            f = tmp_path / f"{name}_{i}.npz"
            np.savez(f, **s)
            files.append(f)
        return case, path, files

    return make


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """Run the CLI in-process through `main()`; returns (exit code, stdout, stderr)."""

    def run(*args: str):
        from precision_doctor.cli import main

        monkeypatch.setattr(sys, "argv", ["precision-doctor", *map(str, args)])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
