"""A section in HTML (report.html): escaped, with the reports' CSS classes."""

from __future__ import annotations

from html import escape

from precision_doctor.render.sections import Block, Notes, Section, Steps, Text, Verdict


def _e(v: object) -> str:
    return escape(str(v), quote=True)


def html(section: Section) -> str:
    """The section's blocks; in a `<section id=key>` with its title where it has one."""
    body = "".join(_block(b, section.title is not None) for b in section.blocks)
    if section.title is None:
        return body
    return f'<section id="{_e(section.key)}"><h2>{_e(section.title)}</h2>{body}</section>'


def _block(block: Block, in_section: bool) -> str:
    if isinstance(block, Verdict):
        return (f'<div class="verdict"><span class="badge {_e(block.tone)}" id="verdict">{_e(block.label)}</span>'
                f'<span class="sentence">{_e(block.sentence)}</span></div>')
    if isinstance(block, Text):
        return f'<p class="muted">{_e(block.text)}</p>'
    if isinstance(block, Notes):
        return "".join(f'<div class="headroom">{_e(line.replace("`", ""))}</div>' for line in block.lines)
    if isinstance(block, Steps):
        items = "".join(f"<li>{_e(s.text)}" + (f"<pre>{_e(s.command)}</pre>" if s.command else "") + "</li>"
                        for s in block.steps)
        return f"<ol>{items}</ol>"
    raise TypeError(f"no HTML for {type(block).__name__}")
