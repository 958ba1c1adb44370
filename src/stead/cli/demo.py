"""`stead demo [STORY]`: watch an agent run survive a real worker crash, with
real worker processes (the stories live in `stead.demos`)."""

from __future__ import annotations

from pathlib import Path

import click

from stead.cli import common


@click.command(short_help="Watch an agent run survive a real worker crash and resume.")
@click.argument("story", type=click.Choice(["refund", "ci", "triage", "policy"]), default="refund",
                required=False)
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR",
              help="Keep the database, the fake services' ledgers and the worker logs in DIR "
                   "(new or empty) to explore them afterwards with `stead runs show`.")
@click.option("--model", type=click.Choice(["scripted"]), default="scripted",
              show_default=True,
              help="The model the agent asks. Only the scripted model for now (no network, "
                   "no key): there are no OpenAI/Anthropic adapters yet, so OPENAI_API_KEY "
                   "and ANTHROPIC_API_KEY are not used.")
def demo(story: str, keep: Path | None, model: str) -> None:
    """Watch an agent run survive a real crash, with real worker processes.

    \b
    refund  (default) order 123 waits for the customer's confirmation; its
            worker is SIGKILLed (a deploy); the approval arrives while no
            worker runs; a new worker resumes the run and refunds once
    ci      a coding agent is SIGKILLed while its CI job runs; the new worker
            asks CI about job 471 and never submits a second job
    triage  a worker is SIGKILLed mid-step; only that step runs again
    policy  a refund waits while its policy drops the limit; after a SIGKILL
            the new worker pauses it; resumed under a narrowed grant, it
            refunds once

    Each story prints the run's timeline, the resume record and the fake
    services' own ledgers, checks its invariants and exits non-zero if any
    fails.
    """
    # Imported when a demo runs: the stories load the example apps and their
    # fake services, which no other command needs at start-up.
    from stead import demos

    ok = common.run_async(demos.run_demo(story, keep, echo=click.echo, model=model))
    if not ok:
        raise SystemExit(1)
