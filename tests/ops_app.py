"""A small app for CLI tests (the `app_spec` fixture in conftest.py writes it
into the test's folder), and a way to call the CLI on a database."""

from __future__ import annotations

from click.testing import CliRunner, Result

from stead.cli import main

APP_SOURCE = '''
import stead

app = stead.App("ops")


@app.workflow()
async def hello(run, name):
    return await run.step("greet", lambda: f"hello {name}")


@app.workflow()
async def confirm(run):
    return await (await run.wait("approval"))
'''


def cli(db_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["--db", db_url, *args])
