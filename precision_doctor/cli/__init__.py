"""The typer app: parses options, calls the API (precision_doctor.api), prints. One module per command;
shared option groups and the flag <-> setting table in `options`."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from precision_doctor.errors import SpecError, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find which layers lose accuracy in FP16/BF16, and the smallest set to keep in FP32.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console(width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True)


def error_text(exc: UserError) -> str:
    """A user error in the CLI's words (settings named by their flags)."""
    from precision_doctor.cli.options import flag

    return exc.render(flag) if isinstance(exc, SpecError) else str(exc)


def fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", highlight=False, soft_wrap=True)  # '.[trt]' is not markup
    raise typer.Exit(code)


@contextmanager
def stops_on_interrupt(out_dir: Path, hint: str, started: list[bool]):
    """A Ctrl-C outside the search (which reports it itself) ends with one line and exit 130; once the run
    has started (`started[0]`), the line says where its files are."""
    try:
        yield
    except KeyboardInterrupt:
        if not started[0]:
            raise
        err.print(f"interrupted; what was written so far is in {out_dir} ({hint})", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None


def progress_bar(description: str = "{task.description:<12}") -> Progress:
    """A transient progress display on stderr (off when stderr is not a terminal)."""
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


def announce_renamed(renamed: tuple[str, ...] | list[str]) -> None:
    if renamed:
        shown = ", ".join(renamed[:5]) + (" ..." if len(renamed) > 5 else "")
        err.print(f"note: {len(renamed)} unnamed nodes were given names: {shown}", highlight=False)


def main() -> None:
    try:
        app()
    except UserError as exc:
        err.print(f"[bold red]error:[/] {escape(error_text(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        sys.exit(130)


# The commands register themselves on `app`.
from precision_doctor.cli import batch, compare, diagnose, emit, env, report, zoo  # noqa: E402, F401
