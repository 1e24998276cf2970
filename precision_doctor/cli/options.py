"""Shared option groups, built on the one table between RunSpec settings and CLI flags (`flags.py`).

Each option names the setting it sets ("tolerance.atol"); its default is the RunSpec default. A command
composes groups (`@with_options(INPUTS, TOLERANCE, ...)`) and receives their values as one `Options`,
which builds the RunSpec. `flag(setting)` turns a SpecError's setting back into the flag the user typed.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from precision_doctor import spec as specs
from precision_doctor.backends import registry
from precision_doctor.data import augment as aug
from precision_doctor.data import input_spec as lim
from precision_doctor.data.arrayfiles import binary
from precision_doctor.flags import FLAGS, command_line, flag  # noqa: F401 (the flag table, re-exported)
from precision_doctor.pipeline import heldout_policy as held
from precision_doctor.search import STRATEGY_INFO
from precision_doctor.spec import RunSpec


@dataclass(frozen=True)
class Opt:
    """One option: the command parameter it fills, the setting it sets (None: a run option), its typer
    annotation and OptionInfo; `expand` turns the option's value into several settings (`--atol 1e-3 --atol
    out:1e-2` sets `tolerance.atol` and `tolerance.output_atol`)."""

    param: str
    setting: str | None
    annotation: Any
    info: Any
    expand: Callable[[Any], dict[str, Any]] | None = None

    def settings_of(self, value: Any) -> dict[str, Any]:
        """{setting path: value} this option sets when it holds `value` (nothing for an unset list option)."""
        if self.setting is None:
            return {}
        if self.expand is not None:
            return self.expand(value)
        if value is None and self.info.default is None and specs.default(self.setting) == ():
            return {}  # a list option not given: the spec's empty default
        return {self.setting: value}


def _opt(param: str, setting: str, annotation: Any, help: str, *decls: str, default: Any = ...,
         expand: Callable[[Any], dict[str, Any]] | None = None) -> Opt:
    value = specs.default(setting) if default is ... else default
    return Opt(param, setting, annotation, typer.Option(value, *(decls or (FLAGS[setting],)), help=help), expand)


def _tolerances(kind: str) -> Callable[[list[str] | None], dict[str, Any]]:
    """polygraphy's `--atol`/`--rtol` values: a number for every output (the last one given counts) and
    NAME:VALUE for one output, in any order; as the settings `tolerance.<kind>` and `tolerance.output_<kind>`."""

    def expand(values: list[str] | None) -> dict[str, Any]:
        if not values:
            return {}
        named = tuple(v for v in values if ":" in v)
        plain = [v for v in values if ":" not in v]
        return {f"tolerance.output_{kind}": named, **({f"tolerance.{kind}": plain[-1]} if plain else {})}

    return expand


# -- the groups ------------------------------------------------------------------------------------------
FILES = _opt("inputs", "inputs.files", list[Path] | None,
             "Input samples: a file (.npz, .npy, polygraphy JSON, .h5), a directory of them (sorted, not recursive) or a "
             "quoted glob ('data/*.npz'); repeatable. An .npz/.npy array with one more axis than the model's input holds "
             "samples stacked on its first axis; with the model's rank and a fixed batch b, a first dimension k*b holds k "
             "samples (ModelOpt's calibration layout); otherwise a file is one sample. A run holds at most "
             f"{lim.MAX_RUN_SAMPLES:,} samples (held-out ones too), one sample at most {binary(lim.MAX_SAMPLE_BYTES)} and one "
             f"file {binary(lim.MAX_FILE_BYTES)}, as the files' headers declare them (checked before reading; read a "
             "sample at a time). Alias: --load-inputs.",
             "--inputs", "--load-inputs", default=None)
LOADER = _opt("data_loader_script", "inputs.data_loader_script", str | None,
              "Python script FILE[:FUNC] whose FUNC() (default load_data) yields feed dicts (polygraphy's "
              "convention); run once, its samples kept in the run directory (at most "
              f"{lim.MAX_LOADER_SAMPLES:,}). Runs your code: give only your own.",
              default=None)
MAX_SAMPLES = _opt("max_samples", "inputs.max_samples", int | None,
                   "Use at most N of the samples found: a seeded (--seed) choice spread over the list and over the "
                   "shapes; report.json's inputs say which.")
SAMPLES = _opt("samples", "inputs.samples", int, "Number of generated samples when no --inputs are given.")
SEED = _opt("seed", "inputs.seed", int, "Seed for generated samples and for --max-samples' choice.")
INPUTS = (
    FILES, LOADER, MAX_SAMPLES, SAMPLES, SEED,
    _opt("val_range", "inputs.val_ranges", list[str] | None,
         "Value range of generated inputs: NAME:[lo,hi] or [lo,hi].", default=None),
    _opt("input_shapes", "inputs.input_shapes", list[str] | None,
         "Shape for dynamic inputs: NAME:[d0,d1,...].", default=None),
    _opt("allow_nonfinite_inputs", "inputs.allow_nonfinite", bool, "Accept NaN/Inf in input samples."),
    _opt("reference_outputs", "inputs.reference_outputs", Path | None,
         "FP32 reference outputs saved by polygraphy (run --save-outputs FILE, with --load-inputs of the same "
         "--inputs): used instead of ONNX Runtime's FP32 outputs. --load-outputs is the same (polygraphy's name).",
         "--reference-outputs", "--load-outputs", default=None),
)
GENERATED = (SAMPLES, SEED)  # batch: the default sample recipe
HELD_OUT = (
    _opt("validate_inputs", "inputs.validate_files", list[Path] | None,
         "Held-out samples to confirm the answer on (files, directories, globs, as --inputs); repeatable.",
         default=None),
    _opt("validation_split", "inputs.validation_split", float | None,
         "Hold out this fraction of the samples for confirmation (default: from "
         f"{held.HOLD_OUT_FROM} --inputs samples on, {held.HOLD_OUT_FRACTION:g} of them, at least {held.MIN_HELD_OUT} "
         f"and at least {held.HELD_OUT_TARGET} where that is at most a quarter; generated runs generate "
         f"{held.GENERATED_FRACTION:g} held-out sample per search sample, with another seed)."),
)
PRECISION = (_opt("precision", "precision", str, "Low precision to diagnose: fp16 or bf16."),)
TOLERANCE = (
    _opt("atol", "tolerance.atol", list[str] | None,
         "Absolute tolerance, as polygraphy's --atol: a number for every output (default 1e-5), NAME:VALUE for one "
         "output; repeatable (--atol 1e-3 --atol logits:1e-2).", default=None, expand=_tolerances("atol")),
    _opt("rtol", "tolerance.rtol", list[str] | None,
         "Relative tolerance, as polygraphy's --rtol: a number for every output (default 1e-5), NAME:VALUE for one "
         "output; repeatable. The defaults are tighter than FP16 (relative rounding 4.9e-4) or BF16 (3.9e-3) can "
         "represent at most outputs: the nodes that write them must then stay FP32, and usually most others (the run "
         "warns before the search); 1e-3 is a common choice for FP16.", default=None, expand=_tolerances("rtol")),
    _opt("check_error_stat", "tolerance.check_error_stat", str, "elemwise, max, mean or median (as polygraphy)."),
    _opt("cosine_floor", "tolerance.cosine_floor", float | None, "Also require cosine similarity >= this per output."),
)
SEARCH = (
    _opt("margin", "search.margin", float,
         "Search for a set that uses at most 1 - MARGIN of the tolerance (0.2: 20% to spare); held-out samples "
         "are checked at the full tolerance. Room to spare, no guarantee on other hardware (--confirm-backend "
         "checks there). Default 0.1; --margin 0 is the bare minimum set (no room to spare)."),
    _opt("augment", "search.augment", int,
         f"Perturbed copies (Gaussian noise of {100 * aug.Augment().noise:g}% of each continuous float input's std, "
         "never on integer ones; image-like inputs first get another exposure: contrast "
         f"x{aug.CONTRAST[0]:g}-{aug.CONTRAST[1]:g}, a gain of {aug.GAIN[0]:g}-{aug.GAIN[1]:g} and an offset of "
         f"±{100 * aug.OFFSET[1]:g}% of the range per channel) of each search sample that the search also checks, so "
         "the answer is not tuned to one rounding pattern. Default 0 (none): the held-out samples of your data say whether "
         "an answer holds."),
    _opt("strategy", "search.strategy", str, f"{', '.join(STRATEGY_INFO)}."),
    _opt("cost", "search.cost", str,
         "What the search minimizes: 'deploy' (default: the estimated time fixed.onnx spends above all-FP16, FLOPs and "
         "bytes moved including Casts, with fusion groups kept whole unless a member alone is proven to matter), "
         "'nodes' (fewest nodes) or 'flops' (least FP32 FLOPs)."),
    _opt("batch", "search.batch", int | None,
         "The batch you deploy: the cost model's and the GPU latency's (default: the samples' batch)."),
    _opt("max_evaluations", "search.max_evaluations", int | None, "Stop after this many evaluations."),
    _opt("time_budget", "search.time_budget", float | None,
         "Seconds the search phase may take: its clock starts after the capture and runs through the search, the "
         "checks of its answers (held-out samples, perturbed copies), a second search, and the confirmation and knob "
         "search (these spend what is left); when it runs out the answer so far is reported. It does not bound the "
         "whole run: loading, references, the capture and analysis come before it, the fixed capture, artifacts, "
         "TensorRT check and report after it (report.json's timing says how long each took)."),
    _opt("keep_io_types", "search.keep_io_types", bool, "fixed.onnx keeps FP32 I/O.",
         "--keep-io-types/--no-keep-io-types"),
    _opt("knobs", "search.knobs", bool,
         "Also try the answer's backend under its knob configurations (ort-cuda: cudnn_conv_algo_search x use_tf32; "
         "trt: tactic sources, TF32), alone and with the answer less one node; the cheapest passing one is kept and "
         "its settings go into the commands. Refused with the emulator (no knobs; --backend auto tries them on its "
         "confirm backend, ort-cuda where a GPU is).", "--knobs/--no-knobs"),
)


def _search_backends() -> tuple[list[registry.BackendInfo], list[registry.BackendInfo]]:
    """The backends `--backend` may name, the default first, and those it refuses (backends/registry.py)."""
    first = registry.info(specs.default("backends.backend"))
    assert first is not None
    rest = [b for b in registry.listed() if b is not first]
    return [first, *(b for b in rest if b.search_refusal() is None)], [b for b in rest if b.search_refusal() is not None]


def backend_help(brief: bool = False) -> str:
    """`--backend`'s help: the names it takes (with a few words each unless `brief`), the default first, and why the
    refused ones are refused."""
    ok, refused = _search_backends()
    if brief:
        return f"{ok[0].name} (default), {', '.join(b.name for b in ok[1:])}."
    named = ", ".join(f"{b.name} ({b.brief})" if b.brief else b.name for b in ok)
    return named + "." + "".join(f" {b.name} is refused: {b.brief}." for b in refused)


def _confirm_backends() -> str:
    """The backends worth confirming an answer on: those that run the mixed graph fixed.onnx is, the GPU's first."""
    return ", ".join(b.name for b in sorted((b for b in registry.listed() if b.runs_fixed), key=lambda b: b.check_only))


BACKENDS = (
    _opt("backend", "backends.backend", str, backend_help()),
    _opt("confirm_backend", "backends.confirm_backend", str | None,
         f"Carry the answer over to this backend ({_confirm_backends()}) on every sample: kept if it passes "
         "there, else grown until it does, then pruned to 1-minimal there. Search with the fast emulator, "
         "finish on the GPU. ort-cpu is a plumbing check only (fixed.onnx loads and runs; ONNX Runtime's CPU "
         "provider computes FP16 chains in FP32, so its verdict is not FP16's): it may add nodes, never removes "
         "one, and never certifies the answer."),
)
TARGET = (
    _opt("target", "backends.target", str, "The runtime that will execute fixed.onnx, whose answer the run finds: "
         "tensorrt (default: the run's artifacts are TensorRT's; the emulator models what TensorRT is documented to do "
         "with a strongly typed network, every node its own layer, no ONNX Runtime fusion; a GPU here measures it on "
         "ONNX Runtime CUDA with graph optimizations off, a proxy) or ort-cuda (ONNX Runtime's CUDA kernels and "
         "fusions, measured on an H100/H200). The answer is then checked for the other runtime; where it fails there, "
         "that runtime gets its own answer, fixed.onnx and commands in a folder named after it."),
)
EMULATION = (
    _opt("emulation_rules", "backends.rules", str | None, "How the emulator rounds (default: the --target's rules, "
         "tensorrt or ort-cuda; probe-ops: ort-cuda): standard (round each node's inputs and output, FP32 between), or "
         "rule names (docs/ARCHITECTURE.md); rules with ONNX Runtime's fusions need --target ort-cuda.", default=None),
)
ENGINE_TARGETS = _opt("engine_targets", "artifacts.engine_targets", list[str] | None,
                      "TensorRT-RTX compute capabilities to build fixed.plan for, e.g. 8.6,8.9 (default: its portable set "
                      "8.0 8.6 8.9 12.0 12.1); repeatable or comma-separated.", default=None)
ARTIFACTS = (
    _opt("engine", "artifacts.engine", bool,
         "Build the fixed engine fixed.plan from fixed.onnx: TensorRT-RTX ahead of time (no GPU needed), TensorRT for "
         "the GPU present; caches in the run directory. A model that does not build is reported, not an error."),
    ENGINE_TARGETS,
)
CAPTURE = (
    _opt("capture_samples", "capture.max_samples", int,
         "Samples the layer-by-layer capture runs on (the hardest, spread over shape groups). It measures every "
         "tensor's error statistics as the runs execute and writes only the tensors --keep-activations names; a "
         "capture the run directory's disk has no room for is refused before it starts, naming the number that fits."),
    _opt("group_mb", "capture.group_mb", float,
         "Memory budget of one capture group of layers: its FP32 values of one sample (MiB; its low-precision and "
         "local values come on top). Fewer, larger groups are faster."),
)
CAPTURE_DEVICE = (_opt("capture_device", "capture.device", str,
                       "Where the capture's runs compute: auto (default: a CUDA GPU where ONNX Runtime has one, else "
                       "the CPU), cpu, cuda. On the GPU every layer group's sessions are alive at once: a large "
                       "model's capture can take most of its memory (ISNet at 1024x1024: 65 GiB); cpu then."),)
KEEP = (_opt("keep_activations", "capture.keep", str,
             "Which full tensors activations.h5 keeps beside every tensor's error statistics and the graph outputs: "
             "summary (default: the top 3 layers of the ranking, as top:3), top:N, node or tensor names "
             "(comma-separated, with summary or top:N: top:0,NODE keeps that node alone), all (every tensor of "
             "every sample: samples x the model's activations x 4 runs), none (the file removed once the report is "
             "written; a run cut off keeps it for --resume)."),)
# diagnose's and submit's
DIAGNOSIS = (INPUTS, HELD_OUT, PRECISION, TOLERANCE, SEARCH, BACKENDS, TARGET, EMULATION, ARTIFACTS, CAPTURE,
             CAPTURE_DEVICE, KEEP)
FILE_SETTINGS = ("inputs.files", "inputs.data_loader_script", "inputs.validate_files", "inputs.reference_outputs")
# resubmit's: a job's files stay the daemon's copies
CHANGES = tuple(g for g in (tuple(o for o in group if o.setting not in FILE_SETTINGS) for group in DIAGNOSIS) if g)
RUN_DIR = (
    Opt("out", None, Path | None,
        typer.Option(None, "--out", help="Run directory (default: reports/MODEL-COMMAND-TIME).")),
    Opt("force", None, bool, typer.Option(False, "--force", help="Write into a non-empty --out (replaces our files only).")),
)

# -- help panels: `--help` shows each command's options in these groups ------------------------------------
GROUP_PANELS = ((INPUTS, "Inputs"), (HELD_OUT, "Held-out samples"), (PRECISION, "Precision and tolerance"),
                (TOLERANCE, "Precision and tolerance"), (SEARCH, "Search"), (BACKENDS, "Backends"),
                (TARGET, "Backends"), (EMULATION, "Backends"), (ARTIFACTS, "Engine"), (CAPTURE, "Capture"),
                (CAPTURE_DEVICE, "Capture"), (KEEP, "Capture"),
                (RUN_DIR, "Run directory"))
# the commands' own options, by flag ("command flag" where one flag means different things in two commands)
PANELS: dict[str, str] = {
    "--resume": "Run directory", "--rerun": "Run directory", "--out": "Run directory", "--force": "Run directory",
    "zoo fetch --force": "Zoo", "--dest": "Zoo", "zoo fetch --name": "Zoo",
    "--jobs": "Batch", "--executor": "Batch", "--only": "Batch", "serve --executor": "Workers",
    "--ray-address": "Ray", "--ray-cpus": "Ray",
    "--format": "Output", "--top": "Output", "--json": "Output", "--state": "Output",
    "--engine-targets": "Engine", "--provider": "Probe", "--threshold": "Probe",
    "--server": "Service", "--token": "Service", "--host": "Service", "--port": "Service", "--state-dir": "Service",
    "--allow-root": "Service", "--allow-loader-scripts": "Service", "--max-upload-mb": "Service",
    "--workers": "Workers", "--cache-mb": "Workers", "--lease-s": "Workers", "--keep-jobs": "Service",
    "--keep-days": "Service", "--name": "Job", "--remote": "Job", "--timeout": "Job",
}
for _group, _panel in GROUP_PANELS:
    for _o in _group:
        _o.info.rich_help_panel = _panel

# -- short help: `--help` shows these options with a brief text; `--help-all` and docs/cli.md show every option with
# its whole text (FULL_HELP) ------------------------------------------------------------------------------------------
BRIEF = {
    "inputs.files": "Your samples: files (.npz .npy .json .h5), a directory or a quoted glob ('data/*.npz'); "
                    "repeatable.",
    "inputs.data_loader_script": "FILE[:FUNC] whose FUNC() (default load_data) yields feed dicts. Runs your code.",
    "inputs.input_shapes": "NAME:[d0,d1,...]: the shape of a dynamic input of generated samples.",
    "inputs.reference_outputs": "FP32 outputs saved by polygraphy --save-outputs (default: ONNX Runtime's).",
    "inputs.validate_files": "Held-out samples (default: from 4 --inputs on, a fifth of them).",
    "precision": "fp16 or bf16.",
    "tolerance.atol": "Absolute tolerance, as polygraphy's (default 1e-5); NAME:VALUE for one output.",
    "tolerance.rtol": "Relative tolerance (default 1e-5: below FP16's rounding; 1e-3 is common).",
    "search.max_evaluations": "Stop the search after N evaluations.",
    "search.time_budget": "Seconds the search may take (the capture before it not counted).",
    "backends.backend": backend_help(brief=True),
    "backends.target": "The runtime fixed.onnx is for: tensorrt (default) or ort-cuda.",
}
FULL_HELP: dict[str, str] = {}  # an option's parameter -> its whole help, where `--help` shows a brief one
HELP_ALL = "--help-all"
for _group in (INPUTS, HELD_OUT, PRECISION, TOLERANCE, SEARCH, BACKENDS, TARGET, EMULATION, ARTIFACTS, CAPTURE, CAPTURE_DEVICE,
               KEEP):
    for _o in _group:
        if _o.setting in BRIEF:
            FULL_HELP[_o.param], _o.info.help = _o.info.help, BRIEF[_o.setting]
        else:
            _o.info.hidden = True  # in `--help-all` and docs/cli.md

_MARKDOWN = re.compile(r"([\\*<~]|&(?=#?\w+;)|(?<!\w)_|_(?!\w))")  # what Markdown takes for markup, not text


def md_literal(text: str | None) -> str | None:
    """`text` as Markdown that shows it literally (`--help` renders help texts as Markdown, docs/cli.md is Markdown):
    `*`, `<`, `_x_`, `[a](b)`, `&amp;` ... escaped, but inside `code` spans (which show every character as it is)."""
    if not text:
        return text
    parts = text.split("`")
    return "`".join(p if i % 2 else _MARKDOWN.sub(r"\\\1", p) for i, p in enumerate(parts))


_LITERAL: set[int] = set()  # the help texts made literal (once each: the OptionInfos are shared by commands)


def literal_help(app: typer.Typer) -> None:
    """Make every help text of `app`'s commands and options literal (`md_literal`), once."""
    groups = [app] + [g.typer_instance for g in app.registered_groups]
    for param, text in list(FULL_HELP.items()):
        if ("full", param) not in _LITERAL:
            FULL_HELP[param] = md_literal(text) or ""
            _LITERAL.add(("full", param))  # type: ignore[arg-type]
    for group in groups:
        for cmd in group.registered_commands:
            if id(cmd) not in _LITERAL:
                cmd.help = md_literal(cmd.help if cmd.help is not None else inspect.getdoc(cmd.callback))
                _LITERAL.add(id(cmd))
            for param in inspect.signature(cmd.callback).parameters.values():
                info = param.default
                if isinstance(info, typer.models.ParameterInfo) and id(info) not in _LITERAL:
                    info.help = md_literal(info.help)
                    _LITERAL.add(id(info))


def _show_all(ctx: typer.Context, value: bool) -> None:
    """`--help-all`: the command's help with every option and each option's whole help text."""
    if not value or ctx.resilient_parsing:
        return
    for p in ctx.command.params:
        p.hidden = False
        if p.name in FULL_HELP:
            p.help = FULL_HELP[p.name]
    text = ctx.get_help()  # typer's rich help prints itself and returns ""
    if text:
        typer.echo(text)
    raise typer.Exit()


def assign_panels(app: typer.Typer) -> list[str]:
    """Put every option of every command of `app` without a help panel into its panel from `PANELS`; the
    options left without one ("command --flag"), for a test to catch."""
    left = []
    groups = [(app, "")] + [(g.typer_instance, f"{g.name} ") for g in app.registered_groups]
    for group, prefix in groups:
        for cmd in group.registered_commands:
            name = prefix + (cmd.name or cmd.callback.__name__.replace("_", "-"))
            for param in inspect.signature(cmd.callback).parameters.values():
                info = param.default
                if not isinstance(info, typer.models.OptionInfo) or info.rich_help_panel:
                    continue
                decl = next((d for d in info.param_decls or () if d.startswith("--")), None)
                panel = PANELS.get(f"{name} {decl}") or PANELS.get(decl or "")
                if panel is None:
                    left.append(f"{name} {decl}")
                info.rich_help_panel = panel
    return left


class Options:
    """The values of a command's grouped options: RunSpec settings and run options; `given` holds the
    parameters the user typed (the others took their defaults)."""

    def __init__(self, opts: Iterable[Opt], values: dict[str, Any], given: Iterable[str] = ()):
        self._opts = list(opts)
        self._values = values
        self.given = set(given)

    def __getitem__(self, param: str) -> Any:
        return self._values[param]

    def given_settings(self) -> dict[str, Any]:
        """{setting path: value} of the setting options the user typed."""
        return {k: v for o in self._opts if o.param in self.given for k, v in o.settings_of(self._values[o.param]).items()}

    def settings(self) -> dict[str, Any]:
        """{setting path: value} of the options that set RunSpec settings (unset list options left out)."""
        return {k: v for o in self._opts for k, v in o.settings_of(self._values[o.param]).items()}

    def spec(self, model: str | Path) -> RunSpec:
        return RunSpec(model=str(model)).with_settings(self.settings())


def with_options(*groups: tuple[Opt, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the options of `groups` to a typer command; the command receives their values as `options`."""
    opts = [o for g in groups for o in g]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "options"]
        extra = [inspect.Parameter(o.param, inspect.Parameter.KEYWORD_ONLY, default=o.info, annotation=o.annotation)
                 for o in opts]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            ctx = kwargs.pop(_CTX)
            kwargs.pop(_HELP_ALL, None)
            grouped = {o.param: kwargs.pop(o.param) for o in opts}
            given = [o.param for o in opts if _typed(ctx, o.param)]
            return fn(**kwargs, options=Options(opts, grouped, given))

        if any(o.info.hidden for o in opts):
            extra.append(inspect.Parameter(_HELP_ALL, inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=typer.Option(
                False, HELP_ALL, is_eager=True, callback=_show_all, rich_help_panel=OTHER_PANEL,
                help=f"Show every option ({sum(o.info.hidden for o in opts)} more) with its whole help; docs/cli.md "
                "lists them too.")))
        args = [p for p in own if not isinstance(p.default, typer.models.OptionInfo)]  # then the groups, then its own
        params = args + extra + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p not in args] + [
            inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


_CTX = "pd_click_context"  # the parameter through which typer hands a command its context
_HELP_ALL = "pd_help_all"  # the parameter of `--help-all`
OTHER_PANEL = "Options"  # typer's panel of --help


def _typed(ctx: Any, param: str) -> bool:
    """Whether the user gave `param` (on the command line or through the environment), not its default."""
    source = ctx.get_parameter_source(param) if ctx is not None else None
    return source is not None and getattr(source, "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")
