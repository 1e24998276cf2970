"""Only the CLI draws on a terminal: nothing outside precision_doctor/cli/ imports typer or rich (the service, the
api and the renderers run without them)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "precision_doctor"


def _imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_only_the_cli_imports_typer_or_rich():
    outside = [str(p.relative_to(PKG)) for p in sorted(PKG.rglob("*.py"))
               if "cli" not in p.relative_to(PKG).parts[:1] and _imported(p) & {"typer", "rich"}]
    assert outside == []
    assert _imported(PKG / "cli" / "shared.py") >= {"typer", "rich"}  # the check sees them where they are
