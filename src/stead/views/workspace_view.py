"""A run's workspaces as text, for `stead runs show`: each workspace with the
directory it was attached from, its snapshots (journal seq, who saved it,
tree hash, size, what was stored, git state), and what each takeover
restored, where."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stead import codec
from stead.records import Record, RecordKind, ResumeRecord, SnapshotRow


def snapshot_json(s: SnapshotRow) -> dict[str, Any]:
    """A snapshot without its manifest (`stead workspace restore` reads that)."""
    return {"name": s.name, "seq": s.seq, "epoch": s.epoch, "worker_id": s.worker_id,
            "tree": s.tree, "files": s.files, "bytes": s.bytes,
            "stored_bytes": s.stored_bytes, "blobs": s.blobs or "database", "source": s.source,
            "git": None if s.git is None else json.loads(s.git), "at": s.at}


def _git(text: str | None) -> str:
    if text is None:
        return ""
    git = json.loads(text)
    state = "dirty" if git.get("dirty") else "clean"
    untracked = len(git.get("untracked") or ())
    return f"  git {str(git.get('commit'))[:10]} {state}" + (
        f", {untracked} untracked" if untracked else "")


def render(journal: Sequence[Record], snapshots: Sequence[SnapshotRow],
           resumes: Sequence[ResumeRecord]) -> str:
    attached: dict[str, str] = {}
    for r in journal:
        if r.kind == RecordKind.WORKSPACE:
            data = codec.loads(r.payload)
            if isinstance(data, dict) and "attached" in data:
                attached.setdefault(r.name, str(data["attached"]))
    if not attached and not snapshots:
        return ""
    lines = ["", "workspaces"]
    for name in sorted(attached.keys() | {s.name for s in snapshots}):
        lines.append(f"  {name}  attached {attached.get(name, '?')}")
        mine = [s for s in snapshots if s.name == name]
        if not mine:
            lines.append("    no snapshot yet (a takeover attaches the path anew)")
        for s in mine:
            lines.append(f"    snapshot seq {s.seq}  epoch {s.epoch} by {s.worker_id}  tree "
                         f"{s.tree[:12]}…  {s.files} file(s), {s.bytes} bytes ({s.stored_bytes}"
                         f" new, in {s.blobs or 'the database'}){_git(s.git)}")
    restored = [(res, res.details.workspaces) for res in resumes if res.details.workspaces]
    if restored:
        lines.append("  restored")
        for res, found in restored:
            for name, w in sorted(found.items()):
                lines.append(f"    epoch {res.epoch} by {res.worker_id}: {name} from seq "
                             f"{w.get('seq')} into {w.get('path')}")
    lines.append("  restore one by hand: stead workspace restore RUN NAME DIR")
    return "\n".join(lines)
