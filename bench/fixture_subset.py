"""A small node fixture for CI from a GPU run's `fixture.npz` (bench/gpu_opprobe.py, bench/gpu_nodewise.py): up to
`--per-group` entries of each op type or fused pattern, the smallest first, within `--max-mb` of compressed file.

    .venv/bin/python bench/fixture_subset.py gpu-e1/fixture.npz tests/fixtures/gpu_nodes_h200.npz --max-mb 1.5
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

from precision_doctor.measure.node_fixture import read_fixture, write_fixture


def _compressed(entry) -> int:
    buf = io.BytesIO()
    np.savez_compressed(buf, **entry[1])
    return buf.tell()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--per-group", type=int, default=2)
    ap.add_argument("--max-mb", type=float, default=1.5)
    args = ap.parse_args()
    entries = sorted(read_fixture(args.src), key=_compressed)
    taken: dict[str, int] = {}
    kept, size = [], 0
    for rec, arrays in entries:
        group = rec.get("fusion") or rec["op_type"]
        nbytes = _compressed((rec, arrays))
        if taken.get(group, 0) >= args.per_group or size + nbytes > args.max_mb * 1e6:
            continue
        taken[group] = taken.get(group, 0) + 1
        kept.append(({k: v for k, v in rec.items() if k != "key"}, arrays))
        size += nbytes
    write_fixture(args.dst, kept)
    print(f"{len(kept)} of {len(entries)} entries, {len(taken)} op types/patterns, {args.dst.stat().st_size / 1e6:.2f} MB "
          f"-> {args.dst}")


if __name__ == "__main__":
    main()
