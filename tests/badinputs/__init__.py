"""The bad-input replay: well over 100 ways a user or a tester can get the CLI wrong, each run as a
real subprocess against real files in its own temp directory.

Run the whole catalogue (about 2-3 minutes on 2 cores):

    .venv/bin/python tests/badinputs --jobs 2            # table of failures by class
    .venv/bin/python tests/badinputs --only resume       # cases whose id contains "resume"
    .venv/bin/python tests/badinputs --json out.json     # every result, for the record

Each case checks: the exit code (2 for bad input, or the right verdict), stderr is one line (plus
at most a log-path line) with no traceback, the message names the flag, file or tensor at fault,
and every file that existed before the run is byte-identical afterwards. `known.py` lists the
cases that fail on today's code and the module that must change for each; tests/e2e/test_bad_inputs.py
holds the replay to that list.
"""
