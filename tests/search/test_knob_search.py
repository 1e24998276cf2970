"""`search.knobs` on the CPU with real small models: the knob search's oracle mechanics (one oracle per
configuration, evaluations counted, memoized and checkpointed, resumed without running again, the budget),
what report.json, the reports and the CLI say, and what the commands carry. ONNX Runtime's CUDA knobs do
nothing on the CPU provider (ort-cpu): every configuration gives the same verdicts, which is what these
plumbing tests can show; what knobs do on a GPU is bench/gpu_knobs.py's (docs/BENCHMARKS.md)."""

from __future__ import annotations

import contextlib
import json

import onnx
import pytest
from report_parts import report_of

from precision_doctor import api, planted
from precision_doctor.backends import knobs
from precision_doctor.backends.ort import OrtBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import load_model
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.context import StepContext
from precision_doctor.pipeline.knob_search import KNOBS_DIR, checkpoint_name, search_knobs
from precision_doctor.results import emit
from precision_doctor.results.commands import EmitOptions
from precision_doctor.results.report import KnobsResult, KnobTrial, Report
from precision_doctor.runfiles import RunDir
from precision_doctor.search.oracle import Budget
from precision_doctor.search.space import SearchSpace
from precision_doctor.spec import RunSpec

CONFIGS = knobs.ort_cuda_configs()

TOL = Tolerance(atol=1e-3, rtol=1e-3)


def _args(case, path, files):
    return [path, *[a for f in files for a in ("--inputs", f)], "--atol", str(case.atol), "--rtol", str(case.rtol)]


def _lines(path) -> int:
    return len(path.read_text().splitlines())


def test_knobs_on_ort_cpu_change_nothing_and_are_counted_and_checkpointed(run_cli, planted_file, tmp_path):
    """deep_stack_one_bad keeps one node in FP32 on ort-cpu too: the plan is the answer under the default
    configuration, six configurations alone (all fail), and the answer less its node under each: the empty set
    again, answered from each configuration's memo."""
    case, path, files = planted_file("deep_stack_one_bad", n=4)
    out = tmp_path / "run"
    code, stdout, err = run_cli("diagnose", *_args(case, path, files), "--confirm-backend", "ort-cpu", "--knobs", "--out", out)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    k = rep["checks"]["knobs"]
    assert rep["answer"]["fallback_nodes"] == k["searched_answer"] == k["answer"] == ["l15_scale_up"] and not k["changed_answer"]
    assert k["backend"] == "ort-cpu" and k["configurations"] == [c.label for c in CONFIGS] and k["status"] == "complete"
    assert k["samples"] == rep["search"]["samples"]["search"]  # the held-out samples check the answer after the knob search
    assert k["evaluations"] == 1 + len(CONFIGS) and k["memo_hits"] == len(CONFIGS)
    plan = knobs.knob_plan(["l15_scale_up"], CONFIGS)
    assert [(t["knobs"], t["why"], t["fallback_size"]) for t in k["trials"]] == [
        (t.knobs.label, t.why, len(t.fallback)) for t in plan]
    # the knobs do nothing here: every configuration gives the same verdict for the same set
    by_set: dict[int, set] = {}
    for t in k["trials"]:
        by_set.setdefault(t["fallback_size"], set()).add(t["passed"])
    assert by_set == {1: {True}, 0: {False}}
    assert k["best"] == "default" and k["best_settings"] == {} and 0 < k["tolerance_used"] <= 1
    assert knobs.ORT_CPU_NOTE in k["note"] and rep["answer"]["artifacts"]["knob_checkpoints"] == KNOBS_DIR
    files_now = {p.name: _lines(p) for p in (out / KNOBS_DIR).iterdir()}
    assert files_now == {checkpoint_name(c): 2 if c.is_default else 1 for c in CONFIGS}
    assert "ort_cuda_providers" not in rep["answer"]["commands"]  # nothing to carry: ort-cpu has no such knobs
    assert "Knobs on ort-cpu (6 configurations, 7 evaluations over" in stdout
    assert "no configuration lets fewer FP32 nodes pass" in (out / "report.md").read_text()
    assert '<section id="knobs">' in (out / "report.html").read_text()

    # --resume replays every knob evaluation from the checkpoints: none runs again, the counts stay
    code, _, err = run_cli("diagnose", *_args(case, path, files), "--confirm-backend", "ort-cpu", "--knobs", "--out", out,
                           "--resume")
    assert code == 0, err
    again = json.loads((out / "report.json").read_text())["checks"]["knobs"]
    assert {p.name: _lines(p) for p in (out / KNOBS_DIR).iterdir()} == files_now
    assert again["evaluations"] == k["evaluations"] and again["trials"] == k["trials"]


def test_the_knob_budget_is_what_the_run_left(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("deep_stack_one_bad", n=2)
    out = tmp_path / "run"
    full = tmp_path / "full"
    code, _, err = run_cli("diagnose", *_args(case, path, files), "--confirm-backend", "ort-cpu", "--out", full)
    assert code == 0, err
    before = json.loads((full / "report.json").read_text())
    spent = before["search"]["evaluations"] + before["checks"]["confirm"]["evaluations"]
    code, stdout, err = run_cli("diagnose", *_args(case, path, files), "--confirm-backend", "ort-cpu", "--knobs",
                                "--max-evaluations", str(spent + 3), "--out", out)
    rep = json.loads((out / "report.json").read_text())
    assert code == 1, err  # the run stopped early: INCOMPLETE (budget exhausted), never a pass
    k = rep["checks"]["knobs"]
    assert k["status"] == "budget_exhausted" and k["evaluations"] == 3 and rep["status"] == "budget_exhausted"
    assert rep["answer"]["fallback_nodes"] == before["answer"]["fallback_nodes"] and "stopped early: budget_exhausted" in stdout


def test_a_configuration_with_fewer_nodes_replaces_the_answer(tmp_path):
    """search_knobs itself, on the emulator's answer for `cancellation` (two nodes) with ONNX Runtime's CPU
    provider, where the whole model passes in FP16: the default configuration alone is the cheapest trial, so
    the answer becomes the empty set, its verdict the final one, and ort-cpu's configuration is not emitted."""
    case = planted.cancellation()
    path = tmp_path / "m.onnx"
    onnx.save(case.model, str(path))
    model = load_model(path)
    samples = case.samples(3, 0)
    refs = [ReferenceRunner(model).run(s) for s in samples]
    spec = RunSpec(model=str(path)).with_settings({"tolerance.atol": case.atol, "tolerance.rtol": case.rtol})
    space = SearchSpace(universe=[n.name for n in model.candidates])
    answer = [n.name for n in model.nodes if n.name in case.expected]
    with contextlib.ExitStack() as owned:
        backend = owned.enter_context(contextlib.closing(OrtBackend(model, "fp16", providers=["CPUExecutionProvider"])))
        outcome = search_knobs(StepContext(spec=spec, run_dir=RunDir(tmp_path), space=space), answer, backend=backend,
                               model=model, samples=samples, refs=refs, budget=Budget(), owned=owned)
    k = outcome.result
    assert outcome.fallback == frozenset() and k.answer == [] and k.changed_answer and k.best == "default"
    assert outcome.verdict is not None and outcome.verdict.passed and outcome.emitted is None
    assert [t.passed for t in k.trials[:2]] == [True, True] and all(t.passed is None for t in k.trials[2:])
    assert k.evaluations == 2  # the answer, then the default alone; nothing can be cheaper than that


def _report_with_knobs(changed: bool) -> Report:
    trials = [KnobTrial("default", 2, "the answer, default knobs", True, 0.5),
              KnobTrial("use_tf32=1", 1, "the answer less b", changed, 0.7 if changed else None)]
    k = KnobsResult("ort-cuda", [c.label for c in CONFIGS], ["a", "b"], samples=5, evaluations=2, trials=trials,
                    best="use_tf32=1" if changed else "default", best_settings={"use_tf32": "1"} if changed else {},
                    answer=["a"] if changed else ["a", "b"], tolerance_used=0.7 if changed else 0.5)
    return report_of(status="complete", precision="fp16", backend="ort-cuda", fallback_nodes=k.answer, knobs=k)


@pytest.mark.parametrize("changed", [False, True])
def test_knobs_in_report_json_and_the_reports(changed):
    from precision_doctor.render.html import render_html
    from precision_doctor.render.markdown import render_markdown
    from precision_doctor.render.tensorrt import knobs_sentence

    rep = _report_with_knobs(changed)
    data = rep.to_json()
    assert data["checks"]["knobs"]["changed_answer"] is changed
    back = Report.from_json(json.loads(json.dumps(data)))
    assert back.checks.knobs == rep.checks.knobs
    text = knobs_sentence(back)
    if changed:
        assert "with use_tf32=1 the answer needs 1 FP32 node instead of 2" in text and "70.0%" in text
    else:
        assert "no configuration lets fewer FP32 nodes pass" in text
    assert text in render_markdown(back) and "Knobs on ort-cuda" in render_html(back)


def test_the_commands_carry_the_configuration_found():
    ort = next(c for c in CONFIGS if c.label == "cudnn_conv_algo_search=HEURISTIC,use_tf32=1")
    out = emit.emit_all("m.onnx", "fixed.onnx", ["a"], EmitOptions(tolerance=TOL, knob=ort))
    assert eval(out["ort_cuda_providers"].removeprefix("providers="), {}) == knobs.ort_providers(ort)
    assert "--noTF32" in out["trtexec_trt11"]  # an ORT configuration does not change the TensorRT commands
    trt = knobs.KnobConfig(knobs.TRT, ((knobs.TACTICS, "-JIT_CONVOLUTIONS"), (knobs.TF32, "1")))
    out = emit.emit_all("m.onnx", "fixed.onnx", ["a"], EmitOptions(tolerance=TOL, knob=trt))
    assert "ort_cuda_providers" not in out
    for key in ("trtexec_trt10", "trtexec_trt11"):
        assert "--tacticSources=-JIT_CONVOLUTIONS" in out[key] and "--noTF32" not in out[key], key
    assert "--tactic-sources EDGE_MASK_CONVOLUTIONS --tf32" in out["polygraphy"]
    assert "--noTF32" not in out["trtexec_sh"] and "TF32 stays on" in out["trtexec_sh"]
    rtx = out["tensorrt_rtx_sh"]
    assert "--tactic-sources EDGE_MASK_CONVOLUTIONS" in rtx and "clear_flag" not in rtx and "TF32 stays on" in rtx
    added = knobs.KnobConfig(knobs.TRT, ((knobs.TACTICS, "+CUBLAS"),))
    out = emit.emit_all("m.onnx", "fixed.onnx", ["a"], EmitOptions(tolerance=TOL, knob=added))
    assert "--tacticSources=+CUBLAS" in out["trtexec_trt10"] and "--tacticSources" not in out["trtexec_trt11"]
    assert "--tactic-sources EDGE_MASK_CONVOLUTIONS JIT_CONVOLUTIONS CUBLAS" in out["polygraphy_trt10"]


def test_knobs_are_refused_on_the_emulator_before_any_work(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("cancellation", n=2)
    out = tmp_path / "run"
    code, _, err = run_cli("diagnose", *_args(case, path, files), "--backend", "emulate", "--knobs", "--out", out)
    assert code == 2 and err.count("\n") == 1 and "--knobs: the emulate backend has no knobs" in err
    assert not out.exists()
    with pytest.raises(Exception, match="search.knobs: the emulate backend has no knobs"):
        spec = RunSpec(model=str(path)).with_settings({"search.knobs": True, "backends.backend": "emulate"})
        api.diagnose(spec, tmp_path / "api")
    assert not (tmp_path / "api").exists()


def test_every_ort_configuration_makes_its_own_backend(tmp_path):
    """knob_backend: a CUDA configuration asks ONNX Runtime for the CUDA provider (refused here, in one line);
    ort-cpu's runs on the CPU provider."""
    onnx.save(planted.cancellation().model, str(tmp_path / "m.onnx"))
    model = load_model(tmp_path / "m.onnx")
    cpu = knobs.knob_backend(knobs.ORT_CPU, model, "fp16", model.outputs, CONFIGS[3])
    assert cpu.name == "ort-cpu" and cpu.providers == ["CPUExecutionProvider"]
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this ONNX Runtime has a CUDA provider")
    with pytest.raises(Exception, match="no CUDA provider here"):
        knobs.knob_backend(knobs.ORT_CUDA, model, "fp16", model.outputs, CONFIGS[3])


def test_emit_prints_the_provider_options_found(run_cli, tmp_path):
    rep = _report_with_knobs(True)
    config = knobs.config_of(knobs.ORT_CUDA, rep.checks.knobs.best_settings)
    rep.answer.commands = emit.emit_all("m.onnx", "fixed.onnx", rep.answer.fallback_nodes,
                                        EmitOptions(tolerance=TOL, knob=config))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(rep.to_json()))
    code, out, err = run_cli("emit", tmp_path / "run", "--format", "ort-cuda")
    assert code == 0, err
    assert f"# {emit.LABELS['ort_cuda_providers']}\n{knobs.ort_providers_text(config)}" in out
    assert f"# {emit.LABELS['polygraphy_ort_cuda']}\npolygraphy run fixed.onnx --onnxrt --providers cuda" in out
    assert '"use_tf32": "1"' in out
    rep.answer.commands = {k: v for k, v in rep.answer.commands.items() if k != "ort_cuda_providers"}
    (tmp_path / "run" / "report.json").write_text(json.dumps(rep.to_json()))
    code, out, err = run_cli("emit", tmp_path / "run", "--format", "ort-cuda")
    assert code == 0 and "--providers cuda" in out and "use_tf32" not in out  # the check, without knobs
    rep.answer.commands = {k: v for k, v in rep.answer.commands.items() if k != "polygraphy_ort_cuda"}
    (tmp_path / "run" / "report.json").write_text(json.dumps(rep.to_json()))
    code, _, err = run_cli("emit", tmp_path / "run", "--format", "ort-cuda")
    assert code == 2 and "no ONNX Runtime CUDA command was written for this run" in err
