"""Telling a demo to a person: each journal record in words as it lands, the
resume record, and the checks that make the demo a test."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stead.client import Client
from stead.demos.procs import Echo
from stead.records import Record, RecordKind, RecordStatus, ResumeRecord
from stead.views import timeline


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _args(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={compact(v)}" for k, v in arguments.items())


def describe(rec: Record) -> str:
    """One journal record in a few words."""
    try:
        data = json.loads(rec.payload)
    except ValueError:
        return timeline.summary(rec)
    if not isinstance(data, dict):
        return timeline.summary(rec)
    if rec.kind == RecordKind.LLM and rec.status == RecordStatus.OK:
        calls = data.get("tool_calls") or []
        if calls:
            call = calls[0]
            return f"the model calls {call['name']}({_args(call['arguments'])})"
        return f"the model answers {compact(data.get('text', ''))}"
    if rec.kind == RecordKind.EFFECT:
        if rec.status == RecordStatus.INTENT:
            return f"intent journaled before sending, key {data.get('key')}"
        if rec.status == RecordStatus.ACCEPTED:
            return f"accepted outside as {data.get('external_id')}"
        if rec.status == RecordStatus.OK:
            return "done: " + timeline.shorten(compact(data.get("result")))
    if rec.kind == RecordKind.WAIT:
        if rec.status == RecordStatus.OPEN:
            return f"opened, bound to {compact(data.get('bind'))}"
        if rec.status == RecordStatus.OK:
            return f"event {data.get('event_id')} arrived: {compact(data.get('payload'))}"
    if rec.kind == RecordKind.WORKSPACE:
        if "attached" in data:
            return f"attached {data['attached']}"
        if "tree" in data:
            return (f"saved: tree {str(data['tree'])[:12]}…, {data.get('files')} file(s), "
                    f"{data.get('bytes')} bytes")
    if rec.kind == RecordKind.FINGERPRINT:
        files = data.get("files") or {}
        tree = (data.get("workspace") or {}).get("tree")
        parts = [f"{name} {str(h)[:8]}…" if h else f"{name} (none)" for name, h in files.items()]
        if tree:
            parts.insert(0, f"tree {str(tree)[:8]}…")
        locks = data.get("lockfiles") or {}
        parts += [f"tree {str(h)[:8]}…" if name == "tree" else f"{name} {str(h)[:8]}…"
                  for name, h in locks.items()]
        runtime = data.get("runtime") or {}
        if runtime:
            parts.append(f"python {runtime.get('python')} on {runtime.get('platform')}")
        return "made in: " + (", ".join(parts) or "nothing recorded")
    if rec.kind == RecordKind.DECISION:
        said = f"{data.get('decision')} (policy {data.get('policy_version')})"
        return f"{said}: {compact(data['reason'])}" if data.get("reason") else said
    if rec.kind == RecordKind.STATE and "version" in data:
        return f"version {data['version']}: {timeline.shorten(compact(data.get('data')))}"
    return timeline.summary(rec)


class Tail:
    """Prints each journal record of a run as it is committed, labelled with
    the worker that wrote it (by epoch)."""

    def __init__(self, client: Client, run_id: str, echo: Echo) -> None:
        self.client = client
        self.run_id = run_id
        self.echo = echo
        self.labels: dict[int, str] = {}
        self.seen = 0

    async def pump(self) -> None:
        journal = await self.client.journal(self.run_id)
        for rec in journal[self.seen:]:
            who = self.labels.get(rec.epoch, f"epoch {rec.epoch}")
            # a decision is the policy's, judging the call it names
            kind = "policy" if rec.kind == RecordKind.DECISION else rec.kind
            self.echo(f"    {who} | {kind:<6} {rec.name:<22} {describe(rec)}")
        self.seen = max(self.seen, len(journal))


def resume_lines(resume: ResumeRecord, journal: list[Record]) -> list[str]:
    """A takeover's audit: who, which epoch, from where, and what was reused."""
    classes = resume.details.classes
    reused = [f"{r.kind} {r.name}" if r.kind != r.name else r.kind
              for r in journal[:resume.from_seq] if r.status != RecordStatus.INTENT]
    return [
        "resume record",
        f"  worker    {resume.worker_id}, epoch {resume.epoch}",
        f"  from seq  {resume.from_seq} (the journal it replayed: {resume.reused} "
        "record(s) reused, nothing called again)",
        f"  code      {resume.code_version}",
        f"  replayed  {', '.join(dict.fromkeys(reused))}",
        "  classes   " + (", ".join(f"{k} {v}" for k, v in sorted(classes.items())) or "-"),
    ]


class Checks:
    """The invariants a story promises; the demo exits non-zero if one fails."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.results: list[tuple[bool, str]] = []

    def check(self, ok: bool, what: str) -> bool:
        self.results.append((ok, what))
        return ok

    def report(self) -> bool:
        self.echo("checks")
        for ok, what in self.results:
            self.echo(f"  [{'ok' if ok else 'FAIL'}] {what}")
        failed = sum(1 for ok, _ in self.results if not ok)
        if failed:
            self.echo(f"\n{failed} of {len(self.results)} checks FAILED")
        else:
            self.echo(f"\nall {len(self.results)} checks passed")
        return failed == 0
