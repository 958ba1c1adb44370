"""`stead demo`: stories told with real worker processes and a real SIGKILL,
each checking its own invariants, so a demo is also a test.

- `refund` (the default): the order-123 refund waits for the customer, its
  worker is killed, the approval arrives while no worker runs, a new worker
  resumes it and refunds once (`refund.py`, `stead.examples.refund_agent`).
- `ci`: a coding agent is killed while its CI job runs; the new worker asks
  CI about job 471 and never submits a second job (`ci.py`,
  `stead.examples.ci_agent`).
- `triage`: a worker is killed mid-step; the step that was never journaled
  runs again, once; nothing else does (`triage.py`).
- `policy`: a refund waits while its policy drops the limit and its grant
  expires; after a SIGKILL the new worker's revalidation pauses it, nothing
  asked or sent; one decision (a narrowed grant) clears that pause, the lapsed
  grant pauses it before its next model call, and once renewed the model
  proposes the refund under the new policy and it is sent once (`policy.py`,
  `stead.examples.policy_agent`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from stead.demos import ci, policy, procs, refund, triage
from stead.demos.procs import Echo, Stage

STORIES: dict[str, Callable[[Stage], Awaitable[tuple[bool, str | None]]]] = {
    "refund": refund.tell,
    "ci": ci.tell,
    "triage": triage.tell,
    "policy": policy.tell,
}


MODELS = ("scripted",)


async def run_demo(story: str, keep: Path | None, *, echo: Echo,
                   model: str = "scripted") -> bool:
    """Tell `story` in `keep` (kept afterwards; new or empty) or in a temporary
    folder. True if every check passed."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; one of: {', '.join(MODELS)}")
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("ANTHROPIC_API_KEY"):
        echo("(a model API key is set, but stead has no model adapters yet: the demo uses "
             "the scripted model)\n")
    if keep is not None:
        if keep.exists() and any(keep.iterdir()):
            echo(f"{keep} is not empty; give --keep a new or empty folder")
            return False
        keep.mkdir(parents=True, exist_ok=True)
        return await _tell(story, Stage(keep.resolve(), echo, kept=True))
    with tempfile.TemporaryDirectory(prefix="stead-demo-") as tmp:
        return await _tell(story, Stage(Path(tmp).resolve(), echo, kept=False))


async def _tell(story: str, stage: Stage) -> bool:
    stage.services.mkdir()
    try:
        ok, run_id = await STORIES[story](stage)
    except procs.DemoFailed as exc:
        await stage.stop_all()  # so that their logs are complete
        stage.echo(f"\nFAILED: {exc}")
        for line in stage.log_tails():
            stage.echo(f"  {line}")
        return False
    finally:
        await stage.stop_all()
    echo = stage.echo
    if stage.kept and run_id is not None:
        echo("\nexplore it afterwards:")
        echo(f"  stead --db {stage.db} runs show {run_id}")
        echo(f"  stead --db {stage.db} runs ls")
        echo(f"  the services' ledgers: {stage.services}/*.json")
        echo(f"  worker logs: {', '.join(str(w.log) for w in stage.workers)}")
    elif run_id is not None:
        echo("\nthe database was in a temporary folder and is gone; run "
             f"`stead demo{'' if story == 'refund' else ' ' + story} --keep DIR` to explore "
             "it afterwards with `stead runs show`")
    return ok
