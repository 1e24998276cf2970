"""`--keep-activations` (capture.keep, data/keep_plan.py, pipeline/keep.py): which tensors activations.h5 keeps beside
every tensor's statistics and the graph outputs, and that `report`, `rerender` and `--resume` work with each (a
resume reads the statistics: it never captures again while the file is there)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from precision_doctor import api
from precision_doctor.control import EvaluationEvent, StopToken
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, STATS, ActivationStore, analysable, whole
from precision_doctor.data.keep_plan import KeepPlan
from precision_doctor.errors import SpecError
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.analysis import MEMO
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline import diagnose as diagnose_module
from precision_doctor.pipeline.compare import reanalyse
from precision_doctor.spec import CaptureSpec, InputSpec, RunSpec, SearchSpec


def _spec(case, path, files, keep: str, capture_samples: int = 8, **search) -> RunSpec:
    return RunSpec(str(path), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(case.atol, case.rtol),
                   capture=CaptureSpec(keep=keep, max_samples=capture_samples), search=SearchSpec(**search))


def _evaluations(run) -> int:
    return (run / "search.jsonl").read_text().count("\n")


def _counting_captures(monkeypatch) -> list:
    captured = []
    real = diagnose_module.capture_and_analyse
    monkeypatch.setattr(diagnose_module, "capture_and_analyse", lambda *a, **k: captured.append(1) or real(*a, **k))
    return captured


@pytest.mark.parametrize("keep", ["all", "summary", "top:0", "none"])
def test_each_value_keeps_report_rerender_and_resume_working(planted_file, tmp_path, keep, monkeypatch):
    case, path, files = planted_file("three_defects", n=4)
    spec = _spec(case, path, files, keep)
    run = tmp_path / "run"
    first = api.diagnose(spec, run)
    store = run / "activations.h5"
    assert first.passed
    key = {"all": "activations", "none": None}.get(keep, "activations_summary")
    assert {k for k in first.answer.artifacts if k.startswith("activations")} == ({key} if key else set())
    assert store.is_file() == (keep != "none") and whole(store) == (keep == "all")
    assert analysable(store) == (keep != "none")
    assert not (run / ".activations.h5.summary").exists()

    again = api.rerender(run)  # report/rerender read report.json only
    assert again.answer.fallback_nodes == first.answer.fallback_nodes and (run / "report.html").is_file()

    evaluations = _evaluations(run)
    captured = _counting_captures(monkeypatch)
    resumed = api.diagnose(spec, run, resume=True)
    assert resumed.answer.fallback_nodes == first.answer.fallback_nodes and resumed.passed
    assert _evaluations(run) == evaluations  # the search replayed, nothing evaluated again
    assert captured == ([1] if keep == "none" else [])  # the statistics are read back; no file: captured again
    assert store.is_file() == (keep != "none") and whole(store) == (keep == "all")


def test_a_summary_keeps_the_statistics_the_outputs_and_the_top_layers(planted_file, tmp_path):
    """The summary's analysis, statistics and kept tensors are the whole capture's, bit for bit; it keeps the graph
    outputs of every run and the tensors of the top 3 layers (inputs and outputs in the FP32 and low-precision runs,
    outputs in the local run), nothing more; the verdict under another tolerance is the same from either."""
    case, path, files = planted_file("three_defects", n=4)
    full, brief = tmp_path / "all", tmp_path / "summary"
    api.diagnose(_spec(case, path, files, "all"), full)
    report = api.diagnose(_spec(case, path, files, "summary"), brief)
    model = from_proto(case.model)
    outputs = [o.name for o in case.model.graph.output]
    with ActivationStore(brief / "activations.h5") as s, ActivationStore(full / "activations.h5") as f:
        assert s.read_text(MEMO) == f.read_text(MEMO) and s.read_text(STATS) == f.read_text(STATS)
        assert set(s.runs()) == set(f.runs()) == {REFERENCE, LOWP, LOCAL, "fixed"}
        ranking = json.loads(s.read_text(MEMO))["layers"]
        top = [r["name"] for r in sorted(ranking, key=lambda r: r["rank"])][:3]
        kept = KeepPlan.parse("summary").tensors(model, [r["name"] for r in sorted(ranking, key=lambda r: r["rank"])])
        for run in (REFERENCE, LOWP, LOCAL):
            want = set(outputs) & set(f.tensor_names(run)) | set(kept[run])
            assert set(s.tensor_names(run)) == want, run
            for name in want:
                np.testing.assert_array_equal(s.read(run, name), f.read(run, name))  # NaN where it was
        assert s.tensor_names("fixed") == [o for o in outputs if f.has("fixed", o)]
        for name in s.tensor_names("fixed"):
            np.testing.assert_array_equal(s.read("fixed", name), f.read("fixed", name))
        assert s.attr("kept") == "summary" and f.attr("kept") == "all"
        assert set(s.tensor_names(REFERENCE)) >= {t for n in top for t in model.node(n).outputs}
    sizes = {d: sum(ds.id.get_storage_size() for run in ("reference", "lowp", "local") for ds in
                    h5py.File(d / "activations.h5")[run].values()) for d in (brief, full)}
    assert sizes[brief] < sizes[full] / 2, sizes
    assert report.answer.artifacts["activations_summary"] == "activations.h5"
    tol = Tolerance(case.atol / 2, case.rtol / 2)
    kept_json, every = (json.dumps(reanalyse(d / "activations.h5", tol).to_dict(), sort_keys=True) for d in (brief, full))
    assert kept_json == every  # (as JSON: NaN where the outputs overflow)


def test_names_and_top_n_choose_the_layers_kept(planted_file, tmp_path):
    """`top:0,NODE,TENSOR`: the named node's tensors and the named tensor (in each run that computes it), nothing
    of the ranking; values as the whole capture has them."""
    case, path, files = planted_file("three_defects", n=3)
    model = from_proto(case.model)
    node = model.candidates[-1]
    tensor = model.candidates[0].float_outputs[0]
    keep = f"top:0,{node.name},{tensor}"
    full, named = tmp_path / "all", tmp_path / "named"
    api.compare(_spec(case, path, files, "all"), full)
    api.compare(_spec(case, path, files, keep), named)
    outputs = set(model.outputs)
    with ActivationStore(named / "activations.h5") as s, ActivationStore(full / "activations.h5") as f:
        assert s.attr("kept") == keep
        ref = {t for t in [*node.inputs, *node.outputs] if t and t not in model.initializers} | {tensor} | outputs
        assert set(s.tensor_names(REFERENCE)) == ref
        assert set(s.tensor_names(LOCAL)) == set(node.float_outputs) | {tensor} | (outputs & set(f.tensor_names(LOCAL)))
        for run in (REFERENCE, LOWP, LOCAL):
            for name in s.tensor_names(run):
                np.testing.assert_array_equal(s.read(run, name), f.read(run, name))


def test_a_run_cut_off_keeps_its_capture_and_resumes_without_capturing(planted_file, tmp_path, monkeypatch):
    """Interrupted in the search (a stop after two evaluations): the capture stays, whatever `capture.keep` says, and
    --resume goes on without capturing again; the run that completes then keeps what `keep` says. A run whose budget
    ran out, continued with a larger one, does not capture again either."""
    case, path, files = planted_file("three_defects", n=4)
    run = tmp_path / "run"
    stop = StopToken()

    def progress(event) -> None:
        if isinstance(event, EvaluationEvent) and event.step >= 2:
            stop.stop("test")

    report = api.diagnose(_spec(case, path, files, "none"), run, progress=progress, stop=stop)
    assert report.status == "interrupted"
    assert analysable(run / "activations.h5") and "activations_summary" in report.answer.artifacts
    captured = _counting_captures(monkeypatch)
    finished = api.diagnose(_spec(case, path, files, "none"), run, resume=True)
    assert finished.status == "complete" and not (run / "activations.h5").exists() and captured == []

    budget = tmp_path / "budget"
    short = api.diagnose(_spec(case, path, files, "summary", max_evaluations=2), budget)
    assert short.status == "budget_exhausted" and analysable(budget / "activations.h5")
    evaluations = _evaluations(budget)
    captured.clear()  # the short run captured
    more = api.diagnose(_spec(case, path, files, "summary", max_evaluations=500), budget, resume=True)
    assert more.status == "complete" and more.passed and captured == [], captured
    assert _evaluations(budget) > evaluations, (_evaluations(budget), evaluations)


@pytest.mark.parametrize("value, said", [
    ("top:x", "--keep-activations 'top:x': top:N takes a whole number of layers"),
    ("all,top:2", "--keep-activations all stands alone"),
    ("summary,,x", "an empty item"),
    ("no_such_node", "--keep-activations no_such_node: no node or tensor of the model has this name"),
])
def test_bad_value_is_one_line_naming_the_flag(planted_file, run_cli, tmp_path, value, said):
    case, path, files = planted_file("three_defects", n=2)
    code, _, err = run_cli("diagnose", path, "--inputs", files[0], "--keep-activations", value, "--out", tmp_path / "r")
    assert code == 2 and said in err and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()


def test_plan_labels_and_values():
    assert KeepPlan.parse("summary") == KeepPlan() and KeepPlan().label == "summary"
    assert KeepPlan.parse("none").remove and KeepPlan.parse("none").label == "summary"  # what it holds until removed
    assert KeepPlan.parse("all").every and KeepPlan.parse("all").label == "all"
    assert KeepPlan.parse("top:5, a ,b").label == "top:5,a,b" and KeepPlan.parse("summary,a").label == "top:3,a"
    with pytest.raises(SpecError):
        KeepPlan.parse("top:-1")


def test_summary_file_is_readable_without_precision_doctor(planted_file, tmp_path):
    """A summary is a plain HDF5 file: the per-layer analysis and every tensor's statistics as JSON, the outputs and
    the kept tensors as datasets."""
    case, path, files = planted_file("three_defects", n=2)
    api.diagnose(_spec(case, path, files, "summary"), tmp_path / "run")
    with h5py.File(tmp_path / "run" / "activations.h5", "r") as f:
        assert f.attrs["kept"] == "summary"
        layers = json.loads(f[MEMO][()])["layers"]
        assert {row["name"] for row in layers} >= {n.name for n in case.model.graph.node if n.op_type == "Exp"}
        stats = json.loads(f[STATS][()])["tensors"]
        assert {t for n in case.model.graph.node for t in n.output} <= set(stats)


def _one_sample_bytes(store: ActivationStore, outputs: set[str], runs: dict[str, list[str]] | None = None) -> int:
    """One sample's bytes of the tensors kept beyond the graph outputs (`runs`: these only)."""
    runs = runs or {run: store.tensor_names(run) for run in (REFERENCE, LOWP, LOCAL)}
    return sum(store.read(run, t, 0).nbytes for run, ts in runs.items() for t in ts if t not in outputs)


def test_the_top_layers_tensors_are_kept_for_as_many_samples_as_fit(planted_file, tmp_path, monkeypatch):
    """At 1024x1024 the top layers' tensors of 8 samples are gigabytes: they are kept for as many captured samples as
    fit in keep_plan.TENSORS_BYTES, the first always (here the bound is one sample's and a byte: one sample of two);
    the other rows take no room, the store says how many hold them, the statistics are every sample's, and the
    estimate counts the one sample's."""
    from precision_doctor.pipeline import capture_size

    case, path, files = planted_file("three_defects", n=4)
    spec = _spec(case, path, files, "summary", margin=0.0)
    whole = api.diagnose(spec, tmp_path / "whole")
    outputs = {o.name for o in case.model.graph.output}
    with ActivationStore(tmp_path / "whole" / "activations.h5") as w:
        one_sample = _one_sample_bytes(w, outputs)
    monkeypatch.setattr(capture_size, "TENSORS_BYTES", one_sample + 1)
    bounded = api.diagnose(spec, tmp_path / "bounded")
    assert bounded.answer.fallback_nodes == whole.answer.fallback_nodes
    with ActivationStore(tmp_path / "bounded" / "activations.h5") as b, \
            ActivationStore(tmp_path / "whole" / "activations.h5") as w:
        assert b.read_text(STATS) == w.read_text(STATS)  # every sample's statistics
        assert b.attr("tensors_samples") == 1 and w.attr("tensors_samples") == b.n_samples() > 1
        outputs = set(case.model.graph.output[i].name for i in range(len(case.model.graph.output)))
        kept = [t for t in b.tensor_names(REFERENCE) if t not in outputs]
        assert kept and set(kept) == set(w.tensor_names(REFERENCE)) - outputs
        for t in kept:
            np.testing.assert_array_equal(b.read(REFERENCE, t, 0), w.read(REFERENCE, t, 0))
            stored, full = (s.dataset(REFERENCE, t).id.get_storage_size() for s in (b, w))
            assert stored * b.n_samples() <= full * 1.01, t  # one sample's rows written of two
    model, samples = from_proto(case.model), [dict(np.load(f)) for f in files]
    one = capture_size.estimate(model, samples, KeepPlan.parse("summary"))
    monkeypatch.undo()
    every = capture_size.estimate(model, samples, KeepPlan.parse("summary"))
    none = capture_size.estimate(model, samples, KeepPlan.parse("top:0"))
    assert none.nbytes < one.nbytes < every.nbytes  # the top layers' tensors of one sample, not of every one


def test_as_many_samples_as_fit_and_no_more(planted_file, tmp_path, monkeypatch):
    """A bound of two and a half samples' top-layer tensors keeps two samples' (the third would not fit)."""
    from precision_doctor.pipeline import capture_size

    case, path, files = planted_file("three_defects", n=12)
    spec = _spec(case, path, files, "summary", margin=0.0)
    api.diagnose(spec, tmp_path / "whole")
    outputs = {o.name for o in case.model.graph.output}
    with ActivationStore(tmp_path / "whole" / "activations.h5") as w:
        one = sum(w.read(run, t, 0).nbytes for run in (REFERENCE, LOWP, LOCAL) for t in w.tensor_names(run)
                  if t not in outputs)
    monkeypatch.setattr(capture_size, "TENSORS_BYTES", int(2.5 * one))
    api.diagnose(spec, tmp_path / "two")
    with ActivationStore(tmp_path / "two" / "activations.h5") as b:
        assert b.attr("tensors_samples") == 2 and b.n_samples() > 2


def test_a_top_layer_whose_one_samples_tensors_do_not_fit_is_left_out(planted_file, tmp_path, monkeypatch):
    """Where one sample's tensors of the top layers are over the bound (whisper-base's encoder attention: 360 MB a
    layer), the top layers that fit are kept in the ranking's order and the others left out, so that the bound holds
    at one sample too; a named node's tensors are kept whatever their size."""
    from precision_doctor.graph.model import from_proto as model_of
    from precision_doctor.pipeline import capture_size

    case, path, files = planted_file("three_defects", n=4)
    model, outputs = model_of(case.model), {o.name for o in case.model.graph.output}
    spec = _spec(case, path, files, "summary", margin=0.0)
    api.diagnose(spec, tmp_path / "whole")
    with ActivationStore(tmp_path / "whole" / "activations.h5") as w:
        top = [r["name"] for r in sorted(json.loads(w.read_text(MEMO))["layers"], key=lambda r: r["rank"])][:3]
        first = KeepPlan(top=0, names=(top[0],)).tensors(model, [])
        first_bytes = _one_sample_bytes(w, outputs, first)
        all_bytes = _one_sample_bytes(w, outputs)
    assert first_bytes < all_bytes  # the other top layers add tensors
    monkeypatch.setattr(capture_size, "TENSORS_BYTES", first_bytes)
    api.diagnose(spec, tmp_path / "first")
    with ActivationStore(tmp_path / "first" / "activations.h5") as b:
        for run in (REFERENCE, LOWP, LOCAL):
            assert set(b.tensor_names(run)) - outputs == set(first[run]) - outputs, run
        assert b.attr("tensors_samples") == 1
    monkeypatch.setattr(capture_size, "TENSORS_BYTES", 1)
    named = top[-1]
    api.diagnose(_spec(case, path, files, f"summary,{named}", margin=0.0), tmp_path / "named")
    want = KeepPlan(top=0, names=(named,)).tensors(model, [])
    with ActivationStore(tmp_path / "named" / "activations.h5") as b:
        for run in (REFERENCE, LOWP, LOCAL):
            assert set(b.tensor_names(run)) - outputs == set(want[run]) - outputs, run


def test_a_stop_while_the_top_tensors_are_written_keeps_the_statistics_and_resume_finishes_them(
        planted_file, tmp_path, monkeypatch):
    """A stop after the capture's statistics, while the top layers' tensors are written (on a large model minutes
    of statistics): the run directory keeps the statistics and the analysis, with the tensors owed and none of them
    half written; --resume writes the tensors without capturing the statistics again, and ends as a run that was
    never stopped (the same answer, the same tensors kept, for the samples the capture ran on)."""
    from precision_doctor.control import CaptureEvent
    from precision_doctor.pipeline.compare import TENSORS_OWED

    case, path, files = planted_file("three_defects", n=4)
    whole_run = api.diagnose(_spec(case, path, files, "top:2"), tmp_path / "whole")
    run, stop = tmp_path / "run", StopToken()

    def progress(event) -> None:
        if isinstance(event, CaptureEvent) and event.stage == "tensors" and event.done >= 1:
            stop.stop("test")

    with pytest.raises(KeyboardInterrupt):
        api.diagnose(_spec(case, path, files, "top:2"), run, progress=progress, stop=stop)
    store = run / "activations.h5"
    assert analysable(store) and not (run / ".activations.h5.partial").exists()
    with ActivationStore(store) as s:
        owed = s.attr(TENSORS_OWED)
        assert any(owed.values())
        for name, names in owed.items():  # none half written: neither listed nor stored
            stored = {s.file[name][k].attrs["onnx_name"] for k in s.file[name]} if name in s.file else set()
            assert not set(names) & (set(s.tensor_names(name)) | stored)
    captured, stages = _counting_captures(monkeypatch), []
    # resumed with another number of capture samples: the tensors owed are the captured samples' all the same
    finished = api.diagnose(_spec(case, path, files, "top:2", capture_samples=1), run, resume=True,
                            progress=lambda e: stages.append(e.stage) if isinstance(e, CaptureEvent) else None)
    assert finished.status == "complete" and captured == [] and "statistics" not in stages and "tensors" in stages
    assert finished.answer.fallback_nodes == whole_run.answer.fallback_nodes and finished.passed == whole_run.passed
    kept = {a: v for a, v in finished.answer.artifacts.items() if a.startswith("activations")}
    assert kept and kept.keys() == {a for a in whole_run.answer.artifacts if a.startswith("activations")}
    for name in kept.values():
        with ActivationStore(run / name) as s, ActivationStore(tmp_path / "whole" / name) as w:
            assert s.attr(TENSORS_OWED) is None
            for r in (REFERENCE, LOWP, LOCAL):
                assert sorted(s.tensor_names(r)) == sorted(w.tensor_names(r))
                for t in s.tensor_names(r):
                    np.testing.assert_array_equal(s.read(r, t), w.read(r, t))
