"""An OpenAI agent: each turn and each tool call is journaled once, so a worker that
takes the run over asks and runs nothing again. `python examples/openai_agent.py`
runs offline (the client answers from a script); use `openai.AsyncOpenAI()` for real."""

import asyncio
import json
from typing import Any

import stead
from stead.examples import scripted_api
from stead.llm import openai as so

sdk = scripted_api.openai_client()  # or openai.AsyncOpenAI()
gpt = stead.llm.OpenAIChat(sdk, model="gpt-4o", temperature=0)  # the SDK's own retries: off
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
app = stead.App("openai-weather")


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "celsius": 18}


@app.workflow(version=1)
async def ask(run: stead.Run, question: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    while True:  # a 429 is journaled and retried under stead.Retry, backoff surviving restarts
        turn = await run.llm("turn", gpt, messages, tools=TOOLS, retry=stead.Retry(on=so.TRANSIENT))
        messages.append(so.assistant_message(turn))
        if not turn.tool_calls:
            return turn.text
        for call in turn.tool_calls:  # a tool call is a step: run once, its result journaled
            result = await run.step(call.name, weather, **call.arguments)
            messages.append(so.tool_message(call, json.dumps(result)))


if __name__ == "__main__":
    print(asyncio.run(scripted_api.run_once(app, ask, "Weather in Paris?")))
