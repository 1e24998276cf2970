"""Real low precision on ONNX Runtime (the CUDA provider when present) in one session for every
fallback set: the gated native graph of `graph.native`, where a fallback set is a feed.

It computes what the mixed graph of `backends.ort` computes for the same set, without the kernel
fusions ONNX Runtime makes across neighbouring nodes (it cannot fuse across If branches), unless `units`
(the `ort-cuda` target): then each fusion site of the deployed graph is gated whole
(`graph.native.fusion_units`) and fuses inside its branch where all its nodes are low precision, as in the
deployed graph. Compare the two with bench/gpu_nodewise.py before trusting one for the other. On the CPU provider ONNX
Runtime computes the FP16 nodes in FP32 (it drops the Casts around ops without FP16 kernels), so
`ort-cpu-gated` checks plumbing only. In BF16 the op types this ONNX Runtime refuses for want of a BF16 kernel
stay FP32, ungated (`backends.ort.session_keeping_fp32`, one record shared with the mixed graphs).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import numpy as np
import onnx

from precision_doctor.backends.base import Feeds, SessionHolder
from precision_doctor.backends.ort import CUDA, OrtBackend, session_keeping_fp32
from precision_doctor.errors import UserError
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.graph.native import NativeGatedGraph, fusion_units, gated_native_graph
from precision_doctor.graph.ort_session import GpuRunError, make_session, run_session, with_outputs

FORMS = ("if", "where")  # the gated graph's forms (`graph.native.gated_native_graph`), timed on a GPU: `choose_form`
FORM_WORDS = {"if": "If form", "where": "Where form"}


def offered_forms(gpu: bool, units: bool) -> tuple[str, ...]:
    """The gated graph's forms a backend chooses from, the first used until `choose_form` times them: both on a GPU
    where no fusion unit is gated, else the If form. With units (the ort-cuda target, optimized) the Where form's
    values were not compared with the If form's on a GPU, and ONNX Runtime's CPU optimizer treats the two
    differently (it removes Casts across the Where form's main graph that the If form's branches keep)."""
    return FORMS if gpu and not units else ("if",)


class OrtGatedRunner:
    """A fallback set bound to the shared session. Floating outputs come back as float32."""

    def __init__(self, backend: OrtGatedBackend, fallback: frozenset[str]):
        self.backend = backend
        self.fallback = fallback
        self._gates: tuple[NativeGatedGraph, dict] | None = None  # the gates, for the graph they were made for

    @property
    def gates(self) -> dict[str, np.ndarray]:
        """The gate feeds of the set for the backend's graph now (made again with its session after a pause, with
        the op types refused meanwhile left ungated: other gates)."""
        graph = self.backend.graph
        if self._gates is None or self._gates[0] is not graph:
            self._gates = (graph, graph.feeds(self.fallback))
        return self._gates[1]

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else self.backend.output_names
        session = self.backend.live_session()
        res = run_session(session, names, {**feeds, **self.gates}, getattr(self.backend, "model", None))
        return {n: a.astype(np.float32) if a.dtype.kind == "f" and a.itemsize < 4 else a for n, a in zip(names, res)}


class OrtGatedBackend(SessionHolder):
    """One session over the gated native graph; each `prepare` costs nothing.

    Arguments as `OrtBackend` (providers, `tf32`, `optimize`, `level`); `mixed` is an `OrtBackend` with the
    same settings, for the real mixed graph of a set (`mixed.prepare(fallback)`, one session each); `units`:
    gate ONNX Runtime's fusion sites whole (see the module docstring); `forms`: the gated graph's forms to choose
    from, the first used until `choose_form` times them (None: both on the CUDA provider, the If form elsewhere).
    """

    def __init__(
        self,
        model: Model,
        precision: str = "fp16",
        providers: Sequence | None = None,
        outputs: Sequence[str] | None = None,
        optimize: bool = True,
        tf32: bool = False,
        level: str | None = None,
        units: bool = False,
        forms: Sequence[str] | None = None,
    ):
        self.mixed = OrtBackend(model, precision, providers, outputs, optimize=optimize, tf32=tf32, level=level)
        self.model = model
        self.precision = precision
        self.providers = self.mixed.providers
        self.level = self.mixed.level
        self.name = "ort-cuda-gated" if self.mixed.uses_cuda else "ort-cpu-gated"
        self.output_names = self.mixed.output_names
        fmt = get_format(precision)
        self.kept_fp32 = self.mixed.kept_fp32  # one record: what the gated session refused, the mixed graphs keep too
        whole = fusion_units(model, fmt) if units else ()
        self.graph: NativeGatedGraph
        self._made_with = lambda form, kept, everywhere, warn: session_keeping_fp32(
            lambda blocked: gated_native_graph(model, fmt, form=form, units=whole, op_block_list=blocked),
            lambda graph: make_session(with_outputs(graph.proto, self.output_names, model.tensor_types), self.providers,
                                       optimize=optimize, level=self.level),
            precision, kept, warn, self.name, model, everywhere)
        self._made = lambda form: self._made_with(form, self.kept_fp32, self.mixed.refused_everywhere, self.mixed.warn)
        forms = tuple(forms) if forms is not None else offered_forms(self.mixed.uses_cuda, bool(whole))
        self.form, self.untimed = forms[0], forms[1:]  # untimed: the forms `choose_form` tries
        self.form_times: dict[str, float] = {}  # seconds per form of `choose_form`'s trial (empty: none was made)
        self.graph, self.session = self._made(self.form)
        self.graph.proto = onnx.ModelProto()  # the session holds it; the gates are all `prepare` reads
        if self.mixed.uses_cuda and CUDA not in self.session.get_providers():
            raise UserError("ONNX Runtime could not use the CUDA provider (onnxruntime-gpu and its CUDA libraries needed)")
        self.activate()

    def prepare(self, fallback: frozenset[str]) -> OrtGatedRunner:
        return OrtGatedRunner(self, frozenset(fallback))

    def live_session(self):
        """The session, made again after a `pause` (the gated graph built again, with the refusals known: in BF16
        other backends' sessions may have added op types, whose nodes the new graph leaves ungated)."""
        if self.session is None and self.is_active:
            self.graph, self.session = self._made(self.form)
            self.graph.proto = onnx.ModelProto()
        return self.session

    def choose_form(self, sample: Feeds, quiet: contextlib.AbstractContextManager | None = None) -> str | None:
        """Time the graph's forms on `sample` and keep the faster (the others' sessions dropped); a line saying what
        was timed and kept, or None where there is nothing to choose (one form: the CPU provider, or chosen before).

        The If form runs only the taken branch of each gate, but each If is a subgraph call decided on the host; the
        Where form computes both sides of every gate with no control flow, twice the arithmetic in kernels launched
        back to back. Which costs less depends on the model and the GPU (about the same on a 300-node detector, on
        a 1,900-node encoder-decoder the If calls cost 15-20 times the real graph's run), so it is measured: each
        form on the all-low and the all-FP32 set, a warm-up run and the faster of two timed runs each. Without
        fusion units (the only case the Where form is offered in) both compute the same values: to the bit under
        ONNX Runtime (tests/graph/test_target.py; whisper-base on the H200). A form that cannot be made or run here
        (a type ONNX Runtime has no Where kernel for, the GPU's memory, an op it would need kept FP32) is said in the
        line and the other kept. `quiet`: held while a form is timed (work beside the trial pauses meanwhile: the FP32
        references, `ReferenceSet.computed_beside`)."""
        if not self.untimed:
            return None
        sets, quiet = (frozenset(), frozenset(self.graph.candidates)), quiet or contextlib.nullcontext()

        def timed(graph: NativeGatedGraph, session) -> float:
            with quiet:
                return sum(self._timed(session, {**sample, **graph.feeds(fb)}) for fb in sets)

        self.form_times[self.form] = timed(self.graph, self.live_session())
        failed = []
        for form in self.untimed:  # each made and timed beside the one kept so far, the slower dropped at once
            kept = dict(self.kept_fp32)  # its own record: a trial teaches the run's sessions and fixed.onnx nothing
            try:
                graph, session = self._made_with(form, kept, None, lambda line: None)
                graph.proto = onnx.ModelProto()
                if kept != self.kept_fp32:
                    raise UserError(f"it needs {', '.join(sorted(set(kept) - set(self.kept_fp32)))} kept FP32")
                self.form_times[form] = timed(graph, session)
            except Exception as exc:  # noqa: BLE001 (its session or a run: a kernel ONNX Runtime lacks for a Where's
                failed.append(f"the {FORM_WORDS[form]} could not run here ({_reason(exc)})")  # type, the GPU's memory)
                continue
            if self.form_times[form] < self.form_times[self.form]:
                self.form, self.graph, self.session = form, graph, session
            del graph, session
        self.untimed = ()
        times = ", ".join(f"{FORM_WORDS[f]} {t * 1e3:.0f} ms" for f, t in self.form_times.items())
        return (f"the search graph's {FORM_WORDS[self.form]} kept (a sample all-low and all-FP32: {times})"
                + "".join(f"; {f}" for f in failed))

    def _timed(self, session, feeds: Feeds) -> float:
        names, model = self.output_names, self.model
        run_session(session, names, feeds, model)  # the first run: kernels chosen, memory allocated
        times = []
        for _ in range(2):
            t = time.perf_counter()
            run_session(session, names, feeds, model)
            times.append(time.perf_counter() - t)
        return min(times)

    def pause(self) -> None:
        """Drop the session and the mixed backend's while others need the memory (a capture, the other runtime's
        check): on a GPU the session's arena holds what its largest runs needed. The next run makes it again (a
        large model's gated graph: seconds)."""
        self.session = None
        self.mixed.pause()

    def release(self) -> None:
        """Release the session and the mixed backend's cached ones."""
        self.session = None
        self.mixed.close()


def _reason(exc: Exception) -> str:
    """A failure in a few words: a GPU failure's own line without its advice (the run goes on), else the error's
    first line, cut at a word."""
    if isinstance(exc, GpuRunError):
        text = exc.what.split(": ", 1)[-1]  # without the model's path
    else:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= 160 else text[:160].rsplit(" ", 1)[0] + " ..."
