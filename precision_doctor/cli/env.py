"""`precision-doctor env`: versions, providers, GPUs and the backends usable here."""

from __future__ import annotations

from precision_doctor.cli import app, console


@app.command()
def env() -> None:
    """Versions of ONNX Runtime (and providers), polygraphy, TensorRT, and GPUs."""
    from precision_doctor.environment import describe

    for key, value in describe().items():
        console.print(f"[bold]{key}[/]: {value}", highlight=False)
