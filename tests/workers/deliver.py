"""Deliver one event from a separate process, as a webhook handler would.

    python deliver.py --db URL --run RUN --wait WAIT --token T --event-id E --go FILE

Waits for FILE to exist (so several processes deliver at the same moment),
then prints the verdict as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import stead


async def main(a: argparse.Namespace) -> None:
    store = await stead.open_store(a.db)
    client = stead.Client(store)
    while not Path(a.go).exists():
        time.sleep(0.002)
    verdict = await client.deliver(
        a.run, wait_id=a.wait, event_id=a.event_id, token=a.token,
        payload={"approved": True},
        bind={"order_id": "123", "amount": 4200, "state_version": 1},
    )
    print(json.dumps({"verdict": type(verdict).__name__,
                      "reason": getattr(verdict, "reason", None)}))
    await store.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    for name in ("--db", "--run", "--wait", "--token", "--event-id", "--go"):
        p.add_argument(name, required=True)
    asyncio.run(main(p.parse_args()))
