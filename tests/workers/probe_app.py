"""An app for tests/test_crash_matrix_server.py that notes, as it is
imported, which process imported it, from where, and the point its
environment names: one JSON line in the file `STEAD_PROBE_LOG` names."""

from __future__ import annotations

import json
import os

import stead

with open(os.environ["STEAD_PROBE_LOG"], "a") as _log:
    _log.write(json.dumps({"module": "app", "pid": os.getpid(), "cwd": os.getcwd(),
                           "point": os.environ.get("PROBE_POINT")}) + "\n")

app = stead.App("probe")


def hello(name: str) -> str:
    return f"hello {name}"


@app.workflow(version=1)
async def greet(run: stead.Run, name: str) -> str:
    text: str = await run.step("hello", hello, name)
    return text
