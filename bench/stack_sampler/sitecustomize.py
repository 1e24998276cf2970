"""A wall-clock sampler of the main thread's stack, for measuring where a long run's time goes on the GPU machine
(no profiler can be installed there): with this folder on PYTHONPATH and PD_STACK_SAMPLES=PREFIX set, every Python
process started samples its main thread every 0.1 s and rewrites PREFIX-<pid>.folded every 5 s (and at exit): one
line per distinct stack, "frame;frame;... count" (the folded format of flame graphs), the frames as
file:function. Waits count as time (a session run, a Future's result), which is what a wall-clock question needs.

    PYTHONPATH=bench/stack_sampler:$PYTHONPATH PD_STACK_SAMPLES=/tmp/stacks python3 -m precision_doctor diagnose ...
    python3 bench/stack_sampler/summary.py /tmp/stacks-*.folded     # the functions that took the time
"""

import os

if os.environ.get("PD_STACK_SAMPLES"):
    import atexit
    import collections
    import sys
    import threading
    import time

    _prefix, _main = os.environ["PD_STACK_SAMPLES"], threading.main_thread()
    _counts: collections.Counter = collections.Counter()
    _lock = threading.Lock()  # the sampler's writes and the one at exit, on the main thread

    def _frames(frame) -> str:
        out = []
        while frame is not None:
            code = frame.f_code
            out.append(f"{os.path.basename(code.co_filename)}:{code.co_name}")
            frame = frame.f_back
        return ";".join(reversed(out))

    def _write() -> None:
        path = f"{_prefix}-{os.getpid()}.folded"
        with _lock:
            with open(path + ".tmp", "w") as f:
                f.writelines(f"{stack} {n}\n" for stack, n in _counts.most_common())
            os.replace(path + ".tmp", path)

    def _sample() -> None:
        last = time.monotonic()
        while True:
            time.sleep(0.1)
            frame = sys._current_frames().get(_main.ident)
            if frame is not None:
                stack = _frames(frame)
                with _lock:
                    _counts[stack] += 1
            if time.monotonic() - last > 5:
                last = time.monotonic()
                _write()

    threading.Thread(target=_sample, name="pd-stack-sampler", daemon=True).start()
    atexit.register(_write)
