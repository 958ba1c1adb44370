"""A pydantic-ai agent in a stead workflow, offline (`stead[pydantic-ai]`).
    stead start stead.examples.pydantic_ai_refund:app refund_order '["123"]'
    stead worker stead.examples.pydantic_ai_refund:app --until-idle  # to the approval
    stead approve RUN --kind approve --token - --payload '{"approvals": {"call_1": true}}'
    # RequestInput's wait for a person is a stead wait: its token is in mailbox.json
    stead worker stead.examples.pydantic_ai_refund:app --until-idle  # refunds, once"""
from pydantic_ai import Agent, DeferredToolRequests, ModelMessage, ModelResponse, RunContext
from pydantic_ai.capabilities import RequestInput
from pydantic_ai.messages import TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import stead
from stead.contrib.pydantic_ai import SteadDurability, run
from stead.examples import services

app = stead.App("pydantic-shop")


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:  # refund, report
    done = [p.content for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    return ModelResponse(parts=[TextPart(f"Done: {done[0]}")] if done else [ToolCallPart(
        "refund", {"order_id": "123", "amount": 4200}, tool_call_id="call_1")])


def ask(ctx: RunContext[object], requests: DeferredToolRequests, token: str) -> None:
    services.Mailbox().send("support@example.com", "Approve?", {"token": token}, key=token[-12:])


agent = Agent(FunctionModel(answer), name="support",
              capabilities=[SteadDurability(), RequestInput(ask, name="approve")])


@agent.tool_plain(requires_approval=True)  # a step: the payment service dedups a rerun by key
def refund(order_id: str, amount: int) -> str:  # the amount is in cents
    return str(services.Payments().refund(order_id, amount, idempotency_key=order_id)["refund"])


@app.workflow(version=1)
async def refund_order(stead_run: stead.Run, order_id: str) -> str:
    return str((await run(stead_run, agent, f"Refund order {order_id}")).output)
