"""stead's side of `bench.conversation`: one run of the tool-calling agent
of `bench.conversation_shape`, its conversation kept (`keep`) or not, on a
fresh database; the bytes the run added."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import stead
from bench import common, conversation_shape


class Agent:
    """A model that calls the tool `turns` times, then answers."""

    name = "bench-agent"

    def __init__(self, turns: int) -> None:
        self.turns = turns

    async def complete(self, messages: Sequence[Mapping[str, Any]], **params: Any
                       ) -> stead.Completion:
        turn = (len(messages) - 2) // 2
        if turn >= self.turns:
            return stead.Completion(text=conversation_shape.answer()["content"])
        said = conversation_shape.call(turn)
        return stead.Completion(text=said["content"], tool_calls=(
            stead.ToolCall.parsed(f"call_{turn}", "lookup",
                                  said["tool_calls"][0]["function"]["arguments"]),))


def app_for(keep: bool) -> tuple[stead.App, Any]:
    app = stead.App("conversation", keep_conversation=keep)

    def lookup(n: int) -> str:
        return str(conversation_shape.result(n)["content"])

    @app.workflow(version=1)
    async def agent(run: stead.Run, turns: int) -> int:
        model = Agent(turns)
        messages: list[dict[str, Any]] = [conversation_shape.SYSTEM, conversation_shape.QUESTION]
        while True:
            reply = await run.llm("agent", model, messages, temperature=0)
            if not reply.tool_calls:
                return len(messages) + 1  # and the answer
            c = reply.tool_calls[0]
            messages.append({"role": "assistant", "content": reply.text, "tool_calls": [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.raw_arguments}}]})
            found = await run.step("lookup", lookup, c.arguments["n"])
            messages.append({"role": "tool", "tool_call_id": c.id, "content": found})

    return app, agent


async def main(job: dict[str, Any]) -> dict[str, Any]:
    app, agent = app_for(job["keep"])
    store = await stead.open_store(job["url"])
    client = stead.Client(store, app)
    await client.start(agent, 0)  # the schema and a first run: not what is measured
    await stead.Worker(app, store).run_until_idle()
    before = common.used_bytes(job["url"])
    info = await client.start(agent, job["turns"])
    await stead.Worker(app, store).run_until_idle()
    after = common.used_bytes(job["url"])
    done = await client.get(info.run_id)
    await store.close()
    return {"bytes": after - before, "status": str(done.status), "messages": done.result}


if __name__ == "__main__":
    common.result(asyncio.run(main(common.args())))
