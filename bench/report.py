"""The table of medians, the targets of issue 7, and bench/RESULTS.md."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from bench.workloads import PG, SQLITE, Context, Metric

COLUMNS = (("stead", "stead"), ("dbos", "DBOS"), ("dbos_wal", "DBOS (WAL)"),
           ("langgraph", "LangGraph"), ("limit", "1 commit/step"))
RATIOS = (("dbos", "stead/DBOS"), ("langgraph", "stead/LangGraph"))
DB_LABEL = {SQLITE: "SQLite", PG: "PostgreSQL"}


def _num(x: float, digits: int) -> str:
    if abs(x) >= 10_000 and digits == 0:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def cell(metric: Metric, key: str) -> str:
    xs = metric.samples.get(key) or []
    if not xs:
        return "—"
    med = metric.median(key)
    assert med is not None
    text = _num(med, metric.digits)
    if len(xs) > 1:
        text += f" ({_num(min(xs), metric.digits)}-{_num(max(xs), metric.digits)})"
    return text


def ratio(metric: Metric, peer: str) -> str:
    if peer in metric.no_ratio and metric.samples.get(peer):
        return "n/a"
    s, p = metric.median("stead"), metric.median(peer)
    if s is None or p is None or s == 0 or p == 0:
        return "—"
    r = s / p
    better = (1 / r) if metric.better == "lower" else r
    word = "better" if better >= 1 else "worse"
    factor = better if better >= 1 else 1 / better
    return f"{r:.2f} ({factor:.1f}x {word})"


def table(metrics: list[Metric]) -> str:
    used = [(k, label) for k, label in COLUMNS if any(m.samples.get(k) for m in metrics)]
    head = ["workload", "db", "metric", *[label for _, label in used],
            *[label for _, label in RATIOS]]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    last = ""
    for m in metrics:
        name = m.workload if m.workload != last else ""
        last = m.workload
        rows.append("| " + " | ".join([
            name, DB_LABEL[m.db], m.name, *[cell(m, k) for k, _ in used],
            *[ratio(m, k) for k, _ in RATIOS],
        ]) + " |")
    return "\n".join(rows)


# -- targets ----------------------------------------------------------------------------
@dataclasses.dataclass
class Target:
    text: str
    db: str
    measured: str
    ok: bool | None  # None: not measured
    miss: str = ""
    profile: str | None = None  # which profile explains a miss
    kind: str = ""  # sequential, concurrency, recovery, growth_size, growth_flat, wake


def _find(metrics: list[Metric], workload: str, db: str, name: str) -> Metric | None:
    for m in metrics:
        if m.workload.startswith(workload) and m.db == db and m.name.startswith(name):
            return m
    return None


def targets(ctx: Context) -> list[Target]:
    out: list[Target] = []
    ms = ctx.metrics

    def med(workload: str, db: str, name: str, key: str) -> float | None:
        m = _find(ms, workload, db, name)
        return m.median(key) if m else None

    def add(text: str, db: str, ok: bool | None, measured: str, miss: str,
            profile: str | None) -> None:
        if ok is not None:  # None: that workload was not run
            kind = ("sequential" if text.startswith("sequential") else
                    "concurrency" if text.startswith("32") else
                    "recovery" if text.startswith("recovery") else
                    "growth_size" if text.startswith("growth: storage") else
                    "growth_flat" if text.startswith("growth") else "wake")
            out.append(Target(text, db, measured, ok, "" if ok else miss,
                              None if ok else profile, kind))

    for db in ctx.dbs:
        s = med("1.", db, "µs per step", "stead")
        lim = med("1.", db, "µs per step", "limit")
        d = med("1.", db, "µs per step", "dbos")
        lg = med("1.", db, "µs per step", "langgraph")
        seq_profile = f"sequential-{db}"
        if s and lim:
            r = s / lim
            add("sequential steps within 2x of one commit per step", db, r <= 2,
                f"{s:.0f} µs/step = {r:.2f}x the {lim:.0f} µs commit",
                f"missed by {(r / 2 - 1) * 100:.0f}% ({s - 2 * lim:.0f} µs/step over 2x "
                "the commit)", seq_profile)
        if s and d:
            r = d / s
            add("sequential steps >= 5x DBOS (as shipped)", db, r >= 5, f"{r:.2f}x",
                f"missed: {r:.2f}x of 5x (stead would need <= {d / 5:.0f} µs/step, "
                f"has {s:.0f})", seq_profile)
        if s and lg:
            r = lg / s
            add("sequential steps >= 3x LangGraph (sync)", db, r >= 3, f"{r:.2f}x",
                f"missed: {r:.2f}x of 3x (stead would need <= {lg / 3:.0f} µs/step, "
                f"has {s:.0f})", seq_profile)
        c32 = med("2.", db, "runs/s, concurrency=32", "stead")
        x32 = med("2.", db, "runs/s executing started runs, concurrency=32", "stead")
        if x32 and c32 and lim:
            # Group commit is the worker's: judged on executing runs. Starting them one
            # `client.start` after another is a commit each, shown beside it.
            rate = 1e6 / (3 * lim)
            add("32 concurrent runs: the worker executes them past one commit per step "
                "(3 steps a run)", db, x32 > rate,
                f"{x32:.0f} runs/s executing vs {rate:.0f} runs/s at one commit per step "
                f"({c32:.0f} runs/s counting their one-by-one starts)",
                f"missed: {x32 / rate:.2f}x of the one-commit-per-step rate (see Reading "
                "the misses)", f"many-{db}")
        rp = med("3.", db, "replay", "stead")
        rpd = med("3.", db, "replay", "dbos")
        tot = med("3.", db, "spawn → result", "stead")
        totd = med("3.", db, "spawn → result", "dbos")
        rec = f"recovery-{db}"
        add("recovery: replay of 1,000 steps under 100 ms", db,
            None if rp is None else rp < 100, f"{rp or 0:.0f} ms",
            f"missed by {(rp or 0) - 100:.0f} ms", rec)
        if rp and rpd:
            add("recovery: replay >= 10x DBOS", db, rpd / rp >= 10, f"{rpd / rp:.1f}x",
                f"missed: {rpd / rp:.1f}x of 10x", rec)
        add("recovery: fresh process to result under 0.5 s", db,
            None if tot is None else tot < 0.5, f"{tot or 0:.2f} s",
            f"missed by {(tot or 0) - 0.5:.2f} s", rec)
        took = med("3.", db, "SIGKILL → first live step", "stead")
        add("recovery: SIGKILL → taken over within 2 s with the default lease", db,
            None if took is None else took < 2, f"{took or 0:.2f} s",
            f"missed by {(took or 0) - 2:.2f} s", rec)
        if tot and totd:
            add("recovery: fresh process to result >= 6x DBOS", db, totd / tot >= 6,
                f"{totd / tot:.1f}x", f"missed: {totd / tot:.1f}x of 6x", rec)
        size = med("4.", db, "bytes stored", "stead")
        add("growth: storage <= 1.5 KB per 1 KB step", db,
            None if size is None else size <= 1536, f"{size or 0:.0f} B/step",
            f"missed by {(size or 0) - 1536:.0f} B/step", None)
        first = med("4.", db, "first 100", "stead")
        last = med("4.", db, "last 100", "stead")
        if first and last:
            r = last / first
            add("growth: flat per-step latency, step 1 to 1,000 (last 100 <= 1.5x first 100)",
                db, r <= 1.5, f"{first:.2f} -> {last:.2f} ms/step ({r:.1f}x)",
                f"missed: the last 100 steps are {r:.1f}x slower than the first 100",
                f"growth-{db}")
        if db == PG:
            p50 = med("5.", db, "deliver → next step, p50", "stead")
            add("waits: deliver to next step p50 under 50 ms on PostgreSQL, idle worker", db,
                None if p50 is None else p50 < 50, f"{p50 or 0:.1f} ms",
                f"missed by {(p50 or 0) - 50:.1f} ms", None)
    return out


def targets_md(ts: list[Target]) -> str:
    rows = ["| target | db | measured | met? |", "|---|---|---|---|"]
    for t in ts:
        mark = "n/a" if t.ok is None else ("yes" if t.ok else f"**no** — {t.miss}")
        rows.append(f"| {t.text} | {DB_LABEL[t.db]} | {t.measured} | {mark} |")
    return "\n".join(rows)


# -- RESULTS.md ---------------------------------------------------------------------------
def machine_md(info: dict[str, Any]) -> str:
    proj = info["project"]
    lines = [
        f"- machine: {info['nproc']} cores ({info['cpu']}), {info['memory_gib']} GiB, "
        f"Linux {info['kernel']}",
        f"- load average (1/5/15 min) when the run began: {info['load_before']}; when it "
        f"ended: {info.get('load_after', '?')} (other work on this box shares its 2 cores)",
        f"- Python {proj['python']}, SQLite {proj['sqlite']} (stead's venv)",
    ]
    pg = info.get("postgres")
    if pg:
        lines.append(f"- PostgreSQL {pg['server_version']} on loopback "
                     f"(synchronous_commit={pg['synchronous_commit']}, fsync={pg['fsync']}, "
                     f"wal_sync_method={pg['wal_sync_method']}, "
                     f"shared_buffers={pg['shared_buffers']})")
    else:
        lines.append("- PostgreSQL: not available in this run")
    pk = proj["packages"]
    lines.append(f"- stead {pk.get('stead')} at {info['stead_commit']}; psycopg "
                 f"{pk.get('psycopg')}, psycopg-pool {pk.get('psycopg-pool')}")
    peers = info.get("peers")
    if peers:
        lines.append(f"- peers' venv (bench/.venv-peers): Python {peers['python']}, SQLite "
                     f"{peers['sqlite']}; " + ", ".join(
                         f"{k} {v}" for k, v in peers["packages"].items() if v))
    return "\n".join(lines)


def write(path: Path, ctx: Context, info: dict[str, Any], ts: list[Target],
          profile_text: dict[str, str], method: str, elapsed: float, argv: str) -> None:
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# stead benchmarks, side by side with DBOS and LangGraph",
        "",
        f"Written by `{argv}` on {when} in {elapsed / 60:.1f} min. Every figure below was "
        "measured in that one run, on this machine; nothing is copied or hard-coded. "
        "Cells are `median (min-max)`; a cell without a range is a single measurement. "
        "The ratio columns are stead's median divided by the peer's, with what that means "
        "for stead (for times lower is better, for rates higher is better).",
        "",
        "## Machine and versions",
        "",
        machine_md(info),
        "",
        "## Results",
        "",
        table(ctx.metrics),
        "",
        "## Targets (issue 7)",
        "",
        targets_md(ts),
        "",
    ]
    details = _details_md(ctx)
    if details:
        parts += ["## Details", "", details, ""]
    reading = _reading(ctx, ts)
    if reading:
        parts += ["## Reading the misses", "", reading, ""]
    if profile_text:
        parts += ["## Where the time goes (profiles of the misses)", "",
                  "pyinstrument on stead's side of the workload, default renderer (library "
                  "frames collapsed). `epoll.poll` is the event loop waiting: for the "
                  "SQLite store's thread (when several runs write at once; a run writing "
                  "alone commits on the loop itself), for the thread a sync step function "
                  "runs in, or for the PostgreSQL socket. "
                  "The full text is written to `bench/profiles/` (git-ignored).", ""]
        for name, text in profile_text.items():
            parts += [f"### {name}", "", "```", text, "```", ""]
    parts += ["## How it is measured", "", method, ""]
    notes = [f"- {n}" for ns in ctx.notes.values() for n in ns]
    if notes:
        parts += ["## Notes", "", *notes, ""]
    path.write_text("\n".join(parts))
    raw = {"machine": info, "metrics": [dataclasses.asdict(m) for m in ctx.metrics],
           "details": ctx.details, "targets": [dataclasses.asdict(t) for t in ts]}
    path.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str) + "\n")


def _reading(ctx: Context, ts: list[Target]) -> str:
    """What the measurements themselves say about each miss (numbers from this run)."""
    missed = {(t.kind, t.db) for t in ts if t.ok is False}
    lines = []
    for db in ctx.dbs:
        name = DB_LABEL[db]
        s = _median(ctx, "1.", db, "µs per step", "stead")
        lim = _median(ctx, "1.", db, "µs per step", "limit")
        asy = _median(ctx, "1.", db, "stead, async step", "stead")
        app = _median(ctx, "1.", db, "stead, bare store.append", "stead")
        if ("sequential", db) in missed and s and lim and asy and app:
            path = "committed on the event loop by a run writing alone" if db == SQLITE else \
                "one statement on the store's writer connection"
            text = (f"- **sequential, {name}:** of stead's {s:.0f} µs per step, a bare fenced "
                    f"append (one record, one transaction, {path}) takes {app:.0f} µs, "
                    f"against {lim:.0f} µs for the physical one-row commit")
            if app > lim:
                text += (f": {app - lim:.0f} µs go to the store's write path beyond the commit "
                         "itself. ")
            else:
                text += (" (measured in processes of its own): the store's write path adds "
                         "nothing that stands out of the noise. ")
            if s - asy > 0 and asy - app > 0:
                text += (f"With an async step function (no thread hop for the user's "
                         f"function) the step takes {asy:.0f} µs: {s - asy:.0f} µs go to "
                         f"running the sync function in a thread and {asy - app:.0f} µs to "
                         "the rest of the step (digest, records, replay cursor, event loop).")
            else:
                text += (f"The step machinery adds no time that stands out of the noise "
                         f"beyond that append (async step function: {asy:.0f} µs).")
            lines.append(text)
        rp = _median(ctx, "3.", db, "replay", "stead")
        rpd = _median(ctx, "3.", db, "replay", "dbos")
        tot = _median(ctx, "3.", db, "spawn → result", "stead")
        up = _median(ctx, "3.", db, "start-up", "stead")
        if ("recovery", db) in missed and rp and tot and up:
            lines.append(
                f"- **recovery, {name}:** the fresh process is up (imports, store open) "
                f"after {up * 1000:.0f} ms and has the result after {tot * 1000:.0f} ms; the "
                f"replay of the 1,000 journaled steps (loaded by one query) takes {rp:.0f} ms, "
                f"{rp:.0f} µs per replayed step" + (f", against DBOS's {rpd:.0f} ms" if rpd
                                                    else "") + "; see the profile.")
        c32 = _median(ctx, "2.", db, "runs/s, concurrency=32", "stead")
        c1 = _median(ctx, "2.", db, "runs/s, concurrency=1", "stead")
        many32 = ctx.details.get(f"many/{db}/c32/stead")
        if ("concurrency", db) in missed and c32 and c1 and lim and many32:
            out = sorted(many32, key=lambda o: o["exec_seconds"])[len(many32) // 2]
            n = out["completed"]
            commits = out["exec_commits"] / n
            cpu_ms = out["exec_cpu_seconds"] / n * 1000
            wall_ms = out["exec_seconds"] / n * 1000
            start_ms = out["start_seconds"] / n * 1000
            lines.append(
                f"- **concurrency 32, {name}:** the worker executed {n / out['exec_seconds']:.0f} "
                f"runs/s ({c32:.0f} counting the one-by-one starts) against {c1:.0f} at "
                f"concurrency 1 and {1e6 / (3 * lim):.0f} at one commit per step. While "
                f"executing, the worker committed {commits:.2f} times per run of 3 steps "
                "(a claim, the steps, the finish; records of runs in flight together share "
                f"commits), and spent {cpu_ms:.2f} ms of CPU per run in {wall_ms:.2f} ms of "
                f"wall time per run: the Python work of a run, not the commits, sets the "
                f"pace. Starting the runs (`client.start`, one commit each) took "
                f"{start_ms:.2f} ms per run more.")
        first = _median(ctx, "4.", db, "first 100", "stead")
        last = _median(ctx, "4.", db, "last 100", "stead")
        nofeed = ctx.details.get(f"growth/{db}/stead-nofeed")
        if ("growth_flat", db) in missed and first and last and nofeed:
            lines.append(
                f"- **growth latency, {name}:** {first:.2f} → {last:.2f} ms per step when "
                f"the whole conversation is the model call's argument; "
                f"{nofeed['first_ms']:.2f} → {nofeed['last_ms']:.2f} ms when it is not "
                "(the same records are stored). The growth is in what every call does with "
                "its arguments (the call's digest encodes and hashes the whole conversation, "
                "see the profile), not in storage.")
        size = _median(ctx, "4.", db, "bytes stored", "stead")
        if ("growth_size", db) in missed and size:
            alone = (f" ({nofeed['bytes_per_step']:.0f} bytes when the conversation is not "
                     "the call's argument)" if nofeed and "bytes_per_step" in nofeed else "")
            lines.append(
                f"- **growth storage, {name}:** {size:.0f} bytes per 1 KB step{alone}: the "
                "record is the completion's JSON (1,024 characters of text plus its "
                "metadata) with the run id, address, digest and two index entries, and the "
                "conversation the model saw is kept (`App(keep_conversation=True)`, the "
                "default): each message once per run, so each reply is stored a second time "
                "as the next call's last message. `keep_conversation=False` stores the "
                "record alone.")
    return "\n".join(lines)


def _median(ctx: Context, workload: str, db: str, name: str, key: str) -> float | None:
    m = _find(ctx.metrics, workload, db, name)
    return m.median(key) if m else None


def _details_md(ctx: Context) -> str:
    lines = []
    for db in ctx.dbs:
        nofeed = ctx.details.get(f"growth/{db}/stead-nofeed")
        if nofeed:
            lines.append(
                f"- growth, {DB_LABEL[db]}, stead with the history *not* passed to the call "
                f"(storage path alone): {nofeed['bytes_per_step']:.0f} B/step, "
                f"{nofeed['first_ms']:.2f} → {nofeed['last_ms']:.2f} ms/step.")
        for key, label in (("stead", "stead"), ("dbos", "DBOS"), ("langgraph", "LangGraph")):
            w = ctx.details.get(f"waits/{db}/{key}")
            if not w:
                continue
            held = w.get("holder_rss_after_mb")
            lines.append(
                f"- waits, {DB_LABEL[db]}, {label}: {w['runs']:,} runs; starting them took "
                f"{w['start_seconds']:.1f} s, taking them to their waits "
                f"{w['suspend_seconds']:.1f} s more; wake latency max {w['max']:.0f} ms"
                + (f"; RSS of the process staying up, after the deliveries: {held:.1f} MB"
                   if held is not None else "") + ".")
        for conc in (1, 32):
            runs = ctx.details.get(f"many/{db}/c{conc}/stead")
            if runs:
                start = sorted(r["start_seconds"] for r in runs)[len(runs) // 2]
                execute = sorted(r["exec_seconds"] for r in runs)[len(runs) // 2]
                lines.append(f"- many small runs, {DB_LABEL[db]}, concurrency {conc}: stead "
                             f"spent {start:.2f} s starting the runs and {execute:.2f} s "
                             "executing them (median).")
    return "\n".join(lines)
