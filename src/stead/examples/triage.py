"""Ticket triage: a small stead app to copy from.

The workflow loads the customer, asks a model to classify the ticket, routes it
and posts a reply. Each `run.step` / `run.llm` is journaled, so if the worker
dies halfway, the worker that takes the run over reuses what was already
acknowledged (the model is not asked again) and carries on from there.

Try it:

    stead start stead.examples.triage:app triage '[{"id": 4711, "customer": "acme",
        "subject": "Charged twice", "body": "Card charged twice for INV-0529."}]' \\
        --task-id ticket-4711
    stead worker stead.examples.triage:app --until-idle
    stead runs ls
    stead runs show RUN

`stead demo triage` runs this workflow (with a few notes added for its checks)
through a real SIGKILL mid-step and a resume.
Swap `ScriptedModel` for a real model adapter; nothing else changes.
"""

from __future__ import annotations

from typing import Any

import stead

app = stead.App("triage")
TEAMS = {"billing": "dana", "bug": "sam", "question": "robin"}


def model() -> stead.Model:
    """A scripted model with one answer per run, so the example needs no network.
    Its name enters the call's digest: a changed model under a running
    checkpoint is detected on replay."""
    return stead.ScriptedModel(["billing"], name="scripted-triage")


def load_customer(customer: str) -> dict[str, Any]:
    """A read from your CRM. Sync functions run in a thread."""
    return {"customer": customer, "plan": "pro"}


def assign(category: str, plan: str) -> dict[str, str]:
    queue = category if category in TEAMS else "question"
    return {"queue": queue, "assignee": TEAMS[queue], "priority": "high" if plan == "pro"
            else "normal"}


async def post_reply(ticket_id: int, text: str) -> dict[str, str]:
    """A call to your helpdesk's API. Async functions are awaited."""
    return {"reply_id": f"R-{ticket_id}-1"}


@app.workflow(version=1)
async def triage(run: stead.Run, ticket: dict[str, Any]) -> dict[str, Any]:
    customer = await run.step("load_customer", load_customer, ticket["customer"])
    answer = await run.llm(
        "classify",
        model(),
        [
            {"role": "system", "content": "Classify the ticket: billing, bug or question. "
                                          "Answer with one word."},
            {"role": "user", "content": f"{ticket['subject']}\n\n{ticket['body']}"},
        ],
    )
    category = answer.text.strip().lower()
    route = await run.step("assign", assign, category, customer["plan"])
    text = (f"Hello {ticket['customer']}, your ticket #{ticket['id']} is with our "
            f"{route['queue']} team ({route['assignee']}).")
    posted = await run.step("post_reply", post_reply, ticket["id"], text)
    return {"ticket": ticket["id"], "category": category, **route, **posted}
