"""`precision-doctor env`: versions, providers, GPUs and the backends usable here."""

from __future__ import annotations

from precision_doctor.cli.shared import app, console, styled


@app.command()
def env() -> None:
    """Versions of ONNX Runtime (and providers), polygraphy, TensorRT, and GPUs."""
    from precision_doctor.environment import describe

    for key, value in describe().items():
        console.print(styled(key, "bold", f": {value}"), soft_wrap=True)
