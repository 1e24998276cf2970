"""The fetched zoo as the benchmarks read it: each model with its recipe's samples and tolerance."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from precision_doctor.batch.recipes import discover
from precision_doctor.data.inputs import InputValues
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
            work = load_workload(spec.spec.model, spec.spec.inputs, InputValues.parse(spec.spec.inputs))
        except Exception as exc:  # one model's trouble does not stop the others
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        out.append(ZooWork(name, spec.path, work.model, list(work.samples), spec.spec.tolerance))  # a few: in memory
    return out


def batch_answer(batch_dir: Path, work: ZooWork) -> frozenset[str] | None:
    """The fallback set a `precision-doctor batch` run found for this model (BATCH_DIR/<model>/report.json)."""
    report = batch_dir / work.name.removeprefix("zoo:") / "report.json"
    return frozenset(json.loads(report.read_text())["answer"]["fallback_nodes"]) if report.is_file() else None


UNSEEN_SEED_OFFSET = 20_000  # generated unseen samples: the recipe's seed + this (held-out ones use + 7919)


def unseen_samples(name: str, spec: RunSpec, model: Model, n: int) -> list:
    """`n` samples from the same recipe that neither the search nor the held-out check saw: generated
    with another seed, or (file inputs rendered at fetch time, `zoo.synthetic`) rendered afresh: text
    pages with the seeds after the recipe's, direction-classifier crops chosen by the FP32 model as the
    recipe's were, after them. None where the recipe's inputs cannot be made again here."""
    from precision_doctor.data.inputs import generate_samples, parse_val_ranges
    from precision_doctor.zoo import synthetic
    from precision_doctor.zoo.registry import registry

    inputs = spec.inputs
    if not inputs.files:
        return generate_samples(model, n, inputs.seed + UNSEEN_SEED_OFFSET, parse_val_ranges(inputs.val_ranges))
    known = {m.name: m for m in registry()}
    entry = known.get(name)
    if entry is None or entry.synthetic is None:
        return None
    kind, done, h, w = entry.synthetic
    x = model.inputs[0]
    if kind == "text_page":
        return [{x: synthetic._to_ppocr(synthetic.text_image(h, w, seed=done + i))} for i in range(n)]
    if kind == "cls_crops":
        with synthetic.cls_prob_180(Path(spec.model), h, w) as prob:
            picks = synthetic.select_cls_crops(done + n, h, w, prob)[done:]
        return [{x: synthetic.text_crop(seed, hard, h, w)} for seed, hard, _ in picks]
    return None
