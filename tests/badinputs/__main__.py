"""`python tests/badinputs [--jobs 2] [--only TEXT] [--json FILE] [--keep DIR]`: run the replay, print
the table of failures by class, compare with known.py; exit 1 on a failure not listed there."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `badinputs` as a package, as pytest sees it

from badinputs.replay import main  # noqa: E402

sys.exit(main())
