"""One of a thing is one, not "1 samples" or "1 worker(s)" (issue 34): the counts the program prints go through
`words.counted`, and no message outside the verdict's words spells a plural as "(s)"."""

from __future__ import annotations

import re
from pathlib import Path

from precision_doctor.cli.shared import PlainProgress
from precision_doctor.control import EvaluationEvent, LoadedEvent, PhaseEvent
from precision_doctor.pipeline.heldout_policy import plan_held_out
from precision_doctor.words import counted

SOURCE = Path(__file__).resolve().parents[2] / "precision_doctor"
VERDICT_WORDS = {"render/wording.py"}  # the verdict's sentences: rebuilt as one typed statement (issue 34)


def test_counted():
    assert [counted(n, "sample") for n in (0, 1, 2)] == ["0 samples", "1 sample", "2 samples"]
    assert counted(1, "perturbed copy", "perturbed copies") == "1 perturbed copy"
    assert counted(3, "perturbed copy", "perturbed copies") == "3 perturbed copies"


def test_held_out_reasons_say_one_as_one():
    assert plan_held_out(3, False, n_validate=1).reason == "the 1 --validate-inputs sample is held out"
    assert plan_held_out(3, False, n_validate=2).reason == "the 2 --validate-inputs samples are held out"
    assert plan_held_out(1, False).reason.startswith("only 1 --inputs sample: all went to the search")
    assert plan_held_out(1, True, split=0.5).reason.startswith(
        "the search samples were generated, so 1 held-out sample is generated too")
    assert plan_held_out(5, False, split=0.2).reason.startswith("1 of the 5 --inputs samples is held out")


def test_progress_lines_say_one_as_one():
    said: list[str] = []
    plain = PlainProgress(write=said.append, clock=lambda: 0.0)
    plain(LoadedEvent(model="m.onnx", nodes=3, renamed_nodes=(), samples=1, held_out=0))
    plain(PhaseEvent("search", "1 candidate node"))
    plain.EVERY_EVALUATIONS = 1
    plain(EvaluationEvent(step=1, phase="grow", size=1, passed=True, best_size=1))
    plain(EvaluationEvent(step=2, phase="grow", size=1, passed=True, best_size=1))
    text = "".join(said)
    assert "loaded m.onnx: 3 nodes, 1 sample\n" in text
    assert "search (grow): 2 evaluations, smallest passing set so far 1 node\n" in text


def test_no_message_spells_a_plural_as_s_in_brackets():
    found = []
    for path in SOURCE.rglob("*.py"):
        rel = path.relative_to(SOURCE).as_posix()
        if rel in VERDICT_WORDS:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\}[ \w-]*\(s\)", line):
                found.append(f"{rel}:{i}: {line.strip()}")
    assert found == []
