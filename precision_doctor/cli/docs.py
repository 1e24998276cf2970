"""docs/cli.md, generated from the typer app: every command, its options in their help panels, each option's
value, default and help, exactly as `--help` has them. `python -m precision_doctor.cli.docs > docs/cli.md`
(`make docs`) writes it; tests/cli/test_cli_docs.py fails when the file is stale."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import typer

from precision_doctor.cli.options import FULL_HELP, GROUP_PANELS
from precision_doctor.cli.shared import app

HEADER = """# Command-line reference

Generated from the program itself (`make docs`, or `python -m precision_doctor.cli.docs > docs/cli.md`); a test
fails when this file and the program disagree. `precision-doctor COMMAND --help-all` shows the same, grouped the
same way; `--help` shows the options a first run needs (the samples, the tolerance, the budget, the backend, the run
directory) with a brief text. Start with the README; docs/guide.md explains what the options are for.
"""
OTHER = "Options"  # typer's panel for options without one (--help)
HIDDEN = {"pd_help_all"}  # --help-all: the help itself, not an option of the command's work
# Commands and parameters are click's, or those of the click copy newer typer releases carry: read by their
# attributes (a group lists commands, an option's `param_type_name` is "option").


def _context(cmd: Any, name: str) -> Any:
    return cmd.context_class(cmd, info_name=name)


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "option"


def _commands(group: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    ctx = _context(group, prefix)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        if hasattr(cmd, "list_commands"):
            yield from _commands(cmd, f"{prefix} {name}")
        else:
            yield f"{prefix} {name}", cmd


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(param: Any, ctx: Any) -> str:
    """What the option takes, as `--help` says it ("<float>", "<list[Path]>"; nothing for a switch)."""
    if param.is_flag or param.count:
        return ""
    return param.display_type(ctx) if hasattr(param, "display_type") else param.type.name.upper()


def _default(param: Any) -> str:
    d = param.default
    if d is None or d == () or d == [] or (param.is_flag and d is False and not param.secondary_opts):
        return ""
    if param.secondary_opts and isinstance(d, bool):
        return f"`{param.opts[0] if d else param.secondary_opts[0]}`"
    return f"`{d}`"


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else ""


def _first_sentence(text: str | None) -> str:
    words = " ".join((text or "").split())
    head, dot, _ = words.partition(". ")
    return head + ("." if dot else "")


def _option_names(param: Any) -> str:
    names = [*param.opts, *param.secondary_opts]
    return ", ".join(f"`{n}`" for n in names)


def command_markdown(name: str, cmd: Any) -> list[str]:
    """The section of one command: usage, what it does, its arguments and its options by panel."""
    args = [p for p in cmd.params if getattr(p, "param_type_name", "") == "argument"]
    usage = " ".join(["[OPTIONS]", *(a.name.upper() for a in args)])
    out = [f"## `{name}`", "", f"    {name} {usage}", "", " ".join((cmd.help or "").split()), ""]
    ctx = _context(cmd, name)
    if args:
        out += ["| Argument | What it is |", "| --- | --- |"]
        out += [f"| `{a.name.upper()}` | {_cell(getattr(a, 'help', '') or '')} |" for a in args]
        out.append("")
    panels: dict[str, list[Any]] = {}
    for p in cmd.params:
        if _is_option(p) and p.name not in HIDDEN:
            panels.setdefault(getattr(p, "rich_help_panel", None) or OTHER, []).append(p)
    order = list(dict.fromkeys(panel for _, panel in GROUP_PANELS))
    for panel in sorted(panels, key=lambda k: (k == OTHER, order.index(k) if k in order else len(order), k)):
        if panel == OTHER and all(o.name == "help" for o in panels[panel]):
            continue
        out += [f"**{panel}**", "", "| Option | Value | Default | What it does |", "| --- | --- | --- | --- |"]
        for o in panels[panel]:
            text = FULL_HELP.get(o.name, o.help or "")
            out.append(f"| {_option_names(o)} | {_code(_value(o, ctx))} | {_cell(_default(o))} | {_cell(text)} |")
        out.append("")
    return out


def cli_markdown() -> str:
    """docs/cli.md's text."""
    root = typer.main.get_command(app)
    commands = list(_commands(root, "precision-doctor"))
    out = [HEADER, "| Command | What it does |", "| --- | --- |"]
    for name, cmd in commands:
        anchor = name.replace(" ", "-")
        out.append(f"| [`{name}`](#{anchor}) | {_cell(_first_sentence(cmd.help))} |")
    out.append("")
    for name, cmd in commands:
        out += command_markdown(name, cmd)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(cli_markdown())
