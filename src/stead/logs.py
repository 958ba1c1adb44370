"""Log lines: one line per record, as text or as JSON, with the run id in them.

A message may carry newlines (a database driver's error, a traceback): a log
reader splits on lines, so the formatters escape them. The run a record is
about is the `run_id` attribute of the record (`extra={"run_id": ...}`), or
else the run whose task logged it (`current_run`, which the worker sets for
each run it executes). A JSON line also names the worker (`current_worker`,
set while a worker's loop runs) and, for a record about the run whose task
logged it, that attempt's epoch and `workflow@version` (`current_attempt`).
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import json
import logging

# The run the current task works on (None outside any run).
current_run: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stead_current_run", default=None)




@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """The attempt the current task executes: its epoch, its worker, and the
    workflow's `name@version`."""

    epoch: int
    worker: str
    workflow: str


# The attempt of the current run's task (None outside any run).
current_attempt: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "stead_current_attempt", default=None)
# The worker whose loop the current task belongs to (None outside a worker).
current_worker: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "stead_current_worker", default=None)


def run_of(record: logging.LogRecord) -> str | None:
    given = getattr(record, "run_id", None)
    return str(given) if given is not None else current_run.get()


def one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


class TextFormatter(logging.Formatter):
    """`time level logger: message [run RUN]`, always on one line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        run_id = run_of(record)
        if run_id is not None and run_id not in record.getMessage():
            text += f" [run {run_id}]"
        return one_line(text)


def iso(at: float) -> str:
    """An epoch time as log lines show times: ISO 8601, UTC, milliseconds."""
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (ISO 8601, UTC), level, logger, message,
    run_id, epoch, worker and workflow (`name@version`) when known, and the
    exception when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        run_id = run_of(record)
        if run_id is not None:
            data["run_id"] = run_id
        attempt = current_attempt.get()
        if attempt is not None and run_id == current_run.get():
            data["epoch"] = attempt.epoch
            data["workflow"] = attempt.workflow
        worker = attempt.worker if attempt is not None else current_worker.get()
        if worker is not None:
            data["worker"] = worker
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


def formatter(kind: str) -> logging.Formatter:
    """The formatter for `kind`: "text" or "json"."""
    if kind == "json":
        return JsonFormatter()
    if kind == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {kind!r}: text or json")
