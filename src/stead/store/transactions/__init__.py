"""Every transaction of the store, written once, as a flow (see `seam`):
what it reads, where it asks a pure judgement (the fence, `waits.Judge`,
`state.StateChange`), what it writes. Each function returns a fresh flow; a
backend runs it in one transaction. One module per concern: `runs`, `leases`,
`journal`, `waits`, `state`, `intents`, `actions`, `migrations`, `retention`,
`workspaces`, and `common`, what they all read with.

The read-backs (`runs.created`, `journal.journaled`, `waits.delivered`...)
settle a write whose commit nobody acknowledged (a connection lost during
COMMIT): they say whether it is stored, so it is never written twice. Only a
server database needs them.
"""
