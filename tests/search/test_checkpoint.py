"""The search checkpoint after a kill: a torn last line is cut off before the next record is
appended, so a resumed run repeats nothing (issue #11)."""

from __future__ import annotations

import json

from precision_doctor import planted
from precision_doctor.backends.emulate import EmulateBackend
from precision_doctor.backends.reference import ReferenceRunner
from precision_doctor.graph.model import from_proto
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.search import Oracle

SETS = [frozenset(), frozenset({"add_offset"}), frozenset({"add_offset", "sub_offset"})]


def _oracle(checkpoint) -> Oracle:
    case = planted.cancellation()
    model = from_proto(case.model)
    samples = case.samples(2)
    ref = ReferenceRunner(model)
    return Oracle(EmulateBackend(model), samples, [ref.run(s) for s in samples], Tolerance(case.atol, case.rtol),
                  checkpoint=checkpoint)


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # every line must be a record


def test_torn_last_line_is_cut_and_resume_repeats_nothing(tmp_path):
    ck = tmp_path / "search.jsonl"
    first = _oracle(ck)
    verdicts = [first.evaluate(s).passed for s in SETS]
    assert verdicts == [False, False, True]
    whole = ck.read_bytes()
    last = whole.rstrip(b"\n").rfind(b"\n") + 1
    ck.write_bytes(whole[: last + (len(whole) - last) // 2])  # killed while writing the third record

    resumed = _oracle(ck)
    assert resumed.load_checkpoint() == 2
    assert ck.read_bytes() == whole[:last]  # the fragment is gone before anything is appended
    assert [resumed.evaluate(s).passed for s in SETS] == verdicts
    assert resumed.evaluations == 3 and [r["step"] for r in _records(ck)] == [1, 2, 3]

    again = _oracle(ck)
    assert again.load_checkpoint() == 3
    assert [again.evaluate(s).passed for s in SETS] == verdicts
    assert again.evaluations == 3 and len(_records(ck)) == 3  # nothing evaluated twice


def test_record_glued_onto_a_fragment_by_an_older_version_is_recovered(tmp_path):
    ck = tmp_path / "search.jsonl"
    first = _oracle(ck)
    for s in SETS:
        first.evaluate(s)
    lines = ck.read_text().splitlines(keepends=True)
    ck.write_text(lines[0] + lines[1][:40] + lines[2])  # what appending after a torn line used to leave
    resumed = _oracle(ck)
    assert resumed.load_checkpoint() == 2  # the torn record is lost, the glued one is not
    assert resumed.known(SETS[2]) is not None and resumed.known(SETS[1]) is None


def test_checkpoint_that_is_one_fragment(tmp_path):
    ck = tmp_path / "search.jsonl"
    ck.write_text('{"step": 1, "size": 0, "pas')
    o = _oracle(ck)
    assert o.load_checkpoint() == 0 and ck.read_bytes() == b""
    o.evaluate(SETS[2])
    assert [r["step"] for r in _records(ck)] == [1]
