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
from pathlib import Path

from precision_doctor import storage
from precision_doctor.cli.shared import app, err, error_text, run_dir_in_use, say_error
from precision_doctor.errors import UserError

__all__ = ["app", "main"]

INTERNAL_ERROR = 3  # exit code of a bug (the log file holds the traceback)
LOG_NAME = "precision-doctor-error.log"


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
    run_dir = run_dir_in_use()
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
                from precision_doctor.runfiles import RunDir

                RunDir(path.parent).written(path)
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
from precision_doctor.cli.options import assign_panels, literal_help  # noqa: E402

assign_panels(app)
literal_help(app)
