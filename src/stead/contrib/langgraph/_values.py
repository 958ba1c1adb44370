"""What a node or task returns, as JSON, and back.

A node's update is the state's own values: plain JSON, or LangChain objects
(messages) kept in LangChain's JSON form (`langchain_core.load.dumpd`) and
revived by `load` with only LangChain's core classes allowed, so a journal row
can never name a class to build. A `Command` a node returns (an update and
where to go next), and each `Send` in it, is kept in the same constructor form
under LangGraph's own names (`{"lc": 1, "type": "constructor", "id":
["langgraph", "types", "Command"], "kwargs": {"update": ..., "goto": [...]}}`)
and built here, never by `load`. A value with no JSON form is refused when it
is made, not when it is replayed.

So the JSON of an update is what a person writes for it: an effect node's
outcome, decided by its `check` or by `stead reconcile RUN 'node NAME'
--happened '{"receipt": "rf_1"}'`, is that update as the node would have
returned it."""

from __future__ import annotations

import warnings
from typing import Any

from langchain_core._api import LangChainBetaWarning
from langchain_core.load import dumpd, load
from langchain_core.messages import BaseMessage
from langgraph.types import Command, Send
from pydantic_core import to_jsonable_python

from stead import errors


def _type_name(value: Any) -> str:
    """A value with no JSON form enters a digest by its type, never by its repr
    (a repr may carry a memory address, different on every replay)."""
    return type(value).__qualname__


def _without_ids(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return value.model_dump(mode="json", exclude={"id"})
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_ids(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """`value` as JSON for a digest or an effect's arguments (not to be
    revived). A message's `id` is left out: LangGraph's `add_messages` gives a
    message without one a random id each time the graph runs, a replay
    included, and the id says nothing of what the node was asked."""
    return to_jsonable_python(_without_ids(value), fallback=_type_name)


# LangChain's mark of a dict of the graph's own that has an "lc" key, so that
# `load` does not take it for a LangChain object. `dumpd` writes it too, but
# leaves such a dict's values unserialized (a message in it stays an object),
# so containers are walked here and `dumpd` is given what they hold.
_ESCAPED = "__lc_escaped__"


def _encode(value: Any) -> Any:
    if isinstance(value, dict):
        items = {k: _encode(v) for k, v in value.items()}
        return {_ESCAPED: items} if "lc" in value or _ESCAPED in value else items
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return dumpd(value)


def _dump(value: Any, what: str) -> Any:
    data = _encode(value)
    if _unserializable(data):
        raise errors.SteadError(
            f"{what} holds a value with no JSON form ({_type_name(value)}): a journaled node "
            "returns JSON values or LangChain messages; return plain data from it")
    return data


def _unserializable(data: Any) -> bool:
    if isinstance(data, dict):
        if data.get("lc") == 1 and data.get("type") == "not_implemented":
            return True
        return any(_unserializable(v) for v in data.values())
    if isinstance(data, list):
        return any(_unserializable(v) for v in data)
    return False


def _constructor(kind: str, **kwargs: Any) -> dict[str, Any]:
    return {"lc": 1, "type": "constructor", "id": ["langgraph", "types", kind],
            "kwargs": kwargs}


def _langgraph_kind(data: dict[str, Any]) -> str | None:
    """"Command" or "Send" for one of ours (see the module's docstring), else None."""
    name = data.get("id")
    if (data.get("type") == "constructor" and isinstance(name, list) and len(name) == 3
            and name[:2] == ["langgraph", "types"] and name[2] in ("Command", "Send")):
        return str(name[2])
    return None


def encode(value: Any, what: str) -> Any:
    """What a node returned, as JSON (`decode` gives it back)."""
    if not isinstance(value, Command):
        return _dump(value, what)
    if value.graph is not None:
        raise errors.SteadError(
            f"{what} returns a Command to another graph: a journaled node's Command "
            "stays in its own graph")
    goto = value.goto if isinstance(value.goto, list | tuple) else [value.goto]
    return _constructor("Command", update=_dump(value.update, what), goto=[
        _constructor("Send", node=g.node, arg=_dump(g.arg, what)) if isinstance(g, Send)
        else g for g in goto if g != ()])


def checked(result: Any, what: str) -> Any:
    """An effect node's outcome as its check said it (`Outcome.done(result)`),
    as JSON; `InvalidCheckResult` if it is not what a node returns."""
    if result is not None and not isinstance(result, dict | Command):
        raise errors.InvalidCheckResult(
            f"the check of {what} answered Outcome.done({_type_name(result)}): a node's "
            "check answers with the node's update, as the node returns it (a dict of state "
            'keys, such as Outcome.done({"receipt": "rf_1"}), or a Command)')
    try:
        return encode(result, what)
    except errors.SteadError as exc:
        raise errors.InvalidCheckResult(f"the check's answer: {exc}") from None


def _load(data: Any) -> Any:
    if isinstance(data, list):
        return [_load(v) for v in data]
    if not isinstance(data, dict):
        return data
    if set(data) == {_ESCAPED}:
        return {k: _load(v) for k, v in data[_ESCAPED].items()}
    if "lc" in data:  # a LangChain object (a dict of the graph's own is escaped)
        kind = _langgraph_kind(data)
        fields = data.get("kwargs") or {}
        if kind == "Command":
            return Command(update=_load(fields.get("update")),
                           goto=[_load(g) for g in fields.get("goto") or []])
        if kind == "Send":
            return Send(fields["node"], _load(fields.get("arg")))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LangChainBetaWarning)
            return load(data, allowed_objects="core")
    return {k: _load(v) for k, v in data.items()}


def decode(data: Any) -> Any:
    """What `encode` was given, back: the update (or Command) a node returned."""
    return _load(data)
