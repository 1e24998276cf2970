"""What a job's files can be told apart from at submission, cheaply, so that the submitter gets a 422 naming the file
as they named it instead of a job that fails when it runs: the model is an ONNX model (its graph read without its
weights: `graph.proto_scan`), and each .npz sample names only the model's inputs (its arrays' headers read, no
data). What takes the model's weights or the samples' values (shapes, dtypes, NaNs, a data loader script) is checked
when the job runs, as `diagnose` checks it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from precision_doctor.data.arrayfiles import npz_headers, unknown_input
from precision_doctor.errors import UserError
from precision_doctor.graph.proto_scan import Malformed, graph_names
from precision_doctor.service.uploads import Refused


def model_inputs(path: Path, shown: str, setting: str) -> list[str]:
    """The graph inputs of the model at `path` that are not initializers; Refused (422) where it is no ONNX model.
    Read from the protobuf's wire format (`graph.proto_scan`): the daemon never holds the model's weights (up to 2 GB
    inline; `onnx.load` parsed them all, per submission)."""
    try:
        names = graph_names(path)
    except (Malformed, OSError) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise Refused(422, f"{setting}: {shown} is not an ONNX model ({why})", setting=setting) from None
    if not names.has_graph or not names.inputs:
        raise Refused(422, f"{setting}: {shown} is not an ONNX model with inputs (no graph inputs)", setting=setting)
    weights = set(names.initializers)
    return [i for i in names.inputs if i not in weights]


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
