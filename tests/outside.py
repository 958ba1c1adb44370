"""Test doubles for the outside world an effect reaches: a payment service, a
CI service and a mail service.

Their state lives in a JSON file (one per service) guarded by an `fcntl` lock,
so it survives the SIGKILL of a worker process and is shared by every process
of a test: the worker that dies, the one that takes over, and the test that
reads the ledger afterwards. Each service keeps its own ledger of *every* call
it received, so a test can count what really happened outside, whatever the
journal says.

- `Payments` honours idempotency keys (the same key returns the same receipt
  and refunds once) and can be asked about a key (`lookup`).
- `CI` returns job ids 471, 472, ... and can be asked about a job (`status`):
  pending for the first few polls, then passed.
- `Mail` has neither: every call sends a message, and nothing can be asked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class _File:
    """A JSON document in a file, changed only under an exclusive lock and
    replaced atomically (a reader never sees half a write)."""

    def __init__(self, path: Path, empty: dict[str, Any]) -> None:
        self.path = path
        self.empty = empty

    @contextlib.contextmanager
    def locked(self, *, write: bool = True) -> Iterator[dict[str, Any]]:
        """The state, for reading and changing; written back on exit."""
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                state = self._read()
                yield state
                if write:
                    tmp = self.path.with_name(self.path.name + ".tmp")
                    tmp.write_text(json.dumps(state))
                    os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self) -> dict[str, Any]:
        with self.locked(write=False) as state:
            return state

    def _read(self) -> dict[str, Any]:
        text = self.path.read_text() if self.path.exists() else json.dumps(self.empty)
        data: dict[str, Any] = json.loads(text)
        return data


class Payments:
    """Refunds with idempotency keys, like a real payment API."""

    def __init__(self, path: Path) -> None:
        self._file = _File(path, {"calls": [], "refunds": {}})

    def refund(self, order: str, amount: int, idempotency_key: str) -> dict[str, Any]:
        """Refund `amount` on `order` once per key: a second call with the same
        key returns the first receipt and refunds nothing more."""
        with self._file.locked() as state:
            state["calls"].append(
                {"op": "refund", "order": order, "amount": amount, "key": idempotency_key}
            )
            refunds: dict[str, dict[str, Any]] = state["refunds"]
            if idempotency_key in refunds:
                prior = refunds[idempotency_key]
                if (prior["order"], prior["amount"]) != (order, amount):
                    raise ValueError(f"idempotency key {idempotency_key} reused with "
                                     "other parameters")
                return dict(prior)
            receipt = {"refund": f"rf_{len(refunds) + 1}", "order": order, "amount": amount}
            refunds[idempotency_key] = receipt
            return dict(receipt)

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        """The receipt of the refund made under this key, or None."""
        with self._file.locked() as state:
            state["calls"].append({"op": "lookup", "key": idempotency_key})
            found = state["refunds"].get(idempotency_key)
            return None if found is None else dict(found)

    def calls(self, op: str | None = None) -> list[dict[str, Any]]:
        """Every call received, in order (only those of `op` if given)."""
        return [c for c in self._file.read()["calls"] if op is None or c["op"] == op]

    def refunds(self) -> list[dict[str, Any]]:
        """The refunds that took effect: at most one per key."""
        return list(self._file.read()["refunds"].values())


class CI:
    """A CI service: submitting makes a job (471, 472, ...) that is pending for
    the first `pending_polls` status requests, then passed."""

    FIRST_JOB = 471

    def __init__(self, path: Path, pending_polls: int = 3) -> None:
        self._file = _File(path, {"jobs": {}, "polls": []})
        self.pending_polls = pending_polls

    def submit(self, commit: str) -> int:
        with self._file.locked() as state:
            job = self.FIRST_JOB + len(state["jobs"])
            state["jobs"][str(job)] = {"commit": commit, "polls": 0}
            return job

    def status(self, job: int) -> str:
        with self._file.locked() as state:
            state["polls"].append(job)
            entry = state["jobs"].get(str(job))
            if entry is None:
                return "unknown"
            entry["polls"] += 1
            return "pending" if entry["polls"] <= self.pending_polls else "passed"

    def jobs(self) -> dict[int, str]:
        """Every job ever created: id -> commit."""
        return {int(j): e["commit"] for j, e in self._file.read()["jobs"].items()}

    def polls(self) -> list[int]:
        """The job id of every status request, in order."""
        return list(self._file.read()["polls"])


class Mail:
    """Mail with no idempotency and no lookup: every call sends a message."""

    def __init__(self, path: Path) -> None:
        self._file = _File(path, {"sent": []})

    def send(self, to: str, subject: str) -> str:
        with self._file.locked() as state:
            message_id = f"m{len(state['sent']) + 1}"
            state["sent"].append({"id": message_id, "to": to, "subject": subject})
            return message_id

    def sent(self) -> list[dict[str, Any]]:
        return list(self._file.read()["sent"])
