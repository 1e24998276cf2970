"""The FP32 reference: ONNX Runtime on the CPU over the unmodified model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from precision_doctor.backends.base import Feeds, SessionHolder
from precision_doctor.graph.model import Model
from precision_doctor.graph.ort_session import make_session, run_session, with_outputs


class ReferenceRunner(SessionHolder):
    """Runs the model in FP32; `outputs` may name any tensors (they are marked as graph outputs). Its one session
    is released by `close()` (a `SessionHolder`)."""

    name = "reference"

    def __init__(self, model: Model, outputs: Sequence[str] | None = None):
        self.model = model
        names = list(outputs) if outputs is not None else model.outputs
        self.output_names = names
        self.session = self._make()
        self.activate()

    def _make(self):
        return make_session(with_outputs(self.model.lean_proto(), self.output_names, self.model.tensor_types),
                            optimize=False)

    def pause(self) -> None:
        """Drop the session while others need the memory (a large model's capture: it holds what ONNX Runtime
        prepacks of the weights); the next `run` makes it again."""
        self.session = None

    def run(self, feeds: Feeds, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        names = list(outputs) if outputs is not None else self.output_names
        if self.session is None and self.is_active:
            self.session = self._make()
        return dict(zip(names, run_session(self.session, names, dict(feeds), self.model)))

    def release(self) -> None:
        self.session = None
