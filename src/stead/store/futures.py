"""What the group commits share: answering the writer waiting on a future."""

from __future__ import annotations

import asyncio


def settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    """Resolve `fut` with success or `exc`, unless its waiter gave up (cancelled)."""
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


# A writer's future and how its write ended (None: committed).
Settled = tuple[asyncio.Future[None], BaseException | None]


def settle_all(settled: list[Settled]) -> None:
    for fut, exc in settled:
        settle(fut, exc)
