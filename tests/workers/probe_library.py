"""A stand-in for a heavy library (tests/test_crash_matrix_server.py): notes
which process imported it, one JSON line in the file `STEAD_PROBE_LOG` names."""

from __future__ import annotations

import json
import os

with open(os.environ["STEAD_PROBE_LOG"], "a") as _log:
    _log.write(json.dumps({"module": "library", "pid": os.getpid()}) + "\n")
