"""The package's import graph, read with `ast`: import circles between modules and imports that run back up
between layers (subpackages and top-level modules, in the order `LAYERS` gives).

usage: python bench/import_graph.py [--edges]   (--edges: the imports inside each circle and every unit edge)

Counted: every import of a `precision_doctor` module, at the top of a module or inside a function; imports under
`if TYPE_CHECKING:` are counted apart (they never run, but a circle through them is still two modules that
need each other). `from precision_doctor.x import y` counts as an import of
`x.y` where `y` is a module, else of `x`. A circle is a strongly connected set of two or more modules
(Tarjan); "top-level" counts only imports that run when a module is imported (those are the circles Python
can trip over; the rest hide behind function bodies). A unit is a subpackage or a top-level module; an arrow
runs back up where a unit imports one of a later layer.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "precision_doctor"

# Lowest first: a unit may import units of its own layer and of the layers before it. The order is the data flow
# of docs/ARCHITECTURE.md: models (graph) run on backends, samples (data) are measured, searched, the settings
# (spec) name them all, results keep what a run found, the pipeline runs the steps, the front ends call api.
LAYERS: list[list[str]] = [
    ["errors", "storage", "manifest", "runfiles", "jsonio", "codec", "control", "outcome", "costs", "fingerprint", "words"],
    ["graph"],
    ["backends"],
    ["data"],
    ["measure"],
    ["search"],
    ["spec", "flags", "planted", "environment"],
    ["results"],
    ["render"],
    ["pipeline"],
    ["api"],
    ["batch", "zoo"],
    ["service"],
    ["cli", "__main__"],
]


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted((ROOT / PKG).rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, bool, bool]]:
    """(imported module, at top level, for type checking only) for each import of the package in `path`."""
    is_pkg = path.name == "__init__.py"
    out: list[tuple[str, bool, bool]] = []

    def resolve(mod: str, level: int) -> str:
        if not level:
            return mod
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([mod] if mod else []))

    def visit(node: ast.AST, top: bool, typing: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for c in child.body:
                    visit(ast.Module(body=[c], type_ignores=[]), top, True)
                for c in child.orelse:
                    visit(ast.Module(body=[c], type_ignores=[]), top, typing)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] == PKG:
                        out.append((_nearest(a.name, known), top, typing))
            elif isinstance(child, ast.ImportFrom):
                mod = resolve(child.module or "", child.level)
                if mod.split(".")[0] != PKG:
                    continue
                for a in child.names:
                    sub = f"{mod}.{a.name}"
                    out.append((sub if sub in known else _nearest(mod, known), top, typing))
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, inner, typing)

    visit(ast.parse(path.read_text()), True, False)
    return [e for e in out if e[0] != name]


def _nearest(mod: str, known: set[str]) -> str:
    while mod not in known and "." in mod:
        mod = mod.rsplit(".", 1)[0]
    return mod


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of two or more nodes (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def unit(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def main() -> None:
    mods = modules()
    known = set(mods)
    found = {m: imports(m, p, known) for m, p in mods.items()}
    typed = {m: {t for t, _, _ in es} for m, es in found.items()}
    edges = {m: [(t, at_top) for t, at_top, typing in es if not typing] for m, es in found.items()}
    every = {m: {t for t, _ in es} for m, es in edges.items()}
    top = {m: {t for t, at_top in es if at_top} for m, es in edges.items()}
    inside = sum(1 for es in edges.values() for _, at_top in es if not at_top)
    n_typing = sum(1 for es in found.values() for e in es if e[2])
    layer = {u: i for i, units in enumerate(LAYERS) for u in units}
    units = sorted({unit(m) for m in mods} - {"__init__"})
    missing = [u for u in units if u not in layer]
    if missing:
        sys.exit(f"units without a layer in LAYERS: {missing}")
    unit_edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for m, targets in every.items():
        for t in targets:
            a, b = unit(m), unit(t)
            if a != b and "__init__" not in (a, b):
                unit_edges[(a, b)].append(f"{m.removeprefix(PKG + '.')} -> {t.removeprefix(PKG + '.')}")
    back = {k: v for k, v in unit_edges.items() if layer[k[0]] < layer[k[1]]}
    typed_circles, all_circles, top_circles = circles(typed), circles(every), circles(top)
    unit_circles = circles({u: {b for (a, b) in unit_edges if a == u} for u in units})

    short = lambda ms: " <-> ".join(m.removeprefix(PKG + ".") for m in ms)  # noqa: E731
    print(f"modules: {len(mods)}; imports of the package: {sum(len(e) for e in edges.values())} "
          f"({inside} inside functions), and {n_typing} for type checking only")
    print(f"units: {len(units)} in {len(LAYERS)} layers; unit edges: {len(unit_edges)}")
    print(f"module circles (with type-checking imports): {len(typed_circles)}")
    for c in typed_circles:
        print(f"  {short(c)}")
    print(f"module circles (every import that runs): {len(all_circles)}")
    for c in all_circles:
        print(f"  {short(c)}")
        if "--edges" in sys.argv:
            inner = sorted(f"{a} -> {b}" for a in c for b in every[a] if b in c)
            print("    " + "; ".join(x.replace(PKG + ".", "") for x in inner))
    print(f"module circles (top-level imports only): {len(top_circles)}")
    for c in top_circles:
        print(f"  {short(c)}")
    print(f"unit circles: {len(unit_circles)}")
    for c in unit_circles:
        print(f"  {' <-> '.join(c)}")
    print(f"arrows running back up (unit edges to a later layer): {len(back)} ({sum(map(len, back.values()))} module imports)")
    for (a, b), why in sorted(back.items()):
        print(f"  {a} -> {b}: {'; '.join(sorted(why))}")
    if "--edges" in sys.argv:
        for (a, b), why in sorted(unit_edges.items()):
            print(f"{a} -> {b}: {len(why)}")


if __name__ == "__main__":
    main()
