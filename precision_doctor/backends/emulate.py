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


class EmulatedRunner:
    """A fallback set bound to the shared emulation session."""

    def __init__(self, backend: EmulateBackend, fallback: frozenset[str]):
        self.backend = backend
        self.mask = backend.graph.mask(fallback)

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else self.backend.output_names
        res = run_session(self.backend.session, names, {**feeds, MASK_INPUT: self.mask}, self.backend.model)
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
        self.session = make_session(with_outputs(self.graph.proto, self.output_names, model.tensor_types),
                                    optimize=False)
        self.graph.proto = onnx.ModelProto()  # the session holds it (2x the weights: FP32 and rounded); the gate
        self.activate()  # order is all `prepare` reads

    def prepare(self, fallback: frozenset[str]) -> EmulatedRunner:
        return EmulatedRunner(self, frozenset(fallback))

    def release(self) -> None:
        """Release the session (runners prepared before cannot run afterwards)."""
        self.session = None
