"""Error statistics of one tensor against its reference, accumulated sample by sample (`ErrorStats`, `RelL2`), and
what the analysis needs of each captured tensor (`TensorStats`, accumulated by `TensorAccumulator` from each sample's
reference, low-precision and local values: the same sums in the same order whether the values come from a stored
capture or straight from the runs, so the same numbers).
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from precision_doctor.graph.formats import Format
from precision_doctor.measure.accumulate import shared_pool, stats_threads

# Elements summed at a time. Every sum runs chunk by chunk, whatever feeds it (the streaming capture, a stored
# capture, the fixed run), so the paths agree to the last bit; a chunk's float64 copies live in buffers of this
# thread's, reused: an array of a million elements or more made anew for each step (13 of them per tensor, sample and
# run) cost more in page faults than in arithmetic (isnet-1024's capture: one core, 4 s a step).
CHUNK = 1 << 18


class _Scratch(threading.local):
    """This thread's reusable buffers, by name and dtype (one chunk each, or more for a longer request)."""

    def __init__(self) -> None:
        self.bufs: dict[tuple[str, np.dtype], np.ndarray] = {}

    def get(self, name: str, n: int, dtype=np.float64) -> np.ndarray:
        key = (name, np.dtype(dtype))
        buf = self.bufs.get(key)
        if buf is None or buf.size < n:
            buf = self.bufs[key] = np.empty(max(n, CHUNK), key[1])
        return buf[:n]


_SCRATCH = _Scratch()


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


# A tensor of this many chunks or more is summed a chunk per thread and merged in order (`TensorAccumulator.add`):
# one tensor's sums on one thread held each step of whisper-base's capture (attention probabilities of 18M elements,
# 0.43 s each with every role) while the other threads waited.
PARALLEL_CHUNKS = 4


def _chunk_pool() -> ThreadPoolExecutor | None:
    """The threads a large tensor's chunks are summed on, as many as the capture's statistics get now
    (`stats_threads`: a batch worker's share; a Ray worker given another share gets another pool); None with one.
    They live with the process, each with its scratch buffers (about 10 MiB a thread)."""
    threads = stats_threads()
    return shared_pool("pd-chunks", threads) if threads > 1 else None


def _chunk_pairs(out, ref):
    """`out` and `ref` as the pairs of chunks every sum runs over: themselves where they are one chunk or their shapes
    differ (no chunks to pair: the accumulator says so), else flat slices of `CHUNK` elements."""
    o, r = np.asarray(out), np.asarray(ref)
    if o.shape != r.shape or r.size <= CHUNK:
        yield o, r
        return
    o, r = o.reshape(-1), r.reshape(-1)
    for i in _chunks(r.size):
        yield o[i:i + CHUNK], r[i:i + CHUNK]


def _as_f64(x: np.ndarray, name: str) -> np.ndarray:
    """`x` (flat, one chunk) as float64 in this thread's buffer `name`."""
    buf = _SCRATCH.get(name, x.size)
    np.copyto(buf, x, casting="unsafe")
    return buf


def _all_finite(x: np.ndarray) -> bool:
    return bool(np.isfinite(x, out=_SCRATCH.get("finite", x.size, np.bool_)).all())


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """The dot product of two flat float64 arrays on this thread (NumPy's own loop, not BLAS): the capture accumulates
    between ONNX Runtime's runs, whose thread pool BLAS's threads fight, as they fight any other load (on the 2-core
    machine under load, a 400k-element `np.dot` took 71 ms, this 4 ms)."""
    return float(np.einsum("i,i->", a, b))


@dataclass
class ErrorStats:
    """Error of a tensor against its reference, accumulated over samples."""

    size: int = 0
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    rel_l2: float = 0.0
    cosine: float = 1.0
    nan: int = 0
    inf: int = 0
    ref_absmax: float = 0.0
    frac_above_max: float = 0.0
    frac_below_normal: float = 0.0

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf


@dataclass(frozen=True)
class _Pairs:
    """One sample of a tensor and its reference as float64, flat: the pairs where both are finite (all of them, not
    copied, in the usual case), |ref| over every finite reference element (None: `ref`'s, all finite), how many
    elements, the NaN and Inf the run added, and whether it made a finite reference element non-finite."""

    out: np.ndarray
    ref: np.ndarray
    ref_abs: np.ndarray | None
    size: int
    nan: int = 0
    inf: int = 0
    new_nonfinite: bool = False


def _finite_pairs(out: np.ndarray, ref: np.ndarray) -> _Pairs | None:
    """The pairs the error statistics sum over (None: the shapes differ)."""
    o = np.asarray(out, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    if o.shape != r.shape:
        return None
    if not r.size:
        return _Pairs(o, r, None, 0)
    finite_ref, finite_out = np.isfinite(r), np.isfinite(o)
    if finite_ref.all() and finite_out.all():  # the usual case: no masked copies (the same sums, in the same order)
        return _Pairs(o, r, None, r.size)
    both = finite_ref & finite_out
    return _Pairs(o[both], r[both], np.abs(r[finite_ref]), r.size,
                  nan=int(np.count_nonzero(np.isnan(o) & ~np.isnan(r))),
                  inf=int(np.count_nonzero(np.isinf(o) & ~np.isinf(r))),
                  new_nonfinite=bool(np.any(~finite_out & finite_ref)))


@dataclass(frozen=True)
class _Ref:
    """One sample of a reference tensor, prepared once for every run compared with it (the low-precision run, the
    local run, the rounding of the reference itself): float64 and flat, and where every element is finite (else
    None: each comparison masks on its own), its |ref| with zeros as float64's smallest step, its sum of squares
    and its range facts under `fmt`. The comparisons then compute what they computed before, once instead of three
    times: the same numbers."""

    raw: np.ndarray
    flat: np.ndarray
    safe_abs: np.ndarray | None = None
    sq: float = 0.0
    absmax: float = 0.0
    above: int = 0
    below: int = 0

    @classmethod
    def of(cls, ref: np.ndarray, fmt: Format) -> _Ref:
        """One chunk of a reference (at most `CHUNK` elements), prepared in this thread's buffers: valid until the
        thread prepares the next one."""
        ref = np.asarray(ref)
        if not ref.size or ref.dtype.kind != "f":
            return cls(ref, np.asarray(ref, dtype=np.float64).ravel())
        r = _as_f64(ref.reshape(-1), "ref")
        if not _all_finite(r):
            return cls(ref, r)
        return cls.of_pairs(ref, r, None, fmt)

    @classmethod
    def of_pairs(cls, raw: np.ndarray, rb: np.ndarray, a: np.ndarray | None, fmt: Format, buf: str = "absref") -> _Ref:
        """The prepared form of the finite reference elements `rb` (float64, flat) that are compared; `a`: |ref|
        over every finite reference element, for the range facts (None: `rb`'s); `buf`: the scratch buffer its
        |ref| lives in (another than a prepared chunk's that is still in use)."""
        with np.errstate(invalid="ignore", over="ignore"):
            absr = np.abs(rb, out=_SCRATCH.get(buf, rb.size))
            a = absr if a is None else a
            absmax = float(a.max()) if a.size else 0.0
            flags, more = _SCRATCH.get("flags", a.size, np.bool_), _SCRATCH.get("flags2", a.size, np.bool_)
            above = int(np.count_nonzero(np.greater(a, fmt.max, out=flags)))
            np.logical_and(np.greater(a, 0, out=flags), np.less(a, fmt.smallest_normal, out=more), out=flags)
            below = int(np.count_nonzero(flags))
            # after the range facts: a zero reference divides by float64's smallest step
            absr[np.equal(absr, 0, out=_SCRATCH.get("flags", absr.size, np.bool_))] = 2.22e-16
            return cls(raw, rb, absr, _dot(rb, rb), absmax, above, below)


class _Acc:
    """Streaming accumulator for `ErrorStats`."""

    def __init__(self, fmt: Format):
        self.fmt = fmt
        self.n = 0
        self.sum_abs = 0.0
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sq_diff = 0.0
        self.sq_ref = 0.0
        self.sq_out = 0.0
        self.dot = 0.0
        self.nan = 0
        self.inf = 0
        self.ref_absmax = 0.0
        self.above = 0
        self.below = 0
        self.new_nonfinite = False

    def add(self, out: np.ndarray, ref: np.ndarray | _Ref) -> None:
        """One sample: `out` against `ref` (an array, summed chunk by chunk; or one chunk's `_Ref`)."""
        if isinstance(ref, _Ref):
            if ref.safe_abs is not None and np.shape(out) == np.shape(ref.raw):
                o = _as_f64(np.asarray(out).reshape(-1), "out")
                if _all_finite(o):
                    self.n += o.size
                    self._add_prepared(o, ref)
                    return
            self._add_raw(out, ref.raw)
            return
        for o, r in _chunk_pairs(out, ref):
            self._add_raw(o, r)

    def _add_raw(self, out: np.ndarray, ref: np.ndarray) -> None:
        """One chunk (or arrays of different shapes), from the raw arrays."""
        p = _finite_pairs(out, ref)
        if p is None:
            self.new_nonfinite = True
            return
        self.n += p.size
        if not p.size:
            return
        self.nan += p.nan
        self.inf += p.inf
        self.new_nonfinite |= p.new_nonfinite
        self._add_finite(p.out, p.ref, p.ref_abs)

    def _add_finite(self, ob: np.ndarray, rb: np.ndarray, a: np.ndarray | None = None) -> None:
        """The sums over finite pairs (`ob`, `rb`: float64, flat); `a`: |ref| over every finite reference element
        (None: `rb`'s)."""
        self._add_prepared(ob, _Ref.of_pairs(rb, rb, a, self.fmt, buf="absref-pairs"))

    def _add_prepared(self, ob: np.ndarray, ref: _Ref) -> None:
        """The sums of the finite `ob` against the prepared, finite reference elements it is paired with."""
        rb = ref.flat
        self.ref_absmax = max(self.ref_absmax, ref.absmax)
        self.above += ref.above
        self.below += ref.below
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.subtract(ob, rb, out=_SCRATCH.get("diff", ob.size))
            np.abs(d, out=d)
            self.sum_abs += float(d.sum())
            if d.size:
                self.max_abs = max(self.max_abs, float(d.max()))
                self.max_rel = max(self.max_rel, float(np.divide(d, ref.safe_abs, out=_SCRATCH.get("rel", d.size)).max()))
            self.sq_diff += _dot(d, d)
            self.sq_ref += ref.sq
            self.sq_out += _dot(ob, ob)
            self.dot += _dot(ob, rb)

    def merge(self, part: _Acc) -> None:
        """Add `part`, an accumulator of one chunk, as `_add_prepared` and `_add_raw` would have added that chunk here:
        each float sum gets one addition (a fresh accumulator's sum is that chunk's term itself, 0.0 + x == x), so
        chunks summed apart and merged in their order give the same bits as summed one after the other."""
        self.n += part.n
        self.nan += part.nan
        self.inf += part.inf
        self.new_nonfinite |= part.new_nonfinite
        self.ref_absmax = max(self.ref_absmax, part.ref_absmax)
        self.above += part.above
        self.below += part.below
        self.max_abs = max(self.max_abs, part.max_abs)
        self.max_rel = max(self.max_rel, part.max_rel)
        self.sum_abs += part.sum_abs
        self.sq_diff += part.sq_diff
        self.sq_ref += part.sq_ref
        self.sq_out += part.sq_out
        self.dot += part.dot

    def result(self) -> ErrorStats:
        if self.new_nonfinite:
            rel_l2 = math.inf
            max_abs = max_rel = math.inf
        else:
            rel_l2 = _rel_l2(self.sq_diff, self.sq_ref)
            max_abs, max_rel = self.max_abs, self.max_rel
        denom = math.sqrt(self.sq_ref) * math.sqrt(self.sq_out)
        cos = self.dot / denom if denom > 0 else (1.0 if self.sq_ref == self.sq_out == 0 else 0.0)
        n = max(self.n, 1)
        return ErrorStats(
            size=self.n,
            max_abs=max_abs,
            mean_abs=self.sum_abs / n,
            max_rel=max_rel,
            rel_l2=rel_l2,
            cosine=cos,
            nan=self.nan,
            inf=self.inf,
            ref_absmax=self.ref_absmax,
            frac_above_max=self.above / n,
            frac_below_normal=self.below / n,
        )


class RelL2:
    """A streaming accumulator of one tensor's relative L2 error alone (`add(out, ref)` sample by sample, then
    `result()`): the same sums over the same finite pairs as `tensor_error`'s, so the same number, for a third
    of its passes over the data (the fixed run's per-layer errors need nothing else)."""

    def __init__(self) -> None:
        self.sq_diff = 0.0
        self.sq_ref = 0.0
        self.new_nonfinite = False

    def add(self, out: np.ndarray, ref: np.ndarray) -> None:
        for o, r in _chunk_pairs(out, ref):  # the chunks `_Acc` sums
            self._add(o, r)

    def _add(self, out: np.ndarray, ref: np.ndarray) -> None:
        p = _finite_pairs(out, ref)
        if p is None:
            self.new_nonfinite = True
            return
        if not p.size:
            return
        self.new_nonfinite |= p.new_nonfinite
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.subtract(p.out, p.ref, out=_SCRATCH.get("diff", p.out.size))
            self.sq_diff += _dot(d, d)
            self.sq_ref += _dot(p.ref, p.ref)

    def result(self) -> float:
        return math.inf if self.new_nonfinite else _rel_l2(self.sq_diff, self.sq_ref)


def _rel_l2(sq_diff: float, sq_ref: float) -> float:
    """||out - ref|| / ||ref|| from the sums of squares (0 where both are 0)."""
    if sq_ref == 0 and sq_diff == 0:
        return 0.0
    return math.sqrt(sq_diff) / max(math.sqrt(sq_ref), 1e-30)


@dataclass(frozen=True)
class TensorStats:
    """What the analysis needs of one tensor, over the captured samples: its low-precision run's error, its local error
    and the error of only rounding it (for a candidate's output), the largest finite |reference| (for a candidate's
    input); None where the tensor has no such role."""

    lowp: ErrorStats | None = None
    local: ErrorStats | None = None
    rounding: ErrorStats | None = None
    absmax: float | None = None

    def to_json(self) -> dict:
        return {k: (asdict(v) if isinstance(v, ErrorStats) else v) for k, v in
                (("lowp", self.lowp), ("local", self.local), ("rounding", self.rounding), ("absmax", self.absmax))}

    @classmethod
    def from_json(cls, d: dict) -> TensorStats:
        """The inverse of `to_json` (KeyError, TypeError or ValueError for a document that is not one)."""
        def stats(v):
            return None if v is None else ErrorStats(**v)

        absmax = d["absmax"]
        return cls(stats(d["lowp"]), stats(d["local"]), stats(d["rounding"]),
                   None if absmax is None else float(absmax))


class TensorAccumulator:
    """One tensor's `TensorStats`, sample by sample: `add(ref, lowp, local)` with one sample's reference value and,
    where the tensor has them (`lowp`, `local`: the roles it was made with), its low-precision and local values;
    `rounding` comes with `local` (a candidate's output) unless asked not to, `absmax` with `absmax` (a candidate's
    input). Each reference sample is prepared once for every comparison (`_Ref`)."""

    def __init__(self, fmt: Format, *, lowp: bool = False, local: bool = False, absmax: bool = False,
                 rounding: bool = True, chunked: bool = True):
        self.fmt = fmt
        self.chunked = chunked  # a large tensor's chunks on the chunk pool's threads (the same sums either way)
        self.lowp = _Acc(fmt) if lowp else None
        self.local = _Acc(fmt) if local else None
        self.rounding = _Acc(fmt) if local and rounding else None
        self.absmax = 0.0 if absmax else None

    @property
    def needed(self) -> bool:
        """Whether it has anything to accumulate (a tensor with no role needs no values)."""
        return self.lowp is not None or self.local is not None or self.absmax is not None

    def add(self, ref: np.ndarray, lowp: np.ndarray | None = None, local: np.ndarray | None = None) -> None:
        ref = np.asarray(ref)
        runs = []
        for acc, v in ((self.lowp, lowp), (self.local, local)):
            if acc is None:
                continue
            v = None if v is None else np.asarray(v)
            if v is None or v.shape != ref.shape:
                acc.add(v, ref)  # no chunks to pair: the accumulator says so
            else:
                runs.append((acc, v.reshape(-1)))
        flat = ref.reshape(-1)
        starts = _chunks(flat.size) if flat.size else range(1)
        pool = _chunk_pool() if self.chunked and len(starts) >= PARALLEL_CHUNKS else None
        if pool is None:
            for i in starts:
                self._add_chunk(flat[i:i + CHUNK], [(acc, v[i:i + CHUNK]) for acc, v in runs])
            return
        roles = [self.lowp, self.local]
        arrays = [next((v for acc, v in runs if acc is role), None) for role in roles]
        for part in pool.map(lambda i: self._part(flat, arrays, i), starts):  # merged in the chunks' order
            self._merge(part)

    def _part(self, flat: np.ndarray, arrays: list, i: int) -> TensorAccumulator:
        """Chunk `i` summed into a fresh accumulator of the same roles."""
        part = TensorAccumulator(self.fmt, lowp=self.lowp is not None, local=self.local is not None,
                                 absmax=self.absmax is not None, rounding=self.rounding is not None, chunked=False)
        pairs = [(acc, v[i:i + CHUNK]) for acc, v in zip((part.lowp, part.local), arrays) if v is not None]
        part._add_chunk(flat[i:i + CHUNK], pairs)
        return part

    def _merge(self, part: TensorAccumulator) -> None:
        for mine, theirs in ((self.lowp, part.lowp), (self.local, part.local), (self.rounding, part.rounding)):
            if mine is not None:
                mine.merge(theirs)
        if self.absmax is not None:
            self.absmax = max(self.absmax, part.absmax)

    def _add_chunk(self, ref: np.ndarray, runs: list) -> None:
        prepared = _Ref.of(ref, self.fmt)  # once for the runs, the rounding and the input's range
        for acc, v in runs:
            acc.add(v, prepared)
        if self.rounding is not None:
            if ref.dtype.kind == "f":
                rounded = _SCRATCH.get("rounded", ref.size, self.fmt.np_dtype)
                with np.errstate(over="ignore", invalid="ignore"):
                    np.copyto(rounded, ref, casting="unsafe")  # the format's rounding (`Format.round`)
            else:
                rounded = ref
            self.rounding.add(rounded, prepared)
        if self.absmax is not None and ref.dtype.kind == "f" and ref.size:
            if prepared.safe_abs is not None:
                self.absmax = max(self.absmax, prepared.absmax)
            else:
                with np.errstate(invalid="ignore"):
                    a = np.abs(ref[np.isfinite(ref)])
                if a.size:
                    self.absmax = max(self.absmax, float(a.max()))

    def result(self) -> TensorStats:
        return TensorStats(*(acc.result() if acc is not None else None for acc in (self.lowp, self.local, self.rounding)),
                           self.absmax)
