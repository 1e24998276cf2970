"""render/sections: a section built once from a Report is drawn by the Markdown, HTML and terminal writers with the
same words; report.md, report.html and the CLI draw the verdict and the next steps through them."""

from __future__ import annotations

import pytest
from test_verdict import CASES, _report

from precision_doctor.render.brief import brief
from precision_doctor.render.html import render_html
from precision_doctor.render.markdown import render_markdown
from precision_doctor.render.sections import Section, Step, Steps, Text, Verdict
from precision_doctor.render.sections import next_steps as next_steps_section
from precision_doctor.render.sections import verdict as verdict_section
from precision_doctor.render.sections.html import html
from precision_doctor.render.sections.markdown import lines
from precision_doctor.render.sections.terminal import lines as terminal_lines
from precision_doctor.render.sections.terminal import plain


@pytest.mark.parametrize("name", ["pass", "too few samples", "failed held-out", "no solution"])
def test_the_verdict_section_is_the_same_in_every_writer(name):
    rep = _report(**CASES[name][0])
    section = verdict_section.build(rep)
    (block,) = section.blocks
    b = brief(rep)
    assert (block.label, block.tone, block.sentence) == (b.label, b.tone, b.sentence)
    assert lines(section) == [f"**Verdict: {b.label}.** {b.sentence}", ""] and "\n".join(lines(section)) in render_markdown(rep)
    assert html(section) in render_html(rep) and f'class="badge {b.tone}" id="verdict">' in html(section)
    (line,) = terminal_lines(section)
    assert plain(line) == b.headline and line[0].style == {"pass": "bold green", "warn": "bold yellow"}.get(
        b.tone, "bold red")


def test_the_next_steps_section_in_markdown_and_html():
    rep = _report(**CASES["little benefit (latency)"][0])
    section = next_steps_section.build(rep)
    steps, note = section.blocks
    assert [(s.text, s.command) for s in steps.steps] == [(s.text, s.command) for s in brief(rep).next_steps]
    md = "\n".join(lines(section))
    assert md.startswith("## Next steps\n\n1. The answer keeps little of FP16's benefit") and md in render_markdown(rep)
    assert f"   ```bash\n   {steps.steps[0].command}\n   ```" in md and md.endswith(f"\n\n{note.text}\n")
    page = html(section)
    assert page.startswith('<section id="next-steps"><h2>Next steps</h2><ol><li>') and page in render_html(rep)


def test_the_checks_section_is_the_same_in_every_writer(tmp_path):
    """How the answer was checked: report.md's bullets, report.html's lines under the verdict, the CLI's lines: the same
    sentences in the same order (backticks only in Markdown)."""
    from precision_doctor.render.sections import checks

    rep = _report(**CASES["repaired with held-out samples"][0])
    (notes,) = checks.build(rep).blocks
    assert len(notes.lines) >= 3 and any("Certified by" in line for line in notes.lines)
    assert "\n".join(lines(checks.build(rep))) in render_markdown(rep)
    assert html(checks.build(rep)) in render_html(rep)
    shown = [plain(t) for t in terminal_lines(checks.build(rep))]
    assert shown == [line.replace("`", "") for line in notes.lines]


def test_each_writer_draws_each_block_and_escapes_what_it_must():
    evil = Section("x", "T <1>", (Verdict("PASSED", "pass", "a <b> & c"), Text("t & u"),
                                 Steps((Step("do <it>", "echo '<x>'"), Step("then"))),))
    page = html(evil)
    assert "<b>" not in page and "a &lt;b&gt; &amp; c" in page and "echo &#x27;&lt;x&gt;&#x27;" in page
    assert lines(evil) == ["## T <1>", "", "**Verdict: PASSED.** a <b> & c", "", "t & u", "", "1. do <it>", "",
                           "   ```bash", "   echo '<x>'", "   ```", "2. then", ""]
    assert [plain(t) for t in terminal_lines(evil)] == ["T <1>", "PASSED: a <b> & c", "t & u", "next: do <it>\n  echo '<x>'",
                                                       "next: then"]
