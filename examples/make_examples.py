"""Write the example models and input samples shipped in examples/ (re-run to regenerate them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from precision_doctor import planted

HERE = Path(__file__).resolve().parent


def main() -> None:
    for name in ("overflow_island", "three_defects"):
        case = planted.CASES[name]()
        model_path = HERE / f"{name}.onnx"
        if not model_path.exists():
            onnx.save(case.model, str(model_path))
        inputs = HERE / f"{name}_inputs"
        inputs.mkdir(exist_ok=True)
        for i, sample in enumerate(case.samples(25, seed=0)):  # 6 held out: enough to validate an answer
            path = inputs / f"sample{i}.npz"
            if not path.exists():
                np.savez(path, **sample)


if __name__ == "__main__":
    main()
