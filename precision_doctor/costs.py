"""What an answer costs where it is deployed, as records: `AnswerCost` (one set's price, `graph/cost.py`),
`DeployLatency` (measured, `measure/latency.py`), `GroupUse` (a fusion group the answer keeps, `search/refine.py`),
`Tradeoff` with its `TradeoffPoint`s and `FrontierPoint`s (FP32 cost against the tolerance, `search/tradeoff.py`),
`Refinement` (what `search/refine.py` did to an answer: groups split, gaps closed; `SearchSpace.refinements`).
The modules that compute them and the Report that keeps them (`results/report.py`'s `Pricing`) both import them
from here, so nothing below the results climbs up to the Report for a type."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class AnswerCost:
    """One set's price (`graph/cost.py`): FP32 share of the FLOPs (the set and the nodes fixed.onnx keeps in FP32
    anyway) at the shapes that ran, the Casts fixed.onnx has and how many more than the all-low-precision model,
    bytes moved per inference (weights and activations, Casts included) by fixed.onnx, all-FP32 and
    all-low-precision, the deployment objective (`deploy_us`, microseconds above all-low-precision) and the
    estimated share of the low-precision speed-up kept (None where that model estimates no speed-up). `batch`:
    the batch the figures are for; `shapes_from`: "capture" or "inference"; `profile`: the device assumed."""

    fp32_flop_share: float
    fp32_flops: int
    total_flops: int
    casts: int
    casts_added: int
    cast_bytes: int
    bytes_fixed: int
    bytes_fp32: int
    bytes_lowp: int
    deploy_us: float
    estimated_speedup_kept: float | None
    batch: int
    shapes_from: str
    profile: str


@dataclass(frozen=True)
class DeployLatency:
    """Measured median milliseconds of one inference at `batch` (and the 90th percentile), on `device` (ORT
    with I/O binding, `measure/latency.py`), of the FP32 model, the all-low-precision one and fixed.onnx."""

    batch: int
    device: str
    runs: int
    fp32_ms: float
    lowp_ms: float
    fixed_ms: float
    fp32_p90_ms: float
    lowp_p90_ms: float
    fixed_p90_ms: float

    @property
    def latency_kept(self) -> float | None:
        """(t_fp32 - t_fixed) / (t_fp32 - t_lowp): the share of the low-precision speed-up kept; None without one."""
        gain = self.fp32_ms - self.lowp_ms
        return (self.fp32_ms - self.fixed_ms) / gain if gain > 0 else None

    def to_json(self) -> dict:
        return {**asdict(self), "latency_kept": self.latency_kept}


@dataclass(frozen=True)
class TradeoffPoint:
    """The cheapest set found that passes at `multiplier` x the search's tolerance (`search/tradeoff.py`): its
    size, FP32 FLOP share and deployment cost (None without a cost model). `complete`: its prune finished (else
    an upper bound); `evaluations`: what it took beyond the search; `fallback`: the set."""

    multiplier: float
    found: bool
    fallback_size: int | None = None
    fp32_flop_share: float | None = None
    deploy_us: float | None = None
    complete: bool = True
    evaluations: int = 0
    fallback: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FrontierPoint:
    """A set the search saw pass using `share` of the tolerance: it holds from `share` x the tolerance up."""

    share: float
    fallback_size: int
    fp32_flop_share: float | None
    deploy_us: float | None


@dataclass
class Tradeoff:
    """FP32 cost against the tolerance a user could choose: the answer's point (multiplier 1), the points pruned
    again at other multiples and the frontier of the search's own passing sets; `evaluations` beyond the search."""

    points: list[TradeoffPoint] = field(default_factory=list)
    frontier: list[FrontierPoint] = field(default_factory=list)
    evaluations: int = 0

    def at(self, multiplier: float) -> TradeoffPoint | None:
        return next((p for p in self.points if p.multiplier == multiplier), None)


@dataclass(frozen=True)
class GroupUse:
    """A fusion group (`graph/groups.py`) the answer keeps in FP32: whole (`released` empty), or split where its
    other members were proven not to matter (`search/refine.py`)."""

    kind: str
    kept: list[str]
    released: list[str] = field(default_factory=list)


@dataclass
class Refinement:
    """What the steps after the search did: `answer` (nodes), the groups split, the gaps closed (nodes added)
    and the evaluations they took; `stopped` says why they ended early (the budget), if they did."""

    answer: frozenset[str]
    splits: list[GroupUse] = field(default_factory=list)
    gaps_closed: list[tuple[str, ...]] = field(default_factory=list)
    evaluations: int = 0
    stopped: str | None = None
