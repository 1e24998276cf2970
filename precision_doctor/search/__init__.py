"""Search for the smallest FP32 fallback set: an oracle, and strategies that only talk to it.

Each strategy is one `StrategyInfo` in `STRATEGY_INFO`: its function and what the counterexample-guided loop
(pipeline/search_loop.py) may ask of it beyond a fresh search. A new strategy is its module and one entry here.
"""

from collections.abc import Callable
from dataclasses import dataclass

from precision_doctor.search.auto import auto, polish, repair
from precision_doctor.search.baselines import bisect, linear, segment
from precision_doctor.search.ddmin import ddmin
from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace
from precision_doctor.search.units import on_units

Strategy = Callable[[Oracle, SearchSpace], "frozenset[str] | None"]
Polish = Callable[[Oracle, SearchSpace, "frozenset[str]"], "frozenset[str]"]


@dataclass(frozen=True)
class StrategyInfo:
    """A search strategy: `fn` searches the space from nothing; `grow` (None: it cannot) continues from an answer
    that new samples failed, growing it until it passes and pruning only what it added (the loop's next round;
    a run that measures attributions grows by them instead: pipeline/growth.py); `polish` (None: nothing) is what an
    answer grown so still owes once it passes every search sample (the removals the growth did not try)."""

    fn: Strategy
    grow: Callable[["frozenset[str]"], Strategy] | None = None
    polish: Polish | None = None

    @property
    def grows_from_answer(self) -> bool:
        return self.grow is not None


def _grow_by_ranking(previous: "frozenset[str]") -> Strategy:
    """`auto`'s next round: the previous answer grown along the search's ranking, what was added pruned."""
    return lambda o, sp: repair(o, sp, previous, keep_start=True)


# Each runs over the space's units (fusion groups with the deploy objective, search/units.py); another strategy
# than `auto` searches again in each round, its failures memoized.
STRATEGY_INFO: dict[str, StrategyInfo] = {
    "auto": StrategyInfo(on_units(auto), grow=_grow_by_ranking, polish=polish),
    "bisect": StrategyInfo(on_units(bisect)),
    "bisect-reverse": StrategyInfo(on_units(lambda o, s: bisect(o, s, "reverse"))),
    "linear": StrategyInfo(on_units(linear)),
    "linear-reverse": StrategyInfo(on_units(lambda o, s: linear(o, s, "reverse"))),
    "ddmin": StrategyInfo(on_units(ddmin)),
    "segment": StrategyInfo(on_units(segment)),
}
STRATEGIES: dict[str, Strategy] = {name: s.fn for name, s in STRATEGY_INFO.items()}  # name -> the search itself
