"""Workflows whose step returns a large value, or that write a large task
state, for the process tests that SIGKILL their worker between the value's
blob and its reference (tests/test_large_values_processes.py). With `LARGE_KILL_AFTER_BLOB` set, the
worker kills itself as soon as a blob is durable, before the reference's
transaction begins."""

from __future__ import annotations

import os
import signal

import stead
from stead.payloads import blobs

app = stead.App("large")
KILL_ENV = "LARGE_KILL_AFTER_BLOB"

if os.environ.get(KILL_ENV):
    _put = blobs.BlobStore.put_text

    def _put_then_die(self: blobs.BlobStore, text: str) -> tuple[str, int]:
        done = _put(self, text)
        os.kill(os.getpid(), signal.SIGKILL)
        return done

    blobs.BlobStore.put_text = _put_then_die  # type: ignore[method-assign]


def fetch(n: int, ledger: str) -> str:
    """A large value naming the worker that made it (noted in `ledger`)."""
    with open(ledger, "a") as out:
        out.write(f"fetch {os.getpid()}\n")
    return f"{os.getpid()}:" + "x" * n


@app.workflow()
async def bulky(run: stead.Run, n: int, ledger: str) -> dict[str, int]:
    big = await run.step("fetch", fetch, n, ledger)
    return {"size": len(big), "pid": int(big.split(":", 1)[0])}


@app.workflow()
async def stateful(run: stead.Run, n: int) -> dict[str, object]:
    """A large task state, made of a recorded uuid: the uuid rides along with
    the state's write, so a worker killed before that write commits leaves a
    state the next worker makes anew (another blob)."""
    stamp = str(run.uuid())
    facts = await run.state.update({"doc": f"{stamp}:" + "s" * n}, expect_version=None)
    return {"version": facts.version, "stamp": stamp, "size": len(facts["doc"])}
