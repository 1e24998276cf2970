"""FP32 reference outputs from a file: polygraphy's `--save-outputs` JSON (`RunResults`), used instead of
ONNX Runtime's FP32 outputs (`inputs.reference_outputs`).

The file holds one runner's outputs for each sample, in the order of the samples of `inputs.files` and
then `inputs.validate_files` (polygraphy run --load-inputs of the same samples writes it so). Every model
output must be there, with its static dimensions; other tensors in the file are ignored. Every problem
is one line naming the file (and the iteration, the output).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from precision_doctor.data.arrayfiles import read_polygraphy_json
from precision_doctor.data.input_spec import MAX_ELEMENTS
from precision_doctor.errors import SpecError, UserError
from precision_doctor.graph.model import Model
from precision_doctor.words import counted

SETTING = "inputs.reference_outputs"
Outputs = dict[str, np.ndarray]


def _refuse(path: Path | str, what: str) -> SpecError:
    return SpecError(SETTING, f"{{{SETTING}}} {path}: {what}")


def load_reference_outputs(path: str | Path, model: Model) -> list[Outputs]:
    """The reference outputs of each sample (the model's outputs only, as stored), checked against the
    model: every output present, floating where the model's is, static dimensions equal."""
    path = Path(path)
    if not path.is_file():
        raise _refuse(path, "not found" if not path.exists() else "is not a file")
    runs = _read(path, model)
    if len(runs) != 1:
        names = ", ".join(str(n) for n, _ in runs) or "none"
        raise _refuse(path, f"holds the results of {len(runs)} runners ({names}); save one runner's outputs "
                            "(polygraphy run --onnxrt --save-outputs FILE)")
    runner, iterations = runs[0]
    if not iterations:
        raise _refuse(path, f"runner '{runner}' holds no iterations")
    return [_outputs(path, i, it, model) for i, it in enumerate(iterations)]


def check_count(path: str | Path, references: list[Outputs], samples: int, what: str) -> None:
    """Refuse a file whose iterations do not pair with the samples one to one."""
    if len(references) != samples:
        raise _refuse(path, f"holds {counted(len(references), 'iteration')} but {what} give "
                            f"{counted(samples, 'sample')}; save the outputs of exactly these samples (polygraphy run "
                            "MODEL --onnxrt --load-inputs INPUTS --save-outputs FILE)")


def check_shapes(path: str | Path, references: list[Outputs], computed: Outputs) -> None:
    """Refuse references whose shapes differ from the model's outputs as ONNX Runtime computes them for the
    first sample (`computed`)."""
    for name, arr in references[0].items():
        if name in computed and tuple(np.shape(computed[name])) != tuple(arr.shape):
            raise _refuse(path, f"output '{name}' has shape {list(arr.shape)} in the file, but the model computes "
                                f"{list(np.shape(computed[name]))} for the first sample: are these the outputs of "
                                "these inputs?")


def _read(path: Path, model: Model) -> list[tuple[str, list]]:
    from polygraphy.logger import G_LOGGER

    G_LOGGER.module_severity = G_LOGGER.ERROR  # polygraphy's own progress lines are noise here
    try:
        from polygraphy.comparator import RunResults

        limit = _largest_output(model)
        data = read_polygraphy_json(path, limit, where=str(path),
                                    holder="the model's largest output" if limit < MAX_ELEMENTS else "")
    except UserError as exc:  # arrays refused before reading (data/arrayfiles.py)
        raise SpecError(SETTING, f"{{{SETTING}}} {exc}") from None
    except Exception as exc:  # noqa: BLE001 (polygraphy raises many kinds for a bad file)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:150]
        raise _refuse(path, f"is not a polygraphy outputs file ({first}); write one with polygraphy run "
                            "--save-outputs") from None
    if not isinstance(data, RunResults):
        raise _refuse(path, f"is not a polygraphy outputs file (it holds a {type(data).__name__}, not RunResults); "
                            "write one with polygraphy run --save-outputs")
    return [(str(name), list(its)) for name, its in data.items()]


def _largest_output(model: Model) -> int:
    """The most elements one array of the file may hold: the largest output when every output's shape is
    static, else `MAX_ELEMENTS` (checked before an array is read; its shape is checked after)."""
    shapes = [model.tensor_shapes.get(o) for o in model.outputs]
    if any(s is None or any(d is None for d in s) for s in shapes):
        return MAX_ELEMENTS
    return max((math.prod(s) for s in shapes if s is not None), default=0)


def _outputs(path: Path, index: int, iteration, model: Model) -> Outputs:
    where = f"iteration {index}"
    try:
        names = list(iteration.keys())
    except AttributeError:
        raise _refuse(path, f"{where} is not a set of named outputs") from None
    missing = [o for o in model.outputs if o not in names]
    if missing:
        raise _refuse(path, f"{where} lacks the model's output '{missing[0]}' (it holds: {', '.join(names[:8]) or 'nothing'})")
    out: Outputs = {}
    for name in model.outputs:
        arr = np.asarray(iteration[name])
        if model.is_float(name) and arr.dtype.kind != "f":
            raise _refuse(path, f"{where}: output '{name}' has dtype {arr.dtype}, the model's is floating point")
        declared = model.tensor_shapes.get(name)
        if declared is not None and (len(declared) != arr.ndim or any(
                d is not None and d != s for d, s in zip(declared, arr.shape))):
            shown = [d if d is not None else "?" for d in declared]
            raise _refuse(path, f"{where}: output '{name}' has shape {list(arr.shape)}, the model declares {shown}")
        out[name] = arr
    return out
