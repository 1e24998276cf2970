"""Where stderr is no terminal, a stretch with no progress event (a large model's load, a capture step of a 110M
transformer: 16 s on the 2-core machine) still gets a line every EVERY_S seconds: the heartbeat repeats the last
line, still working (issue 35: no phase silent for more than 10 s)."""

from __future__ import annotations

import time

from precision_doctor.cli.shared import PROGRESS_LINE, PlainProgress, heartbeat
from precision_doctor.control import CaptureEvent, PhaseEvent


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_beat_repeats_the_last_line_only_after_every_s_of_silence():
    lines: list[str] = []
    clock = Clock()
    plain = PlainProgress(lines.append, clock)
    clock.t = 5.0
    plain.beat()
    assert lines == []  # not yet due
    clock.t = PlainProgress.EVERY_S + 1
    plain.beat()
    assert lines[-1].endswith("] loading the model (still working, 9 s)\n")  # a large model's load
    plain(PhaseEvent("capture", "6 samples, every layer's statistics"))
    plain(CaptureEvent("statistics", 1, 12))
    clock.t += 3
    plain.beat()
    assert len(lines) == 2 and "capture: 6 samples" in lines[-1]
    clock.t += PlainProgress.EVERY_S
    plain.beat()
    clock.t += PlainProgress.EVERY_S
    plain.beat()
    assert lines[-2].endswith("] capture statistics: 1 of 12\n")  # the news that was not due when it came
    assert lines[-1].endswith("] capture statistics: 1 of 12 (still working, 28 s)\n")
    plain(CaptureEvent("statistics", 2, 12))  # news not due as a line yet: the next beat says it, not the old line
    clock.t += 2
    plain.beat()
    assert len(lines) == 4
    clock.t += PlainProgress.EVERY_S
    plain.beat()
    clock.t += PlainProgress.EVERY_S
    plain.beat()
    assert lines[-2].endswith("] capture statistics: 2 of 12\n")
    assert lines[-1].endswith("] capture statistics: 2 of 12 (still working, 46 s)\n")  # not nested
    assert all(PROGRESS_LINE.match(ln) for ln in lines)


def test_the_heartbeat_thread_beats_while_the_block_runs_and_stops_after_it():
    lines: list[str] = []
    plain = PlainProgress(lines.append)
    plain.EVERY_S = 0.05
    with heartbeat(plain, every_s=0.01):
        deadline = time.monotonic() + 30  # a busy machine may give the thread few turns: wait for two beats
        while len(lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    said = len(lines)
    assert said >= 2 and all("(still working" in ln for ln in lines)
    time.sleep(0.2)
    assert len(lines) == said
    with heartbeat(None):  # the bars are on: nothing to do
        pass
