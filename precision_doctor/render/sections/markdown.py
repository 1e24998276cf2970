"""A section in Markdown (report.md): its lines, ending with a blank one."""

from __future__ import annotations

from precision_doctor.render.sections import Block, Notes, Section, Steps, Text, Verdict


def lines(section: Section) -> list[str]:
    out = [f"## {section.title}", ""] if section.title else []
    for block in section.blocks:
        out += _block(block)
    return out


def _block(block: Block) -> list[str]:
    if isinstance(block, Verdict):
        return [f"**Verdict: {block.label}.** {block.sentence}", ""]
    if isinstance(block, Text):
        return [block.text, ""]
    if isinstance(block, Notes):  # bullets, in the list they continue
        return [f"- {line}" for line in block.lines]
    if isinstance(block, Steps):
        out = []
        for i, step in enumerate(block.steps, 1):
            out.append(f"{i}. {step.text}")
            if step.command:
                out += ["", "   ```bash", *(f"   {line}" for line in step.command.splitlines()), "   ```"]
        return out + [""]
    raise TypeError(f"no Markdown for {type(block).__name__}")
