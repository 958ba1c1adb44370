"""The documentation cannot drift from the code: the site builds with `mkdocs build
--strict` (every link checked), every README link leads to a file of the repository,
and every fenced code block of README.md and docs/ is either run here or says it is
not Python.

A ```python block is run: each page's blocks in order, in one namespace, in a fresh
temporary directory (a SQLite store there), offline, each bounded in time; top-level
`await` works, as in `python -m asyncio`, and so does a script's `asyncio.run(main())`.
A block that cannot run on its own is marked by a `<!-- fragment -->` line just before
it, and fragments stay a minority. Shell sessions are ```bash or ```console, output
```text: they are not run."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

import stead
from tests import stress

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_PYTHON = {"bash", "console", "text", "json", "sql", "toml", "yaml", "html", "mermaid"}
# The architecture map is the lead's to edit: its blocks may be unnamed, never Python.
UNNAMED_ALLOWED = {ROOT / "docs" / "architecture.md"}
FRAGMENT = "<!-- fragment -->"
# At most this share of the Python blocks may be fragments.
MAX_FRAGMENT_SHARE = 0.25
BLOCK_SECONDS = 20  # on a quiet box; scaled to the machine's load (tests/stress.py)
# A page whose SDK conflicts with another extra's pins (docs/install.md) names it in a
# `<!-- needs: MODULE -->` line: without the module installed its blocks are skipped.
NEEDS = re.compile(r"^<!-- needs: (?P<module>[\w.]+) -->$", re.M)
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    source: str
    fragment: bool

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, in order."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent = opening["indent"]
        before = next((line.strip() for line in reversed(lines[:i]) if line.strip()), "")
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = textwrap.dedent("\n".join(line.removeprefix(indent) for line in lines[i + 1:end]))
        found.append(Block(page, i + 1, opening["lang"], body + "\n", before == FRAGMENT))
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]
PYTHON = [b for b in ALL if b.lang == "python"]

# Run in a process of its own per page: the page's blocks in one namespace, each
# bounded by an alarm (sync code) and by wait_for (awaits). A block that awaits at
# its top level runs on the page's one event loop (`asyncio.Runner`); no loop runs
# between blocks, so a block written as a script may call `asyncio.run(main())`.
RUNNER = """
import ast, asyncio, json, signal, sys

def timed_out(signum, frame):
    raise TimeoutError("the block ran past its time")

namespace = {"__name__": "__main__"}
with asyncio.Runner() as runner:
    for where, source, seconds in json.load(sys.stdin):
        signal.signal(signal.SIGALRM, timed_out)
        signal.alarm(seconds)
        code = compile(source, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if asyncio.iscoroutine(result):
            runner.run(asyncio.wait_for(result, seconds))
        signal.alarm(0)
        print("ran", where, flush=True)
"""


def test_every_block_names_its_language() -> None:
    unnamed = [b.where for b in ALL if not b.lang and b.page not in UNNAMED_ALLOWED]
    assert not unnamed, f"blocks without a language (```python, ```bash, ```text...): {unnamed}"
    unknown = [f"{b.where} ({b.lang})" for b in ALL if b.lang not in NOT_PYTHON | {"python", ""}]
    assert not unknown, f"blocks in a language this test does not know: {unknown}"


def test_fragments_stay_a_minority() -> None:
    fragments = [b for b in PYTHON if b.fragment]
    assert len(PYTHON) >= 20
    assert len(fragments) <= MAX_FRAGMENT_SHARE * len(PYTHON), (
        f"{len(fragments)} of {len(PYTHON)} Python blocks are fragments: make some runnable")
    stray = [b.where for b in ALL if b.fragment and b.lang != "python"]
    assert not stray, f"only Python blocks are fragments: {stray}"


GETTING_STARTED = ROOT / "docs" / "getting-started.md"
RUN_PAGES = sorted({b.page for b in PYTHON if not b.fragment})


def run_page(page: Path, tmp_path: Path) -> str:
    """Run the page's blocks, in order, in one process; what they printed."""
    runnable = [b for b in PYTHON if b.page == page and not b.fragment]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STEAD_", "OPENAI", "ANTHROPIC"))}
    # Offline: anything that tries the network meets a closed port.
    env |= {"HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
            "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    seconds = round(BLOCK_SECONDS * stress.slow())
    stdin = json.dumps([[b.where, b.source, seconds] for b in runnable])
    done = subprocess.run([sys.executable, "-c", RUNNER], input=stdin, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=seconds * len(runnable))
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert done.stdout.count("ran ") == len(runnable)
    return done.stdout


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    for needed in NEEDS.finditer(page.read_text()):
        pytest.importorskip(needed["module"])
    printed = run_page(page, tmp_path)
    if page == GETTING_STARTED:
        # The first agent a newcomer meets completes, with the real OpenAI SDK, offline.
        assert "Checked: " in printed


def test_getting_started_runs_a_real_sdk_agent() -> None:
    source = "".join(b.source for b in PYTHON if b.page == GETTING_STARTED and not b.fragment)
    assert "openai.AsyncOpenAI(" in source and "httpx2.MockTransport(" in source
    assert "stead.Worker(app, store).run_until_idle()" in source


def test_the_agents_sdk_page_runs_the_sdk_model_offline() -> None:
    """The OpenAI Agents SDK page's agent is the SDK's own Chat Completions model over
    the real client, its HTTP answered offline, run by a worker through an approval."""
    page = ROOT / "docs" / "guides" / "agent-author" / "openai-agents.md"
    source = "".join(b.source for b in PYTHON if b.page == page and not b.fragment)
    assert "OpenAIChatCompletionsModel(" in source and "httpx2.MockTransport(" in source
    assert "client.deliver(" in source and 'assert answer == "Refunded: rf_123"' in source


def test_getting_started_is_a_script_its_commands_run(tmp_path: Path) -> None:
    """support.py as the page builds it (the agent, then the `main` added at its end)
    runs with `python support.py`, and the shell commands the page gives next start and
    finish a second run from the folder that holds it."""
    source = "\n\n".join(b.source for b in PYTHON if b.page == GETTING_STARTED
                         and not b.fragment)
    assert "asyncio.run(main())" in source  # a script: no top-level await
    (tmp_path / "support.py").write_text(source)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STEAD_", "OPENAI", "ANTHROPIC"))}
    env |= {"HOME": str(tmp_path), "HTTP_PROXY": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9"}

    def run(*argv: str) -> str:
        done = subprocess.run(list(argv), cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    assert run(sys.executable, "support.py").startswith("Checked: ")
    stead_cli = [sys.executable, "-m", "stead"]
    run(*stead_cli, "start", "support:app", "support", '["Can I get a refund for order 123?"]',
        "--task-id", "question-2")
    run(*stead_cli, "worker", "support:app", "--until-idle")
    listed = run(*stead_cli, "runs", "ls")
    assert re.search(r"support@1\s+completed\s+question-2", listed), listed
    assert re.search(r"support@1\s+completed\s+question-1", listed), listed


# stead is installed from its checkout (docs/install.md): `pip install stead` and
# `pip install 'stead[openai]'` find nothing on a package index.
BY_NAME = re.compile(r"pip\s+install\s+(?:-\S+\s+)*['\"]?stead\b")
# `pip install -e '.[openai,postgres]'`, or with the checkout's path for the dot.
EXTRAS = re.compile(r"pip\s+install\s+-e\s+['\"]?(?:\.|\S*/stead)\[(?P<names>[^\]]+)\]")
INSTALL = ROOT / "docs" / "install.md"


def test_install_lines_install_from_the_checkout() -> None:
    """No page, README or message says to install stead by name; every extra named exists,
    and every page that names one links to the page that says how to install."""
    sources = sorted((ROOT / "src" / "stead").rglob("*.py"))
    texts = {path: path.read_text() for path in [*PAGES, *sources]}
    by_name = [f"{path.relative_to(ROOT)}: {m[0]!r}" for path, text in texts.items()
               for m in BY_NAME.finditer(text)]
    assert not by_name, f"stead is installed from its checkout (docs/install.md): {by_name}"
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"])
    named = {path: {n.strip() for m in EXTRAS.finditer(text) for n in m["names"].split(",")}
             for path, text in texts.items()}
    unknown = {str(path.relative_to(ROOT)): sorted(names - extras)
               for path, names in named.items() if names - extras}
    assert not unknown, f"extras pyproject.toml does not declare: {unknown}"
    unlinked = [str(path.relative_to(ROOT)) for path in PAGES
                if named[path] and path.parent != ROOT and path != INSTALL
                and "install.md" not in texts[path]]
    assert not unlinked, f"pages naming an extra without a link to install.md: {unlinked}"
    every = {m[1] for m in re.finditer(r"^\| `([\w-]+)` \|", INSTALL.read_text(), re.M)}
    assert every == extras, "docs/install.md's table lists every extra of pyproject.toml"


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_readme_links_lead_to_files() -> None:
    readme = ROOT / "README.md"
    targets = [m["target"] for m in LINK.finditer(readme.read_text())]
    local = [t.split("#")[0] for t in targets if "://" not in t and not t.startswith("#")]
    assert local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that are not there: {missing}"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    api = (tmp_path / "reference" / "api" / "index.html").read_text()
    assert "stead.Client" in api and "deliver" in api
    # The crash matrix's hooks, which the crash-testing guide's code uses.
    assert all(f'id="stead.testing.{name}"' in api for name in ("Event", "Waiting", "Services"))
    cli = (tmp_path / "reference" / "cli" / "index.html").read_text()
    assert "stead worker" in cli and "--until-idle" in cli


async def test_the_schema_page_lists_every_table_and_column(tmp_path: Path) -> None:
    """docs/reference/schema.md is what migrating an empty store gives, column for column."""
    store = await stead.open_store(f"sqlite:///{tmp_path / 'schema.db'}")
    await store.close()
    db = sqlite3.connect(tmp_path / "schema.db")
    try:
        tables = [r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
        stored = {(t, row[1]) for t in tables
                  for row in db.execute("SELECT * FROM pragma_table_info(?)", (t,))}
    finally:
        db.close()
    documented: set[tuple[str, str]] = set()
    table = ""
    for line in (ROOT / "docs" / "reference" / "schema.md").read_text().splitlines():
        if heading := re.fullmatch(r"## `(\w+)`", line):
            table = heading[1]
        elif column := re.match(r"\| `(\w+)`", line):
            documented.add((table, column[1]))
    assert documented == stored


def test_the_readme_agent_runs_to_its_wait_from_the_shell(tmp_path: Path) -> None:
    """The README's refund agent, saved as shop.py, started and run by the commands it gives
    (the worker imports `shop` from its current directory): the run ends up waiting."""
    readme = ROOT / "README.md"
    agent = next(b for b in PYTHON if b.page == readme and "def refund_order" in b.source)
    (tmp_path / "shop.py").write_text(agent.source)
    stead_cli = [sys.executable, "-m", "stead"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    env |= {"HOME": str(tmp_path)}

    def shell(*args: str) -> str:
        done = subprocess.run([*stead_cli, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    shell("start", "shop:app", "refund_order", '["123", 4200]', "--task-id", "order-123")
    shell("worker", "shop:app", "--until-idle")
    assert re.search(r"refund_order@1\s+waiting\s+order-123", shell("runs", "ls"))


UPGRADING = ROOT / "docs" / "guides" / "platform" / "upgrading.md"


def test_the_upgrading_pages_commands_print_what_it_shows(tmp_path: Path) -> None:
    """The `stead` commands of docs/guides/platform/upgrading.md, block by block and in
    order, on a database stead 0.1.0 wrote (tests/upgrade/fixtures): each exits 0, and
    what a block's commands print is the ```text block after it."""
    from tests.upgrade import restore

    [fixture] = [f for f in restore.every() if f.schema == 28]
    restore.sqlite(fixture, tmp_path / "stead.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    env |= {"HOME": str(tmp_path), "STEAD_SECRET": fixture.described["secret"]}
    page = [b for b in ALL if b.page == UPGRADING]
    ran = 0
    for block, after in zip(page, [*page[1:], None], strict=True):
        if block.lang != "bash":
            continue
        printed = ""
        for line in block.source.splitlines():
            assert line.startswith("stead "), f"{block.where}: only stead commands here: {line}"
            done = subprocess.run([sys.executable, "-m", "stead", *shlex.split(line)[1:]],
                                  cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, f"{block.where}: {line}: {done.stderr}"
            printed += done.stdout
            ran += 1
        if after is not None and after.lang == "text":
            assert printed == after.source, block.where
    assert ran >= 4


PRODUCTION = ROOT / "docs" / "guides" / "platform" / "postgresql-in-production.md"


def test_the_postgresql_in_production_pages_commands_run_through_pgbouncer(
    tmp_path: Path,
) -> None:
    """The ```bash blocks of docs/guides/platform/postgresql-in-production.md, in
    order in one shell, each exiting 0: its hosts are the test server and a
    PgBouncer in transaction pooling in front of it, its database a fresh schema."""
    from tests import pg, pgbouncer

    pg.require()
    with pg.fresh_schema(pg.URL) as url, \
            pgbouncer.PgBouncer("transaction", ("127.0.0.1", 5432)) as bouncer:
        schema = pg.query_param(url, "schema")
        hosts = {
            "app@": "postgres@",
            "pgbouncer.internal:6432": f"127.0.0.1:{bouncer.port}",
            "db-a.internal:5432": "127.0.0.1:5432",
            "db-b.internal:5432": "127.0.0.1:5432",
            "db.internal:5432": "127.0.0.1:5432",
            "/shop?schema=stead": f"/test?schema={schema}",
            "/shop'": "/test'",
        }
        script = ""
        for block in (b for b in ALL if b.page == PRODUCTION and b.lang == "bash"):
            source = block.source
            for written, here in hosts.items():
                source = source.replace(written, here)
            assert ".internal" not in source, f"{block.where}: a host the test does not map"
            script += f"echo '== {block.where}'\n{source}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
        env |= {"HOME": str(tmp_path),
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"}
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert script.count("stead runs ls") >= 3
