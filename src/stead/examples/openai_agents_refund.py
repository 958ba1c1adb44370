"""An OpenAI Agents SDK agent in a stead workflow, offline (`stead[openai-agents]`).
    stead start stead.examples.openai_agents_refund:app refund_order '["123"]'
    stead worker stead.examples.openai_agents_refund:app --until-idle  # to the approval
    stead approve RUN --wait WAIT --token -  # both in example-services/mailbox.json
    stead worker stead.examples.openai_agents_refund:app --until-idle  # refunds, once"""
from agents import Agent, ModelResponse, Usage
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import stead
from stead.contrib import openai_agents
from stead.examples import services

app = stead.App("agents-shop")


def answer(call: ModelCall) -> ModelResponse:  # the scripted model: refund, then report it
    done = [i["output"] for i in call.input if isinstance(i, dict) and "output" in i]
    return ModelResponse(output=[assistant_message(f"Done: {done[0]}") if done else function_call(
        "refund", {"order_id": "123", "amount": 4200}, call_id="call_1")], usage=Usage(),
        response_id=None)


def refund(op: stead.Operation, order_id: str, amount: int) -> str:
    """Refund an order; the amount is in cents."""  # an effect: op.key is its idempotency key
    return str(services.Payments().refund(order_id, amount, idempotency_key=op.key)["refund"])


def ask(op: stead.Operation, wait: stead.Wait[object], request: dict[str, object]) -> str:
    assert wait.token is not None  # the token comes out only here, in the effect sending it
    return services.Mailbox().send("support@example.com", f"Approve {request['tool']}?", {
        "wait_id": wait.wait_id, "token": wait.token.reveal(), **request}, key=op.key)


@app.workflow(version=1)
async def refund_order(run: stead.Run, order_id: str) -> str:
    agent = Agent(name="support", model=ScriptedModel([ModelStep.respond(answer)] * 9), tools=[
        openai_agents.effect_tool(refund, idempotent=True, needs_approval=True)])
    result = await openai_agents.run(run, agent, f"Refund order {order_id}", on_approval=ask)
    return str(result.final_output)
