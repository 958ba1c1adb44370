"""DBOS's side of `bench.conversation`, in bench/.venv-peers: the same
tool-calling agent as a workflow whose model call and tool call are steps
(the model step given the whole conversation, as an agent's is); the bytes
the workflow added. DBOS records each step's output, not its input."""

from __future__ import annotations

from typing import Any

from bench import common, conversation_shape
from bench.w_dbos import launch
from dbos import DBOS


@DBOS.step()
def ask(messages: list[dict[str, Any]], turns: int) -> dict[str, Any]:
    turn = (len(messages) - 2) // 2
    return conversation_shape.answer() if turn >= turns else conversation_shape.call(turn)


@DBOS.step()
def lookup(turn: int) -> dict[str, Any]:
    return conversation_shape.result(turn)


@DBOS.workflow()
def agent(turns: int) -> int:
    messages = [conversation_shape.SYSTEM, conversation_shape.QUESTION]
    while True:
        said = ask(messages, turns)
        messages.append(said)
        if not said.get("tool_calls"):
            return len(messages)
        messages.append(lookup((len(messages) - 3) // 2))


def main(job: dict[str, Any]) -> dict[str, Any]:
    launch(job)
    DBOS.start_workflow(agent, 0).get_result()
    before = common.used_bytes(job["url"])
    count = DBOS.start_workflow(agent, job["turns"]).get_result()
    after = common.used_bytes(job["url"])
    DBOS.destroy()
    return {"bytes": after - before, "messages": count}


if __name__ == "__main__":
    common.result(main(common.args()))
