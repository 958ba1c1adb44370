"""What an operator does to runs, and what needs one: the actions (reconcile,
approve or reject a wait, renew, narrow or deny a grant, resume or terminate
a paused run, retry, cancel, unlock or revoke a wait) and the "needs a human"
list, over `Client`. The dashboard (`stead.web`) draws forms from the actions
and the list; any other face (a script, the command line) calls `act` and
gets the same checks and the same audit.

An action is a small record: its fields, where it applies (`targets`: the
waits, effects or tools of a run as it is now) and what it does (`perform`,
one `Client` call). `act` refuses an action decided on a view of the run that
is no longer true (`RunMovedOn`) or that no longer applies (`UnknownAction`),
and keeps every attempt, done or refused, with who and why
(`Client.store.record_action`). Adding an action is one `Action(...)` in
`ACTIONS`; adding a kind of "needs a human" is one finder in `FINDERS`.

The parts, one module each: `forms` (fields and the `Decision` typed into
them), `situation` (the run as it is now), `actions` (`ACTIONS`, `act`),
`audit` (what `act` keeps, and its text), `attention` (`FINDERS`,
`needs_a_human`). The run shown as text, which they draw on, is `stead.views`.
"""

from __future__ import annotations

from stead.operator.actions import ACTIONS, Action, Done, act, event_id, offered
from stead.operator.attention import (
    FINDERS,
    NEAR_EXPIRY,
    Attention,
    AttentionKind,
    Finder,
    needs_a_human,
)
from stead.operator.forms import Decision, Field, FieldKind
from stead.operator.situation import Situation, situation, unknown_effects

__all__ = [
    "ACTIONS", "FINDERS", "NEAR_EXPIRY", "Action", "Attention", "AttentionKind", "Decision",
    "Done", "Field", "FieldKind", "Finder", "Situation", "act", "event_id", "needs_a_human",
    "offered", "situation", "unknown_effects",
]
