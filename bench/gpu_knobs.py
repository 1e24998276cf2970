"""Knobs as part of the search, measured on ORT CUDA: can a provider-option configuration alone, or
with a smaller FP32 set, replace an answer? (`precision_doctor.backends.knobs`: cudnn_conv_algo_search
EXHAUSTIVE/HEURISTIC/DEFAULT x use_tf32 0/1.)

For every model it runs `knobs.knob_plan`: the answer under the default configuration, each other
configuration alone (all FP16), then each configuration with the answer less one node; each trial on
every sample against the FP32 reference (ONNX Runtime CPU), with the model's tolerance. It reports
each trial's verdict and share of the tolerance, and the best trial (fewest FP32 nodes).

Two steps. Here (full install), stage the zoo answers of a batch run into a folder that travels:

    .venv/bin/python bench/gpu_knobs.py stage --runs reports/batch-zoo --out .gpu/knobs

On the GPU machine (needs onnxruntime-gpu, numpy, onnx, h5py and ml-dtypes, and this repository on
PYTHONPATH; no polygraphy, onnx-graphsurgeon, typer or matplotlib), planted suite and staged zoo:

    python3 bench/gpu_knobs.py run --stage .gpu/knobs --planted --out $OUT

`--provider cpu` runs the same plan on ONNX Runtime's CPU provider (the knobs then do nothing: a
plumbing check, not a measurement). Results: $OUT/gpu_knobs.json and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from precision_doctor import planted
from precision_doctor.backends import knobs
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.data.inputs import load_samples
from precision_doctor.graph.model import from_proto, load_model
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.validation import check_on_samples


def stage(runs: Path, out: Path) -> None:
    """Copy what the GPU side needs of each passing zoo answer: the model as diagnosed (node names and
    input shapes as in the report), the samples as .npz files, the answer and the tolerance."""
    for report in sorted(runs.glob("*/report.json")):
        rep = json.loads(report.read_text())
        if not rep.get("passed"):
            print(f"{report.parent.name}: no passing answer; not staged")
            continue
        dest = out / report.parent.name
        (dest / "samples").mkdir(parents=True, exist_ok=True)
        model = load_model(rep["model"]["path"], input_shapes=_input_shapes(report.parent / "fixed.onnx"))
        from precision_doctor.graph.toolnames import save_model

        save_model(model.proto, dest / "model.onnx")
        for i, sample in enumerate(load_samples([report.parent / "inputs.json"])):
            np.savez(dest / "samples" / f"sample_{i}.npz", **sample)
        answer = {k: rep[k] for k in ("fallback_nodes", "precision", "tolerance")}
        (dest / "answer.json").write_text(json.dumps(answer, indent=1) + "\n")
        print(f"{report.parent.name}: staged {len(rep['fallback_nodes'])} FP32 node(s) -> {dest}")


def _input_shapes(fixed: Path) -> dict[str, list[int]] | None:
    """The input shapes the run fixed (fixed.onnx carries them), where all dims are known."""
    import onnx

    shapes = {}
    for vi in onnx.load(str(fixed), load_external_data=False).graph.input:
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = [d.dim_value for d in dims]
    return shapes or None


def _works(stage_dir: Path | None, with_planted: bool, only: set[str] | None) -> list[tuple]:
    """(name, model, samples, answer, precision, tolerance) of each planted case and staged zoo model."""
    works = []
    if with_planted:
        for name, make in planted.CASES.items():
            if only and f"planted:{name}" not in only:
                continue
            case = make()
            works.append((f"planted:{name}", from_proto(case.model), case.samples(6, seed=1), sorted(case.expected),
                          "fp16", Tolerance(case.atol, case.rtol)))
    for folder in sorted(stage_dir.iterdir()) if stage_dir is not None else []:
        answer_file = folder / "answer.json"
        if not answer_file.is_file() or (only and f"zoo:{folder.name}" not in only):
            continue
        ans = json.loads(answer_file.read_text())
        t = ans["tolerance"]
        tol = Tolerance(t["atol"], t["rtol"], t.get("check_error_stat", "elemwise"), t.get("cosine_floor"))
        samples = load_samples(sorted((folder / "samples").glob("*.npz"), key=lambda p: int(p.stem.split("_")[-1])))
        works.append((f"zoo:{folder.name}", load_model(folder / "model.onnx"), samples, ans["fallback_nodes"],
                       ans["precision"], tol))
    return works


def run(stage_dir: Path | None, with_planted: bool, provider: str, out: Path, only: set[str] | None = None) -> None:
    configs = knobs.ort_cuda_configs()
    results = []
    for name, model, samples, answer, precision, tol in _works(stage_dir, with_planted, only):
        ref = ReferenceRunner(model)
        refs = [ref.run(s) for s in samples]
        backends: dict[str, OrtBackend] = {}
        trials = []
        for trial in knobs.knob_plan(answer, configs):
            cfg = trial.knobs
            if cfg.label not in backends:
                providers = knobs.ort_providers(cfg) if provider == "cuda" else ["CPUExecutionProvider"]
                backends[cfg.label] = OrtBackend(model, precision, providers=providers)
            t0 = time.perf_counter()
            res = check_on_samples(backends[cfg.label], trial.fallback, samples, refs, tol)
            used = max((o.tol_used for o in res.outputs.values()), default=float("nan"))
            trials.append((trial, res.passed, used, time.perf_counter() - t0))
        best = knobs.best_trial([(t, ok) for t, ok, _, _ in trials])
        row = {
            "model": name, "answer": answer, "provider": provider,
            "trials": [{"knobs": t.knobs.label, "fallback": sorted(t.fallback), "why": t.why, "passed": ok,
                        "tol_used": used, "seconds": round(s, 3)} for t, ok, used, s in trials],
            "best": None if best is None else {"knobs": best.knobs.label, "fallback": sorted(best.fallback),
                                               "providers": knobs.ort_providers_text(best.knobs)},
        }
        results.append(row)
        print(json.dumps({k: row[k] for k in ("model", "best")}), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_knobs.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(summary(results))


def summary(results: list[dict]) -> str:
    """One line per model: the answer's share of the tolerance, the configurations that pass alone,
    how many smaller sets pass (under which configurations), and the best trial."""
    lines = ["| model | answer | tolerance used by the answer | knobs alone that pass | smaller sets that pass | best |",
             "|---|---|---|---|---|---|"]
    for r in results:
        base = r["trials"][0]
        alone = [t["knobs"] for t in r["trials"] if t["why"] == "knobs alone" and t["passed"]]
        smaller = [f"{t['knobs']} without {t['why'].removeprefix('the answer less ')}" for t in r["trials"]
                   if t["why"].startswith("the answer less") and t["passed"]]
        best = r["best"]
        best_text = "none" if best is None else f"{best['knobs']}, {len(best['fallback'])} FP32 node(s)"
        lines.append(f"| {r['model']} | {len(r['answer'])} | {base['tol_used']:.3g} ({'pass' if base['passed'] else 'FAIL'}) "
                     f"| {', '.join(alone) or 'none'} | {len(smaller)}: {'; '.join(smaller[:3]) or '-'} | {best_text} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage", help="here: stage a batch run's zoo answers for the GPU machine")
    st.add_argument("--runs", type=Path, required=True)
    st.add_argument("--out", type=Path, required=True)
    rn = sub.add_parser("run", help="on the GPU machine: run the knob plan")
    rn.add_argument("--stage", type=Path, default=None)
    rn.add_argument("--planted", action="store_true", help="also the planted suite (made on the spot)")
    rn.add_argument("--provider", choices=("cuda", "cpu"), default="cuda")
    rn.add_argument("--out", type=Path, required=True)
    rn.add_argument("--only", action="append", default=None, help="planted:NAME or zoo:NAME (repeatable)")
    args = ap.parse_args()
    if args.cmd == "stage":
        stage(args.runs, args.out)
    else:
        run(args.stage, args.planted, args.provider, args.out, set(args.only) if args.only else None)


if __name__ == "__main__":
    main()
