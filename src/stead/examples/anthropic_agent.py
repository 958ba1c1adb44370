"""An Anthropic agent, streamed: text reaches `on_text` as it comes, the final message
is journaled, and a replay returns it at once (no request, no deltas).
`python examples/anthropic_agent.py` runs offline; use `anthropic.AsyncAnthropic()` for real."""

import asyncio
import json
from typing import Any

import stead
from stead.examples import scripted_api
from stead.llm import anthropic as sa

sdk = scripted_api.anthropic_client()  # or anthropic.AsyncAnthropic()
claude = stead.llm.AnthropicMessages(sdk, model="claude-sonnet-4-6", max_tokens=1024,
                                     stream=True, on_text=lambda text: print(text, end=""))
TOOLS = [{"name": "weather", "input_schema": {"type": "object"}}]
app = stead.App("anthropic-weather")


def weather(city: str) -> dict[str, Any]:
    return {"city": city, "celsius": 18}


@app.workflow(version=1)
async def ask(run: stead.Run, question: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    while True:
        turn = await run.llm("turn", claude, messages, tools=TOOLS,
                             retry=stead.Retry(on=sa.TRANSIENT))
        messages.append(sa.assistant_message(turn))
        if not turn.tool_calls:  # sa.message(turn): the SDK's typed Message, live or replayed
            return turn.text
        results = [(call, json.dumps(await run.step(call.name, weather, **call.arguments)))
                   for call in turn.tool_calls]
        messages.append(sa.tool_results(results))


if __name__ == "__main__":
    print(f"\n-> {asyncio.run(scripted_api.run_once(app, ask, 'Weather in Paris?'))}")
