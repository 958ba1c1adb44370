"""How each `Store` operation is seen from inside one tenant: the rule that
`scoped.Scoped` applies to it. An operation missing here is refused."""

from __future__ import annotations

import enum


class Rule(enum.StrEnum):
    # Names no run and reads nothing of any tenant's runs (the keys, the
    # clock, the store's own lifecycle, revoking a token by its id, the
    # workers), or reads what only a run's own rows name: a workspace's blobs
    # are content-addressed, their hashes known from a snapshot's manifest.
    FREE = "free"
    # Takes the run it concerns as a parameter named `run_id` (or `run_ids`),
    # or in a row, event, fence, plan or fork it is given: each is checked
    # first; another tenant's is `UnknownRun`.
    RUN = "run"
    # Takes a wait's id (`wait_id`): its run is checked; another tenant's
    # wait is not there (None, or `UnknownRun` for a change).
    WAIT = "wait"
    # Takes a task key (`task_key`, or `task_id`): the task's run (`run:<id>`, else its live run) is
    # checked; a task with no run of the tenant is refused.
    TASK = "task"
    # Lists: asked with the tenant (`tenant=`, a search's `tenant`).
    LISTED = "listed"
    # Answers runs (or rows naming one) of any tenant: those of others are
    # left out of the answer.
    FILTERED = "filtered"
    # Makes runs: each serves the tenant (a run naming another is refused).
    CREATES = "creates"
    # Reads what one tenant holds (its limits, its spend), named by `tenant`:
    # the scope's own only.
    TENANT = "tenant"


RULES: dict[str, Rule] = {
    **dict.fromkeys(("keyring", "close", "open", "check_schema", "wait_for_work", "work_mark",
                     "revoke_stream_token", "worker_hosts", "lease_now", "read_blobs",
                     "prices"), Rule.FREE),
    **dict.fromkeys((
        "get_run", "children", "lineage", "load_journal", "journal_page", "journal_size",
        "journal_summaries", "journal_model_calls", "list_resumes", "list_events", "get_event",
        "list_actions",
        "list_intents", "latest_intent", "list_migrations", "archived_journal",
        "list_snapshots", "read_stream", "cancel_run", "request_cancel", "resume_stopped",
        "end_stopped", "rollback_run", "revise_intent", "revoke_run_stream_tokens",
        "stream_token_revoked", "cancel_requests", "export_runs", "record_action",
        "deliver", "migrate_run", "fork_run", "close_wait", "append_stream",
        "forgotten", "check_not_forgotten", "conversation_parts", "reservations",
        "run_tenant", "resolve", "inlined",
    ), Rule.RUN),
    **dict.fromkeys(("get_wait", "wait_and_event", "revoke_wait", "unlock_wait"), Rule.WAIT),
    **dict.fromkeys(("read_state", "state_history", "state_version", "state_since",
                     "set_state", "forget_task"), Rule.TASK),
    **dict.fromkeys(("list_runs", "search_runs", "count_runs", "list_waits"), Rule.LISTED),
    **dict.fromkeys(("live_run_of_task", "stranded_runs"), Rule.FILTERED),
    **dict.fromkeys(("create_run", "create_runs", "import_run"), Rule.CREATES),
    **dict.fromkeys(("tenant_spend", "tenant_limits"), Rule.TENANT),
}

# Attributes read as they are: the store's clock and its URL's display.
ATTRIBUTES = frozenset({"clock", "url"})
