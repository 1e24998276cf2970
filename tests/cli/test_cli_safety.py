"""What a user meets when things go wrong or when a run goes on (issue #11): internal errors as one line and
a log, resumes and re-runs with the recorded settings, polygraphy reference outputs, the report's next
steps and reasons, `env`'s backends."""

from __future__ import annotations

import json
import re

import pytest
from report_parts import report_of

from precision_doctor.results.report import Report


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_internal_error_is_one_line_naming_the_log_with_the_traceback(run_cli, planted_file, tmp_path,
                                                                        monkeypatch):
    from precision_doctor import api

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(api, "compare", broken)
    _, path, _ = planted_file("clean")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where the log goes when there is no run directory
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    code, _, err = run_cli("compare", path, "--out", tmp_path / "r")
    line = _one_line(err)
    assert code == 3 and "internal error (ZeroDivisionError: a bug)" in line
    log = re.search(r"the traceback is in (\S+)", line).group(1)
    text = open(log).read()
    assert "Traceback" in text and "ZeroDivisionError: a bug" in text and "compare" in text


def test_usage_errors_are_one_line(run_cli):
    code, _, err = run_cli("compare", "m.onnx", "--atol", "x")
    assert code == 2 and "--atol" in _one_line(err)
    code, _, err = run_cli("compare")
    assert code == 2 and "MODEL" in _one_line(err)


def _diagnose_args(case, path, files):
    return ["diagnose", path, *[a for f in files for a in ("--inputs", f)], "--atol", f"{case.atol:g}",
            "--rtol", f"{case.rtol:g}"]


def test_resume_continues_with_the_recorded_settings_and_refuses_others_printing_the_command(run_cli, planted_file,
                                                                                          tmp_path):
    case, path, files = planted_file("cancellation")
    out = tmp_path / "r"
    code, _, _ = run_cli(*_diagnose_args(case, path, files), "--strategy", "linear", "--out", out)
    assert code == 0
    (out / "report.json").unlink()  # as if cut off before its report
    code, _, err = run_cli("diagnose", path, "--out", out)  # a re-run without --resume is told about it
    assert code == 2 and "--resume" in _one_line(err)
    code, stdout, err = run_cli("diagnose", path, "--resume", "--out", out)  # no flags: the recorded ones
    assert code == 0, err
    rep = Report.load(out)
    assert rep.search.tolerance.atol == case.atol and rep.search.strategy == "linear"
    code, _, err = run_cli("diagnose", path, "--resume", "--out", out, "--atol", "0.5")
    line = _one_line(err)
    assert code == 2 and "other settings" in line
    again = line.split("to continue it: ")[1].split(";")[0]
    assert f"--atol {case.atol:g}" in again and "--strategy linear" in again and again.endswith(f"--resume --out {out}")


def _zoo(tmp_path, case):
    import onnx

    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(case.model, str(zoo / "m.onnx"))
    (zoo / "m.json").write_text(json.dumps({"inputs": {"samples": 2}, "max_evaluations": 30}))
    return zoo


def test_a_batch_rerun_without_flags_keeps_its_settings_and_other_flags_need_rerun(run_cli, tmp_path):
    from precision_doctor import planted

    case = planted.cancellation()
    zoo, out = _zoo(tmp_path, case), tmp_path / "b"
    tol = ["--atol", f"{case.atol:g}", "--rtol", f"{case.rtol:g}"]
    code, _, err = run_cli("batch", zoo, "--out", out, *tol)
    assert code == 0, err
    report = (out / "m" / "report.json").read_bytes()
    code, _, err = run_cli("batch", zoo, "--out", out)  # the recorded settings: nothing to redo
    assert code == 0 and "finished earlier" in err and (out / "m" / "report.json").read_bytes() == report
    code, _, err = run_cli("batch", zoo, "--out", out, "--atol", "0.5")
    line = _one_line(err)
    assert code == 2 and "--rerun" in line and f"--atol {case.atol:g}" in line.split("to continue it: ")[1]
    assert (out / "m" / "report.json").read_bytes() == report
    code, _, err = run_cli("batch", zoo, "--out", out, "--atol", "0.5", "--rerun")
    assert code == 0 and Report.load(out / "m").search.tolerance.atol == 0.5


def _save_outputs(path, outputs: list[dict], runners=("onnxrt-runner",)):
    """A reference file as polygraphy's `run --save-outputs` writes it (its own RunResults.save)."""
    from polygraphy.comparator import IterationResult, RunResults

    results = RunResults()
    for name in runners:
        results.append((name, [IterationResult(dict(o), runner_name=name) for o in outputs]))
    results.save(str(path))


def test_reference_outputs_from_polygraphy_are_the_reference(run_cli, planted_file, tmp_path):
    from precision_doctor.backends.reference import ReferenceRunner
    from precision_doctor.data.inputs import load_samples
    from precision_doctor.graph.model import load_model

    def refs_of(name: str):
        case, path, files = planted_file(name)
        runner = ReferenceRunner(load_model(path))
        refs = [runner.run(s) for s in load_samples(files)]
        good, off = tmp_path / f"{name}-ref.json", tmp_path / f"{name}-off.json"
        _save_outputs(good, refs)
        _save_outputs(off, [{k: v + 10.0 for k, v in r.items()} for r in refs])  # another "FP32" entirely
        return case, path, files, refs, good, off

    _, path, files, refs, good, off = refs_of("clean")
    base = ["compare", path, *[a for f in files for a in ("--inputs", f)], "--atol", "1e-2", "--rtol", "1e-2"]
    assert run_cli(*base, "--reference-outputs", good, "--out", tmp_path / "c1")[0] == 0
    code, stdout, _ = run_cli(*base, "--reference-outputs", off, "--out", tmp_path / "c2")
    assert code == 1 and "FAIL" in stdout
    out_name = next(iter(refs[0]))
    # diagnose searches against it: a reference nothing in the model reproduces has no answer
    case, path, files, _, good_c, off_c = refs_of("cancellation")
    code, stdout, _ = run_cli(*_diagnose_args(case, path, files), "--reference-outputs", off_c, "--out", tmp_path / "d")
    assert code == 1 and "even with every node in FP32" in stdout
    code, _, _ = run_cli(*_diagnose_args(case, path, files), "--reference-outputs", good_c, "--out", tmp_path / "d2")
    assert code == 0 and json.loads((tmp_path / "d2" / "run_settings.json").read_text())["reference_hash"]
    # bad files: one line naming the file and what is wrong
    _, path, files, refs, good, _ = refs_of("clean")
    bad = {
        "count": (refs[:2], "holds 2 iterations but --inputs give 4"),
        "missing": ([{"other": v} for r in refs for v in r.values()], f"lacks the model's output '{out_name}'"),
        "shape": ([{k: v[:1] for k, v in r.items()} for r in refs], f"output '{out_name}' has shape"),
    }
    for name, (outs, said) in bad.items():
        _save_outputs(tmp_path / f"{name}.json", outs)
        code, _, err = run_cli(*base, "--reference-outputs", tmp_path / f"{name}.json", "--out", tmp_path / name)
        assert code == 2 and said in _one_line(err) and f"{name}.json" in err, err
        assert not (tmp_path / name).exists()
    _save_outputs(tmp_path / "two.json", refs, runners=("a", "b"))
    code, _, err = run_cli(*base, "--reference-outputs", tmp_path / "two.json")
    assert code == 2 and "2 runners (a, b)" in _one_line(err)
    code, _, err = run_cli("compare", path, "--reference-outputs", good)
    assert code == 2 and "--inputs" in _one_line(err)


def test_the_report_says_what_to_do_next_and_why_each_node_in_words(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("cancellation")
    code, stdout, _ = run_cli(*_diagnose_args(case, path, files), "--out", tmp_path / "r")
    assert code == 0
    md = (tmp_path / "r" / "report.md").read_text()
    steps = md.split("## Next steps")[1].split("\n## ")[0]
    assert "trtexec --onnx=fixed.onnx" in steps and "TensorRT 11" in steps and "./trtexec.sh" in steps
    assert "--confirm-backend ort-cuda" in steps and "polygraphy run fixed.onnx" in steps
    fallback = md.split("## FP32 fallback nodes")[1].split("\n## ")[0]
    assert "cancellation" in fallback and "fed by `add_offset`" in fallback  # sub_offset's producer
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'id="next-steps"' in html and "trtexec --onnx=fixed.onnx" in html
    assert "the FP32 reference outputs of those samples" in md  # artifacts described in words


def test_env_lists_every_backend_and_what_it_is_for(run_cli):
    code, stdout, _ = run_cli("env")
    assert code == 0
    for name in ("emulate", "ort-cuda", "trt", "ort-cpu", "auto"):
        assert re.search(rf"^backend {name}: (runs here|not here)", stdout, re.M), name
    assert "not a search backend" in stdout and "FP16 nodes in FP32" in stdout


@pytest.mark.parametrize("held", [True, False])
def test_the_headline_says_when_the_answer_came_from_a_second_search(held):
    """The first answer failed 1 of the 2 held-out samples and a second search ran with them: a pass is NOT VALIDATED
    (the held-out samples shaped it), and either way the headline gives the first answer's failures once, as
    counted."""
    from precision_doctor.render.verdict import headline, verdict
    from precision_doctor.results.report import Validation

    rep = report_of(status="complete" if held else "no_solution", backend="emulate", fallback_nodes=["a", "b"] if held else [],
                 fallback_size=2 if held else 0,
                 validation=Validation(passed=False, samples=2, failing_samples=[1], first_candidate=["a"],
                                       research="searched again", passed_after_research=held))
    label, _ = verdict(rep)
    assert label == ("PASSED, NOT VALIDATED" if held else "NO SOLUTION")
    text = headline(rep)
    assert "the first answer (1 node) failed 1 of 2 held-out samples on emulate".lower() in text.lower()
    assert ("a second search used them" in text) == held and ("found no set that passes every sample" in text) != held
    assert "holds" not in text


def test_explain_names_each_kind_of_reason():
    from precision_doctor.measure.explain import Limits, explain
    from precision_doctor.results.report import Layer

    fp16 = Limits("FP16", 65504.0, 6.1e-5)

    def kinds(**facts) -> list[str]:
        base = dict(index=0, name="n", op_type="Mul", local_rel_l2=1e-3, rounding_rel_l2=5e-4, ref_absmax=1.0,
                    input_ref_absmax=1.0, frac_above_max=0.0, frac_below_normal=0.0)
        return [r.kind for r in explain(Layer(**{**base, **facts}), fp16, ["p"])]

    assert kinds(frac_above_max=0.1, ref_absmax=1e5) == ["overflow"]
    assert kinds(input_ref_absmax=1e6) == ["input_overflow"]
    assert kinds(op_type="Sub", input_sensitive=True, local_rel_l2=0.3) == ["cancellation"]
    assert kinds(op_type="Div", input_sensitive=True, local_rel_l2=0.3) == ["input_rounding"]
    assert kinds(op_type="MatMul", local_rel_l2=0.05) == ["accumulation"]
    assert kinds(frac_below_normal=0.5) == ["underflow"]
    assert kinds() == ["small_error"]
    # an exact node (a Slice of 0..255 pixels): kept for its neighbours, not "the search found it is needed"
    assert kinds(op_type="Slice", local_rel_l2=0.0, rounding_rel_l2=0.0) == ["exact"]
    assert kinds(local_rel_l2=float("inf")) == ["nonfinite"]
