"""The fetched zoo as the benchmarks read it: each model with its recipe's samples and tolerance."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from precision_doctor.batch.recipes import discover
from precision_doctor.data.workload import load_workload
from precision_doctor.graph.model import Model
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.spec import RunSpec


@dataclass
class ZooWork:
    """One zoo model ready to search: name (`zoo:NAME`), file, loaded model, samples, tolerance."""

    name: str
    path: Path
    model: Model
    samples: list
    tol: Tolerance


def zoo_works(zoo_dir: Path, only: set[str] | None = None) -> list[ZooWork]:
    """Every model of `zoo_dir` (recipes read by precision_doctor.batch.recipes), or those named in `only`
    (`NAME` or `zoo:NAME`). A model that fails to load is reported and left out."""
    if not zoo_dir.is_dir() or not any(zoo_dir.glob("*.onnx")):
        print(f"no fetched models in {zoo_dir} (precision-doctor zoo fetch --dest {zoo_dir}); skipping the zoo",
              file=sys.stderr)
        return []
    out = []
    for spec in discover(zoo_dir, RunSpec(model="")):
        name = f"zoo:{spec.name}"
        if only and name not in only and spec.name not in only:
            continue
        if spec.error:
            print(f"{name}: {spec.error}", file=sys.stderr)
            continue
        try:
            work = load_workload(spec.spec)
        except Exception as exc:  # one model's trouble does not stop the others
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        out.append(ZooWork(name, spec.path, work.model, work.samples, spec.spec.tolerance))
    return out


def batch_answer(batch_dir: Path, work: ZooWork) -> frozenset[str] | None:
    """The fallback set a `precision-doctor batch` run found for this model (BATCH_DIR/<model>/report.json)."""
    report = batch_dir / work.name.removeprefix("zoo:") / "report.json"
    return frozenset(json.loads(report.read_text())["fallback_nodes"]) if report.is_file() else None
