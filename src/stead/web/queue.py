"""The needs-a-human queue as the dashboard shows it: every item of
`operator.needs_a_human`, filtered (kind, workflow, task, age), counted per
kind, each with a stable key and a version. A wait that asks something (its
request) shows it, so the approver decides on the question, not its digest.

The page is an inbox: a row says what, why, since when, until when and the
values it is bound to, with one primary action for a person who may take it;
the rest is in the row's detail panel, shown there rather than linked: the
whole request, the run's context (its intent, what its last resume judged
and the diff since, the effect's or the run's arguments by name with their
JSON one click away, the model's last turns) and the other actions. It
updates itself row by row (`static/queue.js`): a row is keyed by what it is
about (its kind, run and wait) and versioned by what it shows that matters
to a decision (its status, its bound values, its request, its actions; not
the minutes left, which tick), so a poll replaces only the rows whose
version changed and that no operator is editing, and says what changed on
one that is. An error's text is shown whole (a short form first, cut at a
word), without the command-line commands it names: on the page, the forms
below it are what decide. A run stopped on an effect whose outcome is unknown shows
the effect's arguments, key and external id, so the operator can look it up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

from stead import arguments, operator, roles
from stead.client import Client
from stead.operator import Attention, AttentionKind
from stead.records import IntentRow, Record
from stead.views import context_view, timeline
from stead.web import views
from stead.workflow import waits

SHORT = 200  # characters of a summary shown before it is expanded
# Ages an item may be filtered by: it has waited for a person at least this long.
AGES: dict[str, float] = {"5m": 300.0, "1h": 3600.0, "1d": 86400.0, "7d": 7 * 86400.0}
# A command-line command in a message: the page offers its form instead.
_COMMAND = re.compile(r"`?\bstead (?:runs|reconcile|grants|events|state|workspace|db)\b")
# A wait's time left in its summary: it ticks, so it is no change to the row.
_TICKING = re.compile(r"expires in [0-9.]+ (?:min|h)")
# What a row's line leaves out of a wait's summary: its id (the detail has
# it) and when it expires (the line's own column says).
_KEYED = re.compile(r"\s*\(key [^)]*\)")  # an effect's key and attempt: the detail has them
_WAIT_DETAIL = re.compile(r"\s*\([0-9a-f]{12,}\)|\s*(?:expires in [0-9.]+ (?:min|h)|no expiry"
                          r"|has expired)$")
# The words a row labels its actions with: an approver approves; whose
# authority it is the audit says.
LABELS = {"approve": "Approve", "reject": "Reject", "revoke_wait": "Revoke the wait"}
# The fields a row's one-line form leaves out, rarely used: the run page's
# form has them (an approval's extra payload fields).
LEFT_OUT = frozenset({("approve", "payload")})
# How many of a row's bound values its line shows (the detail shows them all).
BOUND_SHOWN = 3
# How many of the model's last turns a row's detail shows (the run page has them all).
TURNS = 4
# What led up to a command, left dangling once it is cut: ", then", ": ".
_DANGLING = re.compile(r"[\s,;:(`]*(?:\b(?:then|with|run|use)\b)?[\s,;:(`]*$")


def without_commands(text: str) -> str:
    """`text` up to the sentence that names a `stead ...` command."""
    found = _COMMAND.search(text)
    if found is None:
        return text
    head = text[:found.start()]
    end = head.rfind(". ")
    if end >= 0:
        return head[:end + 1].strip()
    return _DANGLING.sub("", head).strip()


def short(text: str, width: int = SHORT) -> str:
    """`text` in at most `width` characters, cut at a word, with `…`."""
    if len(text) <= width:
        return text
    cut = text[:width].rsplit(" ", 1)[0] if " " in text[:width] else text[:width]
    return cut.rstrip(" ,;:") + " …"


def pretty(value: Any) -> str:
    """A value as indented JSON, tokens redacted."""
    return waits.TOKEN_TEXT.sub("[token]", json.dumps(
        value, indent=2, ensure_ascii=False, sort_keys=True, default=str))


@dataclasses.dataclass(frozen=True)
class Filter:
    kind: AttentionKind | None = None
    workflow: str | None = None  # a name, or name@version
    task: str | None = None
    age: str | None = None  # a key of AGES

    @classmethod
    def read(cls, q: Mapping[str, str]) -> Filter:
        kind = q.get("kind", "")
        age = q.get("age", "")
        return cls(AttentionKind(kind) if kind in AttentionKind.__members__.values() else None,
                   q.get("workflow", "").strip()[:200] or None,
                   q.get("task", "").strip()[:200] or None,
                   age if age in AGES else None)

    def matches(self, a: Attention, now: float, *, kind: bool = True) -> bool:
        if kind and self.kind is not None and a.kind != self.kind:
            return False
        if self.workflow is not None:
            name, at, version = self.workflow.partition("@")
            if a.run.workflow != name or (at and str(a.run.version) != version):
                return False
        if self.task is not None and a.run.task_id != self.task:
            return False
        return self.age is None or now - a.waiting_since >= AGES[self.age]

    def query(self, **changed: str) -> str:
        """This filter as a query string, with `changed` fields."""
        fields = {"kind": self.kind or "", "workflow": self.workflow or "",
                  "task": self.task or "", "age": self.age or "", **changed}
        return "&".join(f"{k}={urllib.parse.quote(v, safe='@')}" for k, v in fields.items() if v)


@dataclasses.dataclass(frozen=True)
class Unknown:
    """The effect a run stopped on, as the operator looks it up outside."""

    name: str
    key: str
    attempt: int
    external_id: str | None
    arguments: str  # pretty JSON
    named: tuple[tuple[str, str], ...] = ()  # the arguments by name, clipped


def label(action: operator.Action) -> str:
    """What a button says for `action`."""
    return LABELS.get(action.name, action.label)


def values(value: Any) -> list[tuple[str, str]]:
    """A JSON object's fields as (name, clipped value) rows; anything else
    as one row named `value`."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [(str(k), _clipped(v)) for k, v in value.items()]
    return [("value", _clipped(value))]


def _clipped(v: Any, width: int = 80) -> str:
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    return waits.TOKEN_TEXT.sub("[token]", short(text, width))


@dataclasses.dataclass(frozen=True)
class Row:
    key: str  # what it is about: stable while it needs a human
    version: str  # what it shows that matters: changes when a decision might
    item: Attention
    summary: str
    brief: str  # `summary`, short
    unknown: Unknown | None
    asks: str = ""  # what the wait asks, pretty JSON ("" for none)
    question: str = ""  # what it asks, on one line ("" for none)
    about: str = ""  # why it needs a person, on the row's line
    bound: tuple[tuple[str, str], ...] = ()  # the values the wait is bound to
    inputs: tuple[tuple[str, str], ...] = ()  # the run's arguments, by name
    inputs_json: str = ""  # the run's arguments as stored, pretty JSON
    intent: tuple[str, ...] = ()  # the intent in force and its versions, as lines
    conversation: tuple[views.Turn, ...] = ()  # the model's last turns
    # What its last resume judged (the intent's diff, the decision), if a
    # resume revalidated an intent: what changed since the run last went on.
    resumed: views.Revalidation | None = None

    def primary(self, held: frozenset[roles.Role]) -> tuple[operator.Action, str] | None:
        """The first action these roles allow: the row's one button."""
        return next(((a, t) for a, t in self.item.actions if roles.allows(held, a.role)), None)

    def others(self, held: frozenset[roles.Role]) -> list[tuple[operator.Action, str]]:
        """The other actions these roles allow, for the detail panel."""
        return [(a, t) for a, t in self.item.actions if roles.allows(held, a.role)][1:]

    @property
    def status(self) -> str:
        """What the row says of the run, as its change notice compares it."""
        return f"{self.item.run.status} at epoch {self.item.run.epoch}"

    @property
    def bound_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.bound)


@dataclasses.dataclass(frozen=True)
class Queue:
    rows: tuple[Row, ...]
    counts: dict[AttentionKind, int]  # per kind, under the other filters
    total: int


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Context:
    """What a row's detail panel shows of its run, read once per run."""

    summed: list[Record]  # the effect, model-call and workspace records
    intents: list[IntentRow]


async def _context(client: Client, run_id: str) -> Context:
    return Context(await client.store.journal_summaries(run_id), await client.intents(run_id))


def _unknown(a: Attention, c: Context) -> Unknown | None:
    stop = a.run.outcome_unknown
    if stop is None:
        return None
    effects = timeline.effect_views(c.summed)
    external = next((v.external_id for v in effects if v.key == stop.key), None)
    return Unknown(stop.name, stop.key, stop.attempt, external, pretty(stop.arguments),
                   tuple((n, _clipped(v)) for n, v in arguments.table(stop.arguments) or ()))


def _inputs(client: Client, a: Attention) -> tuple[tuple[str, str], ...]:
    """The run's arguments by name: the workflow's signature names them."""
    return views.named(a.run.input, views.workflow_fn(client, a.run))


async def _resumed(client: Client, a: Attention) -> views.Revalidation | None:
    judged = views.revalidations(await client.resumes(a.run.run_id))
    return judged[max(judged)] if judged else None


def _intent(c: Context, now: float) -> tuple[str, ...]:
    if not c.intents:
        return ()
    return tuple(views.redact(x) for x in context_view.intent_lines(c.intents, c.summed, now))


async def read(client: Client, f: Filter, now: float) -> Queue:
    found = await operator.needs_a_human(client)
    around = [a for a in found if f.matches(a, now, kind=False)]
    counts = {k: sum(a.kind == k for a in around) for k in AttentionKind}
    rows = []
    contexts: dict[str, Context] = {}
    for a in around:
        if f.kind is not None and a.kind != f.kind:
            continue
        c = contexts.get(a.run.run_id)
        if c is None:
            c = contexts[a.run.run_id] = await _context(client, a.run.run_id)
        summary = without_commands(a.summary)
        actions = [(x.name, t) for x, t in a.actions]
        bound = tuple(values(a.bound))
        question = "" if a.asks is None else _clipped(
            a.asks.get("question", a.asks) if isinstance(a.asks, dict) else a.asks, 160)
        rows.append(Row(
            key="q-" + _digest(a.kind, a.run.run_id, a.target),
            version=_digest(a.kind, a.run.status, a.run.epoch, _TICKING.sub("expires", summary),
                            a.due, actions, bound, a.asks),
            item=a, summary=summary, brief=short(summary), unknown=_unknown(a, c),
            asks="" if a.asks is None else pretty(a.asks), question=question, bound=bound,
            about=question or short(_WAIT_DETAIL.sub("", summary) if a.target
                                    else _KEYED.sub("", summary), 120),
            inputs=_inputs(client, a),
            inputs_json="" if a.run.input is None else views.pretty(a.run.input),
            intent=_intent(c, now), conversation=views.turns(c.summed, a.run.created_at, TURNS),
            resumed=await _resumed(client, a)))
    return Queue(tuple(rows), counts, len(found))
