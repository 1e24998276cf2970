"""Emulated low precision on ONNX Runtime CPU: one gated graph, a fallback set is just a feed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from precision_doctor.backends.base import Feeds, SessionHolder
from precision_doctor.graph.emulate import MASK_INPUT, GatedGraph, gated_graph
from precision_doctor.graph.formats import get_format
from precision_doctor.graph.model import Model
from precision_doctor.graph.ort_session import make_session, run_session, with_outputs
from precision_doctor.graph.weights import in_files


class EmulatedRunner:
    """A fallback set bound to the shared emulation session."""

    def __init__(self, backend: EmulateBackend, fallback: frozenset[str]):
        self.backend = backend
        self.mask = backend.graph.mask(fallback)

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else self.backend.output_names
        res = run_session(self.backend.live_session(), names, {**feeds, MASK_INPUT: self.mask}, self.backend.model)
        return dict(zip(names, res))


class EmulateBackend(SessionHolder):
    """The emulation rule on ORT CPU. Building it costs one session; each `prepare` costs nothing."""

    name = "emulate"

    def __init__(self, model: Model, precision: str = "fp16", outputs: Sequence[str] | None = None, rules=None):
        self.model = model
        self.precision = precision
        self.graph: GatedGraph = gated_graph(model, get_format(precision), rules=rules)  # rules: graph.rules
        self.rules = self.graph.rules  # the rules' label (a profile name, or rule names)
        self.output_names = list(outputs) if outputs is not None else model.outputs
        self._proto = with_outputs(self.graph.proto, self.output_names, model.tensor_types)
        self.session = make_session(self._proto, optimize=False)
        self.graph.proto = onnx.ModelProto()  # the gate order is all `prepare` reads
        if not in_files(self._proto):  # its weights in the graph (FP32 and rounded: 2x): the session has them
            self._proto = None
        self.activate()

    def prepare(self, fallback: frozenset[str]) -> EmulatedRunner:
        return EmulatedRunner(self, frozenset(fallback))

    def pause(self) -> None:
        """Drop the session while others need the memory (a large model's capture: it holds what ONNX Runtime
        prepacks of the FP32 and the rounded weights), where it can be made again from the graph kept (one whose
        large weights are in files, `graph/weights.py`): the next run makes it again."""
        if self._proto is not None:
            self.session = None

    def live_session(self):
        """The session, made again after a `pause`."""
        if self.session is None and self.is_active and self._proto is not None:
            self.session = make_session(self._proto, optimize=False)
        return self.session

    def release(self) -> None:
        """Release the session (runners prepared before cannot run afterwards)."""
        self.session = None
        self._proto = None
