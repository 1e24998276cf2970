"""The TensorRT commands precision-doctor prints, built in one place from one `EmitOptions` record: trtexec
for TensorRT 10 (weak typing) and 11 (strongly typed), TensorRT 11's accuracy check of the engine, polygraphy's
checks, the layer-precision list, the trtexec.sh and tensorrt_rtx.sh build scripts. Tactic sources and TF32 come
from `backends/tensorrt/flags.py` (a knob configuration's, `EmitOptions.tactics`).

Every command runs from the run directory with paths relative to it (the model is `model.onnx` there, a link or a
copy, or named.onnx; pipeline/artifacts.py). Dynamic inputs carry the shapes the samples gave them: trtexec
`--minShapes/--optShapes/--maxShapes` (the samples' range; `--shapes` for the inference run trtexec does
after a build), polygraphy `--trt-min-shapes/--trt-opt-shapes/--trt-max-shapes` (TensorRT's documentation,
"Working with Dynamic Shapes", trtexec's README Example 3; `polygraphy run --help` of 0.53.6).

Facts these commands rest on (see the report of the module's author for sources):

* trtexec (TensorRT 10) `--layerPrecisions=` / `--layerOutputTypes=` take `name:type` pairs
  joined by `,`; each pair is split at its *last* `:` (so `:` inside a name is fine), a pair with
  `'` in it is read as a quoted name (`'name':fp32`) and a `*` in a name is a wildcard. Names with
  `,`, `'`, `*` or a line break therefore cannot be written; they are reported, not emitted.
  The specs act only with `--precisionConstraints=obey|prefer`. trtexec enables TF32 by default
  (`--noTF32` turns it off); polygraphy disables it unless `--tf32` is given.
* TensorRT 11 removed `--fp16`/`--bf16` and the weak-typing options; every network is strongly
  typed and `--stronglyTyped` is "no longer needed" (TensorRT 11 migration guide), so the TRT 11
  command builds the mixed-precision `fixed.onnx` as it is.
* trtexec `--tacticSources=-CUBLAS,-CUDNN` removes sources from the defaults; polygraphy
  `--tactic-sources A B` enables exactly the listed sources.
* polygraphy `--layer-precisions name:float32 ...` takes one argument per layer, split at the
  last `:`; `--precision-constraints obey`; `--strongly-typed`; `--check-error-stat`.
* TF32 is on by default in trtexec (10 and 11) and in TensorRT-RTX's builder config, so every
  trtexec line here that builds FP32 layers says `--noTF32` (weak and strongly typed alike). polygraphy
  clears TF32 for TensorRT, but with `POLYGRAPHY_USE_TENSORRT_RTX=1` its config leaves it on (seen
  with polygraphy 0.53.6: "Flags | [TF32, STRONGLY_TYPED]"), so the TensorRT-RTX build script clears
  it with a `--trt-config-postprocess-script`.
* TensorRT-RTX (PyPI ships the library, not trtexec) builds with `polygraphy convert` and
  `POLYGRAPHY_USE_TENSORRT_RTX=1`, ahead of time for `--compute-capabilities`, no GPU needed.
* TensorRT 11's trtexec checks an engine against reference outputs itself (samples/trtexec/README.md of the
  TensorRT 11 sources, "7.5: Accuracy-aware tuning", read 2026-11-26 in the kevinch-nv/TensorRT copy at
  ca754f7; DESIGN.md's facts of 2026-11-26): `--loadInputs=name:file` and `--loadRefOutputs=name:file` take
  raw binary files (`numpy.ndarray.tofile`, the same `name:file` form), `--accuracyThreshold` is required with
  `--loadRefOutputs`, `--refPair=N` groups one input set with one reference set (several pairs),
  `--accuracyAlgorithm=l0` (the default) is the fraction of elements outside `atol + rtol * |ref|`, with
  `--atol`/`--rtol` (default 1e-5). That rule passes an element up to 2x further off than polygraphy's
  elemwise check (an element fails only when both `|d| > atol` and `|d|/|ref| > rtol`), and trtexec has one
  atol/rtol for every output: both are said in the emitted comment. Not run: no TensorRT 11 here.
Model file: pass the file whose node names are the report's (`toolnames.model_for_tools`: the
original, or `named.onnx` when precision-doctor had to name nodes): TensorRT calls an unnamed node
`node_of_<output>`, so names written for another file match nothing. Nodes fixed.onnx keeps FP32 beyond the answer
(`EmitOptions.forced`, e.g. `Range`: no FP16 kernel in ONNX Runtime) go into the weak-typing lists too (and
AutoCast's, results/emit.py), so every tool builds what fixed.onnx holds.

Input names: every dynamic input gets its shape in every command, or the command is not given: trtexec's
`name:value` lists cannot carry a name with `'` (nor a line break), polygraphy's arguments an empty name or one that
starts with `-` (read as an option). Where a dynamic input's name is such a name, the command is a comment that says
so (`# Not possible: ...`), and a script exits 2 with that line instead of building without the input's shape
(`unwritable_inputs`).

Layer names: pass the TensorRT layer names of a build (`TrtEngineRunner.layers`) when known:
TensorRT names a node's first layer after the node and further layers `<node>_<n>`, so ONNX
node names alone miss the extra layers of nodes that become several layers. The model path given
to the TRT 10 commands must be the file whose node names those are.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from precision_doctor.backends.knobs import KnobConfig
from precision_doctor.backends.tensorrt import flags
from precision_doctor.backends.tensorrt.flags import TacticChange
from precision_doctor.backends.tensorrt.tactics import TACTIC_SOURCES_TRT11
from precision_doctor.graph.names import shown
from precision_doctor.graph.shapes import InputShape, dims_text
from precision_doctor.measure.tolerance import Tolerance
from precision_doctor.words import counted

PRECISION_FLAGS = {"fp16": "--fp16", "bf16": "--bf16"}
# trtexec cannot express these in a layer name (see the module docstring).
TRTEXEC_BAD_CHARS = (",", "'", "*", "\n", "\r")
# TensorRT-RTX 1.7's portable targets (what its builder targets when none are named; 7.5 only when named).
PORTABLE_TARGETS = ("8.0", "8.6", "8.9", "12.0", "12.1")


def check_precision(precision: str) -> None:
    """ValueError unless `precision` is one the commands build (fp16, bf16)."""
    if precision not in PRECISION_FLAGS:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_FLAGS)}, got {precision!r}")


def unique(names: Iterable[str]) -> list[str]:
    """`names` without duplicates, in order."""
    return list(dict.fromkeys(names))


def unexpressible_layer_names(names: Iterable[str], tool: str = "trtexec") -> list[str]:
    """Names a tool's layer-precision syntax cannot carry. trtexec: `,` `'` `*` or a line break
    (or empty). polygraphy (one argument per layer, split at the last `:`): an empty name, one
    that starts with `-` (read as an option) or has a line break."""
    bad = []
    for n in unique(names):
        if tool == "trtexec":
            if not n or any(c in n for c in TRTEXEC_BAD_CHARS):
                bad.append(n)
        elif tool == "polygraphy":
            if not n or n.startswith("-") or "\n" in n or "\r" in n:
                bad.append(n)
        else:
            raise ValueError(f"unknown tool {tool!r}")
    return bad


def split_layer_names(names: Iterable[str], tool: str = "trtexec") -> tuple[list[str], list[str]]:
    """(expressible names, unexpressible names), each in the given order without duplicates."""
    names = unique(names)
    bad = set(unexpressible_layer_names(names, tool))
    return [n for n in names if n not in bad], [n for n in names if n in bad]


def layer_precisions_spec(names: Iterable[str], precision: str = "fp32") -> str:
    """trtexec's `--layerPrecisions` value: `n1:fp32,n2:fp32` (unexpressible names left out:
    get them from `unexpressible_layer_names`)."""
    ok, _ = split_layer_names(names)
    return ",".join(f"{n}:{precision}" for n in ok)


def layer_output_types_spec(names: Iterable[str], precision: str = "fp32") -> str:
    """trtexec's `--layerOutputTypes` value; one type applies to every output of the layer."""
    return layer_precisions_spec(names, precision)


def shell_line(args: Sequence[str], multiline: bool = False) -> str:
    """One shell command line, every argument quoted; `multiline`: one argument per continued line."""
    quoted = [shlex.quote(a) for a in args]
    if not multiline or len(quoted) <= 2:
        return " ".join(quoted)
    return (" \\\n    ").join([" ".join(quoted[:2]), *quoted[2:]])


def _trtexec_name(name: str) -> str | None:
    """An input name in trtexec's `name:value` lists: quoted ('name') where it holds `:` or `,`; None where it
    cannot be written (a `'` or a line break, or no name)."""
    if not name or any(c in name for c in "'\n\r"):
        return None
    return f"'{name}'" if any(c in name for c in ":, ") else name


def _polygraphy_name_ok(name: str) -> bool:
    """Whether polygraphy's `NAME:[dims]` arguments carry `name` (split at the last `:`; a leading `-` is an option)."""
    return bool(name) and not name.startswith("-")


def unwritable_inputs(shapes: Sequence[InputShape], tool: str) -> list[str]:
    """The dynamic inputs whose names `tool` ("trtexec" or "polygraphy") cannot be given a shape for: the commands
    of that tool are then refused (`not_possible`), never emitted without the input's shape."""
    ok = (lambda n: _trtexec_name(n) is not None) if tool == "trtexec" else _polygraphy_name_ok
    return [s.name for s in shapes if s.dynamic and not ok(s.name)]


def not_possible(tool: str, names: Sequence[str]) -> str:
    """The comment that stands for a command `tool` cannot be given the dynamic inputs `names` in."""
    why = "its name:shape lists cannot carry a name with ' or a line break" if tool == "trtexec" else \
        "its NAME:[dims] arguments cannot carry an empty name or one that starts with -"
    other = "polygraphy (tensorrt_rtx.sh, the polygraphy commands)" if tool == "trtexec" else "trtexec"
    inputs = "input" if len(names) == 1 else "inputs"
    return (f"# Not possible: {tool} cannot be given the shape of the dynamic {inputs} {', '.join(repr(n) for n in names)} "
            f"({why}); use {other}, or rename the {inputs} in the model.")


def _refused_script(header: list[str], tool: str, names: Sequence[str]) -> str:
    """A script that says why it cannot build, and exits 2."""
    line = not_possible(tool, names)
    return "\n".join([*header, line, f"echo {shlex.quote(line.removeprefix('# '))} >&2", "exit 2"]) + "\n"


def trtexec_shape_args(shapes: Sequence[InputShape] = ()) -> list[str]:
    """trtexec's shape flags for the dynamic inputs: `--shapes` (the shape trtexec builds for and runs after the
    build: the most common one), with `--minShapes/--optShapes/--maxShapes` where the samples' shapes vary (the
    profile then spans their range). A ValueError where a dynamic input's name cannot be written (the callers
    refuse the command first: `unwritable_inputs`)."""
    if bad := unwritable_inputs(shapes, "trtexec"):
        raise ValueError(not_possible("trtexec", bad))
    dynamic = [s for s in shapes if s.dynamic]
    if not dynamic:
        return []

    def spec(which: str) -> str:
        return ",".join(f"{_trtexec_name(s.name)}:{dims_text(getattr(s, which))}" for s in dynamic)

    ranges = [f"--minShapes={spec('min')}", f"--optShapes={spec('opt')}", f"--maxShapes={spec('max')}"]
    return [*(ranges if any(s.varies for s in dynamic) else []), f"--shapes={spec('opt')}"]


def polygraphy_shape_args(shapes: Sequence[InputShape] = ()) -> list[str]:
    """polygraphy's TensorRT profile for the dynamic inputs (`--trt-min-shapes name:[d0,d1] ...`); a ValueError where
    a dynamic input's name cannot be written (the callers refuse the command first: `unwritable_inputs`)."""
    if bad := unwritable_inputs(shapes, "polygraphy"):
        raise ValueError(not_possible("polygraphy", bad))
    dynamic = [s for s in shapes if s.dynamic]
    if not dynamic:
        return []
    out: list[str] = []
    for which in ("min", "opt", "max"):
        out += [f"--trt-{which}-shapes", *(f"{s.name}:[{dims_text(getattr(s, which), ',')}]" for s in dynamic)]
    return out


def forced_comment_lines(forced: Mapping[str, str] | None, prefix: str = "# ") -> list[str]:
    """Comment lines naming the nodes fixed.onnx keeps FP32 beyond the answer, with why (names and reasons come
    from the model: escaped, so that no line break ends the comment)."""
    if not forced:
        return []
    lines = [f"{prefix}fixed.onnx also keeps {counted(len(forced), 'node')} in FP32 beyond the answer (listed with it here):"]
    lines += [f"{prefix}  {shown(name)}: {shown(why)}" for name, why in forced.items()]
    return lines


def answer_lines(options: EmitOptions, prefix: str = "# ") -> list[str]:
    """Comment lines saying which runtime the answer holds for (`EmitOptions.answer_for`), escaped to one line each."""
    return [f"{prefix}{shown(line)}" for line in options.answer_for]


def with_forced(names: Sequence[str], forced: Mapping[str, str] | None) -> list[str]:
    """The answer's names followed by the forced FP32 nodes (no duplicates)."""
    return unique([*names, *(forced or {})])


@dataclass(frozen=True)
class EmitOptions:
    """What every command of a run shares: the precision, the tolerance its checks use (polygraphy's defaults
    unless given), the run directory's files they read and write (`inputs`, `reference_outputs`, `block_list`,
    `engine`, `timing_cache`), the inputs' shapes as the samples ran (dynamic ones get shape flags), the nodes
    fixed.onnx keeps FP32 beyond the answer, with why (`forced`: `graph.mixed.forced_fp32_nodes`), TensorRT-RTX's
    targets, and the knob configuration the answer was found under (`knob`: a TensorRT one changes the tactic
    sources and TF32 of every TensorRT command, an ONNX Runtime CUDA one adds its provider options) with tactic
    sources to avoid besides (`avoid`); `answer_for`: the lines saying which runtime the answer holds for (and how
    it fared on the other one), written at the top of every script and list (`answer_lines`)."""

    precision: str = "fp16"
    tolerance: Tolerance = field(default_factory=Tolerance)
    inputs: str = "inputs.json"
    reference_outputs: str = "reference_outputs.json"
    block_list: str = "ort_node_block_list.json"
    engine: str = "fixed.plan"
    timing_cache: str | None = "timing.cache"
    shapes: Sequence[InputShape] = ()
    forced: Mapping[str, str] = field(default_factory=dict)
    compute_capabilities: Sequence[str] = PORTABLE_TARGETS
    knob: KnobConfig | None = None
    avoid: Sequence[str] = ()
    answer_for: Sequence[str] = ()

    def __post_init__(self):
        check_precision(self.precision)

    @property
    def tactics(self) -> TacticChange:
        """The tactic sources to avoid and add, and whether TF32 stays on (`flags.TacticChange`)."""
        return TacticChange.of(self.knob, self.avoid)


def _trtexec_trt10_args(model: str, layers: Sequence[str], o: EmitOptions) -> list[str]:
    t = o.tactics
    args = ["trtexec", f"--onnx={model}", *trtexec_shape_args(o.shapes), PRECISION_FLAGS[o.precision]]
    args += flags.trtexec_tf32_args(t.tf32)
    spec = layer_precisions_spec(layers)
    if spec:
        args += [
            "--precisionConstraints=obey",
            f"--layerPrecisions={spec}",
            f"--layerOutputTypes={layer_output_types_spec(layers)}",
        ]
    return args + _build_tail_args(o, 10)


def _build_tail_args(o: EmitOptions, trt_major: int) -> list[str]:
    """Tactic sources to avoid or add, the engine to save and the timing cache: common to both builds."""
    t = o.tactics
    args = [*flags.trtexec_tactic_args(t.avoid, trt_major, t.add), f"--saveEngine={o.engine}"]
    if o.timing_cache:
        args.append(f"--timingCacheFile={o.timing_cache}")
    return args


def trtexec_trt10(model: str, layers: Sequence[str], options: EmitOptions = EmitOptions(), *,
                  multiline: bool = False) -> str:
    """TensorRT 10 (weak typing): the original model in FP16/BF16, `layers` forced to FP32 with
    obeyed precision constraints. `layers`: TensorRT layer names, else the ONNX node names."""
    if bad := unwritable_inputs(options.shapes, "trtexec"):
        return not_possible("trtexec", bad)
    return shell_line(_trtexec_trt10_args(model, layers, options), multiline)


def _trtexec_strong_args(fixed_onnx: str, o: EmitOptions, strongly_typed_flag: bool, trt_major: int) -> list[str]:
    args = ["trtexec", f"--onnx={fixed_onnx}", *trtexec_shape_args(o.shapes)]
    if strongly_typed_flag:
        args.append("--stronglyTyped")
    args += flags.trtexec_tf32_args(o.tactics.tf32)
    return args + _build_tail_args(o, trt_major)


def trtexec_trt11(fixed_onnx: str, options: EmitOptions = EmitOptions(), *, strongly_typed_flag: bool = False,
                  multiline: bool = False) -> str:
    """TensorRT 11 (always strongly typed): build the mixed-precision graph as it is. Set
    `strongly_typed_flag` to add `--stronglyTyped` (needed on TensorRT 10.x, where strong typing
    is opt-in; documented as no longer needed in 11). `--noTF32` keeps the FP32 islands in FP32
    (TF32 is on by default in 11.x) unless the knob configuration turns TF32 on."""
    if bad := unwritable_inputs(options.shapes, "trtexec"):
        return not_possible("trtexec", bad)
    return shell_line(_trtexec_strong_args(fixed_onnx, options, strongly_typed_flag, 11), multiline)


def _tolerance_args(tolerance: Tolerance) -> list[str]:
    """polygraphy's tolerance flags: `--atol 0.001 out:0.01` (a value for every output, then per output, one
    flag with several values: polygraphy reads the flag's values as one list), `--rtol`, `--check-error-stat`."""
    def values(kind: str) -> list[str]:
        return [repr(float(getattr(tolerance, kind))),
                *(f"{n}:{v!r}" for n, v in tolerance.per_output(kind).items())]

    return ["--atol", *values("atol"), "--rtol", *values("rtol"), "--check-error-stat", tolerance.check_error_stat]


def polygraphy_verify(fixed_onnx: str, options: EmitOptions = EmitOptions(), *, strongly_typed: bool = True,
                      multiline: bool = False) -> str:
    """The fixed (mixed-precision) model on TensorRT, strongly typed, checked against the run's FP32 reference
    outputs (reference_outputs.json, of the samples in inputs.json). (Running `--onnxrt` on fixed.onnx
    checks the same files on ONNX Runtime: the plumbing, not TensorRT's FP16.)"""
    o, t = options, options.tactics
    if bad := unwritable_inputs(o.shapes, "polygraphy"):
        return not_possible("polygraphy", bad)
    args = ["polygraphy", "run", fixed_onnx, "--trt"]
    if strongly_typed:
        args.append("--strongly-typed")
    args += flags.polygraphy_tactic_args(t.avoid, t.add, t.tf32)
    args += polygraphy_shape_args(o.shapes)
    args += ["--load-inputs", o.inputs, "--load-outputs", o.reference_outputs, *_tolerance_args(o.tolerance)]
    return shell_line(args, multiline)


def polygraphy_ort_cuda(fixed_onnx: str, options: EmitOptions = EmitOptions(), *, multiline: bool = False) -> str:
    """The fixed model on ONNX Runtime's CUDA provider (what `--target ort-cuda` answers for), checked against the run's
    FP32 reference outputs at the tolerance."""
    o = options
    if bad := unwritable_inputs(o.shapes, "polygraphy"):
        return not_possible("polygraphy", bad)
    args = ["polygraphy", "run", fixed_onnx, "--onnxrt", "--providers", "cuda"]
    args += ["--load-inputs", o.inputs, "--load-outputs", o.reference_outputs, *_tolerance_args(o.tolerance)]
    return shell_line(args, multiline)


def polygraphy_trt10(model: str, layers: Sequence[str], options: EmitOptions = EmitOptions(), *,
                     multiline: bool = False) -> str:
    """TensorRT 10 (weak typing) check in one command: the original model on TensorRT in FP16/BF16 with
    `layers` in FP32 (obeyed), against the run's FP32 reference outputs."""
    o, t = options, options.tactics
    if bad := unwritable_inputs(o.shapes, "polygraphy"):
        return not_possible("polygraphy", bad)
    ok, _ = split_layer_names(layers, "polygraphy")
    args = ["polygraphy", "run", model, "--trt", PRECISION_FLAGS[o.precision]]
    if ok:
        args += ["--precision-constraints", "obey", "--layer-precisions", *(f"{n}:float32" for n in ok)]
    args += flags.polygraphy_tactic_args(t.avoid, t.add, t.tf32)
    args += polygraphy_shape_args(o.shapes)
    args += ["--load-inputs", o.inputs, "--load-outputs", o.reference_outputs, *_tolerance_args(o.tolerance)]
    return shell_line(args, multiline)


@dataclass(frozen=True)
class IOPair:
    """One sample for trtexec's accuracy check: each input's and each output's raw file (relative to the run
    directory) and the shapes of the dynamic inputs in it."""

    inputs: dict[str, str]
    outputs: dict[str, str]
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def under(self, prefix: str) -> IOPair:
        """The same files named from another folder (`prefix`: "../" from a folder of the run directory)."""
        if not prefix:
            return self
        return IOPair({k: prefix + v for k, v in self.inputs.items()}, {k: prefix + v for k, v in self.outputs.items()},
                      self.shapes)


def trtexec_trt11_check(pairs: Sequence[IOPair], options: EmitOptions = EmitOptions()) -> str:
    """TensorRT 11: run the engine on the samples of `pairs` and check its outputs against the references with
    trtexec's l0 rule (one command per input shape; `--refPair` where a command checks several samples).
    Comment lines first say how the check differs from the report's."""
    tolerance, engine = options.tolerance, options.engine
    lines = ["# trtexec's l0 check passes an element when |out - ref| <= atol + rtol * |ref|: up to 2x looser than",
             "# polygraphy's elemwise rule, which precision-doctor and its polygraphy check use."]
    if pairs:
        lines.append(f"# It checks the {len(pairs)} samples of trtexec_io/: the first of inputs.json's, at most 4 "
                     "(polygraphy's check runs every one).")
    own = tolerance.outputs_named
    if own:
        lines.append(f"# trtexec has one --atol/--rtol for every output: the plain ones are used here, not the ones "
                     f"for {', '.join(shown(n) for n in own)}.")
    if tolerance.check_error_stat != "elemwise" or tolerance.cosine_floor is not None:
        lines.append(f"# The run checked with --check-error-stat {tolerance.check_error_stat}"
                     + (f" and a cosine floor {tolerance.cosine_floor:g}" if tolerance.cosine_floor is not None else "")
                     + ": l0 counts elements instead.")
    bad = sorted({n for p in pairs for n in [*p.inputs, *p.outputs] if _trtexec_name(n) is None})
    if bad:
        names = "name" if len(bad) == 1 else "names"
        return "\n".join([*lines, f"# Not possible: trtexec's name:file lists cannot carry the {names} "
                                   f"{', '.join(shown(n) for n in bad)}."])
    groups: dict[tuple, list[IOPair]] = {}
    for pair in pairs:
        groups.setdefault(tuple(sorted(pair.shapes.items())), []).append(pair)
    for key, group in groups.items():
        args = ["trtexec", f"--loadEngine={engine}"]
        if key:
            args.append("--shapes=" + ",".join(f"{_trtexec_name(n)}:{dims_text(d)}" for n, d in key))
        for i, pair in enumerate(group):
            if len(group) > 1:
                args.append(f"--refPair={i}")
            args.append("--loadInputs=" + ",".join(f"{_trtexec_name(n)}:{f}" for n, f in pair.inputs.items()))
            args.append("--loadRefOutputs=" + ",".join(f"{_trtexec_name(n)}:{f}" for n, f in pair.outputs.items()))
        # the threshold is a share of failing elements: any positive value below one element in the outputs
        args += ["--accuracyAlgorithm=l0", f"--atol={tolerance.atol!r}", f"--rtol={tolerance.rtol!r}",
                 "--accuracyThreshold=1e-12"]
        lines.append(shell_line(args))
    return "\n".join(lines)


def layer_precisions_file(layers: Sequence[str], options: EmitOptions = EmitOptions(), *, from_build: bool = False) -> str:
    """layer_precisions.txt: a header of `#` lines, then one `name:fp32` per line (the forced FP32
    nodes after the answer's, named in the header)."""
    precision, forced = options.precision, options.forced
    ok, bad = split_layer_names(with_forced(layers, forced))
    source = (
        "TensorRT layer names from a build"
        if from_build
        else "ONNX node names (TensorRT names a node's first layer after it; extra layers `<node>_<n>` are not listed)"
    )
    lines = [
        f"# precision-doctor: layers to keep in FP32 when building in {precision.upper()} with TensorRT 10.",
        *answer_lines(options),
        f"# Names: {source}.",
        "# trtexec: --precisionConstraints=obey \\",
        "#   --layerPrecisions=\"$(grep -v '^#' layer_precisions.txt | paste -sd, -)\" \\",
        "#   --layerOutputTypes=\"$(grep -v '^#' layer_precisions.txt | paste -sd, -)\"",
        "# TensorRT 11 has no layer precisions: build fixed.onnx (strongly typed) instead.",
        *forced_comment_lines(forced),
    ]
    for n in bad:
        lines.append(f"# NOT EXPRESSIBLE in trtexec's syntax (contains , ' * or a line break): {n!r}")
    lines += [f"{n}:fp32" for n in ok]
    return "\n".join(lines) + "\n"


# trtexec.sh's detection of the TensorRT major version: $TRT_MAJOR, else trtexec's banner, else the Python package.
_DETECT_TRT_MAJOR = (
    "trt_major() {",
    '  if [[ -n "${TRT_MAJOR:-}" ]]; then echo "${TRT_MAJOR}"; return; fi',
    "  local v",
    "  # trtexec prints a banner like '&&&& RUNNING TensorRT.trtexec [TensorRT v101401]' (10.14.1).",
    "  v=\"$(trtexec --version 2>&1 | grep -o 'TensorRT v[0-9][0-9]*' | head -n 1 | sed 's/TensorRT v//' || true)\"",
    '  if [[ -n "$v" ]]; then',
    '    if (( ${#v} >= 6 )); then echo "${v:0:2}"; else echo "${v:0:1}"; fi',
    "    return",
    "  fi",
    "  python3 -c 'import tensorrt; print(tensorrt.__version__.split(\".\")[0])' 2>/dev/null || true",
    "}",
    "",
    'major="$(trt_major)"',
    'if [[ -z "$major" ]]; then',
    '  echo "cannot tell the TensorRT version: set TRT_MAJOR=10 or TRT_MAJOR=11" >&2',
    "  exit 2",
    "fi",
    "",
)


def _trtexec_script_header(precision: str, what: str, tf32: bool, forced: Mapping[str, str] | None,
                           answer: Sequence[str] = ()) -> list[str]:
    """trtexec.sh's first lines: what it builds in which precision, which runtime the answer is for, TF32, the forced
    FP32 nodes, strict bash."""
    return [
        "#!/usr/bin/env bash",
        "# Generated by precision-doctor: build the fixed TensorRT engine.",
        *answer,
        f"# Precision {precision.upper()} everywhere except {what} kept in FP32.",
        "# TensorRT 10: weak typing. The original model is built with the precision flag and the",
        "#   FP32 layers pinned by --layerPrecisions/--layerOutputTypes under",
        "#   --precisionConstraints=obey" + ("." if tf32 else "; --noTF32 keeps those FP32 layers in true FP32."),
        "# TensorRT 11: strongly typed only (no --fp16, no layer precisions): the mixed-precision",
        "#   fixed.onnx carries the precisions itself and is built as it is.",
        "# Set TRT_MAJOR=10 or 11 to skip detection; PD_STRONGLY_TYPED=1 builds fixed.onnx on 10.x.",
        "# Strongly typed builds say --noTF32 too: TF32 is on by default and would round the FP32 islands."
        if not tf32 else "# TF32 stays on (the knob configuration found): FP32 layers multiply with 10-bit mantissas.",
        *forced_comment_lines(forced),
        "set -euo pipefail",
        'cd "$(dirname "${BASH_SOURCE[0]}")"',
        "",
    ]


def trtexec_script(model: str, fixed_onnx: str, layers: Sequence[str], options: EmitOptions = EmitOptions(), *,
                   nodes: Sequence[str] | None = None) -> str:
    """trtexec.sh: picks the TensorRT 10 or 11 build by `$TRT_MAJOR`, else by the banner of
    `trtexec --version`, else by `python3 -c 'import tensorrt'`. Relative paths are relative to
    the script's folder. On TensorRT 10, `PD_STRONGLY_TYPED=1` builds fixed.onnx instead. The nodes fixed.onnx keeps
    FP32 beyond the answer (`options.forced`) are pinned too on TensorRT 10 and named in the header; `nodes`: the
    answer's ONNX nodes, counted in the header."""
    o, t = options, options.tactics
    layers = with_forced(layers, o.forced)
    ok, bad = split_layer_names(layers)
    n_nodes = len(unique(nodes)) if nodes is not None else None
    what = counted(len(ok) + len(bad), "layer") + (f" from {counted(n_nodes, 'ONNX node')}" if n_nodes is not None else "")
    if unwritable := unwritable_inputs(o.shapes, "trtexec"):
        return _refused_script(_trtexec_script_header(o.precision, what, t.tf32, o.forced), "trtexec", unwritable)
    weak = shell_line(_trtexec_trt10_args(model, layers, o), True)
    strong10 = shell_line(_trtexec_strong_args(fixed_onnx, o, True, 10), True)
    strong11 = shell_line(_trtexec_strong_args(fixed_onnx, o, False, 11), True)
    dropped11 = [s for s in [*flags.source_names(t.avoid), *flags.source_names(t.add)] if s not in TACTIC_SOURCES_TRT11]

    def indent(text: str) -> str:
        return "\n".join("  " + ln if ln else ln for ln in text.splitlines())

    out = _trtexec_script_header(o.precision, what, t.tf32, o.forced, answer_lines(o))
    if bad:
        out.append("# WARNING: layer names trtexec cannot express (contain , ' * or a line break); the")
        out.append("# TensorRT 10 command below leaves them out. Prefer PD_STRONGLY_TYPED=1 (fixed.onnx).")
        out += [f"#   {n!r}" for n in bad]
        out.append("")
    out += [
        *_DETECT_TRT_MAJOR,
        "if (( major >= 11 )); then",
        "  # TensorRT 11+: the network is strongly typed; fixed.onnx holds the FP32 islands.",
    ]
    if dropped11:
        out.append(f"  # (tactic sources {', '.join(dropped11)} no longer exist in TensorRT 11: not passed)")
    out += [
        indent(strong11),
        'elif [[ "${PD_STRONGLY_TYPED:-0}" == "1" ]]; then',
        "  # TensorRT 10.x, strongly typed: the same mixed-precision graph, opted in with --stronglyTyped.",
        indent(strong10),
        "else",
    ]
    if bad:
        out.append(f'  echo "warning: {counted(len(bad), "FP32 layer name")} cannot be passed to trtexec; see the header" >&2')
    out += [
        "  # TensorRT 10.x, weak typing: the original model, FP32 layers pinned.",
        indent(weak),
        "fi",
    ]
    return "\n".join(out) + "\n"


# polygraphy's TensorRT-RTX config leaves TF32 on; this postprocess function clears it (for either library).
NO_TF32_POSTPROCESS = """from polygraphy.mod.trt_importer import lazy_import_trt


def postprocess_config(builder, network, config):
    config.clear_flag(lazy_import_trt().BuilderFlag.TF32)
"""


def tensorrt_rtx_script(fixed_onnx: str, options: EmitOptions = EmitOptions(), *,
                        input_shapes: Mapping[str, Sequence[int]] | None = None) -> str:
    """tensorrt_rtx.sh: build the fixed engine with TensorRT-RTX through `polygraphy convert` (what PyPI's
    `tensorrt-rtx` and `polygraphy` give; no GPU needed), strongly typed, TF32 off, for the compute
    capabilities of `options.compute_capabilities` (`PD_COMPUTE_CAPABILITIES` overrides them when set);
    `input_shapes`: fixed shapes for inputs (`--input-shapes`)."""
    o, t = options, options.tactics
    tf32, engine = t.tf32, o.engine
    fixed_names = [name for name in (input_shapes or {}) if not _polygraphy_name_ok(name)]
    if bad := unwritable_inputs(o.shapes, "polygraphy") + fixed_names:
        header = ["#!/usr/bin/env bash", "# Generated by precision-doctor: build the fixed engine with TensorRT-RTX.",
                  "set -euo pipefail"]
        return _refused_script(header, "polygraphy", bad)
    ccs = " ".join(o.compute_capabilities)
    args = ["polygraphy", "convert", fixed_onnx, "--convert-to", "trt", "--strongly-typed"]
    args += flags.polygraphy_tactic_args(t.avoid, t.add, defaults=TACTIC_SOURCES_TRT11, available=TACTIC_SOURCES_TRT11)
    for name, shape in (input_shapes or {}).items():
        args += ["--input-shapes", f"{name}:[{','.join(str(int(d)) for d in shape)}]"]
    args += polygraphy_shape_args(o.shapes)
    cmd = " ".join(shlex.quote(a) for a in args)
    tf32_text = (["# fixed.onnx holds the precisions (strongly typed); TF32 stays on (the knob configuration found)."] if tf32
                 else ["# fixed.onnx holds the precisions (strongly typed); TF32 is cleared, since polygraphy's TensorRT-RTX",
                       "# config leaves it on and it would round the FP32 islands."])
    out = [
        "#!/usr/bin/env bash",
        "# Generated by precision-doctor: build the fixed engine with TensorRT-RTX, ahead of time (no GPU needed).",
        *answer_lines(o),
        *tf32_text,
        "# Needs: pip install polygraphy tensorrt-rtx. The engine runs on GPUs of the compute capabilities",
        "# it is built for (TensorRT-RTX runs none of compute capability 9.0).",
        *forced_comment_lines(o.forced),
        "set -euo pipefail",
        'cd "$(dirname "${BASH_SOURCE[0]}")"',
    ]
    out.append(f"default_ccs={shlex.quote(ccs)}")
    if tf32:
        out += [
            'read -r -a ccs <<< "${PD_COMPUTE_CAPABILITIES:-$default_ccs}"',
            f'POLYGRAPHY_USE_TENSORRT_RTX=1 {cmd} --compute-capabilities "${{ccs[@]}}" -o {shlex.quote(engine)}',
        ]
        return "\n".join(out) + "\n"
    out += [
        'tmp="$(mktemp -d)"',
        "trap 'rm -rf \"$tmp\"' EXIT",
        "cat > \"$tmp/pd_no_tf32.py\" <<'PY'",
        NO_TF32_POSTPROCESS.rstrip("\n"),
        "PY",
        'read -r -a ccs <<< "${PD_COMPUTE_CAPABILITIES:-$default_ccs}"',
        f'POLYGRAPHY_USE_TENSORRT_RTX=1 {cmd} --compute-capabilities "${{ccs[@]}}" \\',
        f'    --trt-config-postprocess-script "$tmp/pd_no_tf32.py" -o {shlex.quote(engine)}',
    ]
    return "\n".join(out) + "\n"
