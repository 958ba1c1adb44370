"""A run as text: its status and result, its journal as a timeline, each
effect's phase, and the audit of every takeover. Used by `stead runs show` and
`stead demo`; what a run's row alone shows (the table `stead runs ls` prints,
a run as JSON, the times) is in `runs_view`.

Pure functions over what `Client` returns; no I/O here.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stead import arguments
from stead.client import RunInfo
from stead.records import (
    Lineage,
    LineageKind,
    Record,
    RecordKind,
    RecordStatus,
    ResumeClass,
    ResumeRecord,
    RunStatus,
)
from stead.views.runs_view import ago, clock_time, offset, run_json, table

PAYLOAD_WIDTH = 60

if TYPE_CHECKING:  # annotations only: `runs ls` draws no migration
    from stead.records import MigrationRow


def shorten(text: str, width: int = PAYLOAD_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def by_name(stored: Any) -> Any:
    """Stored arguments as an object by parameter name when their record
    names every one (`stead.arguments`); else as stored."""
    rows = arguments.table(stored)
    if rows is None or any(name.startswith("#") for name, _ in rows):
        return stored
    return dict(rows)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def summary(rec: Record) -> str:
    """The record's payload in a few words: a completion's text, an error's
    type and message, otherwise compact JSON."""
    value = _decoded(rec.payload)
    if rec.status == RecordStatus.ERROR and isinstance(value, dict):
        text = f"{value.get('type', 'Error')}: {value.get('message', '')}"
        if value.get("retry_at") is not None:
            text += " (will retry)"
        return shorten(text)
    if rec.kind == RecordKind.LLM and isinstance(value, dict) and "text" in value:
        text = _compact(value["text"])
        calls = value.get("tool_calls") or []
        if calls:
            text += f" +{len(calls)} tool call(s)"
        return shorten(text)
    return shorten(_compact(value))


def _resume_line(r: ResumeRecord, start: float) -> str:
    line = (
        f"epoch {r.epoch}  by {r.worker_id}  at {offset(r.at - start)}  from seq {r.from_seq}"
        f"  code {r.code_version}  reused {r.reused} record(s)"
    )
    version = state_version(r)
    if version is not None:
        line += f"  on task state v{version}"
    return "".join([line, *(f"\n    {said}" for said in replay_words(r))])


def state_version(r: ResumeRecord) -> int | None:
    """The version of the task state a takeover resumed on (0: the task had
    none), if its record says: every record does, older ones only with an
    intent or a policy."""
    world = r.details.world or ((r.details.intent or {}).get("snapshot") or {}).get("world")
    version = world.get("version") if isinstance(world, dict) else None
    return version if isinstance(version, int) else None


def replay_words(r: ResumeRecord) -> list[str]:
    """What the replay of a takeover did, in words: the calls by class, each
    result made again (or not) and why, each effect's fate. The CLI and the
    dashboard both show these."""
    said = []
    words = [f"{CLASS_WORDS[c]} {n}" for c, n in sorted(r.details.classes.items()) if n]
    if words:
        said.append(f"calls: {'; '.join(words)}")
    for stale in r.details.reran or ():
        changed = "; ".join(str(c) for c in stale.get("changed") or ()) or "the intent changed"
        said.append(f"{stale.get('done')}: {stale.get('call')} (seq {stale.get('seq')}), "
                    f"its {stale.get('cause')} changed: {changed}")
    done = [f"{e.get('name')} {e.get('done')}"
            + "".join(f" ({k} {e[k]})" for k in ("external_id", "key") if e.get(k))
            for e in r.details.effects or ()]
    if done:
        said.append(f"effects: {'; '.join(done)}")
    return said


# How a resume record's classes read in `stead runs show`.
CLASS_WORDS = {
    ResumeClass.REUSE: "reused from the journal",
    ResumeClass.NOT_STARTED: "effects never sent, sent now",
    ResumeClass.PENDING_EXTERNAL: "accepted outside without a result, asked with check",
    ResumeClass.OUTCOME_UNKNOWN: "intents without an outcome, resent, asked or stopped",
    ResumeClass.REVALIDATE: "results no longer holding, made again",
}


def journal_lines(
    info: RunInfo, journal: Sequence[Record], resumes: Sequence[ResumeRecord]
) -> list[str]:
    """The journal as a table, with a marker line where each takeover resumed."""
    if not journal:
        return ["  (no records yet)"]
    header = ["seq", "time", "kind", "name", "status", "attempt", "epoch", "payload"]
    rows = [
        [str(r.seq), offset(r.at - info.created_at), r.kind, r.name, r.status,
         str(r.attempt), str(r.epoch), summary(r)]
        for r in journal
    ]
    lines = table(header, rows, right={0, 1, 5, 6})
    out = ["  " + lines[0]]
    marks = {r.from_seq: r for r in resumes}
    for rec, text in zip(journal, lines[1:], strict=True):
        mark = marks.get(rec.seq)
        if mark is not None:
            out.append(f"  -- resumed by {mark.worker_id} at epoch {mark.epoch}: "
                       f"{mark.reused} record(s) above reused --")
        out.append("  " + text)
    return out


# -- effects ------------------------------------------------------------------
# An effect's phase is the phase of its last record (see `stead.workflow.effects`).
PHASES = {RecordStatus.INTENT: "intent", RecordStatus.ACCEPTED: "accepted",
          RecordStatus.OK: "done", RecordStatus.ERROR: "failed",
          RecordStatus.UNKNOWN: "unknown", RecordStatus.RECONCILED: "reconciled"}


@dataclasses.dataclass(frozen=True)
class EffectView:
    """One effect of a run: where it stands and what is known of it."""

    name: str
    key: str
    addr: str
    phase: str  # intent / accepted / done / failed / unknown / reconciled
    attempt: int
    history: tuple[str, ...]  # the phase of each of its records, in journal order
    detail: str
    external_id: str | None = None
    arguments: Any = None  # what its intent recorded it was sent with
    # Each of its records: (phase, when, attempt, epoch), in journal order.
    steps: tuple[tuple[str, float, int, int], ...] = ()


def _fields(rec: Record) -> dict[str, Any]:
    value = _decoded(rec.payload)
    return value if isinstance(value, dict) else {}


def _decision(data: dict[str, Any]) -> str:
    """A reconcile decision in words: what, by whom, why."""
    decision = data.get("decision")
    who = f"by {data.get('by') or '?'}" + (f" ({data['why']})" if data.get("why") else "")
    if decision == "happened":
        return f"happened, {who}: {_compact(data.get('result'))}"
    if decision == "not_happened":
        return f"did not happen, {who}"
    return f"compensated, {who}: {_compact(data.get('result'))}"


def _effect_view(recs: Sequence[Record]) -> EffectView:
    key, external, decided, arguments = "", None, "", None
    for r in recs:
        data = _fields(r)
        if r.status == RecordStatus.INTENT:
            key = str(data.get("key", key))
            arguments = data.get("arguments", arguments)
        elif r.status == RecordStatus.ACCEPTED:
            external = str(data.get("external_id"))
        elif r.status == RecordStatus.RECONCILED:
            decided = _decision(data)
    last = recs[-1]
    data = _fields(last)
    if last.status == RecordStatus.INTENT:
        detail = "sent or not: no outcome recorded"
    elif last.status == RecordStatus.ACCEPTED:
        detail = f"accepted outside as {external}; no result recorded yet"
    elif last.status == RecordStatus.OK:
        detail = _compact(data.get("result"))
    elif last.status == RecordStatus.ERROR:
        detail = summary(last)
    elif last.status == RecordStatus.UNKNOWN:
        detail = f"outcome unknown: {data.get('reason', '')}"
    else:
        detail = decided
    if decided and last.status != RecordStatus.RECONCILED:
        detail += f" (after a decision: {decided})"
    return EffectView(
        name=last.name, key=key, addr=last.addr, phase=PHASES.get(last.status, last.status),
        attempt=last.attempt, history=tuple(PHASES.get(r.status, r.status) for r in recs),
        detail=detail, external_id=external, arguments=arguments,
        steps=tuple((PHASES.get(r.status, r.status), r.at, r.attempt, r.epoch) for r in recs),
    )


def effect_views(journal: Sequence[Record]) -> list[EffectView]:
    """Every effect of the journal, in the order each was first journaled."""
    by_addr: dict[str, list[Record]] = {}
    for r in journal:
        if r.kind == RecordKind.EFFECT:
            by_addr.setdefault(r.addr, []).append(r)
    return [_effect_view(recs) for recs in by_addr.values()]


def effect_lines(info: RunInfo, views: Sequence[EffectView]) -> list[str]:
    """Each effect in a few lines: name and key, phase, history, what is known.
    The one the run stopped on is marked."""
    unknown = info.outcome_unknown
    stopped_on = unknown.key if unknown is not None else None
    out: list[str] = []
    for v in views:
        mark = "   <- the run stopped here" if v.key == stopped_on else ""
        out += [
            f"  {v.name}  key {v.key}{mark}",
            f"    phase    {v.phase} (attempt {v.attempt})",
            f"    history  {' > '.join(v.history)}",
            f"    detail   {shorten(v.detail, 200)}",
        ]
    return out


def unknown_lines(info: RunInfo, views: Sequence[EffectView]) -> list[str]:
    """For a run stopped as `outcome_unknown`: what is known, and the commands
    that record a decision."""
    stop = info.outcome_unknown
    if stop is None:
        return []
    name, key = stop.name, stop.key
    # Name the effect by its name, or by its key if the name is not unique.
    ref = name if sum(v.name == name for v in views) <= 1 else key
    cmd = f"stead reconcile {info.run_id} {shlex.quote(ref)}"
    return [
        f"outcome unknown: stead cannot tell whether effect {name!r} happened",
        f"  key        {key}  (attempt {stop.attempt})",
        f"  address    {stop.addr or '?'}",
        f"  arguments  {shorten(_compact(by_name(stop.arguments)), 200)}",
        f"  known      {stop.known}",
        "  find out outside (look it up by its key), then record what happened:",
        f"    it happened, with result JSON:  {cmd} --happened JSON --why TEXT",
        f"    it did not (send it, same key): {cmd} --not-happened --why TEXT",
        f"    it happened and was undone:     {cmd} --compensate JSON --why TEXT",
        "  the decision is journaled with who made it (--by NAME, default: you) and why",
    ]


def lease_text(info: RunInfo, now: float) -> str:
    """Who may run it now: a lease and until when, or that it waits for a worker."""
    code = f"{info.workflow}@{info.version}"
    if info.status == RunStatus.PENDING:
        return f"not started: waiting for a worker hosting {code}"
    if info.status != RunStatus.RUNNING:
        return ""
    expires = info.lease_expires_at
    if info.lease_owner is None or expires is None:
        return f"no lease: waiting for a worker hosting {code}"
    if expires > now:
        return (f"lease held by {info.lease_owner} until {clock_time(expires)} "
                f"(in {ago(expires - now)})")
    return (f"lease held by {info.lease_owner} expired at {clock_time(expires)} "
            f"({ago(now - expires)} ago): expired, waiting for a worker hosting {code}")


def last_update(info: RunInfo, journal: Sequence[Record]) -> float:
    """When the run last changed: its row, or its newest journal record if later
    (a journal append does not touch the row)."""
    return max([info.updated_at, *(r.at for r in journal[-1:])])


def render_run(
    info: RunInfo, journal: Sequence[Record], resumes: Sequence[ResumeRecord], *,
    now: float | None = None,
) -> str:
    """Everything `stead runs show` prints for one run. With `now`, where its
    lease stands (held until when, or expired)."""
    lease = "" if now is None else lease_text(info, now)
    updated = last_update(info, journal)
    lines = [
        f"run       {info.run_id}",
        f"workflow  {info.workflow}@{info.version}",
        f"task      {info.task_id or '-'}",
        *([f"tenant    {info.tenant}"] if info.tenant else []),
        *([f"queue     {info.queue} (priority {info.priority})"] if info.queue else []),
        f"status    {info.status}",
        f"epoch     {info.epoch}" + (f"  (lease held by {info.lease_owner})"
                                     if info.lease_owner and now is None else ""),
        *([f"lease     {lease}"] if lease else []),
        f"created   {clock_time(info.created_at)}",
        f"updated   {clock_time(updated)}  ({offset(updated - info.created_at)})",
        *([f"parent    {info.parent_id} (this run is its child)"] if info.parent_id else []),
        *([f"deadline  {clock_time(info.deadline)}"] if info.deadline is not None else []),
        *(["cancel    requested: it ends at its next call boundary"]
          if info.cancel_requested and not info.done else []),
    ]
    if info.result is not None or info.status == RunStatus.COMPLETED:
        lines.append(f"result    {_compact(info.result)}")
    views = effect_views(journal)
    if info.outcome_unknown is not None:
        lines += ["", *unknown_lines(info, views)]
    elif info.error is not None:
        err = info.error
        lines.append(f"error     {err.get('type', 'Error')}: {err.get('message', '')}")
        sent = [v for v in views if v.phase in ("done", "reconciled")]
        if info.status == RunStatus.FAILED and sent:
            lines.append(f"go on     it failed after {len(sent)} effect(s) happened; once "
                         f"the code is fixed, `stead runs fork {info.run_id}` goes on from "
                         "its journal, replaying them, not sending them again")
    lines += ["", f"journal ({len(journal)} record(s))", *journal_lines(info, journal, resumes)]
    if views:
        lines += ["", f"effects ({len(views)})", *effect_lines(info, views)]
    lines += ["", f"resumes ({len(resumes)})"]
    if resumes:
        lines += ["  " + _resume_line(r, info.created_at) for r in resumes]
    else:
        lines.append("  (none: the run was never taken over)")
    return "\n".join(lines)


def render_migrations(workflow: str, migrated: Sequence[MigrationRow]) -> str:
    """Each migration of a run: versions, who, when, the journal's length
    before and after (the old journal is kept), and its rollback."""
    lines = ["migrations"]
    for m in migrated:
        lines.append(
            f"  {m.number}. {workflow}@{m.from_version} -> {workflow}@{m.to_version} by "
            f"{m.author} at {clock_time(m.at)} (epoch {m.epoch}); journal "
            f"{m.records_before} -> {m.records_after} record(s), the old one kept")
        if m.rolled_back_at is not None:
            lines.append(f"     rolled back by {m.rolled_back_by} at "
                         f"{clock_time(m.rolled_back_at)}")
    return "\n".join(lines)


# -- JSON forms (for --json) -------------------------------------------------
def record_json(rec: Record) -> dict[str, Any]:
    data = dataclasses.asdict(rec)
    data["payload"] = _decoded(rec.payload)
    return data


def resume_json(rec: ResumeRecord) -> dict[str, Any]:
    data = dataclasses.asdict(rec)
    data["detail"] = _decoded(rec.detail)
    return data


def show_json(
    info: RunInfo, journal: Sequence[Record], resumes: Sequence[ResumeRecord]
) -> dict[str, Any]:
    return {
        "run": {**run_json(info), "updated_at": last_update(info, journal)},
        "journal": [record_json(r) for r in journal],
        "effects": [dataclasses.asdict(v) for v in effect_views(journal)],
        "resumes": [resume_json(r) for r in resumes],
    }


def lineage_lines(lineage: Lineage) -> list[str]:
    """Where the run came from, and the runs that came from it."""
    lines: list[str] = []
    p = lineage.parent
    if p is not None:
        lines.append(f"  forked from run {p.parent_id} at {p.at_seq} (its first {p.at_seq} "
                     "record(s))" if p.kind == LineageKind.FORK
                     else f"  continues run {p.parent_id} (which ended at seq {p.at_seq})")
    for c in lineage.children:
        lines.append(f"  fork {c.run_id} at {c.at_seq}" if c.kind == LineageKind.FORK
                     else f"  continued as run {c.run_id}")
    return ["lineage", *lines] if lines else []


def lineage_json(lineage: Lineage) -> dict[str, Any]:
    return {"parent": None if lineage.parent is None else dataclasses.asdict(lineage.parent),
            "children": [dataclasses.asdict(c) for c in lineage.children]}
