"""What a person or a system changes on a run from outside its worker, while
it runs, waits or is paused: its intent (`Revision`: a new goal, new
instructions, grants narrowed) and its task's state (`StateEdit`: a JSON merge
patch by compare-and-set on the version). Both are pure here; `Client.revise`
and `Client.set_state` store them in one transaction with who and why, and the
run sees them at its next resume (see docs/architecture.md §8)."""

from __future__ import annotations

import dataclasses
import getpass
import os
from collections.abc import Mapping, Sequence
from typing import Any

from stead import bounds, codec, errors
from stead.intent import Grant, Intent
from stead.records import IntentRow, RunRow, StateRow
from stead.workflow.state import OUTSIDE_LIMIT, Facts, merge_patch, state_text


def author(by: str | None) -> str:
    """Who makes a change to a run: `by`, else the OS user running this process."""
    if by is None:
        try:
            by = os.environ.get("USER") or getpass.getuser()
        except (OSError, KeyError):  # no login name in this environment
            by = ""
    if not isinstance(by, str) or not by.strip():
        raise errors.InvalidInput("say who makes this change (by=...): it is recorded")
    return bounds.text(by, "who makes the change (by)")


def refuse_ended(run: RunRow, what: str) -> None:
    """Nothing changes an ended run: raise `RunEnded` saying what was asked."""
    if not run.live:
        raise errors.RunEnded(
            f"run {run.run_id} is {run.status}: it has ended, and {what} would change "
            "nothing it does; nothing was stored. Start a new run for the task "
            "(stead start) if the work must go on")


@dataclasses.dataclass(frozen=True)
class Revision:
    """A change to a run's intent: `goal` and `instructions` replace the
    ones in force when given; `grants` (when given) is the run's new set of
    grants, each one narrowing a grant it holds for the same tool (a scope no
    wider, an expiry no later; left out, the expiry and the granting policy
    are the held grant's); a tool left out is withdrawn."""

    goal: str | None = None
    instructions: str | None = None
    grants: Sequence[Grant] | None = None

    def __post_init__(self) -> None:
        if self.goal is None and self.instructions is None and self.grants is None:
            raise errors.InvalidIntent(
                "a revision changes something: give a goal, instructions or grants")
        for name in ("goal", "instructions"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise errors.InvalidIntent(f"a revised {name} is a non-empty string")
        if self.grants is not None:
            grants = tuple(self.grants)
            if not all(isinstance(g, Grant) for g in grants):
                raise errors.InvalidIntent("a revision's grants are stead.Grant values")
            object.__setattr__(self, "grants", grants)

    def apply(self, current: IntentRow | None, run: RunRow, now: float) -> str:
        """The JSON text of the intent in force with this revision applied.
        Raises (nothing is stored) for an ended run, a run with no intent, or
        a grant that would widen what the run may do."""
        refuse_ended(run, "revising its intent")
        if current is None:
            raise errors.InvalidIntent(
                f"run {run.run_id} has no intent to revise; give a run its intent when "
                "it starts (stead start --intent FILE)")
        before = Intent.loads(current.intent)
        after = before
        if self.goal is not None:
            after = dataclasses.replace(after, goal=self.goal)
        if self.instructions is not None:
            after = dataclasses.replace(after, instructions=self.instructions,
                                        instructions_sha256=None)
        if self.grants is not None:
            narrowed = tuple(_inherit(g, before.grants_for(g.tool)).anchored(now)
                             for g in self.grants)
            for grant in narrowed:
                _narrows(grant, before.grants_for(grant.tool), run.run_id)
            after = dataclasses.replace(after, grants=narrowed)
        return Intent.from_json(after.to_json()).dumps()


def _inherit(grant: Grant, held: Sequence[Grant]) -> Grant:
    """`grant` with what it leaves out (its expiry, the policy that granted
    it) taken from the grant it narrows."""
    if not held:
        return grant
    if grant.expires_at is None and grant.expires_in is None:
        grant = dataclasses.replace(grant, expires_at=held[0].expires_at)
    if grant.policy is None:
        grant = dataclasses.replace(grant, policy=held[0].policy)
    return grant


def _narrows(grant: Grant, held: Sequence[Grant], run_id: str) -> None:
    """Raise `GrantWidening` unless `grant` narrows one of `held`."""
    if not held:
        raise errors.GrantWidening(
            f"run {run_id} holds no grant for {grant.tool!r}: a revision may narrow or "
            "withdraw grants, not add one. Give it with a new intent on a paused run "
            "(stead runs resume RUN --intent FILE)")
    why: list[str] = []
    for before in held:
        wider = grant.widens(before)
        if before.expires_at is not None and (
                grant.expires_at is None or grant.expires_at > before.expires_at):
            wider.append("a later expiry")
        if not wider:
            return
        why.extend(wider)
    raise errors.GrantWidening(
        f"the revised grant for {grant.tool!r} would widen it ({'; '.join(why)}); a "
        "revision may only narrow. Renew it instead (stead grants renew RUN TOOL --widen)")


@dataclasses.dataclass(frozen=True)
class StateEdit:
    """A change to a task's facts from outside any run: `patch` (JSON merge
    patch: None deletes a key) applied only if the state is still at
    `expect_version` (0: nothing recorded yet)."""

    patch: Mapping[str, Any]
    expect_version: int

    def __post_init__(self) -> None:
        if not isinstance(self.patch, Mapping):
            raise errors.InvalidInput("a state patch is a JSON object (JSON merge patch)")
        if isinstance(self.expect_version, bool) or not isinstance(self.expect_version, int) \
                or self.expect_version < 0:
            raise errors.InvalidInput(
                "expect_version is the version the change was decided on: an integer >= 0 "
                "(stead state show TASK prints it)")

    def apply(self, task_key: str, current: StateRow | None) -> str:
        """The JSON text of the new facts; `StateConflict` if the state moved."""
        facts = Facts.from_row(current)
        if facts.version != self.expect_version:
            raise errors.StateConflict(task_key, self.expect_version, facts.version)
        patch = codec.loads(codec.dumps(dict(self.patch), what="the state patch"))
        return state_text(merge_patch(facts.data, patch), task_key, OUTSIDE_LIMIT)
