"""How the answer was checked, one fact a sentence: the held-out claim's long form, the search's rounds, both answers,
the confirmation, who certified it, the share of the tolerance it uses and what the emulator does not model."""

from __future__ import annotations

from precision_doctor.render.sections import Notes, Section
from precision_doctor.render.verdict import claim_details
from precision_doctor.render.wording import (
    answers_sentence,
    certified_sentence,
    confirm_sentence,
    emulation_note_lines,
    headroom_sentence,
    rounds_sentence,
)
from precision_doctor.results.report import Report


def build(report: Report) -> Section:
    """The facts; what the answer was certified on and uses of the tolerance only for an answer that did not fail
    held-out samples (a certificate beside their failures would read as a contradiction: FAILED ON HELD-OUT SAMPLES,
    or a stopped run's set so far that they failed)."""
    st = report.statement
    lines = [claim_details(report), rounds_sentence(report), answers_sentence(report), confirm_sentence(report)]
    if st.answered and not st.held_out_failed:
        lines += [certified_sentence(report), headroom_sentence(report), *emulation_note_lines(report)]
    return Section("checks", None, (Notes(tuple(x for x in lines if x)),))
