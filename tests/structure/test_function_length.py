"""No function of the pipeline, results, render or service layers is longer than 60 lines (issue 36: a function a
reader takes in at once; nested functions count in the one around them and on their own)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "precision_doctor"
LAYERS, MAX_LINES = ("pipeline", "results", "render", "service"), 60


def long_functions(root: Path, limit: int) -> list[str]:
    """`file:line name (n lines)` of each function under `root` longer than `limit` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > limit:
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    return out


def test_no_function_over_60_lines():
    assert [f for layer in LAYERS for f in long_functions(PKG / layer, MAX_LINES)] == []


def test_the_measure_counts_nested_functions_in_the_one_around_them(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES - 2))
    (tmp_path / "m.py").write_text(f"def outer():\n    def inner():\n{body}\n    return inner\n")
    assert long_functions(tmp_path, MAX_LINES) == [f"m.py:1 outer ({MAX_LINES + 1} lines)"]
