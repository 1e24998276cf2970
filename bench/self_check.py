"""The GPU scripts' own plumbing, on ONNX Runtime's CPU provider: each runs end to end with the CPU standing in
for the GPU and writes what the GPU run would (its numbers mean nothing: the CPU computes FP16 nodes in FP32).
Not part of the test suite (tests/ never imports bench/); run it here before a GPU session, after changing a
GPU script or what it imports:

    .venv/bin/python bench/self_check.py                  # every check (about 3 minutes on 2 cores)
    .venv/bin/python bench/self_check.py opprobe knobs    # some

Exit status 1 when a check fails (its assertion printed), 0 when all pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import onnx
from natural_images import natural_image, natural_images_nchw
from onnx import TensorProto, helper, numpy_helper
from probe_models import IMAGENET, Builder, Probe, load_probes, write_manifest

from precision_doctor import planted
from precision_doctor.backends import knobs as knob_configs
from precision_doctor.measure.node_fixture import read_fixture
from precision_doctor.planted import IR_VERSION

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, cwd=ROOT, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _hardswish_model() -> onnx.ModelProto:
    """Conv -> BatchNormalization-15 -> HardSwish -> GlobalAveragePool: a PP-LCNet block in miniature."""
    rng = np.random.default_rng(3)
    f32 = lambda name, v: numpy_helper.from_array(np.asarray(v, np.float32), name)  # noqa: E731
    inits = [f32("w", rng.standard_normal((4, 3, 3, 3)) * 0.4), f32("s", rng.uniform(0.5, 2, 4)),
             f32("b", rng.standard_normal(4)), f32("m", rng.standard_normal(4) * 0.1), f32("v", rng.uniform(1e-4, 1e-2, 4))]
    node = helper.make_node
    nodes = [node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn", epsilon=1e-5),
             node("HardSwish", ["n"], ["h"], name="hswish"),
             node("GlobalAveragePool", ["h"], ["y"], name="gap")]
    vi = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    g = helper.make_graph(nodes, "hswish", [vi("x", [1, 3, 8, 8])], [vi("y", [1, 4, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=IR_VERSION)


def check_natural_images(tmp: Path) -> None:
    """natural_images.py: renders that look like images (the calibration and batching scripts' samples)."""
    a, b = natural_image(64, 80, 0), natural_image(64, 80, 0)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (64, 80, 3) and a.dtype == np.float32 and 0 <= a.min() and a.max() <= 1
    assert np.allclose(a * 255, np.round(a * 255), atol=1e-3)  # on the 8-bit grid
    # neighbouring pixels are strongly correlated (uniform noise: about 0)
    corr = np.corrcoef(a[:, :-1, 0].ravel(), a[:, 1:, 0].ravel())[0, 1]
    assert corr > 0.8
    batch = natural_images_nchw(2, 32, 48, seed=5)
    assert batch[0].shape == (1, 3, 32, 48) and not np.array_equal(batch[0], batch[1])


def check_opprobe(tmp: Path) -> None:
    """probe_models.py's folder round trip, then gpu_opprobe.py (`bench/gpu.sh opprobe`) on it and a planted case."""
    probe_dir = tmp / "probe"
    probe_dir.mkdir()
    b = Builder(probe_dir)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (8, 8), dtype=np.uint8) for _ in range(3)]
    b.write(Probe("hswish", "whole", ["HardSwish", "BatchNormalization-15"], None, "random grey images",
                  preprocess=IMAGENET, tolerance={"atol": 1e-3, "rtol": 1e-3}), _hardswish_model(), [{"x": a} for a in images])
    write_manifest(probe_dir, b.probes, None)
    (p,) = load_probes(probe_dir)
    assert p.name == "hswish" and p.kind == "whole" and p.tolerance == {"atol": 1e-3, "rtol": 1e-3}
    assert len(p.samples) == 3 and p.samples[0]["x"].shape == (1, 3, 8, 8) and p.samples[0]["x"].dtype == np.float32
    manifest = json.loads((probe_dir / "manifest.json").read_text())
    assert manifest["probes"][0]["bytes"] > 0 and manifest["probes"][0]["samples"] == 3
    assert not load_probes(probe_dir, {"other"})

    out = tmp / "out"
    res = _run("bench/gpu_opprobe.py", "--probes", probe_dir, "--planted", "--only", "hswish,planted:three_defects", "--cpu",
               "--out", out, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["fixture.npz", "opprobe.json", "opprobe.md"]
    data = json.loads((out / "opprobe.json").read_text())
    assert not data["errors"]
    models = {m["model"]: m for m in data["models"]}
    assert sorted(models) == ["hswish", "planted:three_defects"]
    hs = models["hswish"]
    row = next(r for r in hs["nodes"] if r["op_type"] == "HardSwish")
    assert {"hardswish-fp16", "ort-cuda", "standard"} <= set(row["emulated"])
    assert any(k["provider"] == "CPU" for k in hs["kernels"])
    whole = hs["whole"]
    assert whole["metric"] == "tol_used" and set(whole["runs"]) >= {"provider_all", "provider_disable", "cpu_all", "cpu_disable"}
    assert {"emulated standard", "emulated ort-cuda"} <= set(whole["runs"])
    assert all(len(v) == 3 for v in whole["runs"].values()) and whole["agreement"]["ort-cuda"]["samples"] == 3
    # ONNX Runtime folds the BatchNormalization-15 into the Conv (ConvBNFusion): what conv-bn-fold models
    assert whole["optimized"]["cpu"] and not any(k.endswith("BatchNormalization") for k in whole["optimized"]["cpu"])
    assert models["planted:three_defects"]["whole"]["metric"] == "tol_used"
    assert {r["op_type"] for r, _ in read_fixture(out / "fixture.npz")} >= {"HardSwish", "Conv"}
    assert "| op (or fused pattern) |" in (out / "opprobe.md").read_text()


def check_nodewise(tmp: Path) -> None:
    """gpu_nodewise.py (`bench/gpu.sh nodewise`) on two planted cases, and its refusal of an unknown rule."""
    out = tmp / "out"
    res = _run("bench/gpu_nodewise.py", "--planted", "--only", "three_defects,near_constant_norm", "--cpu",
               "--planted-samples", "2", "--random-sets", "1", "--out", out, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads((out / "nodewise.json").read_text())
    models = {m["model"]: m for m in data["models"]}
    assert sorted(models) == ["planted:near_constant_norm", "planted:three_defects"]
    nodes = models["planted:near_constant_norm"]["nodes"]
    assert {"gpu", "emulated", "ratio", "mismatch", "agree", "lowp", "provider"} <= set(nodes[0])
    assert any("reducemean-fp16-sum" in r["emulated"] for r in nodes)
    sets = {(r["model"], r["set"]) for r in data["sets"]}
    assert ("planted:three_defects", "certified") in sets and ("planted:three_defects", "all-fp32") in sets
    assert "| op | rules |" in (out / "nodewise.md").read_text()
    assert read_fixture(out / "fixture.npz")
    bad = _run("bench/gpu_nodewise.py", "--planted", "--rules", "nope", "--cpu", "--out", out, timeout=120)
    assert bad.returncode != 0 and "unknown emulation rule or profile 'nope'" in bad.stderr


def check_knobs(tmp: Path) -> None:
    """gpu_knobs.py (`bench/gpu.sh knobs`): stage a diagnose run here, run the plan where only onnxruntime, numpy,
    onnx, h5py and ml-dtypes exist (polygraphy and the CLI's packages blocked); the CPU's knobs do nothing."""
    case = planted.CASES["overflow_island"]()
    model = tmp / "overflow_island.onnx"
    onnx.save(case.model, str(model))
    files = []
    for i, s in enumerate(case.samples(4, 0)):
        files += ["--inputs", tmp / f"s{i}.npz"]
        np.savez(tmp / f"s{i}.npz", **s)
    runs = tmp / "runs"
    res = _run("-m", "precision_doctor", "diagnose", model, *files, "--atol", case.atol, "--rtol", case.rtol,
               "--out", runs / "m", cwd=tmp)
    assert res.returncode == 0, res.stderr[-2000:]
    script = str(ROOT / "bench" / "gpu_knobs.py")
    staged = _run(script, "stage", "--runs", runs, "--out", tmp / "stage")
    assert staged.returncode == 0, staged.stderr[-2000:]
    assert sorted(p.name for p in (tmp / "stage" / "m").iterdir()) == ["answer.json", "model.onnx", "samples"]
    blocked = "; ".join(f"sys.modules[{m!r}] = None" for m in ("polygraphy", "onnx_graphsurgeon", "typer", "rich", "matplotlib"))
    code = (f"import runpy, sys; {blocked}; sys.argv = sys.argv[1:]; sys.path.insert(0, {str(ROOT)!r}); "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    out = tmp / "out"
    res = _run("-c", code, script, "run", "--stage", tmp / "stage", "--provider", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr[-3000:]
    (row,) = json.loads((out / "gpu_knobs.json").read_text())
    rep = json.loads((runs / "m" / "report.json").read_text())
    assert row["model"] == "zoo:m" and row["answer"] == rep["answer"]["fallback_nodes"]
    plan = knob_configs.knob_plan(rep["answer"]["fallback_nodes"], knob_configs.ort_cuda_configs())
    assert [(t["knobs"], t["fallback"]) for t in row["trials"]] == [(t.knobs.label, sorted(t.fallback)) for t in plan]
    assert row["trials"][0]["passed"]  # the answer passes where it was found (the CPU provider)
    assert "| zoo:m | 3 |" in res.stdout


def check_price(tmp: Path) -> None:
    """price.py's GPU part (`--gpu`) on a planted case."""
    sets = tmp / "sets.json"
    sets.write_text(json.dumps({"models": {"three_defects": {
        "pd": ["double", "scale_down", "exp", "sum", "normalize", "add_offset", "sub_offset"], "converter": [],
        "autocast": ["exp"]}}}))
    out = tmp / "out"
    res = _run(ROOT / "bench" / "price.py", "--gpu", "--device", "cpu", "--sets", sets, "--out", out, "--runs", "2",
               "--batches", "1,4", timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["price_gpu.json", "price_gpu.md"]
    data = json.loads((out / "price_gpu.json").read_text())
    (model,) = data["models"]
    tools = model["tools"]
    assert tools["pd"]["holds"] and tools["pd"]["unseen"] == 6  # ORT CPU computes FP16 nodes in FP32: plumbing only
    assert set(model["batches"]) == {"1", "4"}
    for row in model["batches"].values():
        assert row["fp32_ms"] > 0 and set(row["tools"]) == {"pd", "converter", "autocast"}
    assert "latency kept" in (out / "price_gpu.md").read_text()


def check_pipeline(tmp: Path) -> None:
    """gpu_pipeline.py (`bench/gpu.sh pipeline`) on a one-model zoo of a planted case (the slowest: ~1-2 minutes)."""
    zoo = tmp / "zoo"
    zoo.mkdir()
    case = planted.three_defects()
    onnx.save(case.model, str(zoo / "three_defects.onnx"))
    (zoo / "three_defects.json").write_text(json.dumps({
        "inputs": {"samples": 2, "seed": 0, "val_range": ["x:[1,2]"]},
        "tolerance": {"atol": case.atol, "rtol": case.rtol}, "max_evaluations": 80,
    }))
    out = tmp / "out"
    res = _run("gpu_pipeline.py", "--zoo", zoo, "--cpu", "--jobs", "1", "--unseen", "2", "--out", out,
               "--batch-dir", tmp / "batch", cwd=ROOT / "bench")
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads((out / "pipeline.json").read_text())
    m = result["models"]["zoo:three_defects"]
    assert "error" not in m, m.get("error")
    a = m["answer"]
    assert a["passed"] and a["certified_by"]["backend"] == "emulate"  # ort-cpu, standing in for the GPU, only checks
    assert a["emulation_rules"] == "ort-cuda" and a["evaluations_gpu"] >= 1
    assert set(m["check"]) == {"searched", "held-out", "unseen"} and m["check"]["unseen"]["samples"] == 2
    assert {"real", "emulated ort-cuda", "emulated standard"} <= set(m["check"]["searched"])
    assert len(m["timing"]["gated_eval_s"]) == 3 and m["timing"]["session_eval_median_s"] > 0
    answers = json.loads((out / "answers.json").read_text())
    assert answers["zoo:three_defects"]["default answer"] == sorted(a["fallback_nodes"])
    assert "| zoo:three_defects |" in (out / "pipeline.md").read_text()
    assert (out / "batch.log").read_text().startswith("$ ")


def check_fusion_probes(tmp: Path) -> None:
    """ort_fusion_probe.py and fidelity_bisect.py (the large-model sessions' fidelity probes, run through
    bench/gpu_bundle.sh) on the planted LayerNorm block, in a model folder as bench/large_prepare.py writes them."""
    case = planted.layernorm_block(opset=17)
    folder = tmp / "ln"
    folder.mkdir()
    onnx.save(case.model, str(folder / "model.onnx"))
    np.savez(folder / "samples.npz", **{f"s{j}/{k}": v for j, s in enumerate(case.samples(2)) for k, v in s.items()})
    res = _run("ort_fusion_probe.py", folder / "model.onnx", "--cpu", "--samples", "2", "--sets", "1", "--out", tmp,
               cwd=ROOT / "bench")
    assert res.returncode == 0, res.stderr[-2000:]
    probe = json.loads((tmp / "fusion_probe.json").read_text())
    assert {r["config"] for r in probe["rows"]} >= {"level disabled", "level all", "all without MatMulAddFusion"}
    assert [len(s["real"]) for s in probe["gated"]["sets"]] == [2, 2]
    res = _run("fidelity_bisect.py", folder / "model.onnx", "--cpu", "--samples", "2", "--set", "1", "--apart", "0",
               "--tests", "6", cwd=ROOT / "bench")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("set 1: "), res.stdout[:500]


CHECKS = {"natural-images": check_natural_images, "opprobe": check_opprobe, "nodewise": check_nodewise,
          "knobs": check_knobs, "price": check_price, "pipeline": check_pipeline, "fusion-probes": check_fusion_probes}


def main() -> int:
    names = sys.argv[1:] or list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        print(f"unknown check {unknown[0]!r}; the checks: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"self-check-{name}-") as tmp:
            try:
                CHECKS[name](Path(tmp))
                print(f"ok    {name}")
            except Exception:  # noqa: BLE001 (every failure is reported, then the next check runs)
                failed.append(name)
                print(f"FAIL  {name}\n{traceback.format_exc()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
