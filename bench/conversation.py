"""`python -m bench.conversation [--write]`

Bytes stored for a tool-calling conversation of 50 and of 200 turns (1 KB
messages; `bench.conversation_shape`), side by side in one run, each on a
fresh SQLite file: stead with the conversation kept (the default), stead
without (`App(keep_conversation=False)`), LangGraph's SqliteSaver and DBOS
(in bench/.venv-peers, made on first use). A figure is what the database's
pages in use grew by (`common.used_bytes`) over one run after a warm-up
run; the sizes are deterministic, so one repetition is enough.

The conversation is readable afterwards from stead's store when kept (each
message once: `conversation_parts`), from LangGraph's checkpoints (each
checkpoint holds the whole message list), and not from DBOS's (a step's
inputs are not recorded; its outputs, the model's and the tool's messages,
are). `growth` (200/50) is how the bytes scale when the turns quadruple:
4 is linear, 16 quadratic. Not part of CI nor of `python -m bench`; with
`--write` the section between the markers of bench/RESULTS.md is replaced.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from typing import Any

from bench import conversation_shape, machine, peers, runner

BEGIN, END = "<!-- conversation: begin -->", "<!-- conversation: end -->"
TURNS = (50, 200)
CONTESTANTS = (
    ("stead_kept", "stead, conversation kept", "bench.w_conv_stead", {"keep": True}),
    ("stead_off", "stead, not kept", "bench.w_conv_stead", {"keep": False}),
    ("langgraph", "LangGraph (SqliteSaver)", "bench.w_conv_langgraph", {}),
    ("dbos", "DBOS", "bench.w_conv_dbos", {}),
)


def content_bytes(turns: int) -> int:
    """The JSON of the conversation's distinct messages: what any store of
    it must hold at least."""
    messages = [conversation_shape.SYSTEM, conversation_shape.QUESTION,
                *(m for t in range(turns) for m in (conversation_shape.call(t),
                                                    conversation_shape.result(t))),
                conversation_shape.answer()]
    return sum(len(json.dumps(m, separators=(",", ":"))) for m in messages)


def _versions() -> str:
    found = subprocess.run(
        [runner.peers_python(), "-c", "import importlib.metadata as m; print(' '.join("
         "f'{p} {m.version(p)}' for p in ('langgraph', 'langgraph-checkpoint-sqlite', 'dbos')))"],
        capture_output=True, text=True, check=True)
    return found.stdout.strip()


def measure(key: str, module: str, extra: dict[str, Any], turns: int) -> dict[str, Any]:
    python = runner.project_python() if key.startswith("stead") else runner.peers_python()
    system = runner.System(key, key, module, python)
    with runner.scratch_dir() as scratch, runner.fresh_database("sqlite", scratch) as url:
        out = runner.run(system, {**extra, "url": url, "turns": turns})
    assert out["messages"] == 2 * turns + 3, out
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    peers.ensure(upgrade=False)
    found = {(key, turns): measure(key, module, extra, turns)["bytes"]
             for key, _, module, extra in CONTESTANTS for turns in TURNS}
    small, large = TURNS
    rows = [f"| {label} | {found[key, small]:,} | {found[key, large]:,} | "
            f"{found[key, large] / large:,.0f} | {found[key, large] / found[key, small]:.1f} |"
            for key, label, _, _ in CONTESTANTS]
    kept = found["stead_kept", large] - found["stead_off", large]
    text = "\n".join([
        BEGIN,
        "## The conversation, kept: bytes stored per tool-calling conversation (issue 35)",
        "",
        f"`python -m bench.conversation`, {dt.date.today()}, SQLite, "
        f"{machine.describe(False).get('cpu', '')}; {_versions()}. Each turn the model "
        "answers with a 1 KB message calling a tool and the tool's 1 KB result is "
        f"appended; the distinct messages' JSON is {content_bytes(small):,} bytes at "
        f"{small} turns and {content_bytes(large):,} at {large}.",
        "",
        f"| contestant | {small} turns (bytes) | {large} turns (bytes) | "
        f"bytes per turn at {large} | growth {large}/{small} |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"Keeping the conversation readable costs stead {kept:,} bytes at {large} turns "
        f"({kept / content_bytes(large):.2f}x the messages' own JSON): each message is "
        "stored once, and each model call's record names its list instead of holding it. "
        "LangGraph's checkpoints hold the whole list at every step, so its bytes grow with "
        "the square of the turns; DBOS keeps each step's output, not the conversation a "
        "model call was given.",
        END,
    ])
    print(text)
    if args.write:
        runner.write_section(text, runner.BENCH / "RESULTS.md", BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
