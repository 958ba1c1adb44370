"""How a page's live part stays current without redrawing what did not
change: the part carries a digest of what it shows (`seen`), each poll sends
it back, and the server answers 204 (htmx swaps nothing) while the part it
would draw has the same digest. Forms live outside the part, so a poll never
touches what an operator is typing. A part drawn for a finished run carries
no poll trigger, so its page stops polling.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def digest(html: str) -> str:
    """What a live part shows, in 16 hex digits."""
    return hashlib.sha256(html.encode()).hexdigest()[:16]


def unchanged(query: Mapping[str, str], html: str) -> bool:
    """Whether the poll that sent `query` already shows `html`."""
    return query.get("seen", "") == digest(html)
