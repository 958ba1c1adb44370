"""What the dashboard's pages show, read through `Client`: a page of a run's
timeline (journal records with model turns, effects, waits, events, resumes),
its trace, its decision context and audit, and the filters that render values.

A row shows its value clipped (`clip`); the full value is one click away,
pretty-printed (`pretty`), in a `<details>` that the page renders closed.
Anything shaped like a wait token is replaced before either, so a token is
never rendered at all. Jinja2's autoescape escapes the rest.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from stead import arguments, bounds, errors, operator
from stead.client import Client, RunInfo
from stead.conversations import transcript
from stead.intent import Intent
from stead.records import (
    ActionRow,
    EventRow,
    IntentRow,
    Lineage,
    MigrationRow,
    Record,
    RecordKind,
    ResumeRecord,
    StateRow,
    WaitRow,
)
from stead.store.transactions.conversations import MODEL, answer_of
from stead.store.transactions.payloads import Forgotten
from stead.views import context_view, runs_view, spend_view, timeline, workspace_view
from stead.web import trace, window
from stead.workflow import waits

CLIP = 160
# The run page's tabs, by the name its URL gives (`?tab=`), and what each says.
TABS = {"overview": "Overview", "timeline": "Timeline", "trace": "Trace",
        "conversation": "Conversation", "context": "Intent and grants",
        "workspace": "Workspace and state", "resumes": "Resume records", "audit": "Audit"}
# The tabs drawn from the window of records the URL names (the others sum up the run).
PAGED = frozenset({"timeline", "conversation"})


def tab_of(query: Any) -> str:
    """The tab a run page's URL asks for: `tab`, else the timeline when it
    names a window of records (links from before tabs), else the overview."""
    asked = str(query.get("tab", ""))
    if asked in TABS:
        return asked
    if asked:
        raise errors.InvalidInput(f"tab must be one of {', '.join(TABS)}, not {asked[:40]!r}")
    return "timeline" if "start" in query or "limit" in query else "overview"


def named(value: Any, fn: Any = None) -> tuple[tuple[str, str], ...]:
    """Stored arguments as (name, clipped value) rows (`stead.arguments`)."""
    return tuple((n, clip(v, 120)) for n, v in arguments.table(value, fn) or ())


def redact(text: str) -> str:
    return waits.TOKEN_TEXT.sub("[token]", text)


def clip(value: Any, width: int = CLIP) -> str:
    """`value` as compact JSON (text as is), tokens redacted, at most `width`
    characters (the rest counted, not shown)."""
    text = value if isinstance(value, str) else json.dumps(
        value, separators=(",", ":"), ensure_ascii=False, default=str)
    text = redact(" ".join(text.split()))
    if len(text) <= width:
        return text
    return f"{text[:width - 1]}… ({len(text):,} chars)"


def pretty(value: Any) -> str:
    """`value` as indented JSON (text as is), tokens redacted: the whole of it."""
    text = value if isinstance(value, str) else json.dumps(
        value, indent=2, ensure_ascii=False, default=str)
    return redact(text)


def pretty_json(text: str | None) -> str:
    """Stored JSON text, indented; text that is not JSON as it is."""
    if text is None:
        return ""
    try:
        return pretty(json.loads(text))
    except ValueError:
        return redact(text)


def clip_json(text: str | None, width: int = CLIP) -> str:
    """Stored JSON text, clipped; text that is not JSON is clipped as text."""
    if text is None:
        return ""
    try:
        return clip(json.loads(text), width)
    except ValueError:
        return clip(text, width)


def when(t: float | None) -> str:
    return "never" if t is None else runs_view.clock_time(t)


def left(t: float | None, now: float) -> str:
    if t is None:
        return "no expiry"
    s = t - now
    if s <= 0:
        return "expired"
    if s < 3600:
        return f"{s / 60:.0f} min left"
    return f"{s / 3600:.1f} h left"


def age(t: float, now: float) -> str:
    """How long ago `t` was, in one unit: `40 s`, `12 min`, `5 h`, `3 d`."""
    s = max(0.0, now - t)
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One journal record as a timeline row, with what its kind adds."""

    record: Record
    offset: str
    summary: str
    extra: str  # model tokens and tool calls, an effect's key, a retry's time
    resumed: ResumeRecord | None  # a takeover resumed here
    payload: str  # the whole payload, indented
    # A step's arguments by name, and as JSON (indented), when its record
    # keeps them (`Record.arguments`): empty for other records and old ones.
    arguments: tuple[tuple[str, str], ...] = ()
    arguments_json: str = ""


def _entry(r: Record, start: float, resumed: ResumeRecord | None) -> Entry:
    data: Any
    try:
        data = json.loads(r.payload)
    except ValueError:
        data = None
    extra = ""
    if isinstance(data, dict):
        # A model call's answer, or the one a step holding an SDK's model call keeps.
        said = data if r.kind == RecordKind.LLM else data.get(MODEL) \
            if r.kind == RecordKind.STEP else None
        if isinstance(said, dict):
            usage = said.get("usage") or {}
            calls = [str(c.get("name")) for c in said.get("tool_calls") or []
                     if isinstance(c, dict)]
            extra = (f"tokens {usage.get('input_tokens', 0)} in / "
                     f"{usage.get('output_tokens', 0)} out")
            if calls:
                extra += "; tool calls: " + ", ".join(calls)
            if said.get("reason"):
                extra += f"; reason: {said['reason']}"
        elif r.kind == RecordKind.EFFECT and data.get("key"):
            extra = f"key {data['key']}"
        elif data.get("retry_at") is not None:
            extra = f"retry at {when(float(data['retry_at']))}"
    called = None
    if r.arguments is not None:
        try:
            called = json.loads(r.arguments)
        except ValueError:
            called = None
    return Entry(r, runs_view.offset(r.at - start), clip(timeline.summary(r), CLIP),
                 redact(extra), resumed, pretty(data) if data is not None else redact(r.payload),
                 named(called), "" if called is None else pretty(called))


@dataclasses.dataclass(frozen=True)
class Turn:
    """A model's turn in the conversation: the messages it was sent that no
    turn before it was (see `stead.conversations.transcript`), what it said
    and the tools it called."""

    entry: Entry
    text: str
    calls: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # (tool, its arguments by name)
    kept: str = transcript.Kept.NO
    sent: int = 0  # how many messages the call sent
    earlier: int = 0  # how many of them an earlier turn shows
    messages: tuple[tuple[str, str], ...] = ()  # (role, what it says), tokens redacted
    params: str = ""  # the request's parameters, when they changed


def _turn(e: Entry) -> Turn | None:
    """The turn of a model call's record, or of a step holding an SDK's model
    call (`stead.contrib`); None for any other record."""
    r = e.record
    data = answer_of(r.kind, r.status, r.payload) if r.kind == RecordKind.STEP else None
    if r.kind == RecordKind.LLM:
        try:
            data = json.loads(r.payload)
        except ValueError:
            return None
    if not isinstance(data, dict):
        return None
    calls = []
    for c in data.get("tool_calls") or []:
        if isinstance(c, dict):
            given = c.get("arguments")
            fields = given.items() if isinstance(given, dict) else ()
            calls.append((str(c.get("name")), tuple((str(k), clip(v, 120)) for k, v in fields)))
    return Turn(e, redact(str(data.get("text") or "")), tuple(calls))


def _conversation(entries: Sequence[Entry], calls: Sequence[transcript.Call]
                  ) -> tuple[Turn, ...]:
    """The turns among `entries`, each with what it was sent (read over the
    whole run: a turn shows only what no turn before it showed)."""
    by_seq = {c.record.seq: c for c in calls}
    before: dict[int, Any] = {}  # the parameters the turn before each sent
    params: Any = None
    for c in calls:
        before[c.record.seq] = params
        params = c.params if c.params is not None else params
    out = []
    for e in entries:
        t, call = _turn(e), by_seq.get(e.record.seq)
        if t is not None and call is not None:
            t = dataclasses.replace(
                t, kept=call.kept, sent=call.sent, earlier=call.earlier,
                messages=tuple((redact(transcript.role(m)), redact(transcript.content(m)))
                               for m in call.new),
                params="" if call.params is None or call.params == before[e.record.seq]
                else clip(call.params, 600))
        if t is not None:
            out.append(t)
    return tuple(out)


def turns(recs: Sequence[Record], start: float, last: int | None = None) -> tuple[Turn, ...]:
    """The model's turns among `recs` (a run created at `start`), the
    `last` of them when given."""
    found = [t for t in (_turn(_entry(r, start, None)) for r in recs
                         if r.kind in (RecordKind.LLM, RecordKind.STEP)) if t is not None]
    return tuple(found if last is None else found[-last:])


@dataclasses.dataclass(frozen=True)
class Revalidation:
    epoch: int
    decision: str
    policy: str
    reason: str
    diff: tuple[tuple[str, str], ...]


def revalidations(resumes: Sequence[ResumeRecord]) -> dict[int, Revalidation]:
    found = {}
    for r in resumes:
        intent = r.details.intent
        if not intent:
            continue
        decision = intent.get("decision") or {}
        # Beside the diff: the action the policy judged, what a pause
        # proposed, and what replay did with each effect.
        rows = {**(intent.get("diff") or {}), "judged": intent.get("action"),
                "proposed": decision.get("proposed_diff"),
                "effects": [dict(e) for e in r.details.effects or ()] or None}
        found[r.epoch] = Revalidation(
            r.epoch, str(decision.get("decision", "?")),
            str(decision.get("policy_version") or "none"), str(decision.get("reason") or ""),
            tuple((str(k), clip(v, 200)) for k, v in rows.items() if v is not None))
    return found


@dataclasses.dataclass(frozen=True)
class RunPage:
    """Everything the run page shows."""

    run: RunInfo
    input: str  # the run's arguments, indented
    inputs: tuple[tuple[str, str], ...]  # the run's arguments by name
    tab: str  # which of TABS the page shows
    turns: tuple[Turn, ...]  # the model's turns among `entries`
    now: float
    window: window.Window  # the part of the journal `entries` shows
    records: int  # how many records the whole journal holds
    last_seq: int
    entries: tuple[Entry, ...]
    effects: tuple[timeline.EffectView, ...]
    waits: tuple[WaitRow, ...]
    events: tuple[EventRow, ...]
    resumes: tuple[ResumeRecord, ...]
    revalidations: dict[int, Revalidation]
    intents: tuple[IntentRow, ...]
    intent_lines: tuple[str, ...]
    intent: Intent | None
    state: tuple[StateRow, ...]
    actions: tuple[ActionRow, ...]
    offered: tuple[tuple[operator.Action, str], ...]
    error: str
    lineage: Lineage
    migrations: tuple[MigrationRow, ...]
    workspaces: str  # the workspaces, their snapshots and restores, as `stead runs show` prints
    forgotten: Forgotten | None = None  # who forgot the run's task, when and why
    # What its model calls reserved and settled, and its tenant's budget, as `stead runs show`
    # prints (see `stead.views.spend_view`).
    spend: str = ""


def workflow_fn(client: Client, info: RunInfo) -> Any:
    """The run's workflow function, to name its arguments (None: not hosted here)."""
    if client.app is None:
        return None
    try:
        return client.app.get(info.workflow, info.version).fn
    except errors.UnknownWorkflow:
        return None


async def run_page(client: Client, run_id: str, shown: window.Window,
                   tab: str = "overview") -> RunPage:
    """The run page's `tab`, with the records of `shown` where the tab lists
    them: what it sums up over the whole run (effects, model calls,
    workspaces) reads only those records."""
    try:
        bounds.text(run_id, "a run id")
    except errors.InvalidValue:
        raise errors.UnknownRun(f"no run {run_id!a}") from None  # none could be stored
    s = await operator.situation(client, run_id)
    info = s.run
    row = await client.store.get_run(run_id)
    page = (await client.journal_page(run_id, start=shown.start, limit=shown.limit)
            if tab in PAGED else [])
    records, last_seq = await client.journal_size(run_id)
    summed = await client.store.journal_summaries(run_id)
    resumes = await client.resumes(run_id)
    intents = await client.intents(run_id)
    marks = {r.from_seq: r for r in resumes}
    key = info.task_id if info.task_id is not None else f"run:{run_id}"
    error = "" if info.error is None else clip(info.error.get("message", info.error), 600)
    entries = tuple(_entry(r, info.created_at, marks.get(r.seq)) for r in page)
    turns = tuple(t for t in map(_turn, entries) if t is not None)
    if tab == "conversation":
        turns = _conversation(entries, await transcript.read(client.store, run_id))
    return RunPage(
        run=info, input=pretty_json(row.input), inputs=named(info.input, workflow_fn(client, info)),
        tab=tab, turns=turns,
        now=s.now, window=shown, records=records, last_seq=last_seq, entries=entries,
        effects=tuple(timeline.effect_views(summed)),
        waits=tuple(await client.waits(run_id=run_id, state=None, limit=1000)),
        events=tuple(await client.events(run_id)),
        resumes=tuple(resumes), revalidations=revalidations(resumes),
        intents=tuple(intents),
        intent_lines=tuple(redact(x) for x in context_view.intent_lines(intents, summed, s.now))
        if intents else (),
        intent=Intent.loads(intents[-1].intent) if intents else None,
        state=tuple(await client.state_history(key)),
        actions=tuple(await client.store.list_actions(run_id)),
        offered=tuple(operator.offered(s)),
        error=error,
        lineage=await client.lineage(run_id),
        migrations=tuple(await client.migrations(run_id)),
        workspaces=workspace_view.render(summed, await client.snapshots(run_id),
                                         resumes).strip(),
        forgotten=await client.store.forgotten(run_id),
        spend=spend_view.render(await client.run_spend(run_id)),
    )


@dataclasses.dataclass(frozen=True)
class TracePage:
    run: RunInfo
    window: window.Window
    last_seq: int
    trace: trace.Trace


async def trace_page(client: Client, run_id: str, shown: window.Window) -> TracePage:
    info = await client.get(run_id)
    page = await client.journal_page(run_id, start=shown.start, limit=shown.limit)
    _, last_seq = await client.journal_size(run_id)
    drawn = trace.trace(page, await client.resumes(run_id), created_at=info.created_at,
                        now=client.store.clock.now(), live=not info.done,
                        started_at=info.started_at)
    return TracePage(info, shown, last_seq, drawn)
