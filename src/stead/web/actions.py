"""What the dashboard does with an operator's form, beside the action itself
(`stead.operator.act`): where to go back to, the confirmation a destructive
action needs, and bulk actions over runs picked on the queue.

- **Back.** Every form carries `next`, the page it was drawn on; the answer
  links back to it. Only a path on this dashboard is followed (`safe_next`):
  anything else (another site, `//host`, a scheme) goes to the queue.
- **Confirm.** A destructive action (`Action.danger`: cancel, terminate,
  revoke, deny, reject, roll back) is taken only with its `confirm` box
  ticked; the box is `required`, so the browser asks before sending, and the
  server refuses a form without it (nothing is done or audited).
- **Bulk.** One action (`BULK`) on each picked run, with one why: each run is
  checked and audited on its own (as drawn: its status and epoch), and the
  answer lists what became of each.
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import Iterable, Mapping, Sequence

from stead import errors, operator
from stead.client import Client
from stead.roles import Role

HOME = "/attention"
MAX_NEXT = 2000
CONFIRM = "confirm"
# The actions that may be taken on many runs at once.
BULK = ("reconcile", "retry", "cancel", "resume")
MAX_PICKS = 200
_PATH = frozenset(string.ascii_letters + string.digits + "/-._~%?&=+@:,")


def safe_next(text: str | None) -> str:
    """`text` if it is a path on this dashboard, else the queue."""
    if (not text or len(text) > MAX_NEXT or not text.startswith("/")
            or text.startswith("//") or not set(text) <= _PATH):
        return HOME
    return text


def confirmed(action: operator.Action, values: Mapping[str, str]) -> bool:
    return not action.danger or values.get(CONFIRM) == "yes"


def unconfirmed(action: operator.Action) -> str:
    return (f"{action.label} cannot be undone: tick “I mean it” on its form, then send it "
            "again. Nothing was done.")


@dataclasses.dataclass(frozen=True)
class Pick:
    """A run picked on the queue, as it was drawn."""

    run_id: str
    status: str
    epoch: int

    @classmethod
    def read(cls, text: str) -> Pick | None:
        run_id, status, epoch = [*text.split(" "), "", "", ""][:3]
        if not run_id or not epoch.isascii() or not epoch.isdigit() or len(epoch) > 18:
            return None
        return cls(run_id[:200], status[:40], int(epoch))


@dataclasses.dataclass(frozen=True)
class Outcome:
    run_id: str
    ok: bool
    message: str


async def _target(client: Client, name: str, run_id: str) -> str:
    """What `name` is done to on the run: its one unknown effect, or the run
    (where none is unknown any more, `operator.act` refuses it, audited)."""
    if name != "reconcile":
        return ""
    s = await operator.situation(client, run_id)
    if not s.unknown_effects:
        return ""
    if len(s.unknown_effects) > 1:
        raise errors.UnknownAction(
            f"run {run_id} has {len(s.unknown_effects)} effects whose outcome is unknown: "
            "reconcile them one by one on its page")
    return s.unknown_effects[0]


async def bulk(client: Client, name: str, picks: Sequence[Pick], values: Mapping[str, str],
               by: str, roles: Iterable[Role]) -> list[Outcome]:
    """Take the action `name` on each run picked, each on its own."""
    held = frozenset(roles)
    done = []
    for p in picks[:MAX_PICKS]:
        try:
            target = await _target(client, name, p.run_id)
            decision = operator.Decision(run_id=p.run_id, target=target, values=values, by=by,
                                         why=values.get("why", ""))
            result = await operator.act(client, name, decision, expect_status=p.status,
                                        expect_epoch=p.epoch, roles=held)
        except errors.StoreError:
            raise
        except errors.SteadError as exc:
            done.append(Outcome(p.run_id, False, str(exc)))
        else:
            done.append(Outcome(p.run_id, True, result.message))
    return done
