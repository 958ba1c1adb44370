"""A stead app whose agent asks a model through `stead.llm.LiteLLM`, offline:
LiteLLM's own `mock_response`/`mock_tool_calls` stand for the provider, one
scripted answer per turn. Everything the outside world sees is a file in
$SDK_DIR: each request LiteLLM sends (model.log, written by a LiteLLM
callback before the call), each tool run (tools.log), the refund service's
ledger (ledger.log), the approval request handed to a person (approval.json).

The agent looks the order up (a step), asks for the refund, which waits for
a person's approval (a bound wait) and is then sent as a write-ahead effect
with an idempotency key and a `check`, and answers."""

from __future__ import annotations

import json
from typing import Any

import litellm
from litellm.integrations.custom_logger import CustomLogger

import stead
from stead.llm import litellm as sl
from stead.testing import kill_process
from tests.workers.agents_app import folder, lines, log

app = stead.App("litellm-tests")
MODEL = stead.llm.LiteLLM("openai/gpt-4o-mini", temperature=0)


class _Asked(CustomLogger):  # type: ignore[misc]
    """Logs every request LiteLLM is about to send: the model asked."""

    def log_pre_api_call(self, model: str, messages: Any, kwargs: Any) -> None:
        log("model.log", f"asked {model}")


if not any(isinstance(c, _Asked) for c in litellm.callbacks):
    litellm.callbacks.append(_Asked())


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


# What the provider answers, turn by turn.
SCRIPT: list[dict[str, Any]] = [
    {"mock_response": "", "mock_tool_calls": [_call("call_lookup", "lookup_order",
                                                     order_id="123")]},
    {"mock_response": "", "mock_tool_calls": [_call("call_refund", "refund", order_id="123",
                                                     amount=4200)]},
    {"mock_response": "Refunded 4200 on order 123."},
]
_OBJECT = {"type": "object", "properties": {"order_id": {"type": "string"},
                                            "amount": {"type": "integer"}}}
TOOLS = [{"type": "function", "function": {"name": n, "parameters": _OBJECT}}
         for n in ("lookup_order", "refund")]


def lookup_order(order_id: str) -> dict[str, Any]:
    log("tools.log", f"lookup {order_id}")
    die = folder() / "die-in-tool"
    if die.exists():  # the worker dies mid-tool, before the tool's result is journaled
        die.unlink()
        kill_process()
    return {"order_id": order_id, "paid": 4200}


def refund(op: stead.Operation, arguments: dict[str, Any]) -> dict[str, Any]:
    log("ledger.log", f"{arguments['order_id']} {arguments['amount']} {op.key}")
    die = folder() / "die-after-sending"
    if die.exists():  # the refund went out; the worker dies before its outcome is journaled
        die.unlink()
        kill_process()
    return {"refund": f"rf_{arguments['order_id']}"}


def refund_check(op: stead.Operation) -> stead.Outcome:
    """What the payment service knows of the refund with this key."""
    sent = [line for line in lines("ledger.log") if line.endswith(f" {op.key}")]
    if not sent:
        return stead.Outcome.not_found()
    return stead.Outcome.done({"refund": "rf_" + sent[0].split()[0]})


def ask_for_approval(op: stead.Operation, wait: stead.Wait[Any],
                     request: dict[str, Any]) -> None:
    """What would send a link to a person: here, a file the test reads."""
    assert wait.token is not None
    (folder() / "approval.json").write_text(json.dumps(
        {"wait_id": wait.wait_id, "token": wait.token.reveal(), **request}))


async def act(run: stead.Run, call: stead.ToolCall) -> Any:
    if call.name == "lookup_order":
        return await run.step("tool lookup_order", lookup_order, **call.arguments)
    request = {"tool": call.name, "call_id": call.id, "arguments": call.arguments}
    w: stead.Wait[Any] = await run.wait("approval", bind={"call_id": call.id},
                                        request=request)
    await run.effect("ask approval", ask_for_approval, w, request, idempotent=True)
    if not (await w).get("approved"):
        return {"refused": True}
    return await run.effect("refund", refund, call.arguments,
                            key=f"refund-{call.arguments['order_id']}", check=refund_check)


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str) -> str:
    convo: list[dict[str, Any]] = [{"role": "user", "content": f"Refund order {order_id}."}]
    for turn, mock in enumerate(SCRIPT, 1):
        answer = await run.llm(f"turn-{turn}", MODEL, convo, tools=TOOLS, **mock)
        if not answer.tool_calls:
            return answer.text
        convo.append(sl.assistant_message(answer))
        for call in answer.tool_calls:
            convo.append(sl.tool_message(call, json.dumps(await act(run, call))))
    raise RuntimeError("the script ran out of turns")
