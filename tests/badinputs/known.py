"""Cases that fail on today's code, and how each fails now (none since phase 2 of issue #11).

Generated from a replay (`python tests/badinputs --json out.json`), then kept by hand: a fix that
makes a case pass must remove it here (the full replay, PD_REPLAY=full, and the representative
cases in tests/e2e/test_bad_inputs.py fail until it does). The module that must change for each is
the case's `where` in cases.py; the replay's table prints both.
"""

KNOWN_FAILING: dict[str, str] = {}
