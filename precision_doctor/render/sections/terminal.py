"""A section on the terminal (the CLI): rich Text lines, the verdict's label in its tone's colour."""

from __future__ import annotations

from rich.text import Text as Styled

from precision_doctor.render.sections import Block, Notes, Section, Steps, Text, Verdict

STYLES = {"pass": "bold green", "warn": "bold yellow", "fail": "bold red"}


def lines(section: Section) -> list[Styled]:
    out = [Styled(section.title, style="bold")] if section.title else []
    for block in section.blocks:
        out += _block(block)
    return out


def _block(block: Block) -> list[Styled]:
    if isinstance(block, Verdict):
        return [Styled.assemble((block.label, STYLES.get(block.tone, "bold red")), ": " + block.sentence)]
    if isinstance(block, Text):
        return [Styled(block.text)]
    if isinstance(block, Notes):
        return [Styled(line.replace("`", "")) for line in block.lines]
    if isinstance(block, Steps):
        return [Styled(f"next: {s.text}" + (f"\n  {s.command}" if s.command else "")) for s in block.steps]
    raise TypeError(f"no terminal form for {type(block).__name__}")
