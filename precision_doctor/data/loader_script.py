"""`--data-loader-script FILE[:FUNC]`: samples from the user's own Python, polygraphy's convention.

The script is imported from its path (its directory first on `sys.path` meanwhile, as polygraphy does) and
`FUNC()` (default `load_data`) is called: it returns or yields feed dicts (input name -> array; numpy arrays,
or anything `np.asarray` turns into numbers). They are read one at a time, each checked (names, numbers, the
model's size bounds) and written to disk at once (data/spill.py): the script runs once per run, its samples
need not be reproducible, and thousands of them are never all in memory. A resumed run reads the samples the
first run kept (`loader_samples.h5` in its run directory) instead of running the script again.

Running a script runs its code with the tool's rights: give only your own scripts. The daemon runs a
script only by a server path within its `--allow-root`s, never an uploaded one.

Every failure is one line naming the script (and the sample, and the script's line where it raised): an exception,
and a `sys.exit()` or `SystemExit` too (a script that exits has given no samples; exit 0 would say all went well).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from precision_doctor.data.arrayfiles import Bounds
from precision_doctor.data.input_spec import MAX_LOADER_SAMPLES
from precision_doctor.data.spill import Spill, SpillEntry
from precision_doctor.errors import SpecError, UserError

SETTING = "inputs.data_loader_script"
DEFAULT_FUNC = "load_data"  # polygraphy's default
_FUNC = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_script(value: str) -> tuple[Path, str]:
    """`FILE[:FUNC]` -> (file, function name)."""
    head, sep, tail = value.rpartition(":")
    if sep and head and _FUNC.match(tail):
        return Path(head), tail
    return Path(value), DEFAULT_FUNC


def run_loader(value: str, bounds: Bounds, spill: Spill | None = None) -> list[SpillEntry]:
    """Every sample `FUNC()` of the script `value` yields, checked and spilled to `spill` (a new temporary
    one by default); labelled "SCRIPT:FUNC (sample i)"."""
    path, func = parse_script(value)
    who = f"data loader script {path}:{func}"
    if not path.is_file():
        raise SpecError(SETTING, f"{{{SETTING}}} {path}: " + ("not found" if not path.exists() else "is not a file"))
    loader = _function(path, func, who)
    spill = spill if spill is not None else Spill(bounds=bounds)
    entries: list[SpillEntry] = []
    sys.path.insert(0, str(path.resolve().parent))
    try:
        iterator = _call(loader, path, who)
        while True:
            i = len(entries)
            try:
                item = next(iterator)
            except StopIteration:
                break
            except BaseException as exc:
                _reraise_interrupt(exc)
                raise UserError(f"{who} raised {_what(exc, path)} while yielding sample {i}") from None
            if i >= MAX_LOADER_SAMPLES:
                raise UserError(f"{who} yields more than {MAX_LOADER_SAMPLES:,} samples; give fewer (or use "
                                "--max-samples with a directory or a multi-sample .npz)")
            feed = _feed(item, i, who, path, bounds)
            bounds.count(f"{who} sample {i}", 1, bounds.sample(f"{who} sample {i}", {
                k: (a.shape, a.dtype) for k, a in feed.items()}))
            entries.append(spill.add(feed, f"{path}:{func} (sample {i})"))
    finally:
        _unpath(path)
    spill.finish()
    if not entries:
        raise UserError(f"{who} yielded no samples")
    return entries


def _function(path: Path, func: str, who: str):
    name = f"precision_doctor_loader_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{who}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise UserError(f"{who}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except BaseException as exc:
        _reraise_interrupt(exc)
        raise UserError(f"{who} raised {_what(exc, path)} when imported") from None
    finally:
        _unpath(path)
    loader = getattr(module, func, None)
    if loader is None:
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == name)
        raise UserError(f"{who}: the script defines no '{func}'" + (f" (it defines: {', '.join(found)})" if found else "")
                        + "; name the function as FILE:FUNC")
    if not callable(loader):
        raise UserError(f"{who}: '{func}' is not a function")
    return loader


def _unpath(path: Path) -> None:
    """Take the script's directory off `sys.path` again (unless the script already did)."""
    with contextlib.suppress(ValueError):
        sys.path.remove(str(path.resolve().parent))


def _reraise_interrupt(exc: BaseException) -> None:
    """Ctrl-C (and a run's stop, a KeyboardInterrupt) goes on; anything else the script raised, SystemExit
    included, becomes the caller's one-line error."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc


def _call(loader, path: Path, who: str) -> Iterator:
    try:
        items = loader()
    except BaseException as exc:
        _reraise_interrupt(exc)
        raise UserError(f"{who} raised {_what(exc, path)}") from None
    if isinstance(items, Mapping):
        raise UserError(f"{who} returned one feed dict; return or yield a list of them (one per sample)")
    try:
        return iter(items)
    except TypeError:
        raise UserError(f"{who} returned {type(items).__name__}, not an iterable of feed dicts "
                        "(yield one dict per sample)") from None
    except BaseException as exc:  # an iterable whose __iter__ raises
        _reraise_interrupt(exc)
        raise UserError(f"{who} returned an iterable that raised {_what(exc, path)}") from None


def _feed(item: object, i: int, who: str, path: Path, bounds: Bounds) -> dict[str, np.ndarray]:
    where = f"{who} sample {i}"
    if not isinstance(item, Mapping):
        raise UserError(f"{where} is a {type(item).__name__}, not a feed dict (input name -> array)")
    try:
        pairs = list(item.items())  # the script's own Mapping may raise
    except BaseException as exc:
        _reraise_interrupt(exc)
        raise UserError(f"{where}: its items raised {_what(exc, path)}") from None
    out = {}
    for name, value in pairs:
        if not isinstance(name, str):
            raise UserError(f"{where}: a key is {type(name).__name__} {name!r:.40}, not an input name")
        try:
            arr = np.asarray(value)
        except BaseException as exc:  # ragged lists, objects numpy refuses, an __array__ of the script's that exits
            _reraise_interrupt(exc)
            arr = np.empty(0, dtype=object)
        bounds.check(where, name, arr.shape, arr.dtype)
        out[name] = arr
    missing = sorted(set(bounds.sizes or ()) - set(out))
    if missing:
        raise UserError(f"{where}: missing input '{missing[0]}'; model inputs are: {', '.join(bounds.sizes or ())}")
    return out


def _what(exc: BaseException, path: Path) -> str:
    """`ValueError: message (line N)`: the exception and the script's line it came from."""
    line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__))
                 if Path(f.filename).resolve() == path.resolve()), None)
    try:
        said = str(exc)
    except Exception:  # an exception of the script's whose __str__ raises
        said = ""
    if isinstance(exc, SystemExit):
        try:
            said = f"sys.exit({0 if exc.code is None else exc.code!r})"
        except Exception:
            said = "sys.exit()"
    text = said.splitlines()[0][:200] if said.strip() else ""
    return f"{type(exc).__name__}" + (f": {text}" if text else "") + (f" (line {line})" if line else "")
