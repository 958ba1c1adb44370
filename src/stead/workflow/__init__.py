"""What a workflow's calls do beneath `Run` (`stead.run`): `effects` (an
operation's phases and its outcome), `waits` (a bound, single-use wait and the
judgement of each delivery), `state` (the task's facts), `children`, `streams`
and `workspaces` (a run's files); and the checks around them: `judgements`
(the policy's verdict on one live action), `revalidation` and `proposals` (a
takeover's diff of intent, authority and world, and the next step judged
under it), `fingerprints` (the environment a step's result was made in).
See docs/architecture.md."""
