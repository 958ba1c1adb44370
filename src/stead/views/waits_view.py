"""A wait as the person answering it sees it: what it asks (the request it
was opened with), clipped on a line or whole, anything shaped like a wait
token redacted; and the command that answers it, with a token only for a
wait that takes one. Pure functions over a `WaitRow`; no I/O here."""

from __future__ import annotations

import json
import shlex
from typing import Any

from stead.records import WaitRow
from stead.workflow import waits

LINE = 120  # characters of a request on one line (`stead waits ls`)


def request(w: WaitRow) -> Any:
    """The request as JSON (None: it has none); stored text that is not JSON as text."""
    if w.request is None:
        return None
    try:
        return json.loads(w.request)
    except ValueError:
        return w.request


def _redacted(text: str) -> str:
    return waits.TOKEN_TEXT.sub("[token]", text)


def shown(w: WaitRow) -> Any:
    """The request as JSON, tokens redacted (for `--json`)."""
    if w.request is None:
        return None
    try:
        return json.loads(_redacted(w.request))
    except ValueError:
        return _redacted(w.request)


def bound(w: WaitRow) -> Any:
    """What the wait is bound to, as JSON, tokens redacted (None: nothing)."""
    if not w.bind:
        return None
    try:
        value = json.loads(_redacted(w.bind))
    except ValueError:
        return _redacted(w.bind)
    return value or None


def asks(w: WaitRow, width: int = LINE) -> str:
    """The request on one line, at most `width` characters ("" without one)."""
    if w.request is None:
        return ""
    value = request(w)
    text = value if isinstance(value, str) else json.dumps(
        value, separators=(", ", ": "), ensure_ascii=False)
    text = _redacted(" ".join(text.split()))
    return text if len(text) <= width else f"{text[:width - 1]}…"


def asks_in_full(w: WaitRow) -> str:
    """The request indented (as stored: at most `waits.REQUEST_CHARS` of JSON)."""
    value = request(w)
    if value is None:
        return ""
    return _redacted(value if isinstance(value, str) else json.dumps(
        value, indent=2, ensure_ascii=False))


def answer_command(w: WaitRow) -> str:
    """`stead approve` for this wait: a token only where the wait takes one."""
    command = f"stead approve {shlex.quote(w.run_id)} --wait {shlex.quote(w.wait_id)}"
    if w.token_hash is None:
        return command
    return f"stead approve --link - (paste the link sent), or {command} --token-file FILE"
