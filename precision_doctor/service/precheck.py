"""What a job's files can be told apart from at submission, cheaply, so that the submitter gets a 422 naming the file
as they named it instead of a job that fails when it runs: the model is an ONNX model (its graph read without its
weights), and each .npz sample names only the model's inputs (its arrays' headers read, no data). What takes the
model's weights or the samples' values (shapes, dtypes, NaNs, a data loader script) is checked when the job runs, as
`diagnose` checks it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from precision_doctor.data.arrayfiles import npz_headers, unknown_input
from precision_doctor.errors import UserError
from precision_doctor.service.uploads import Refused


def model_inputs(path: Path, shown: str, setting: str) -> list[str]:
    """The graph inputs of the model at `path` that are not initializers; Refused (422) where it is no ONNX model."""
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 (protobuf's DecodeError, an empty or truncated file, an OSError)
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Refused(422, f"{setting}: {shown} is not an ONNX model ({why})", setting=setting) from None
    if not proto.HasField("graph") or not proto.graph.input:
        raise Refused(422, f"{setting}: {shown} is not an ONNX model with inputs (no graph inputs)", setting=setting)
    weights = {t.name for t in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in weights]


def samples(files: Sequence[tuple[str, Path]], inputs: list[str], setting: str) -> None:
    """Each .npz of `files` ((the name the submitter gave, the stored file)) names only `inputs`; Refused (422) naming
    the submitter's file otherwise. Other forms are checked when the job runs."""
    for shown, path in files:
        if path.suffix.lower() != ".npz":
            continue
        try:
            names = list(npz_headers(path))
        except UserError as exc:
            raise Refused(422, str(exc).replace(str(path), shown), setting=setting) from None
        for name in names:
            if name not in inputs:
                raise Refused(422, unknown_input(f"{setting} file {shown}", name, inputs), setting=setting)
