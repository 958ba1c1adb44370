"""An app for the run page's tests, the trace view's and the page bench: a
run as long as asked, a shipment sent as an effect, and runs taken over
after their first worker died mid-step."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import stead
from tests.helpers import Crash

app = stead.App("traced")
app.queue("slow", concurrency=2)
crashes: dict[str, bool] = {}  # the orders whose first attempt died already (one a test)


@app.workflow()
async def long(run: stead.Run, records: int) -> int:
    for i in range(records):
        await run.step("tick", lambda i=i: i)  # type: ignore[misc]
    return records


@app.workflow()
async def ship(run: stead.Run, order: str, address: dict[str, Any]) -> Any:
    def send(op: stead.Operation, order: str, address: dict[str, Any]) -> dict[str, str]:
        return {"tracking": f"TRK-{order}", "to": address["city"]}

    label = await run.step("label", lambda: {"order": order, "weight_kg": 2.5})
    sent = await run.effect("ship_parcel", send, order, address)
    return {"label": label, "sent": sent}


@app.workflow()
async def quote(run: stead.Run, order: str, quantity: int, *, gift: bool = False) -> Any:
    def price(order: str, quantity: int, gift: bool) -> dict[str, Any]:
        return {"order": order, "total": 12 * quantity, "wrapped": gift}

    return await run.step("price", price, order, quantity, gift=gift)


@app.workflow()
async def crashy(run: stead.Run, order: str) -> str:
    def reserve() -> str:
        return f"reserved {order}"

    def charge() -> str:
        if not crashes.get(order):
            crashes[order] = True
            raise Crash()
        return f"charged {order}"

    await run.step("reserve", reserve)
    return await run.step("charge", charge)


@app.workflow()
async def crashy_then_ship(run: stead.Run, order: str) -> str:
    def charge() -> str:
        if not crashes.get(order):
            crashes[order] = True
            raise Crash()
        return f"charged {order}"

    await run.step("reserve", lambda: f"reserved {order}")
    await run.step("charge", charge)
    return str(await run.step("ship", lambda: f"shipped {order}"))


async def long_run(client: stead.Client, records: int) -> str:
    """A completed `long` run of `records` step records, stored as an import
    (a worker takes about 2 ms a step: a 20,000-record run is built in a
    second this way). Its journal is a real two-step run's, extended."""
    seed = await client.start("long", 2)
    await stead.Worker(app, client.store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()
    stored = await client.export_run(seed.run_id)
    tick = stored.journal[-1]
    journal = tuple(tick.evolve(seq=i, addr=str(i), payload=str(i), at=tick.at + i * 0.01)
                    for i in range(records))
    row = stored.run.evolve(run_id=uuid.uuid4().hex, input=f'{{"args":[{records}],"kwargs":{{}}}}',
                            result=str(records), updated_at=tick.at + records * 0.01)
    made = await client.import_run(dataclasses.replace(stored, run=row, journal=journal))
    return made.run_id
