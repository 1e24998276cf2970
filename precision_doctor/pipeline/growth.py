"""How a run grows an answer that fails some samples: by attribution (search/attributed.py), with the local errors
of those samples measured here (measure/attribution.py), once per sample, each attribution said in the progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from precision_doctor.control import PhaseEvent, ProgressSink, StopToken, notify
from precision_doctor.data.inputs import Sample
from precision_doctor.errors import UserError
from precision_doctor.graph.formats import Format
from precision_doctor.graph.model import Model
from precision_doctor.graph.ort_session import GpuRunError
from precision_doctor.measure.attribution import local_scores, sample_key, worst_scores
from precision_doctor.measure.capture import CPU, capture_providers
from precision_doctor.search.attributed import Attributor, attributed_repair
from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace


@dataclass
class Attribution:
    """The run's attributions: per sample (by content), each candidate's local error score."""

    model: Model
    fmt: Format
    rules: str | None
    group_mb: float
    progress: ProgressSink | None = None
    stop: StopToken | None = None
    device: str = "cpu"  # where the local runs compute: the capture's device (`capture.device`)
    cache: dict[str, dict[str, float]] = field(default_factory=dict)
    samples: int = 0  # how many samples were attributed

    def scores(self, samples: Sequence[Sample]) -> dict[str, float]:
        """Per node, its largest attributed score over `samples` (those not attributed before, in one pass)."""
        keys = [sample_key(s) for s in samples]
        new = {k: s for k, s in zip(keys, samples) if k not in self.cache}
        if new:
            self.cache.update(zip(new, self._scores(list(new.values()))))
            self.samples += len(new)
        return worst_scores([self.cache[k] for k in keys])

    def _scores(self, samples: list[Sample]) -> list[dict[str, float]]:
        """The samples' scores on the capture's device; on the CPU where that has no CUDA provider (a resumed run
        that captured nothing) or where the GPU fails them (the search's sessions hold its memory meanwhile): an
        attribution ranks nodes, and the CPU's ranks them as well."""
        try:
            providers = capture_providers(self.device)
        except UserError:
            providers, self.device = [CPU], "cpu"
        try:
            return local_scores(self.model, self.fmt, samples, rules=self.rules, group_mb=self.group_mb,
                                providers=providers, progress=self.progress, stop=self.stop)
        except GpuRunError as exc:
            self.device = "cpu"
            notify(self.progress, PhaseEvent("attribute", f"on the CPU: the GPU failed it ({exc.what})"))
            return local_scores(self.model, self.fmt, samples, rules=self.rules, group_mb=self.group_mb,
                                progress=self.progress, stop=self.stop)

    def on(self, oracle: Oracle) -> Attributor:
        """The attributor of `oracle`'s samples (by its indices)."""
        return lambda indices: self.scores([oracle.samples[i] for i in indices])


def grow_by_attribution(attribution: Attribution, previous: frozenset[str], failing: Sequence[int] = (),
                        prune_after: bool = True):
    """A strategy (oracle, space) -> set that carries `previous` over to the oracle it is given: kept where it
    passes, else grown by the nodes its failing samples (`failing`: the oracle's indices known to fail it) are
    attributed to, what it added pruned again (`prune_after`)."""

    def run(oracle: Oracle, space: SearchSpace) -> frozenset[str] | None:
        return attributed_repair(oracle, space, previous, attribution.on(oracle), failing=failing,
                                 prune_after=prune_after)

    return run
