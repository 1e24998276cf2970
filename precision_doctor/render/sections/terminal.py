"""A section on the terminal (the CLI): lines of styled spans, the verdict's label in its tone's style. The CLI draws
them (`cli/shared.terminal_text`, with rich); this writer imports no terminal library."""

from __future__ import annotations

from dataclasses import dataclass

from precision_doctor.render.sections import Block, Notes, Section, Steps, Text, Verdict

STYLES = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red"}  # rich's style names


@dataclass(frozen=True)
class Span:
    """Text in a style (rich's style names: "bold", "bold green"; "": plain)."""

    text: str
    style: str = ""


Line = tuple[Span, ...]


def plain(line: Line) -> str:
    """A line's text without its styles."""
    return "".join(s.text for s in line)


def lines(section: Section) -> list[Line]:
    out = [(Span(section.title, "bold"),)] if section.title else []
    for block in section.blocks:
        out += _block(block)
    return out


def _block(block: Block) -> list[Line]:
    if isinstance(block, Verdict):
        return [(Span(block.label, STYLES.get(block.tone, "bold red")), Span(": " + block.sentence))]
    if isinstance(block, Text):
        return [(Span(block.text),)]
    if isinstance(block, Notes):
        return [(Span(line.replace("`", "")),) for line in block.lines]
    if isinstance(block, Steps):
        return [(Span(f"next: {s.text}" + (f"\n  {s.command}" if s.command else "")),) for s in block.steps]
    raise TypeError(f"no terminal form for {type(block).__name__}")
