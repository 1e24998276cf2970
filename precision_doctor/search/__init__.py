"""Search for the smallest FP32 fallback set: an oracle, and strategies that only talk to it."""

from collections.abc import Callable

from precision_doctor.search.auto import auto
from precision_doctor.search.baselines import bisect, linear, segment
from precision_doctor.search.ddmin import ddmin
from precision_doctor.search.oracle import Oracle
from precision_doctor.search.space import SearchSpace
from precision_doctor.search.units import on_units

Strategy = Callable[[Oracle, SearchSpace], "frozenset[str] | None"]

# Each runs over the space's units (fusion groups with the deploy objective, search/units.py).
STRATEGIES: dict[str, Strategy] = {name: on_units(fn) for name, fn in {
    "auto": auto,
    "bisect": bisect,
    "bisect-reverse": lambda o, s: bisect(o, s, "reverse"),
    "linear": linear,
    "linear-reverse": lambda o, s: linear(o, s, "reverse"),
    "ddmin": ddmin,
    "segment": segment,
}.items()}
