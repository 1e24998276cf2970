"""The oracle's concurrent runs (a GPU backend's `concurrent_runs`): the same verdicts, the same failing sample and the
same search as one run at a time, with the runs after the first in chunks on other threads."""

from __future__ import annotations

import threading

from precision_doctor.search import STRATEGIES
from tests.test_search import Setup


class Threads:
    """Wraps a real backend's runners to record which thread ran each sample."""

    def __init__(self, backend, width: int):
        self.backend, self.concurrent_runs, self.seen = backend, width, set()
        self.name, self.precision = backend.name, backend.precision

    def prepare(self, fallback):
        runner = self.backend.prepare(fallback)
        seen = self.seen

        class Recorded:
            def run(self, feeds, outputs=None):
                seen.add(threading.current_thread().name)
                return runner.run(feeds, outputs)

        return Recorded()

    def close(self):
        self.backend.close()


def test_chunked_runs_give_the_same_search_as_one_at_a_time(tmp_path):
    s = Setup("three_defects", tmp_path, n=9)
    found, trails = {}, {}
    for width in (1, 3):
        o = s.oracle()
        o.backend = Threads(s.backend, width)
        found[width] = STRATEGIES["auto"](o, s.space)
        trails[width] = repr([(sorted(e.fallback), e.verdict.passed, e.verdict.failed_sample,
                          {k: (c.passed, c.max_abs, c.tol_used) for k, c in e.verdict.outputs.items()})
                         for e in o.trajectory])
        threads = o.backend.seen
        o._pool and o._pool.shutdown()
        assert any(t.startswith("pd-oracle") for t in threads) == (width > 1)
    assert found[1] == found[3] and trails[1] == trails[3]  # repr: NaN maxima compare equal
    assert "False" in trails[3] and "True" in trails[3]
