"""A real worker process running an agent loop of proposals (`run.propose`)
under an intent with a budget and a policy, for tests/test_revalidation.py.

    python loop_worker.py --db URL --log FILE [--crash-after NAME:N | --crash-before NAME:N]

Every model call and every refund sent appends a line to FILE, so the test
counts what happened over every process. `--crash-after send:1` SIGKILLs the
process once the first write journaling a `send` record is durable;
`--crash-before` just before it commits.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import stead
from stead.testing import CrashPoint
from tests.workers import procs

app = stead.App("loop-processes")
LOG: list[Path] = []


def _log(line: str) -> None:
    with LOG[0].open("a") as f:
        f.write(line + "\n")


class Planner:
    """A model that logs every call it answers: turn N's answer is "refund N"."""

    name = "planner"

    async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                       ) -> stead.Completion:
        turn = str(messages[0]["content"])
        _log(f"model {turn}")
        return stead.Completion(text=f"refund {turn}")


@app.policy(version="refunds@1")
def judge(intent: stead.Intent | None, state: dict[str, Any], run: stead.RunRow,
          action: stead.Action | None) -> stead.Continue:
    return stead.Continue()


def send(op: stead.Operation, text: str) -> str:
    _log(f"send {text}")
    return text


@app.workflow()
async def loop(run: stead.Run, turns: int) -> list[str]:
    done = []
    for turn in range(turns):
        plan = await run.propose("next", Planner(), [{"role": "user", "content": str(turn)}],
                                 reason=f"turn {turn}")
        sent = await run.effect("send", send, plan.text, key=f"send-{turn}")
        facts = await run.state.get()
        await run.state.update({"turn": turn}, expect_version=facts.version)
        done.append(str(sent))
    return done


def intent() -> stead.Intent:
    return stead.Intent(goal="refund in turns", grants=[stead.Grant("send")],
                        budget=stead.Budget(model_calls=10, effects=10))


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--log", required=True, type=Path)
    p.add_argument("--crash-after")
    p.add_argument("--crash-before")
    args = p.parse_args()
    LOG.append(args.log)
    point = None
    if args.crash_after or args.crash_before:
        name, n = (args.crash_after or args.crash_before).split(":")
        point = CrashPoint(after_commit=int(n), name=name) if args.crash_after \
            else CrashPoint(before_commit=int(n), name=name)
    await procs.drain(app, args.db, point)

if __name__ == "__main__":
    asyncio.run(main())
