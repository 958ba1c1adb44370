"""Fake outside services for the examples and `stead demo`: a payment service
with idempotency keys, a CI service with job ids, the customer's mailbox, the
model provider's log of calls and the coding agent's log of test runs.

Each keeps its state, and its own ledger of every call it received (with the
pid of the caller), in a JSON file under one folder: `$STEAD_EXAMPLE_SERVICES`,
else `./example-services`. A file is changed only under an exclusive lock and
replaced atomically, so it survives the SIGKILL of a worker and is shared by
every process: the worker that dies, the one that takes over, and whoever
reads the ledger afterwards. What a ledger says happened outside is what
happened, whatever any journal says. (Unix only: `fcntl` locks.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV = "STEAD_EXAMPLE_SERVICES"


def folder() -> Path:
    """Where the services keep their files."""
    return Path(os.environ.get(ENV) or "example-services")


class _Ledger:
    """One service's JSON document, changed under an exclusive lock."""

    def __init__(self, name: str, empty: dict[str, Any], where: Path | None) -> None:
        self.path = (where or folder()) / f"{name}.json"
        self._empty = empty

    @contextlib.contextmanager
    def locked(self, *, write: bool = True) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                text = self.path.read_text() if self.path.exists() else json.dumps(self._empty)
                state: dict[str, Any] = json.loads(text)
                yield state
                if write:
                    tmp = self.path.with_name(self.path.name + ".tmp")
                    tmp.write_text(json.dumps(state, indent=1))
                    os.replace(tmp, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(self) -> dict[str, Any]:
        with self.locked(write=False) as state:
            return state


def _call(op: str, **fields: Any) -> dict[str, Any]:
    return {"op": op, **fields, "pid": os.getpid(), "at": time.time()}


class Payments:
    """Refunds with idempotency keys, like a real payment API: the same key
    refunds once and returns the first receipt."""

    def __init__(self, where: Path | None = None) -> None:
        self._ledger = _Ledger("payments", {"calls": [], "refunds": {}}, where)

    def refund(self, order_id: str, amount: int, *, idempotency_key: str) -> dict[str, Any]:
        with self._ledger.locked() as state:
            state["calls"].append(_call("refund", order_id=order_id, amount=amount,
                                        key=idempotency_key))
            refunds: dict[str, dict[str, Any]] = state["refunds"]
            if idempotency_key not in refunds:
                refunds[idempotency_key] = {"refund": f"rf_{len(refunds) + 1}",
                                            "order_id": order_id, "amount": amount}
            prior = refunds[idempotency_key]
            if (prior["order_id"], prior["amount"]) != (order_id, amount):
                raise ValueError(f"idempotency key {idempotency_key} reused for another refund")
            return dict(prior)

    def lookup(self, idempotency_key: str) -> dict[str, Any] | None:
        """The receipt of the refund made under this key, or None."""
        with self._ledger.locked() as state:
            state["calls"].append(_call("lookup", key=idempotency_key))
            found = state["refunds"].get(idempotency_key)
            return None if found is None else dict(found)

    def calls(self) -> list[dict[str, Any]]:
        """Every call received, in order."""
        return list(self._ledger.read()["calls"])

    def refunds(self) -> dict[str, dict[str, Any]]:
        """The refunds that took effect, by idempotency key."""
        return dict(self._ledger.read()["refunds"])


class RefundPolicy:
    """The refund policy service: the largest refund it allows and the
    version of the policy that says so (changed by whoever owns the policy)."""

    def __init__(self, where: Path | None = None) -> None:
        self._ledger = _Ledger("refund_policy", {"limit": 5000, "version": "refunds@7",
                                                 "calls": []}, where)

    def set(self, limit: int, version: str) -> None:
        with self._ledger.locked() as state:
            state["limit"], state["version"] = limit, version

    def current(self) -> tuple[int, str]:
        """The limit and version in force (each call is in the ledger)."""
        with self._ledger.locked() as state:
            state["calls"].append(_call("current"))
            return int(state["limit"]), str(state["version"])


class CI:
    """A CI service. `submit` starts job 471, 472, ...; a job is `pending`
    until it has run `runs_for` seconds (then `passed`), or, with
    `runs_for=None`, until someone calls `finish` (as `stead demo ci` does,
    playing the CI runner)."""

    FIRST_JOB = 471

    def __init__(self, where: Path | None = None) -> None:
        self._ledger = _Ledger("ci", {"calls": [], "jobs": {}, "runs_for": 3.0}, where)

    def configure(self, *, runs_for: float | None) -> None:
        with self._ledger.locked() as state:
            state["runs_for"] = runs_for

    def submit(self, commit: str, *, key: str) -> int:
        with self._ledger.locked() as state:
            job = self.FIRST_JOB + len(state["jobs"])
            state["jobs"][str(job)] = {"commit": commit, "key": key, "status": "pending",
                                       "submitted_at": time.time()}
            state["calls"].append(_call("submit", commit=commit, key=key, job=job))
            return job

    def status(self, job: int) -> str:
        """pending, passed, failed, or unknown (no such job)."""
        with self._ledger.locked() as state:
            state["calls"].append(_call("status", job=job))
            entry = state["jobs"].get(str(job))
            if entry is None:
                return "unknown"
            runs_for = state["runs_for"]
            if entry["status"] == "pending" and runs_for is not None \
                    and time.time() - entry["submitted_at"] >= runs_for:
                entry["status"] = "passed"
            return str(entry["status"])

    def find(self, key: str) -> int | None:
        """The job submitted under this key, if any."""
        with self._ledger.locked() as state:
            state["calls"].append(_call("find", key=key))
            found = [int(j) for j, e in state["jobs"].items() if e["key"] == key]
            return found[0] if found else None

    def finish(self, job: int, status: str = "passed") -> None:
        with self._ledger.locked() as state:
            state["jobs"][str(job)]["status"] = status

    def jobs(self) -> dict[int, dict[str, Any]]:
        return {int(j): e for j, e in self._ledger.read()["jobs"].items()}

    def calls(self) -> list[dict[str, Any]]:
        return list(self._ledger.read()["calls"])


class Mailbox:
    """Mail to customers. A message sent again under the same key is not sent
    twice (the key is the effect's operation key)."""

    def __init__(self, where: Path | None = None) -> None:
        self._ledger = _Ledger("mailbox", {"messages": [], "calls": []}, where)

    def send(self, to: str, subject: str, body: dict[str, Any], *, key: str) -> str:
        with self._ledger.locked() as state:
            state.setdefault("calls", []).append(_call("send", to=to, key=key))
            messages: list[dict[str, Any]] = state["messages"]
            for m in messages:
                if m["key"] == key:
                    return str(m["id"])
            message_id = f"msg_{len(messages) + 1}"
            messages.append({"id": message_id, "to": to, "subject": subject, "body": body,
                             "key": key, "pid": os.getpid()})
            return message_id

    def messages(self, to: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self._ledger.read()["messages"] if to is None or m["to"] == to]

    def calls(self) -> list[dict[str, Any]]:
        """Every send received, a resend under a known key included."""
        return list(self._ledger.read().get("calls", []))


class ModelCalls:
    """The model provider's side: one line per request it really received."""

    def __init__(self, where: Path | None = None) -> None:
        self._ledger = _Ledger("model", {"calls": []}, where)

    def note(self, model: str, purpose: str) -> None:
        with self._ledger.locked() as state:
            state["calls"].append(_call("complete", model=model, purpose=purpose))

    def calls(self) -> list[dict[str, Any]]:
        return list(self._ledger.read()["calls"])

    def stall(self, purpose: str | None) -> None:
        """Make the provider slow for requests made for `purpose` (they wait
        until it is not), or for none."""
        with self._ledger.locked() as state:
            state["stalled"] = purpose

    def stalled(self, purpose: str) -> bool:
        return bool(self._ledger.read().get("stalled") == purpose)


class TestRuns:
    """Where the coding agent's tests ran: one entry per run of the tests,
    with the lockfile (the environment) they ran under."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, where: Path | None = None) -> None:
        self._ledger = _Ledger("test_runs", {"calls": []}, where)

    def note(self, lockfile: str | None) -> None:
        with self._ledger.locked() as state:
            state["calls"].append(_call("test", lockfile=lockfile))

    def calls(self) -> list[dict[str, Any]]:
        return list(self._ledger.read()["calls"])
