"""The streaming capture (measure/capture.py): every tensor's statistics measured as the runs execute equal those the
analysis computed from a store of every tensor (the capture as it was: the reference and low-precision runs written
tensor group by tensor group, the local run fed the stored reference); `local_errors` gives the capture's local
numbers; no capture phase is silent for long; the CUDA path where there is a GPU."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from precision_doctor import api, planted
from precision_doctor.backends.registry import cuda_machine
from precision_doctor.control import CaptureEvent, PhaseEvent
from precision_doctor.data.activations import LOCAL, LOWP, REFERENCE, ActivationStore, captured_shapes
from precision_doctor.data.inputs import load_samples
from precision_doctor.data.workload import Workload
from precision_doctor.graph.emulate import MASK_INPUT, gated_graph, local_graph
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model, from_proto, load_model
from precision_doctor.measure import capture as capture_module
from precision_doctor.measure import chain as chain_module
from precision_doctor.measure.analysis import analyse, tensor_stats
from precision_doctor.measure.capture import capture, capture_providers, capture_run, local_errors, shape_runs
from precision_doctor.measure.fidelity import capture_local_with
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.pipeline.compare import capture_fixed, run_compare
from precision_doctor.spec import BackendSpec, CaptureSpec, InputSpec, RunSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RULES = BackendSpec().rules  # the default emulation rules


def _whole_store(path: Path, model: Model, samples, fmt, rules: str | None, group_mb: float) -> None:
    """The capture as it was before it streamed: every tensor of the reference and low-precision runs written a
    group of tensors at a time, the local run computed from the stored reference tensors."""
    budget = int(group_mb * (1 << 20))
    node_outputs = [t for n in model.nodes for t in n.outputs if t]
    with ActivationStore(path, "w", compression=None) as store:
        store.set_attrs(precision=fmt.name, nodes=model.node_records(), model_outputs=model.outputs,
                        samples=len(samples))
        store.set_shape_groups([(g.as_dict(), n) for g, n in shape_runs(samples)])
        for i, s in enumerate(samples):
            for name, value in s.items():
                store.write(REFERENCE, name, i, len(samples), value)
        capture_run(store, REFERENCE, model.proto, model, node_outputs, samples, {}, budget)
        gated = gated_graph(model, fmt, rules=rules)
        floats = [t for t in node_outputs if model.is_float(t)]
        capture_run(store, LOWP, gated.proto, model, floats, samples, {MASK_INPUT: gated.mask(frozenset())}, budget)
        capture_local_with(store, LOCAL, model, lambda g: local_graph(model, fmt, g, rules), model.candidates,
                           len(samples), budget)


def _cases() -> list[tuple[str, Model, list]]:
    out = [(name, from_proto(planted.CASES[name]().model), planted.CASES[name]().samples(3, seed=0))
           for name in planted.CASES]
    for name in ("three_defects", "overflow_island"):
        model = load_model(EXAMPLES / f"{name}.onnx")
        files = sorted(glob.glob(str(EXAMPLES / f"{name}_inputs" / "*.npz")))
        out.append((f"examples/{name}", model, list(load_samples(files, None, model))))
    return out


CASES = _cases()


@pytest.mark.parametrize("name, model, samples", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("rules", [RULES, "standard"])
def test_streamed_statistics_are_the_whole_stores(tmp_path, name, model, samples, rules):
    """Each tensor's statistics (every ErrorStats field, the ranges) and the whole analysis (layer table, ranking,
    first divergence, verdict) are the same numbers, to the last bit, whether streamed or read from every tensor."""
    fmt = get_format("fp16")
    _whole_store(tmp_path / "whole.h5", model, samples, fmt, rules, 256.0)
    streamed = capture(model, samples, fmt, tmp_path / "streamed.h5", group_mb=256.0, compression=None, rules=rules)
    tol = Tolerance(1e-3, 1e-3)
    with ActivationStore(tmp_path / "whole.h5") as whole, ActivationStore(tmp_path / "streamed.h5") as store:
        stored = tensor_stats(whole, model.node_records(), fmt)
        assert set(stored) == set(streamed)
        for t in stored:
            assert repr(stored[t]) == repr(streamed[t]), t
        before = analyse(whole, tolerance=tol, model=model)  # from the tensors: the store has no statistics
        after = analyse(store, tolerance=tol, model=model)
    assert before.ranking and json.dumps(before.to_dict(), sort_keys=True) == json.dumps(after.to_dict(), sort_keys=True)
    # the shapes that ran, which graph/cost.py prices, though the streamed store holds the graph outputs only
    assert captured_shapes(tmp_path / "streamed.h5") == captured_shapes(tmp_path / "whole.h5")


@pytest.mark.parametrize("name", ["three_defects", "softmax_no_max", "cancellation"])
def test_groups_of_one_layer_give_the_same_numbers(tmp_path, name):
    """A budget below every layer's size (a group per layer: sessions marking only its tensors and the exact inputs
    its local nodes read) measures what one group of every layer measures."""
    case = planted.CASES[name]()
    model, samples, fmt = from_proto(case.model), case.samples(3, seed=1), get_format("fp16")
    one = capture(model, samples, fmt, tmp_path / "one.h5", group_mb=256.0, compression=None, rules=RULES)
    each = capture(model, samples, fmt, tmp_path / "each.h5", group_mb=1e-6, compression=None, rules=RULES)
    assert {t: repr(s) for t, s in one.items()} == {t: repr(s) for t, s in each.items()}


@pytest.mark.parametrize("name, model, samples", CASES[:4] + CASES[-2:], ids=[c[0] for c in CASES[:4] + CASES[-2:]])
def test_local_errors_are_the_captures(tmp_path, name, model, samples):
    """`local_errors` (for attribution: the local error of nodes on a few samples, nothing written) gives each
    candidate the local ErrorStats of the capture's layer table, for every candidate or a few of them."""
    fmt = get_format("fp16")
    capture(model, samples, fmt, tmp_path / "c.h5", group_mb=256.0, compression=None, rules=RULES)
    with ActivationStore(tmp_path / "c.h5") as store:
        layers = {r.name: r for r in analyse(store, model=model).layers}
    got = local_errors(model, fmt, samples, rules=RULES)
    assert set(got) == set(layers) == {n.name for n in model.candidates}
    for node, stats in got.items():
        row = layers[node]
        assert (repr(stats.rel_l2), repr(stats.max_abs), stats.nonfinite, repr(stats.ref_absmax)) == \
            (repr(row.local_rel_l2), repr(row.local_max_abs), row.local_nonfinite, repr(row.ref_absmax)), node
    few = [n.name for n in model.candidates[-2:]]
    assert {k: repr(v) for k, v in local_errors(model, fmt, samples, rules=RULES, nodes=few).items()} == \
        {k: repr(got[k]) for k in few}


def test_memory_holds_two_steps_at_most(tmp_path, monkeypatch):
    """The runs' values are dropped step by step: at most two steps' values (one sample's of one group: the step being
    computed and the one whose statistics are summed meanwhile) are alive at once, whatever the number of samples
    (weak references to every array the sessions return)."""
    import weakref

    case = planted.CASES["three_defects"]()
    model, samples = from_proto(case.model), case.samples(6, seed=0)
    alive, worst = [], [0]
    real = capture_module.run_session

    def tracked(sess, names, feed, model=None, options=None):
        out = real(sess, names, feed, model, options)
        for v in out:
            alive.append(weakref.ref(v))
        worst[0] = max(worst[0], sum(1 for r in alive if r() is not None))
        return out

    monkeypatch.setattr(capture_module, "run_session", tracked)  # the local run
    monkeypatch.setattr(chain_module, "run_session", tracked)  # the FP32 and low-precision chains
    nothing = dict.fromkeys((REFERENCE, LOWP, LOCAL), frozenset())  # no tensor written: none held for a write
    capture(model, samples, get_format("fp16"), tmp_path / "c.h5", group_mb=256.0, compression=None, rules=RULES,
            stored=nothing)
    one_sample = sum(len(n.outputs) + len(n.float_outputs) + (len(n.float_outputs) if n.is_candidate else 0)
                     for n in model.nodes)  # the FP32, low-precision and local runs' values of one sample
    assert one_sample / 2 < worst[0] <= 2 * one_sample, (worst[0], one_sample)


class _VirtualClock:
    """Seconds that pass only when ONNX Runtime works: each session made and each run costs a fixed time (a model
    slow enough that the capture takes minutes), so the gaps between progress events do not depend on the machine."""

    SESSION_S, RUN_S = 3.0, 3.0

    def __init__(self, monkeypatch):
        self.now = 0.0
        make, run = capture_module.make_session, capture_module.run_session

        def slow_make(*a, **k):
            self.now += self.SESSION_S
            return make(*a, **k)

        def slow_run(*a, **k):
            self.now += self.RUN_S
            return run(*a, **k)

        monkeypatch.setattr(capture_module, "make_session", slow_make)
        monkeypatch.setattr(capture_module, "run_session", slow_run)
        monkeypatch.setattr(chain_module, "run_session", slow_run)


def test_no_capture_phase_is_silent_for_10_seconds(planted_file, tmp_path, monkeypatch):
    """Progress events of compare's capture (every layer's statistics, the top layers' tensors) and of diagnose's
    fixed run, at least every 10 s of a run whose every session and ORT run takes 3 s (virtual seconds: the test
    does not depend on the machine's speed), over more than a minute of such work."""
    clock = _VirtualClock(monkeypatch)
    case, path, files = planted_file("three_defects", n=6)
    times: list[float] = []
    stages = set()

    def sink(ev) -> None:
        times.append(clock.now)
        if isinstance(ev, CaptureEvent):
            stages.add(ev.stage)

    spec = RunSpec(str(path), inputs=InputSpec(files=tuple(map(str, files))), tolerance=Tolerance(case.atol, case.rtol),
                   capture=CaptureSpec(group_mb=1e-6))  # a group per layer: many sessions, many runs
    api.compare(spec, tmp_path / "c", progress=sink)
    model = from_proto(case.model)
    work = Workload(model, [dict(np.load(f)) for f in files], InputSpec())
    capture_fixed(tmp_path / "c" / "activations.h5", model, get_format("fp16"), work.samples, frozenset(case.expected),
                  CaptureSpec(group_mb=1e-6), progress=sink)
    gaps = np.diff([0.0, *times])
    assert clock.now > 60 and {"statistics", "tensors", "fixed"} <= stages, (clock.now, stages)
    assert gaps.max() <= 10.0, (gaps.max(), len(times))


def test_plain_progress_prints_a_line_at_least_every_10_seconds_of_capture():
    """Where stderr is no terminal, capture events become a line at least every EVERY_S seconds (and at each
    stage's end), so a long capture is not silent in a log."""
    from precision_doctor.cli.shared import PlainProgress

    now, lines = [0.0], []
    plain = PlainProgress(write=lines.append, clock=lambda: now[0])
    plain(PhaseEvent("capture", "8 samples, every layer's statistics"))
    for done in range(1, 41):
        now[0] += 3.0
        plain(CaptureEvent("statistics", done, 40))
    stamps = [float(ln.split("s]")[0].strip("[ ")) for ln in lines]
    assert max(np.diff(stamps)) <= PlainProgress.EVERY_S + 3.0 and lines[-1].endswith("capture statistics: 40 of 40\n")


def test_compare_writes_far_less_than_every_tensor(planted_file, tmp_path):
    case, path, files = planted_file("three_defects", n=6)

    def spec(keep):
        return RunSpec(str(path), inputs=InputSpec(files=tuple(map(str, files))), capture=CaptureSpec(keep=keep),
                       tolerance=Tolerance(case.atol, case.rtol))

    a = api.compare(spec("all"), tmp_path / "all").analysis
    s = api.compare(spec("top:0"), tmp_path / "stats").analysis
    assert json.dumps(a.to_dict(), sort_keys=True) == json.dumps(s.to_dict(), sort_keys=True)
    with ActivationStore(tmp_path / "stats" / "activations.h5") as store:
        assert set(store.tensor_names(REFERENCE)) == set(from_proto(case.model).outputs)


def test_the_capture_device_is_explicit():
    """`capture.device`: cpu everywhere; auto is cuda only where a CUDA GPU runs; cuda without one is refused."""
    assert capture_providers("cpu") == ["CPUExecutionProvider"]
    if not cuda_machine():
        assert capture_providers("auto") == ["CPUExecutionProvider"]
        with pytest.raises(Exception, match="no working CUDA provider"):
            capture_providers("cuda")


@pytest.mark.gpu
@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers() or not cuda_machine(),
                    reason="needs onnxruntime-gpu and a CUDA GPU")
def test_a_capture_on_the_gpu_ranks_as_on_the_cpu(tmp_path):
    """Not run here (no GPU): the capture's runs on ONNX Runtime's CUDA provider (true FP32, no TF32) give the
    statistics of the CPU's within FP32's noise, and the same planted culprits first."""
    for name in ("three_defects", "softmax_no_max", "overflow_island"):
        case = planted.CASES[name]()
        model, samples = from_proto(case.model), case.samples(3, seed=0)
        for dev in ("cpu", "gpu"):
            (tmp_path / f"{name}-{dev}").mkdir()
        work = Workload(model, samples, InputSpec())
        cpu = run_compare(work, "fp16", Tolerance(case.atol, case.rtol), tmp_path / f"{name}-cpu",
                          CaptureSpec(device="cpu")).analysis
        work = Workload(model, samples, InputSpec())
        gpu = run_compare(work, "fp16", Tolerance(case.atol, case.rtol), tmp_path / f"{name}-gpu",
                          CaptureSpec(device="cuda")).analysis
        with ActivationStore(tmp_path / f"{name}-gpu" / "activations.h5") as store:
            assert store.attr("device") == "cuda"
        assert gpu.ranking[0] in case.planted and cpu.ranking[0] in case.planted
        for a, b in zip(sorted(cpu.layers, key=lambda r: r.name), sorted(gpu.layers, key=lambda r: r.name)):
            if np.isfinite(a.local_rel_l2) and a.local_rel_l2 > 1e-3:
                assert b.local_rel_l2 == pytest.approx(a.local_rel_l2, rel=0.05), a.name
