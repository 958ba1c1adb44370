"""An app for the dashboard's tests: a refund whose outcome is unknown, a run
waiting for an approval, a paused run whose grant expired, a step whose result
holds markup, and a helper that serves the dashboard on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn

import stead
from stead.llm import ScriptedModel

app = stead.App("webshop")
UI_TOKEN = "test-token-0123456789abcdef"
XSS = "<script>window.__pwned = 1</script><img src=x onerror=alert(1)>"


@app.workflow()
async def refund(run: stead.Run, order_id: str) -> dict[str, Any]:
    def send(op: stead.Operation, order: str) -> dict[str, str]:
        raise stead.OutcomeUncertain("the bank's connection dropped after the request")

    receipt = await run.effect("dispatch_refund", send, order_id)
    return {"refunded": True, "receipt": receipt}


@app.workflow()
async def approval(run: stead.Run, order_id: str) -> dict[str, Any]:
    w = await run.wait("approval", bind={"order_id": order_id})
    return {"decision": await w}


@app.workflow()
async def expiring(run: stead.Run, ticket: str) -> Any:
    facts = await run.state.update({"ticket": ticket, "status": "awaiting_review"},
                                   expect_version=0)
    w = await run.wait("review", bind={"ticket": ticket, "state_version": facts.version},
                       expires_in=dt.timedelta(minutes=20))
    return await w


@app.workflow()
async def long_review(run: stead.Run, order_id: str) -> Any:
    """An approval that is due in two days: a normal one, not an urgent one."""
    w = await run.wait("approval", bind={"order_id": order_id},
                       expires_in=dt.timedelta(hours=48))
    return await w


@app.workflow()
async def asking(run: stead.Run, ticket: int) -> Any:
    """A question for whoever reaches the dashboard (no token), a LangGraph
    interrupt's way: its bind holds only a digest, its request the question."""
    question = {"ticket": ticket, "amount": 4200, "order": "123", "note": "<b>refund?</b>",
                "old_link": "https://shop.example/a?token=stk1.k1.abcdefgh0123456789_-"}
    w = await run.wait("interrupt", bind={"value_sha256": "9f2c" * 16}, token=False,
                       request=question)
    return await w


@app.workflow()
async def granted(run: stead.Run, order_id: str) -> str:
    def dispatch(op: stead.Operation, order: str) -> str:
        return f"refunded {order}"

    return await run.effect("dispatch_refund", dispatch, order_id, tool="dispatch_refund")


@app.workflow()
async def advised(run: stead.Run, order_id: str, amount: int) -> Any:
    """An approval a model advised on: its detail shows the model's turn."""
    model = ScriptedModel([f"Order {order_id} was charged twice; refund {amount}."])
    advice = await run.llm("advise", model, [{"role": "user", "content": f"order {order_id}?"}])
    w = await run.wait("approval", bind={"order_id": order_id, "amount": amount},
                       request={"question": advice.text})
    return await w


@app.workflow()
async def echo(run: stead.Run, text: str) -> str:
    return await run.step("echo", lambda: text)


@app.workflow()
async def chat(run: stead.Run, order_id: str) -> str:
    """A model that calls a tool, then answers: the run page's conversation."""
    model = stead.ScriptedModel([stead.Completion(text="", tool_calls=(
        stead.ToolCall("c1", "track", {"order": order_id}),)), "It shipped on Monday."])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer questions about orders."},
        {"role": "user", "content": f"Where is order {order_id}?\nIt was due last week."}]
    first = await run.llm("answer", model, messages, temperature=0)
    messages += [{"role": "assistant", "content": None,
                  "tool_calls": [c.to_json() for c in first.tool_calls]},
                 {"role": "tool", "tool_call_id": "c1", "content": "shipped on Monday"}]
    return (await run.llm("answer", model, messages, temperature=0)).text


def expired_grant() -> stead.Intent:
    return stead.Intent(goal="refund order 9", grants=[
        stead.Grant("dispatch_refund", {"order": "9"}, expires_at=time.time() - 60)])


async def settle(store: stead.Store) -> None:
    """Run every runnable run of the app as far as it goes."""
    await stead.Worker(app, store, stead.WorkerOptions(poll_interval=0.01)).run_until_idle()


@contextlib.contextmanager
def serving(asgi: Any) -> Iterator[str]:
    """Serve `asgi` on a free loopback port from a thread; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning",
                            backlog=2048, limit_concurrency=None)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the dashboard did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a dashboard page."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


async def log_in(http: httpx.AsyncClient, who: str = "alice") -> str:
    """Log `who` in with the dashboard's token; returns the CSRF token."""
    csrf = csrf_of((await http.get("/login")).text)
    r = await http.post("/login", data={"csrf": csrf, "who": who, "token": UI_TOKEN})
    assert r.status_code == 303, r.text
    return csrf
