"""What every command of the CLI shares: the typer `app` they register on, the consoles (rich markup off), one
error line (`say_error`, `fail`, `error_text`), the run directory a crash log goes to (`uses_run_dir`), the
progress bar (on a terminal) or plain progress lines (elsewhere: `PlainProgress`) and the Ctrl-C hint.
`cli/__init__.py` holds the one error path (`main`) and imports the commands."""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from precision_doctor.control import CaptureEvent, CaptureSizeEvent, EvaluationEvent, LoadedEvent, PhaseEvent, ProgressEvent
from precision_doctor.errors import SpecError, UserError
from precision_doctor.render.sections.terminal import Line
from precision_doctor.words import counted

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

_run_dir: list[Path | None] = [None]  # the run directory of the command running (where a crash log goes)


def styled(label: str, style: str, rest: str = "") -> Text:
    """`label` in `style`, then `rest` as plain text."""
    return Text.assemble((label, style), rest)


def terminal_text(line: Line) -> Text:
    """A line of a section's terminal form (render/sections/terminal.py: styled spans) as rich Text."""
    return Text.assemble(*((s.text, s.style) for s in line))


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


def run_dir_in_use() -> Path | None:
    """The run directory the command running works in (`uses_run_dir`), if it said."""
    return _run_dir[0]


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


def announce_capture_size(ev: CaptureSizeEvent) -> None:
    """One line before a large capture: how much it will write and where, the room there, and what is kept of it."""
    from precision_doctor.render.wording import capture_size_note

    err.print(f"note: {capture_size_note(ev)}")


class PlainProgress:
    """A run's progress as plain lines on stderr, where the bars are off (stderr is not a terminal: CI, nohup, a
    log file), so that a long run is not silent: a line as each phase starts ("[ 12.3s] capture: 8 samples, every
    tensor"), as each capture stage ends, and in between one every EVERY_EVALUATIONS evaluations or EVERY_S seconds,
    whichever comes first (at the next event); where no event comes for EVERY_S seconds (a long capture step, a large
    model's load), `heartbeat` repeats the last line, still working. Before the run starts (its first phase after
    loading) only such a beat: a command refused then prints its one error line only. No control characters; each
    line flushed (`PROGRESS_LINE` matches one). A ProgressSink: call it with each event."""

    # 8, not 10: the line waits for the next event, and an evaluation on a GPU's real graph takes 1-2 s (a session
    # each), so at 10 the H200's log showed gaps of 10.2-11.5 s; at 8 they stay within 10 s
    EVERY_S = 8.0
    EVERY_EVALUATIONS = 50

    def __init__(self, write: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 first: str = "loading the model"):
        self._write, self._clock = write, clock
        self._t0 = self._last = clock()
        self._step: int | None = None  # the evaluation of the last line (None: none since the phase began)
        self._loaded: str | None = None  # the loaded model's line, said once the run starts
        self._started = False
        self._said = first  # what the last line said (a heartbeat repeats it)
        self._news: str | None = None  # what an event since then said, not yet due to be a line
        self._lock = threading.RLock()  # a beat reads what to say and says it at once (`doing` may come between)

    def line(self, text: str) -> None:
        """One line, "[ELAPSEDs] text", with any control character in `text` escaped."""
        from precision_doctor.graph.names import shown

        with self._lock:
            self._last = self._clock()
            self._said, self._news = text, None
            out = f"[{self._last - self._t0:5.1f}s] {shown(text)}\n"
            if self._write is not None:
                self._write(out)
                return
            sys.stderr.write(out)
            sys.stderr.flush()

    def doing(self, text: str) -> None:
        """What a heartbeat says from now on, still working (no line now)."""
        with self._lock:
            self._said, self._news = text, None

    def beat(self) -> None:
        """A line where none came for EVERY_S seconds: the latest event's news if one came meanwhile (a capture's
        count, a search's evaluations), else what the last line said, still working (a capture step or a model's
        load that takes longer). Called about every second by `heartbeat`'s thread."""
        with self._lock:
            if not self._due():
                return
            if self._news is not None:  # an event came since the last line but was not due then: it now is
                self.line(self._news)
                return
            said = self._said.partition(" (still working")[0]
            self.line(f"{said} (still working, {self._clock() - self._t0:.0f} s)")

    def _due(self) -> bool:
        return self._clock() - self._last >= self.EVERY_S

    def __call__(self, ev: ProgressEvent) -> None:
        if isinstance(ev, LoadedEvent):

            held = f", {ev.held_out} held out" if ev.held_out else ""
            what = "search sample" if ev.held_out else "sample"
            again = f" ({counted(ev.repeated, 'repeated sample')} used once)" if ev.repeated else ""
            self._loaded = f"loaded {ev.model}: {ev.nodes} nodes, {counted(ev.samples, what)}{held}{again}"
        elif isinstance(ev, PhaseEvent) and ev.phase != "load":
            if not self._started and self._loaded is not None:
                self.line(self._loaded)
            self._started, self._step = True, None
            self.line(f"{ev.phase}: {ev.detail}" if ev.detail else ev.phase)
        elif isinstance(ev, CaptureEvent):
            self._news = f"capture {ev.stage}: {ev.done} of {ev.total}"
            if ev.done == ev.total or self._due():
                self.line(self._news)
        elif isinstance(ev, EvaluationEvent):
            if self._step is None:
                self._step = ev.step - 1  # the phase's own line was just written
            best = ("none passing yet" if ev.best_size is None else
                    f"smallest passing set so far {counted(ev.best_size, 'node')}")
            phase = f"{ev.phase}, round {ev.round + 1}" if ev.round else ev.phase
            self._news = f"search ({phase}): {counted(ev.step, 'evaluation')}, {best}"
            if ev.step - self._step >= self.EVERY_EVALUATIONS or self._due():
                self._step = ev.step
                self.line(self._news)


PROGRESS_LINE = re.compile(r"^\[ *\d+\.\ds\] ")  # a line of PlainProgress


@contextmanager
def heartbeat(plain: PlainProgress | None, every_s: float = 1.0):
    """While the block runs, `plain.beat()` about every `every_s` seconds on a thread of its own (nothing where the
    bars are on, `plain` None): no stretch of a long run is silent for more than EVERY_S seconds and a beat."""
    if plain is None:
        yield
        return
    done = threading.Event()

    def run() -> None:
        while not done.wait(every_s):
            plain.beat()

    thread = threading.Thread(target=run, name="progress-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def plain_progress(first: str = "loading the model") -> PlainProgress | None:
    """Plain progress lines where stderr is not a terminal (the bars are off there); None on a terminal. `first`: what
    a heartbeat says before the first line."""
    return None if err.is_terminal else PlainProgress(first=first)


def warn_floor(floor, tol) -> None:
    """Before the search, a warning (one line) where the tolerance is tighter than the format can represent at the
    outputs (a `measure.floor.RoundingFloor` under `tol`): the nodes that write that output must stay in FP32."""
    from precision_doctor.render.wording import floor_warning

    said = floor_warning(floor, tol)
    if said is not None:
        err.print(styled("warning:", "bold yellow", f" {said} Ctrl-C stops this run (its report says the same)."))


def announce_renamed(renamed: tuple[str, ...] | list[str], unsafe: tuple[tuple[str, str], ...] = ()) -> None:
    """A note for nodes that were given names; a warning (one line) for names that were not safe text."""
    plain = [n for n in renamed if n not in dict(unsafe)]
    if plain:
        shown = ", ".join(plain[:5]) + (" ..." if len(plain) > 5 else "")
        were = "was given a name" if len(plain) == 1 else "were given names"
        err.print(f"note: {counted(len(plain), 'unnamed or duplicate-named node')} {were}: {shown}")
    if unsafe:
        shown = ", ".join(f"{new} (was '{old[:60]}')" for new, old in unsafe[:3]) + (" ..." if len(unsafe) > 3 else "")
        hold = "holds" if len(unsafe) == 1 else "hold"
        err.print(styled("warning:", "bold yellow", f" {counted(len(unsafe), 'node name')} {hold} control characters or bytes "
                         f"that are not UTF-8, which scripts and lists cannot carry safely; renamed (named.onnx, the "
                         f"report): {shown}"))
