"""RunSpec: every setting of one run, with its defaults defined once, here.

A RunSpec is a frozen tree: `model`, `precision`, and the sections `inputs`, `tolerance`, `search`,
`capture`, `backends`. The CLI's option defaults read these defaults, batch recipes are applied onto
them, and a service reads and writes the JSON form (`to_json` / `from_json`). Settings are named by
their path ("search.margin"); `SpecError` carries the path so that every front end can say it in its
own words (a CLI flag, a recipe key, a JSON path). This module holds the settings and their JSON form only: the
checks that need the backends, rules and strategies are `pipeline/spec_check.validate_spec`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from precision_doctor import codec
from precision_doctor.codec import Codec, Hook
from precision_doctor.data.input_spec import InputSpec
from precision_doctor.errors import SpecError, one_line
from precision_doctor.measure.tolerance import Tolerance

COSTS = ("deploy", "nodes", "flops")  # search/space.py says what each means
COMPRESSIONS = ("lzf", "gzip", None)
MAX_AUGMENT = 32  # perturbed copies per search sample, at most
# Upper bounds: far beyond any real run, low enough that no arithmetic on them overflows (a setting
# outside is refused in one line naming it, never accepted to fail later in a job).
MAX_INT = 2**63 - 1  # any integer setting (a 64-bit integer in JSON, SQLite, numpy)
MAX_SAMPLES = 100_000  # generated samples
MAX_EVALUATIONS = 10**9
MAX_TIME_BUDGET_S = 10**9
MAX_GROUP_MB = float(1 << 20)  # 1 TiB in one capture group
# atol and rtol (and each output's): far beyond any difference of two float32 outputs (6.8e38), far enough below
# float64's largest value (1.8e308) that every scaling a run makes of them (4x in the trade-off, the rounding floor's
# suggestion) stays finite
MAX_TOLERANCE = 1e300
MAX_JSON_DEPTH = 32  # nesting of a settings document (a RunSpec's JSON is 3 deep)


@dataclass(frozen=True)
class SearchSpec:
    """How to search: the strategy, what "smallest" means, the margin, perturbed copies and the budget."""

    strategy: str = "auto"
    cost: str = "deploy"  # least estimated deployment cost (graph/cost.py), fewest "nodes", or least FP32 "flops"
    batch: int | None = None  # the batch deployed: the cost model's and the GPU latency's (None: the samples')
    margin: float = 0.1  # search for a set that uses at most 1 - margin of the tolerance
    # perturbed copies of each search sample the oracle also checks (pipeline/copies.py); none by default: on trained
    # models judged on the GPU they grew answers the unseen samples did not need (issue 33)
    augment: int = 0
    max_evaluations: int | None = None
    time_budget: float | None = None  # seconds
    keep_io_types: bool = True  # fixed.onnx keeps FP32 inputs and outputs
    knobs: bool = False  # also try the final backend's knobs around the answer (pipeline/knob_search.py)


@dataclass(frozen=True)
class CaptureSpec:
    """The streaming capture: how many samples it runs on (the hardest, spread over shape groups:
    data/samples.capture_choice), the memory budget of one group of layers, the HDF5 compression, which tensors
    activations.h5 keeps beyond every tensor's error statistics and the graph outputs (`keep`,
    data/keep_plan.py: `summary` the top layers of the ranking, `top:N`, node or tensor names, `all` every
    tensor, `none` the file removed once the report is written), and where its runs compute (`device`: `auto` a
    CUDA GPU where ONNX Runtime has one, else the CPU; `cpu`; `cuda`)."""

    max_samples: int = 8
    group_mb: float = 256.0
    # None: on nudenet LZF saved a fifth of the file (270 against 339 MiB for 2 samples) for about a third of the
    # capture phase's time (compressing, then decompressing in the analysis); "lzf" or "gzip" where disk is short
    compression: str | None = None
    keep: str = "summary"
    device: str = "auto"


TARGETS = ("tensorrt", "ort-cuda")  # the runtimes an answer can be for (graph/targets.py)


@dataclass(frozen=True)
class BackendSpec:
    """The runtime the answer is for (`target`: `tensorrt`, the default, since the run's artifacts are TensorRT's
    (a strongly typed fixed.onnx, trtexec.sh, tensorrt_rtx.sh); or `ort-cuda`), where candidate sets run, where the
    answer is confirmed (None: not confirmed; `auto` confirms on ort-cuda where a CUDA GPU is, measuring what the
    target executes), and the emulator's rules: None (the target's profile: `tensorrt`, TensorRT's documented
    arithmetic with no ONNX Runtime fusion, or `ort-cuda`, ONNX Runtime's CUDA kernels and fusions measured on an
    H100), `standard` (round the inputs and outputs of each node, compute in FP32 between), or rule names
    (graph/rules.py)."""

    backend: str = "auto"
    confirm_backend: str | None = None
    rules: str | None = None
    target: str = "tensorrt"

    @property
    def emulation_rules(self) -> str:
        """The emulator's rules in force: those set, else the target's profile (named as the target)."""
        return self.rules if self.rules is not None else self.target


@dataclass(frozen=True)
class ArtifactSpec:
    """What a passing run builds besides fixed.onnx, the commands and the report: the fixed TensorRT engine
    (`fixed.plan`; TensorRT-RTX ahead of time for `engine_targets`, "8.6" or "8.6,8.9", default its portable
    set; TensorRT for the GPU present)."""

    engine: bool = False
    engine_targets: tuple[str, ...] = ()

    @property
    def targets(self) -> tuple[str, ...] | None:
        """The compute capabilities named (commas split), None for the library's portable default."""
        out = tuple(t.strip() for item in self.engine_targets for t in item.split(",") if t.strip())
        return out or None


SECTIONS: dict[str, type] = {
    "inputs": InputSpec, "tolerance": Tolerance, "search": SearchSpec, "capture": CaptureSpec, "backends": BackendSpec,
    "artifacts": ArtifactSpec,
}
_PATH_SETTINGS = {  # resolved against `base_dir`
    "model", "inputs.files", "inputs.validate_files", "inputs.reference_outputs", "inputs.data_loader_script"}


@dataclass(frozen=True)
class RunSpec:
    """Every setting of one `compare` or `diagnose` run."""

    model: str
    precision: str = "fp16"
    inputs: InputSpec = field(default_factory=InputSpec)
    tolerance: Tolerance = field(default_factory=Tolerance)
    search: SearchSpec = field(default_factory=SearchSpec)
    capture: CaptureSpec = field(default_factory=CaptureSpec)
    backends: BackendSpec = field(default_factory=BackendSpec)
    artifacts: ArtifactSpec = field(default_factory=ArtifactSpec)

    # -- derived ------------------------------------------------------------------------------------
    @property
    def search_tolerance(self) -> Tolerance:
        """What the search asks for: the tolerance scaled by 1 - margin (validation uses the full one)."""
        margin = self.search.margin
        return self.tolerance.scaled(1.0 - margin) if margin else self.tolerance

    def flat(self) -> dict[str, Any]:
        """{setting path: value} of every setting ("tolerance.atol": 1e-05, ...)."""
        out: dict[str, Any] = {}
        for key, value in self.to_json().items():
            if isinstance(value, dict):
                out.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                out[key] = value
        return out

    def user_files(self) -> list[str]:
        """The user's files this run reads (model, inputs, held-out inputs, reference outputs): a run
        directory must not hold them."""
        from precision_doctor.data.loader_script import parse_script
        from precision_doctor.data.sources import static_root

        i = self.inputs
        script = [str(parse_script(i.data_loader_script)[0])] if i.data_loader_script else []
        return [self.model, *map(static_root, i.files), *map(static_root, i.validate_files), *script,
                *([i.reference_outputs] if i.reference_outputs else [])]

    def read_files(self) -> list[str]:
        """Every file this run reads: `user_files` with directories and globs expanded to the sample files in
        them (a batch's fingerprint, the paths every Ray node must see)."""
        from precision_doctor.data.loader_script import parse_script
        from precision_doctor.data.sources import expanded_or_given

        i = self.inputs
        script = [str(parse_script(i.data_loader_script)[0])] if i.data_loader_script else []
        return [self.model, *expanded_or_given([*i.files, *i.validate_files]), *script,
                *([i.reference_outputs] if i.reference_outputs else [])]

    # -- JSON -----------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """Every setting, by section; tuples as lists (the shared codec's plain field mapping)."""
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Any, base_dir: str | Path | None = None) -> RunSpec:
        """A RunSpec from its JSON form (absent settings keep their defaults; unknown ones are refused).
        Relative paths (model, input files) are resolved against `base_dir` when given."""
        if not isinstance(data, Mapping):
            raise SpecError("spec", f"a run spec must be a JSON object, got {type(data).__name__}")
        check_depth(data, "spec")
        changes: dict[str, Any] = {}
        for key, value in data.items():
            if key in SECTIONS:
                if not isinstance(value, Mapping):
                    raise SpecError(key, f"{{{key}}} must be an object, got {type(value).__name__}")
                changes.update({f"{key}.{k}": v for k, v in value.items()})
            else:
                changes[key] = value
        if "model" not in changes:
            raise SpecError("model", "{model} is missing: the path of the ONNX model")
        return cls(model="").with_settings(changes, base_dir=base_dir)

    def with_settings(self, changes: Mapping[str, Any], base_dir: str | Path | None = None) -> RunSpec:
        """This spec with settings replaced by path ({"search.margin": 0.2, "inputs.files": [...]}).
        Values are checked for their type and converted (lists to tuples, paths to strings) by the shared codec
        with the settings' readers (`SETTINGS_CODEC`); a SpecError names the setting's path."""
        top: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        for path, value in changes.items():
            hint = setting_type(path)
            value = SETTINGS_CODEC.from_json(hint, value, path)
            if base_dir is not None and path in _PATH_SETTINGS:
                value = _resolve(value, Path(base_dir), path)
            section, _, name = path.partition(".")
            if name:
                sections.setdefault(section, {})[name] = value
            else:
                top[section] = value
        for section, values in sections.items():
            top[section] = replace(getattr(self, section), **values)
        if "tolerance" in sections:
            check_tolerance(top["tolerance"])
        return replace(self, **top)

    # -- identity -------------------------------------------------------------------------------------
    def key(self) -> str:
        """A stable fingerprint: the settings (sorted JSON, model path left out) plus the SHA-256 of the
        model file and of every file the run reads (`read_files`: directories and globs expanded; None for a
        missing one)."""
        settings = self.to_json()
        del settings["model"]
        files = self.read_files()
        hashes = [file_sha256(Path(f)) if Path(f).is_file() else None for f in files]
        text = json.dumps({"settings": settings, "file_hashes": hashes}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_tolerance(t: Tolerance) -> None:
    """Refuse an atol or rtol (each output's too) above MAX_TOLERANCE, naming the setting: checked where settings are
    read (`with_settings`) and in `validate_spec`, not in `Tolerance` itself, whose scaled copies (the trade-off's 4x)
    may go past it and only need to stay finite. `Tolerance` refuses negative and non-finite values."""
    for kind in ("atol", "rtol"):
        if getattr(t, kind) > MAX_TOLERANCE:
            raise SpecError(f"tolerance.{kind}", f"{{tolerance.{kind}}} must be at most {MAX_TOLERANCE:g}, got "
                            f"{getattr(t, kind):g}")
        for name, value in t.per_output(kind).items():
            if value > MAX_TOLERANCE:
                raise SpecError(f"tolerance.output_{kind}", f"{{tolerance.output_{kind}}} {name}:{value:g} must be at "
                                f"most {MAX_TOLERANCE:g}")


def default(path: str) -> Any:
    """The default value of a setting ("tolerance.atol" -> 1e-5)."""
    section, _, name = path.partition(".")
    if not name:
        return {f.name: f.default for f in dataclasses.fields(RunSpec)}[section]
    return getattr(SECTIONS[section](), name)


def setting_type(path: str) -> Any:
    """The type of a setting, from the dataclass annotations; SpecError for an unknown path."""
    section, _, name = path.partition(".")
    if not name:
        if section in SECTIONS or section not in _hints(RunSpec):
            raise SpecError(path, f"unknown setting '{path}'; known: {', '.join(settings())}")
        return _hints(RunSpec)[section]
    if section not in SECTIONS or name not in _hints(SECTIONS[section]):
        raise SpecError(path, f"unknown setting '{path}'; known: {', '.join(settings())}")
    return _hints(SECTIONS[section])[name]


def settings() -> list[str]:
    """Every setting path, in declaration order."""
    out = ["model", "precision"]
    for section, cls in SECTIONS.items():
        out += [f"{section}.{f.name}" for f in dataclasses.fields(cls)]
    return out


def check_depth(data: Any, setting: str, limit: int = MAX_JSON_DEPTH) -> None:
    """SpecError naming `setting` when `data` (parsed JSON) nests lists and objects deeper than `limit`."""
    level, depth = [data], 0
    while level:
        depth += 1
        if depth > limit:
            raise SpecError(setting, f"{{{setting}}} nests more than {limit} levels of lists and objects")
        level = [v for x in level if isinstance(x, (list, tuple, Mapping))
                 for v in (x.values() if isinstance(x, Mapping) else x)]


def load_json(text: str | bytes, setting: str) -> Any:
    """JSON text as a settings document: SpecError naming `setting` (one line) when it is not JSON or nests
    deeper than MAX_JSON_DEPTH (Python's parser gives up near 1,000 levels with a RecursionError)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise SpecError(setting, f"{{{setting}}} nests more than {MAX_JSON_DEPTH} levels of lists and objects") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError(setting, f"{{{setting}}} is not valid JSON: {one_line(exc)}") from None
    check_depth(data, setting)
    return data


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _resolve(value: Any, base: Path, path: str = "") -> Any:
    if path == "inputs.data_loader_script" and value:
        from precision_doctor.data.loader_script import parse_script

        file, func = parse_script(value)
        return f"{(base / file).resolve()}:{func}"
    if isinstance(value, tuple):
        return tuple(str((base / f).resolve()) for f in value)
    return str((base / value).resolve()) if value else value


def _setting(read: Callable[[str, Any], Any]) -> Hook:
    """A setting's reader as a codec hook: null refused (an optional setting's null is the codec's None), else
    `read(path, value)`."""

    def decode(value: Any, path: str) -> Any:
        if value is None:
            raise SpecError(path, f"{{{path}}} must not be null")
        return read(path, value)

    return Hook(decode=decode)


def _boolean(path: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise SpecError(path, f"{{{path}}}: expected true or false, got {_shown(value)}")


def _string(path: str, value: Any) -> str:
    if isinstance(value, (str, Path)):
        return _text(path, value)
    raise SpecError(path, f"{{{path}}}: expected a string, got {_shown(value)}")


def _strings(path: str, value: Any) -> tuple[str, ...]:
    """A list of strings (one string: a list of one) as a tuple."""
    if isinstance(value, (str, Path)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, Path)) for v in value):
        raise SpecError(path, f"{{{path}}}: expected a list of strings, got {_shown(value)}")
    return tuple(_text(path, v) for v in value)


def _text(path: str, value: str | Path) -> str:
    text = str(value)
    if "\x00" in text:
        raise SpecError(path, f"{{{path}}} must not contain NUL characters, got {_shown(text)}")
    return text


def _shown(value: Any, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters (a message stays one short line whatever was sent)."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"a deeply nested {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(typ: type, path: str, value: Any) -> int | float:
    """`value` (a number, or its text) as `typ`: finite; an integer exactly, within 64 bits."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (isinstance(value, str) and len(value) > 40):
        raise SpecError(path, f"{{{path}}}: expected a number, got {_shown(value)}")  # (int() of 10**5 digits is slow)
    exact: int | None = value if isinstance(value, int) else None
    if isinstance(value, str) and typ is int:
        with contextlib.suppress(ValueError):
            exact = int(value)
    try:
        number = float(value)
    except ValueError:
        raise SpecError(path, f"{{{path}}}: expected a number, got {_shown(value)}") from None
    except OverflowError:  # an integer beyond any float
        raise SpecError(path, f"{{{path}}}: {_shown(value, 40)} is out of range (at most {MAX_INT})") from None
    if not math.isfinite(number):
        raise SpecError(path, f"{{{path}}}: expected a finite number, got {_shown(value)}")
    if typ is not int:
        return number
    if exact is None:
        if not number.is_integer():
            raise SpecError(path, f"{{{path}}}: expected an integer, got {_shown(value)}")
        exact = int(number)
    if abs(exact) > MAX_INT:
        raise SpecError(path, f"{{{path}}}: {_shown(value, 40)} is out of range (at most {MAX_INT})")
    return exact


# The settings' values through the shared codec (`codec.py`: optional settings, the type hints), with readers
# that are lenient where a front end's text is (a number's text, one path for a list, a Path) and strict where a
# run needs it: strings without NUL characters (no path, name or range has one), finite numbers, integers exact
# and within 64 bits. A bad value is a SpecError naming the setting's path.
SETTINGS_CODEC = Codec({
    bool: _setting(_boolean),
    int: _setting(functools.partial(_number, int)),
    float: _setting(functools.partial(_number, float)),
    str: _setting(_string),
    tuple[str, ...]: _setting(_strings),
})
