"""`python -m bench [--quick] [--only NAME[,NAME]] [--db sqlite|postgres|both]`

Runs stead, DBOS and LangGraph on the same workloads in one run, prints the
table of medians and writes bench/RESULTS.md. The peers are installed into
bench/.venv-peers on first use (`--upgrade-peers` refreshes them)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench import contention, fleet, machine, mixed, peers, profiles, report, runner, workloads
from bench.workloads import PG, SQLITE, Context

METHOD = """\
- **Processes.** Every measurement runs in fresh processes on a fresh database (a new
  SQLite file in a temporary folder, or a new PostgreSQL database created for it and
  dropped after). stead runs in the project's venv; DBOS and LangGraph in
  `bench/.venv-peers`, which the bench creates and fills itself. Each workload script
  (`bench/w_*.py`) prints its timings as JSON. Within a repetition the systems take
  turns, so drift on this shared 2-core box hits them alike. Times are
  `time.perf_counter()` (CLOCK_MONOTONIC, comparable across processes).
- **Equal durability.** stead's SQLite store is WAL + `synchronous=FULL`. LangGraph's
  SqliteSaver switches its file to WAL itself and keeps SQLite's default
  `synchronous=FULL`. DBOS as shipped leaves SQLite in its default rollback-journal mode
  (also `synchronous=FULL`); the `DBOS (WAL)` column is DBOS on a file switched to WAL
  before it opens it. PostgreSQL runs with `synchronous_commit=on` for everyone; LangGraph's
  PostgresSaver uses autocommit connections as `from_conn_string` opens them. LangGraph
  runs with `durability="sync"`: every checkpoint is written before the next step starts.
  stead commits every step's record before the step returns.
- **1. sequential steps.** One run of 1,000 trivial steps (a sync function returning its
  argument; for LangGraph a node incrementing a counter, looping on itself). Timed from
  the worker/executor taking the run to its result, per step. Commits per step: on
  SQLite every statement of every sqlite3 connection in the process is traced
  (`COMMIT`s and statements counted over the timed section, in a separate untimed run);
  on PostgreSQL, `pg_stat_database.xact_commit` of the fresh database after a run of
  1,001 steps minus a run of 1 step (all transactions, read-only ones included).
  The `1 commit/step` column is the physical limit: a loop of one-row durable commits
  (SQLite: `BEGIN IMMEDIATE; INSERT; COMMIT` in WAL + FULL; PostgreSQL: autocommit INSERT).
  Two stead-only rows split its time: the same run with an async step function (no
  thread hop for the user's function), and a loop of bare fenced `store.append` calls of
  one record each (no workflow, no worker).
- **2. many small runs.** Runs of 3 trivial steps are all started, then executed: stead
  `client.start` x N, then one `Worker(concurrency=1 or 32).run_until_idle()`; DBOS
  enqueues them on a queue with `worker_concurrency` 1 or 32 (polling every 10 ms; the
  default 1 s poll would cap a concurrency-1 queue at about one run per second) and
  waits for every result; LangGraph has no queue or worker, so its N runs are
  `invoke`s (3 nodes, one thread each) from a pool of 1 or 32 threads sharing the
  checkpointer. Runs/s counts the whole thing, starting included; "executing started
  runs" counts the worker's part alone (LangGraph has no start, so its figure is the
  same; DBOS executes while it enqueues, so its phases do not split). The group-commit
  target is judged on that part: starting runs one `client.start` after another is a
  commit each, whatever the worker does.
- **3. recovery.** A process journals 1,000 steps and, inside step 1,001, says so and is
  SIGKILLed. A fresh process then finishes the run: stead opens the store and runs a
  worker until idle (the killed worker's 1 s lease has run out first); DBOS launches,
  which recovers its executor's pending workflows, and waits for the result; LangGraph
  re-invokes the thread, which resumes from its last checkpoint (no step replay: the
  node restarts). Times are from spawning the fresh process: start-up (imports and
  opening the store / launching), first live step, result. Replay is from the workflow
  function's entry in the fresh process to its first live step. A stead row more
  kills a worker holding the default 30 s lease and starts the fresh process at
  once: SIGKILL → first live step (the fresh worker sees the holder is gone).
- **4. growth.** An agent loop of 1,000 turns: each turn passes the whole conversation
  to a model call that returns a 1 KB message, appended to the conversation (stead
  `run.llm` with a model object; DBOS a step; LangGraph a node over a state with an
  `operator.add` messages channel). Bytes stored = database bytes in use after minus
  before (SQLite `(page_count - freelist_count) x page_size`, WAL included;
  PostgreSQL `pg_database_size`). Latency per step = the gap between successive model
  calls, averaged over the first and the last 100. stead is also run once with the
  conversation *not* passed to the call (same records stored), to separate storage from
  argument handling (under Details).
- **5. waits.** N runs each wait for one event. stead: the runs are started and one
  worker takes each to its wait, where it is suspended (no lease, no worker); then an
  idle worker with default options (SQLite: watches the file's `data_version` every
  10 ms, polls every 0.2 s; PostgreSQL: LISTEN, polls every 0.2 s) runs while a
  separate process calls `client.deliver` for a random sample of the waiting runs,
  spaced at random (mean 25 ms apart). DBOS: async workflows parked
  in `DBOS.recv_async`, sent messages by a `DBOSClient` from another process. LangGraph:
  threads stopped at `interrupt()`, resumed by `invoke(Command(resume=...))`. Latency is
  from the start of the delivery call to the run's next step starting. Bytes per
  waiting run are the database bytes in use after minus before.
- **6. workspace snapshot** (stead alone). A 200 MB tree of 200 files of random bytes
  (in 10 folders) is attached to a run (`run.workspace`) and saved (`ws.save()`), timed
  inside the workflow; one file is rewritten and the tree saved again; the last snapshot
  is then restored into a fresh directory (`client.restore_workspace`, the takeover's
  restore) and its tree hash compared. Stored bytes are the blob bytes each save added
  (`stored_bytes`); database growth is the bytes in use after minus before, as in 4.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="one repetition, smaller workloads (a smoke run, ~3 min)")
    parser.add_argument("--only", default="",
                        help="comma-separated: " + ",".join(workloads.WORKLOADS))
    parser.add_argument("--db", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--no-peers", action="store_true", help="stead alone")
    parser.add_argument("--upgrade-peers", action="store_true",
                        help="pip install --upgrade the peers first")
    parser.add_argument("--no-profiles", action="store_true",
                        help="skip the profiles of missed targets")
    parser.add_argument("--output", default=str(runner.BENCH / "RESULTS.md"))
    parser.add_argument("--contention", action="store_true",
                        help="the contention profile alone: sequential and many-runs "
                             "workloads quiet and beside one CPU hog per core (~10 min)")
    parser.add_argument("--mixed", action="store_true",
                        help="the mixed-load mode alone: step, replay, wake-up and takeover "
                             "quiet and beside a test-suite-like load, 3 interleaved "
                             "repetitions, targets judged in each (~25 min; --quick ~12)")
    parser.add_argument("--fleet", action="store_true",
                        help="the many-workers mode alone (PostgreSQL): 8 worker processes x "
                             "concurrency 32, recovery from a SIGKILL, and a simulated fleet "
                             "of 8 to 100 workers; 3 repetitions (~25 min on a loaded 2-core "
                             "box; --quick: 1, ~6)")
    parser.add_argument("--baseline", default="",
                        help="with --mixed: also run stead's rows with the source of this "
                             "checkout (e.g. a worktree of main), taking turns with this "
                             "tree's, for a before/after in one run")
    args = parser.parse_args(argv)
    if args.fleet:
        return fleet.main(["--write", "--quick"] if args.quick else ["--write"])

    started = time.perf_counter()
    only = [w.strip() for w in args.only.split(",") if w.strip()] or list(workloads.WORKLOADS)
    unknown = [w for w in only if w not in workloads.WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {list(workloads.WORKLOADS)}")

    def log(text: str) -> None:
        print(text, flush=True)

    if not args.no_peers:
        peers.ensure(upgrade=args.upgrade_peers, log=log)
    runner.warm_bytecode()
    dbs = [SQLITE, PG] if args.db == "both" else [args.db]
    if args.mixed:
        argv_text = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
        return mixed.main(dbs, args.quick, not args.no_peers, _output(args.output),
                          argv_text, log, baseline=args.baseline or None)
    if args.contention:
        argv_text = "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv)
        return contention.main(dbs, args.quick, not args.no_peers, _output(args.output),
                               argv_text, log)
    notes: list[str] = []
    if PG in dbs:
        why = runner.pg_available() or _stead_pg_problem()
        if why:
            log(f"skipping PostgreSQL: {why}")
            notes.append(f"PostgreSQL was skipped in this run: {why}")
            dbs.remove(PG)
    info = machine.describe(peers=not args.no_peers)
    peer_keys = [] if args.no_peers else ["dbos", "dbos_wal", "langgraph"]

    with runner.scratch_dir() as scratch:
        ctx = Context(dbs=dbs, systems=runner.systems(), peers=peer_keys, quick=args.quick,
                      scratch=scratch, log=log)
        for note in notes:
            ctx.note("run", note)
        for name in only:
            log(f"== {name} ({', '.join(dbs)})")
            t = time.perf_counter()
            workloads.WORKLOADS[name](ctx)
            log(f"   {name} took {time.perf_counter() - t:.0f} s")
        _peer_notes(ctx, only)
        ts = report.targets(ctx)
        profile_text: dict[str, str] = {}
        if not args.no_profiles:
            profile_text = _profile_misses(ctx, ts, scratch, log)

    elapsed = time.perf_counter() - started
    info["load_after"] = machine.load_now()
    log("")
    log(report.table(ctx.metrics))
    log("")
    log(report.targets_md(ts))
    argv_text = "python -m bench" + ("" if argv is None and len(sys.argv) == 1
                                     else " " + " ".join(sys.argv[1:] if argv is None else argv))
    report.write(
        _output(args.output), ctx, info, ts, profile_text, _method(ctx), elapsed, argv_text,
    )
    log(f"\nwrote {args.output} ({elapsed / 60:.1f} min)")
    return 0


def _output(path: str) -> runner.Path:
    return runner.Path(path)


def _method(ctx: Context) -> str:
    reps = "\n".join(f"  - {k}: {v}" for k, v in ctx.reps_used.items())
    return METHOD + "- **Repetitions** (each in fresh processes on a fresh database):\n" + reps


def _stead_pg_problem() -> str | None:
    """None if stead can open a PostgreSQL store here, else why not."""
    code = ("import asyncio, stead\n"
            "async def m():\n"
            f"    s = await stead.open_store({runner.PG_ADMIN!r})\n"
            "    await s.close()\n"
            "asyncio.run(m())\n")
    proc = subprocess.run([runner.project_python(), "-c", code], capture_output=True,
                          text=True, timeout=120, check=False, env=runner._env())
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return f"stead's PostgreSQL store does not open yet ({last})"
    return None


def _peer_notes(ctx: Context, only: list[str]) -> None:
    if not ctx.peers:
        return
    if "waits" in only:
        ctx.note("waits", "Waits compare three designs. stead suspends a waiting run: no "
                 "lease, no worker, no memory; an idle worker polls (SQLite) or LISTENs "
                 "(PostgreSQL) and resumes it. DBOS keeps each waiting workflow executing "
                 "(`await DBOS.recv_async`) in the process that started it, which must "
                 "stay up; a `DBOSClient` sends the message. LangGraph's `interrupt()` "
                 "leaves a checkpoint and nothing running; there is no worker, so the "
                 "deliverer's own `invoke(Command(resume=...))` runs the rest of the graph "
                 "(its latency is that call's, in the caller's process). The peers wait "
                 "with fewer runs (see Repetitions), so their RSS rows carry no ratio.")
    if "recovery" in only:
        ctx.note("recovery", "LangGraph does not replay steps: re-invoking a thread "
                 "loads its latest checkpoint and re-runs the interrupted node, so its "
                 "'replay' is the time to load that checkpoint.")


def _profile_misses(ctx: Context, ts: list[report.Target], scratch: runner.Path,
                    log: object) -> dict[str, str]:
    wanted = sorted({t.profile for t in ts if t.profile})
    out: dict[str, str] = {}
    for name in wanted:
        kind, _, db = name.partition("-")
        if callable(log):
            log(f"profiling {name} ...")
        try:
            if kind == "sequential":
                path = profiles.profile(name, {"workload": "seq", "n": 3000}, scratch, db)
            elif kind == "many":
                path = profiles.profile(
                    name, {"workload": "many", "runs": 500, "concurrency": 32}, scratch, db)
            elif kind == "growth":
                path = profiles.profile(name, {"workload": "growth", "n": 1000}, scratch, db)
            elif kind == "recovery":
                path = profiles.profile_recovery(name, 1000, scratch, db,
                                                 workloads.STEAD_LEASE)
            else:
                continue
        except (subprocess.SubprocessError, runner.BenchError) as exc:
            out[name] = f"(profile failed: {exc})"
            continue
        out[name] = profiles.excerpt(path)
    return out


if __name__ == "__main__":
    sys.exit(main())
