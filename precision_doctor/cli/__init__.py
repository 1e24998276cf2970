"""The typer app: parses options, calls the API (precision_doctor.api), prints. One module per command;
shared option groups and the flag <-> setting table in `options`.

One error path (`main`): a usage error (unknown option, bad value) and a UserError are one line on stderr
and exit 2; Ctrl-C exits 130; anything else is a bug: one line naming the log file that holds the
traceback, exit 3. Every message is printed with rich markup off (a path or name may hold `[...]`)."""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
import tempfile
import traceback
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from precision_doctor import storage
from precision_doctor.errors import SpecError, UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find which layers lose accuracy in FP16/BF16, and the smallest set to keep in FP32.",
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # --help in option groups (rich panels); help texts are plain, read as Markdown
)
# markup off: user text ("[bold]x", "data[1].npz", "x:[0,16]") is printed as it is; styles go through Text
console = Console(width=None if sys.stdout.isatty() else 140, markup=False, highlight=False)
err = Console(stderr=True, markup=False, highlight=False, soft_wrap=True)

INTERNAL_ERROR = 3  # exit code of a bug (the log file holds the traceback)
LOG_NAME = "precision-doctor-error.log"
_run_dir: list[Path | None] = [None]  # the run directory of the command running (where a crash log goes)


def styled(label: str, style: str, rest: str = "") -> Text:
    """`label` in `style`, then `rest` as plain text."""
    return Text.assemble((label, style), rest)


def error_text(exc: UserError) -> str:
    """A user error in the CLI's words (settings named by their flags)."""
    from precision_doctor.cli.options import flag

    return exc.render(flag) if isinstance(exc, SpecError) else str(exc)


def say_error(msg: str) -> None:
    """One line on stderr: "error: <msg>" (newlines in `msg` folded)."""
    err.print(styled("error:", "bold red", " " + " ".join(str(msg).split())))


def fail(msg: str, code: int = 2) -> None:
    say_error(msg)
    raise typer.Exit(code)


def uses_run_dir(path: Path) -> None:
    """Tell the error path which run directory this command works in (a crash log goes there)."""
    _run_dir[0] = Path(path)


@contextmanager
def stops_on_interrupt(out_dir: Path, hint: str, started: list[bool]):
    """A Ctrl-C outside the search (which reports it itself) ends with one line and exit 130; once the run
    has started (`started[0]`), the line says where its files are (or that nothing was kept)."""
    try:
        yield
    except KeyboardInterrupt:
        if not started[0]:
            err.print("interrupted before the run started; nothing was written")
            raise typer.Exit(130) from None
        if Path(out_dir).is_dir():
            err.print(f"interrupted; what was written so far is in {out_dir} ({hint})")
        else:
            err.print("interrupted before anything worth keeping was written; run the command again to start over")
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


def announce_renamed(renamed: tuple[str, ...] | list[str], unsafe: tuple[tuple[str, str], ...] = ()) -> None:
    """A note for nodes that were given names; a warning (one line) for names that were not safe text."""
    plain = [n for n in renamed if n not in dict(unsafe)]
    if plain:
        shown = ", ".join(plain[:5]) + (" ..." if len(plain) > 5 else "")
        err.print(f"note: {len(plain)} unnamed or duplicate-named nodes were given names: {shown}")
    if unsafe:
        shown = ", ".join(f"{new} (was '{old[:60]}')" for new, old in unsafe[:3]) + (" ..." if len(unsafe) > 3 else "")
        err.print(styled("warning:", "bold yellow", f" {len(unsafe)} node name(s) hold control characters or bytes "
                         f"that are not UTF-8, which scripts and lists cannot carry safely; renamed (named.onnx, the "
                         f"report): {shown}"))


def usage_line(exc: Exception) -> str:
    """A click usage error as one line, with where to find help."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see: {ctx.command_path} --help)" if ctx is not None else ""
    text = re.sub(r"Missing argument '(\w+)'", lambda m: f"Missing argument {m.group(1).upper()}",
                  exc.format_message())  # type: ignore[attr-defined]
    return f"{text}{where}"


def write_crash_log(exc: BaseException) -> Path | None:
    """The traceback of an unexpected error, in the run directory when there is one, else in a temporary
    log directory; None when neither can be written."""
    text = (f"precision-doctor {' '.join(sys.argv[1:])}\n{_dt.datetime.now().isoformat(timespec='seconds')}\n\n"
            + "".join(traceback.format_exception(exc)))
    run_dir = _run_dir[0]
    places = []
    if run_dir is not None and run_dir.is_dir():
        places.append(run_dir / LOG_NAME)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    places.append(Path(tempfile.gettempdir()) / "precision-doctor-logs" / f"error-{stamp}-{os.getpid()}.log")
    for path in places:
        try:
            if path.parent.name == "precision-doctor-logs":
                path.parent.mkdir(parents=True, exist_ok=True)
            else:
                from precision_doctor.results.manifest import note_written

                note_written(path)
            path.write_text(text, encoding="utf-8")
            return path
        except Exception:  # noqa: BLE001 (any place that works)
            continue
    return None


def _kind(exc: BaseException) -> str | None:
    """"help", "usage", "click" or "abort" for the parser's own exceptions (click's, or the copy of click
    that newer typer releases carry), else None."""
    names = {c.__name__ for c in type(exc).__mro__}
    for name, kind in (("NoArgsIsHelpError", "help"), ("UsageError", "usage"), ("ClickException", "click"),
                       ("TyperException", "click"), ("Abort", "abort")):
        if name in names and (kind != "abort" or "typer" in type(exc).__module__ or "click" in type(exc).__module__):
            return kind
    return None


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except UserError as exc:
        say_error(error_text(exc))
        code = 2
    except KeyboardInterrupt:
        err.print("interrupted")
        code = 130
    except Exception as exc:  # noqa: BLE001 (a bug: one line and the log, never a traceback)
        code = _parser_error(exc)
        if code is None:
            log = write_crash_log(exc)
            what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:200]
            where = f"the traceback is in {log}" if log else "the traceback could not be written to a log file"
            say_error(f"internal error ({what}); this is a bug in precision-doctor: please report it; {where}")
            code = INTERNAL_ERROR
    sys.stdout.flush()
    if storage.abandoned:  # an HDF5 file whose write failed: closing it, even at exit, crashes HDF5 (storage.py)
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 0)
    sys.exit(code if isinstance(code, int) else 0)


def _parser_error(exc: Exception) -> int | None:
    """Print a parser error (one line, or the help asked for by no arguments); its exit code, None if
    `exc` is not one."""
    kind = _kind(exc)
    if kind == "help":
        err.print(exc.format_message())  # type: ignore[attr-defined]
        return int(getattr(exc, "exit_code", 2))
    if kind == "usage":
        say_error(usage_line(exc))  # type: ignore[arg-type]
        return 2
    if kind == "click":
        say_error(exc.format_message())  # type: ignore[attr-defined]
        return 2
    if kind == "abort":
        err.print("interrupted")
        return 130
    return None


# The commands register themselves on `app`.
# The daemon's commands come last in --help.
from precision_doctor.cli import batch, compare, diagnose, emit, env, probe_ops, report, zoo  # noqa: E402, F401, I001
from precision_doctor.cli import serve, client  # noqa: E402, F401
from precision_doctor.cli.options import assign_panels  # noqa: E402

assign_panels(app)
