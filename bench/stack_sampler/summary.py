"""Where the sampled time went (bench/stack_sampler/sitecustomize.py's files): for each function of this project
(and ONNX Runtime's run), the share of samples with it on the stack (inclusive), largest first.

    python3 bench/stack_sampler/summary.py /tmp/stacks-1234.folded [--top 40] [--under FUNCTION]

--under: only the samples whose stack holds FUNCTION (e.g. diagnose.py:_search), shares of those.
"""

import argparse
import collections
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--under", default=None)
    a = ap.parse_args()
    inclusive: collections.Counter = collections.Counter()
    total = 0
    for path in a.files:
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = stack.split(";")
            if a.under and a.under not in frames:
                continue
            total += int(n)
            for f in set(frames):
                inclusive[f] += int(n)
    print(f"{total} samples ({total / 10:.0f} s at 0.1 s a sample){' under ' + a.under if a.under else ''}")
    for f, n in inclusive.most_common(a.top):
        print(f"{n / max(total, 1):6.1%} {n / 10:7.1f} s  {f}")


if __name__ == "__main__":
    main()
