"""A run shown as text, for `stead runs show`, the dashboard and `stead demo`:
`timeline` (its status, journal, effects and takeovers), `runs_view` (what
its row alone shows: the table `stead runs ls` prints, a run as JSON, the
times), `context_view` (its intent, grants, budget and the policy's decisions)
and `workspace_view` (its workspaces and snapshots). They read; they act on
nothing, so a command that only shows runs loads none of the operator's
actions."""
