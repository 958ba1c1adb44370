"""What a run is for and what it may do: `Intent`, its `Grant`s and its `Budget`.

An intent is stored as JSON, versioned per run (every change is a new version
with who and why, never an overwrite). Its instructions are kept as a SHA-256
hash unless the author asks to keep the text. A grant is the authority to call
one tool within a scope:

- `{"order_id": "123"}`: the argument `order_id` must equal "123";
- `{"max_amount": 5000}` / `{"min_amount": 1}`: bounds on the argument `amount`;
- `{"matcher": "name"}`: a function registered with `App.matcher(name)` decides.

A scope covers a call when every key holds. A narrower scope is one that
covers no call its predecessor did not: the same equalities, bounds no wider,
the same matcher, and any number of new keys.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stead import bounds, errors

Matcher = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
MATCHER = "matcher"


def _fields(data: Mapping[str, Any], allowed: set[str], what: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise errors.InvalidIntent(
            f"{what} has unknown field(s) {', '.join(unknown)}; "
            f"the fields are {', '.join(sorted(allowed))}")


def _json_scope(scope: Any, tool: str) -> dict[str, Any]:
    if not isinstance(scope, Mapping):
        raise errors.InvalidIntent(
            f"the scope of the grant for {tool!r} must be a JSON object, not {scope!r}")
    try:
        text = json.dumps(dict(scope), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidIntent(
            f"the scope of the grant for {tool!r} is not JSON ({exc}); give names, "
            "numbers, strings, lists and objects only") from exc
    data: dict[str, Any] = json.loads(text)
    for key, value in data.items():
        if key.startswith(("max_", "min_")) and (
                isinstance(value, bool) or not isinstance(value, int | float)):
            raise errors.InvalidIntent(
                f"the bound {key!r} of the grant for {tool!r} must be a number, not {value!r}")
        if key == MATCHER and not isinstance(value, str):
            raise errors.InvalidIntent(
                f"the matcher of the grant for {tool!r} names a registered matcher (a string)")
    return data


def allows_more(key: str, old: Any, new: Any) -> bool:
    """Whether the scope entry `key` set to `new` allows a call `old` refused."""
    if key.startswith("max_"):
        return bool(new > old)
    if key.startswith("min_"):
        return bool(new < old)
    return bool(new != old)


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """The authority to call `tool` within `scope` until `expires_at` (a Unix
    time; `expires_in` seconds is turned into one when the intent is stored).
    `policy` names the policy version that granted it (e.g. "refunds@7")."""

    tool: str
    scope: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    policy: str | None = None
    expires_at: float | None = None
    expires_in: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise errors.InvalidIntent("a grant names its tool: a non-empty string")
        bounds.text(self.tool, "a grant's tool", errors.InvalidIntent)
        object.__setattr__(self, "scope", _json_scope(self.scope, self.tool))
        if self.expires_at is not None and self.expires_in is not None:
            raise errors.InvalidIntent(
                f"the grant for {self.tool!r} gives expires_at and expires_in; give one")
        what = f"the grant for {self.tool!r}:"
        if self.expires_at is not None:
            bounds.instant(self.expires_at, f"{what} expires_at", errors.InvalidIntent)
        if self.expires_in is not None:
            bounds.seconds(self.expires_in, f"{what} expires_in", error=errors.InvalidIntent)

    def anchored(self, now: float) -> Grant:
        """This grant with `expires_in` turned into `expires_at` from `now`."""
        if self.expires_in is None:
            return self
        return dataclasses.replace(self, expires_at=now + self.expires_in, expires_in=None)

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def covers(self, arguments: Mapping[str, Any],
               matchers: Mapping[str, Matcher] | None = None) -> str | None:
        """None if the scope covers `arguments`; else why not."""
        for key, bound in self.scope.items():
            if key == MATCHER:
                match = (matchers or {}).get(str(bound))
                if match is None:
                    return f"its matcher {bound!r} is not registered on the app"
                if not match(arguments, self.scope):
                    return f"its matcher {bound!r} refused the arguments"
                continue
            if key.startswith(("max_", "min_")):
                name = key[4:]
                value = arguments.get(name)
                if isinstance(value, bool) or not isinstance(value, int | float):
                    return f"{key} needs a numeric argument {name!r}, got {value!r}"
                if key.startswith("max_") and value > bound:
                    return f"{name}={value} is above {key}={bound}"
                if key.startswith("min_") and value < bound:
                    return f"{name}={value} is below {key}={bound}"
                continue
            if key not in arguments or arguments[key] != bound:
                return f"{key}={arguments.get(key)!r} is not the granted {bound!r}"
        return None

    def widens(self, before: Grant) -> list[str]:
        """Where this grant's scope allows more than `before`'s (empty: it
        narrows or keeps it)."""
        wider = []
        for key, old in before.scope.items():
            if key not in self.scope:
                wider.append(f"drops {key}={old!r}")
                continue
            if allows_more(key, old, self.scope[key]):
                wider.append(f"{key} {old!r} → {self.scope[key]!r}")
        return wider

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"tool": self.tool, "scope": dict(self.scope)}
        for name in ("policy", "expires_at", "expires_in"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        return data

    @classmethod
    def from_json(cls, data: Any) -> Grant:
        if not isinstance(data, Mapping):
            raise errors.InvalidIntent(f"a grant is a JSON object, not {data!r}")
        _fields(data, {"tool", "scope", "policy", "expires_at", "expires_in"}, "a grant")
        if "tool" not in data:
            raise errors.InvalidIntent("a grant names its tool")
        return cls(tool=data["tool"], scope=data.get("scope") or {},
                   policy=data.get("policy"), expires_at=data.get("expires_at"),
                   expires_in=data.get("expires_in"))


BUDGET_FIELDS = ("model_calls", "tokens", "effects", "spend", "seconds", "model_cost")


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """Limits on what a run may consume, over its whole life (None: no limit):
    model calls, tokens (`Completion.usage`), effects sent, `spend` (the sum
    of the `cost=` effects declare), `seconds` of wall-clock time and
    `model_cost` (what its model calls cost by the price table, see
    `stead.spend`).

    `tokens` and `model_cost` are reserved: each live model call reserves
    its estimate before it is sent (see `stead.spend`), and one whose estimate
    would pass them pauses the run before it is sent.

    `seconds` counts from the run's `created_at` (when it was started) to
    now, on the store's clock: time spent waiting for an event, sleeping,
    queued, paused or between a crash and its takeover all counts. Once it
    is spent, the run pauses before its next live model call, step or
    effect; a larger budget (a resume with a new intent) lets it go on."""

    model_calls: int | None = None
    tokens: int | None = None
    effects: int | None = None
    spend: float | None = None
    seconds: float | None = None
    model_cost: float | None = None

    def __post_init__(self) -> None:
        for name in BUDGET_FIELDS:
            value = getattr(self, name)
            if value is not None:
                bounds.amount(value, f"budget {name}", errors.InvalidIntent)

    def to_json(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in BUDGET_FIELDS if getattr(self, n) is not None}

    @classmethod
    def from_json(cls, data: Any) -> Budget:
        if not isinstance(data, Mapping):
            raise errors.InvalidIntent(f"a budget is a JSON object, not {data!r}")
        _fields(data, set(BUDGET_FIELDS), "a budget")
        return cls(**{n: data[n] for n in BUDGET_FIELDS if n in data})


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class Intent:
    """What a run is for (`goal`), how it should go about it (`instructions`,
    stored as their SHA-256 unless `keep_instructions`), which plan it follows
    (`plan_version`), what it may do (`grants`), what it may consume
    (`budget`) and why it was given (`reason`)."""

    goal: str = ""
    instructions: str | None = None
    plan_version: str | None = None
    grants: Sequence[Grant] = ()
    budget: Budget | None = None
    reason: str | None = None
    keep_instructions: bool = False
    instructions_sha256: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.goal, str):
            raise errors.InvalidIntent("an intent's goal is a string")
        grants = tuple(self.grants)
        if not all(isinstance(g, Grant) for g in grants):
            raise errors.InvalidIntent("an intent's grants are stead.Grant values")
        object.__setattr__(self, "grants", grants)
        if self.instructions is not None:
            object.__setattr__(self, "instructions_sha256", sha256(self.instructions))

    def anchored(self, now: float) -> Intent:
        """This intent with every grant's `expires_in` made absolute."""
        return dataclasses.replace(self, grants=tuple(g.anchored(now) for g in self.grants))

    def grants_for(self, tool: str) -> list[Grant]:
        return [g for g in self.grants if g.tool == tool]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"goal": self.goal, "grants": [g.to_json() for g in self.grants]}
        if self.instructions_sha256 is not None:
            data["instructions_sha256"] = self.instructions_sha256
        if self.keep_instructions and self.instructions is not None:
            data["instructions"] = self.instructions
            data["keep_instructions"] = True
        for name in ("plan_version", "reason"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.budget is not None:
            data["budget"] = self.budget.to_json()
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: Any) -> Intent:
        if not isinstance(data, Mapping):
            raise errors.InvalidIntent(f"an intent is a JSON object, not {type(data).__name__}")
        _fields(data, {"goal", "instructions", "instructions_sha256", "keep_instructions",
                       "plan_version", "grants", "budget", "reason"}, "an intent")
        grants = data.get("grants") or []
        if not isinstance(grants, list):
            raise errors.InvalidIntent("an intent's grants are a JSON list")
        keep = bool(data.get("keep_instructions", False))
        intent = cls(
            goal=data.get("goal", ""), instructions=data.get("instructions"),
            plan_version=data.get("plan_version"),
            grants=tuple(Grant.from_json(g) for g in grants),
            budget=None if data.get("budget") is None else Budget.from_json(data["budget"]),
            reason=data.get("reason"), keep_instructions=keep,
        )
        if intent.instructions is None and data.get("instructions_sha256") is not None:
            intent = dataclasses.replace(intent,
                                         instructions_sha256=str(data["instructions_sha256"]))
        return intent

    @classmethod
    def loads(cls, text: str) -> Intent:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise errors.InvalidIntent(f"an intent is JSON: {exc}") from exc
        return cls.from_json(data)


def check_tools(intent: Intent, known: frozenset[str] | None, app: str) -> None:
    """Raise `InvalidIntent` if `intent` grants a tool outside `known` (the
    tools app `app` declares); None: the app declares none, nothing to check."""
    if known is None:
        return
    for grant in intent.grants:
        check_tool(grant.tool, known, app)


def check_tool(tool: str, known: frozenset[str] | None, app: str) -> None:
    if known is None or tool in known:
        return
    raise errors.InvalidIntent(
        f"the intent grants tool {tool!r}, which app {app!r} does not know (its tools: "
        f"{', '.join(sorted(known)) or 'none'}); nothing was stored. Fix the grant's tool, "
        "or add it to App(tools=...)")
