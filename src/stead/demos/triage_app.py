"""The app `stead demo triage` runs: ticket triage, as in
`stead/examples/triage.py`, with two additions for the demo's checks.

- Every step function and every real model call appends a line to
  `<workdir>/calls.log` ("start"/"done"/"asked", name, pid), so the demo can
  count across processes what was really executed.
- With `crash_in="draft_reply"`, that step kills its own process (SIGKILL) the
  first time it runs, mid-step, before anything of it is journaled. A marker
  file in `workdir` makes it happen once.

A worker imports it as `stead.demos.triage_app:app`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import stead

app = stead.App("demo")

TICKET: dict[str, Any] = {
    "id": 4711,
    "customer": "acme",
    "subject": "Charged twice for my May invoice",
    "body": "Hi, my card was charged twice for invoice INV-0529. Please refund one.",
}
CALLS_LOG = "calls.log"
CRASH_MARKER = "crashed-once"
CATEGORY = "billing"


def expected_result(ticket: Mapping[str, Any]) -> dict[str, Any]:
    """What a run of `triage` on `ticket` returns, crash or no crash."""
    return {
        "ticket": ticket["id"],
        "category": CATEGORY,
        "queue": "billing",
        "assignee": "dana",
        "reply_id": f"R-{ticket['id']}-1",
    }


def _note(workdir: str, event: str, name: str) -> None:
    with open(Path(workdir, CALLS_LOG), "a", encoding="utf-8") as f:
        f.write(f"{event} {name} {os.getpid()}\n")


def _say(text: str) -> None:
    print(f"  {text}", flush=True)


# -- step functions (each runs in the worker's thread pool) --------------------
def load_customer(workdir: str, customer: str) -> dict[str, Any]:
    _note(workdir, "start", "load_customer")
    record = {"customer": customer, "plan": "pro", "open_tickets": 2}
    _say(f"step load_customer: {customer}, plan {record['plan']}")
    _note(workdir, "done", "load_customer")
    return record


def assign(workdir: str, category: str, plan: str, at: str) -> dict[str, str]:
    _note(workdir, "start", "assign")
    route = {"queue": category, "assignee": "dana" if plan == "pro" else "robin", "at": at}
    _say(f"step assign: queue {route['queue']}, assignee {route['assignee']}")
    _note(workdir, "done", "assign")
    return route


def draft_reply(workdir: str, crash_in: str | None, ticket: dict[str, Any],
                category: str) -> str:
    _note(workdir, "start", "draft_reply")
    marker = Path(workdir, CRASH_MARKER)
    if crash_in == "draft_reply" and not marker.exists():
        marker.touch()
        _say("step draft_reply: writing the reply... the worker process is killed "
             "(SIGKILL) mid-step")
        os.kill(os.getpid(), signal.SIGKILL)
    text = (f"Hello {ticket['customer']}, our {category} team has your ticket "
            f"#{ticket['id']} and will refund the duplicate charge.")
    _say("step draft_reply: reply drafted")
    _note(workdir, "done", "draft_reply")
    return text


def post_reply(workdir: str, ticket_id: int, text: str) -> dict[str, str]:
    _note(workdir, "start", "post_reply")
    reply_id = f"R-{ticket_id}-1"
    _say(f"step post_reply: posted {reply_id} ({len(text)} chars)")
    _note(workdir, "done", "post_reply")
    return {"reply_id": reply_id}


class CountingModel:
    """A scripted model that notes every time it is really asked."""

    def __init__(self, workdir: str, replies: Sequence[str]) -> None:
        self.name = "scripted-triage"
        self._workdir = workdir
        self._inner = stead.ScriptedModel(list(replies), name=self.name)

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], **params: Any
    ) -> stead.Completion:
        _note(self._workdir, "asked", "classify")
        _say("llm classify: asking the model")
        return await self._inner.complete(messages, **params)


@app.workflow(version=1)
async def triage(
    run: stead.Run, ticket: dict[str, Any], workdir: str, crash_in: str | None = None
) -> dict[str, Any]:
    """Load the customer, let the model classify the ticket, route it, draft
    and post a reply."""
    customer = await run.step("load_customer", load_customer, workdir, ticket["customer"])
    answer = await run.llm(
        "classify",
        CountingModel(workdir, [CATEGORY]),
        [
            {"role": "system", "content": "Classify the ticket: billing, bug or question."},
            {"role": "user", "content": f"{ticket['subject']}\n\n{ticket['body']}"},
        ],
    )
    category = answer.text.strip()
    triaged_at = run.now()  # recorded; rides along with the next commit
    route = await run.step(
        "assign", assign, workdir, category, customer["plan"], triaged_at.isoformat()
    )
    text = await run.step("draft_reply", draft_reply, workdir, crash_in, ticket, category)
    posted = await run.step("post_reply", post_reply, workdir, ticket["id"], text)
    return {
        "ticket": ticket["id"],
        "category": category,
        "queue": route["queue"],
        "assignee": route["assignee"],
        "reply_id": posted["reply_id"],
    }
